"""``fedsde simulate``: Monte-Carlo simulation of the discrete algorithm on quadratic clients or a data problem.

For a data problem (a problem file with ``kind = "classification"`` or ``kind = "regression"``) the run starts
from the problem's initial weights (``--w0`` overrides) and also reports ``metrics`` over the recorded rounds
(:mod:`fedsde.problems.metrics`: train loss, ``‖∇F‖²``, test accuracy where there is a test set, ``‖w − w₀‖``):
name → ``{"mean": [...], "se": [...]}`` over replicates, one entry per round in ``metrics_rounds``; its ``final``
has the mean and its standard errors, and the covariance for least-squares regression clients only (their ``d`` is
small; a classifier's is in the hundreds or thousands).  ``metrics_sampling`` says how the metrics were evaluated:
exactly, or on a seeded subsample of rows or, for a client population (a synthetic file of 10⁴ clients or more,
:mod:`fedsde.problems.populations.base`), of clients and their rows, with its size.  Least-squares clients draw their
minibatches as the file says (:mod:`fedsde.clients.least_squares_oracle`), so the moments are comparable with
``fedsde exact``.  A data run whose mean train loss grows tenfold or stops being finite, or ends above its start,
and partial participation whose unbiased weights vary widely, are reported as warnings (:mod:`fedsde.sim.health`).
"""

from __future__ import annotations

import argparse

import numpy as np

from fedsde._cli import one_line_help
from fedsde._cli._metric_budget import add_metric_samples_option, metric_samples_for, sampling_line
from fedsde._cli._names import AGGREGATOR_NAMES, WEIGHTINGS
from fedsde._cli.common import (
    add_aggregator_option,
    add_json_flag,
    add_problem_args,
    aggregator_from_args,
    aggregator_options,
    check_aggregator_problem,
    check_start,
    emit,
    fmt_array,
    local_steps_from_args,
    options_named,
    parse_vector,
    refuse_known_divergence,
    show_progress,
    warn,
)
from fedsde.errors import FedsdeInputError

#: the arguments of :func:`fedsde.sim.simulate` that are options of the command (errors name the options)
_OPTIONS = ("participation", "replicates", "rounds", "eta", "server_lr", "local_steps", "weighting", "seed", "w0",
            "device")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help=one_line_help("simulate"),
        description="Simulate R independent runs of federated training on quadratic clients or a data problem "
        "and report the moments of the server weights after the last round (data problems, kind = "
        "\"classification\" or \"regression\": also train loss, ‖∇F‖², test accuracy (classification) and "
        "‖w − w0‖ over rounds, mean ± s.e.).",
    )
    add_problem_args(p)
    p.add_argument("--rounds", type=int, required=True, metavar="n")
    p.add_argument("--replicates", type=int, required=True, metavar="R", help="independent runs (>= 2)")
    p.add_argument("--seed", type=int, required=True, metavar="SEED")
    p.add_argument("--w0", default=None, metavar="w1,w2,…",
                   help="start point (default zero; data problems: the problem's initial weights)")
    p.add_argument("--record-every", type=int, default=None, metavar="m",
                   help="data problems: record the metrics every m rounds (default: about 20 records; the last "
                   "round always)")
    add_metric_samples_option(p)
    p.add_argument("--participation", type=int, default=None, metavar="m", help="clients sampled per round")
    p.add_argument("--weighting", choices=WEIGHTINGS, default="unbiased",
                   help="how the m clients of --participation are drawn and weighted (no effect without it): "
                   "unbiased (default): a uniform m-subset S, client k in S weighted p_k Q/m, so the update is "
                   "unbiased for Σ p_k Δ_k; renormalised: a uniform m-subset S, weights p_k/Σ_{j∈S} p_j (summing "
                   "to one, biased); multinomial: m draws with replacement with probabilities p_k, each draw "
                   "weighted 1/m (seed 003, eq. (14))")
    p.add_argument("--aggregator", default="fedavg", choices=AGGREGATOR_NAMES, metavar="NAME",
                   help="server rule with its default settings (%(choices)s; feddisco reads "
                   "label_distributions from the problem file)")
    add_aggregator_option(p)
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda, cuda:1, …)")
    p.add_argument("--float32", action="store_true", help="simulate in float32 (default float64)")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from fedsde._cli._data_flags import problem_from_args
    from fedsde.problems import is_data_problem
    from fedsde.sim import simulate

    problem = problem_from_args(args, population=True)  # clients on demand where the file asks for them
    steps = local_steps_from_args(args, problem.Q)
    w0 = parse_vector("--w0", args.w0, problem.d)
    check_start(problem, w0)
    check_aggregator_problem(args.aggregator, problem, args.problem)
    agg = aggregator_from_args(args)
    if args.replicates is None or args.replicates < 2:
        raise FedsdeInputError(f"--replicates={args.replicates}: must be an integer >= 2 (a covariance needs two "
                               "replicates)")
    if args.weighting != "unbiased" and args.participation is None:
        warn(f"--weighting={args.weighting} only matters with --participation; without it every client takes part "
             "each round with weight p_k")
    refuse_known_divergence(problem, args.eta, steps, args.server_lr, aggregator=agg,
                            participation=args.participation if args.weighting == "unbiased" else None)
    if is_data_problem(problem):
        return _run_data(args, problem, steps, w0, agg)
    if args.record_every is not None:
        raise FedsdeInputError("--record-every: only for data problems (quadratic runs report the final moments)")
    if args.metric_samples is not None:
        raise FedsdeInputError("--metric-samples: only for data problems (quadratic runs report the final moments)")
    with options_named(args, *_OPTIONS):
        res = simulate(
            problem, eta=args.eta, local_steps=steps, rounds=args.rounds, replicates=args.replicates,
            seed=args.seed, server_lr=args.server_lr, w0=w0, participation=args.participation,
            weighting=args.weighting, aggregator=agg,
            record=[0, args.rounds] if args.rounds else [0], device=args.device,
            dtype=torch.float32 if args.float32 else torch.float64, progress=show_progress(args),
            moments_only=True,  # streamed over replicate chunks: memory does not grow with --replicates
        )
    mean, cov = res.mean()[-1], res.cov()[-1]
    se = np.sqrt(np.diag(cov) / res.replicates)
    result = {
        "final": {"mean": mean, "cov": cov, "mean_stderr": se, "round": args.rounds},
        "replicates": res.replicates,
        "config": {k: v for k, v in res.config.items() if k != "local_steps"} | {
            "aggregator_options": aggregator_options(args),
            "local_steps": np.atleast_1d(steps).tolist()},
    }
    human = "\n".join([
        f"{res.replicates} replicates, {args.rounds} rounds, seed {args.seed} ({res.config['device']})",
        f"final mean  {fmt_array(mean)}  (± {fmt_array(se)} s.e.)",
        f"final cov   {fmt_array(cov)}",
    ])
    return emit(args, result, human)


def _run_data(args: argparse.Namespace, problem, local_steps, w0, agg) -> int:
    """A data problem: metrics over the recorded rounds and the final mean of the server weights."""
    import torch

    from fedsde.sim import MetricRequest, simulate

    n = args.rounds
    every = args.record_every if args.record_every is not None else max(1, -(-n // 20))
    if every < 1:
        raise FedsdeInputError(f"--record-every={every}: must be an integer >= 1")
    record = sorted(set(range(0, n + 1, every)) | {n})
    start = problem.initial_weights() if w0 is None else w0
    samples, groups, chosen_by = metric_samples_for(args, problem, local_steps, len(record))
    dtype = torch.float32 if args.float32 else torch.float64
    from fedsde._memory import json_bytes, keep_memory

    # the metrics of the recorded weights (T, R, d): a contiguous copy and a pass's work space; the printed JSON
    keep_memory(f"the metrics of {len(record)} × {args.replicates} recorded weight vectors (d={problem.d})",
                8 * len(record) * args.replicates * problem.d + (1 << 27) + json_bytes(2 * problem.d + 8 * len(record)),
                "a larger --record-every (fewer records) or fewer --replicates")
    with options_named(args, *_OPTIONS):
        res = simulate(
            problem, eta=args.eta, local_steps=local_steps, rounds=n, replicates=args.replicates, seed=args.seed,
            server_lr=args.server_lr, w0=start, participation=args.participation, weighting=args.weighting,
            aggregator=agg, record=record, device=args.device, dtype=dtype, progress=show_progress(args),
            metrics=MetricRequest(samples=samples, groups=groups,
                                  chosen_by=None if chosen_by == "default" else chosen_by),
        )  # metrics with their progress, and the warnings of a loss that grows or rises (fedsde.sim.health)
    metrics = res.metric_summary()
    final = res.weights[-1]
    mean, se = final.mean(0), final.std(0, ddof=1) / np.sqrt(res.replicates)
    final_law = {"mean": mean, "mean_stderr": se, "round": n}
    if getattr(problem, "model", None) == "least-squares":  # small d: the covariance, comparable with `fedsde exact`
        final_law["cov"] = np.cov(final, rowvar=False).reshape(problem.d, problem.d)
    result = {
        "final": final_law,
        "metrics": metrics,
        "metrics_rounds": record,
        "metrics_sampling": res.metrics.sampling or None,  # exact, or the subsample (clients, rows, seed, why)
        "replicates": res.replicates,
        **({"batching": _batching(res.config["batching"], problem, args.device, dtype)}
           if "batching" in res.config else {}),
        "problem": problem.summary() | {"label_counts": None},
        "config": {k: v for k, v in res.config.items() if k != "local_steps"} | {
            "aggregator_options": aggregator_options(args),
            "local_steps": np.atleast_1d(local_steps).tolist()},
    }
    lines = [f"{res.replicates} replicates, {n} rounds, seed {args.seed} ({res.config['device']}); "
             f"{problem.name}: {problem.model}, Q={problem.Q}, d={problem.d}, batch {problem.batch_size}",
             "round   " + "  ".join(f"{m:>22s}" for m in metrics)]
    for i, r in enumerate(record):
        lines.append(f"{r:<7d} " + "  ".join(f"{v['mean'][i]:>12.6g} ± {v['se'][i]:<7.2g}" for v in metrics.values()))
    note = sampling_line(res.metrics.sampling)
    if note:
        lines.append(note)
    return emit(args, result, "\n".join(lines))


def _batching(train: dict, problem, device, dtype) -> dict:
    """How the local steps (``used``) and the metric passes were batched, with the timings of every choice
    (:mod:`fedsde.problems.module.batching`)."""
    metric = [c.describe() for c in problem.metric_choices(device, dtype)] if hasattr(problem, "metric_choices") \
        else []
    return train | {"timings": train["timings"] + metric}
