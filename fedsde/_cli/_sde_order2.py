"""``fedsde sde --order 2``: the order-2 SDE (:mod:`fedsde.sde.order2`, :mod:`fedsde.sde.order2_general`)."""

from __future__ import annotations

import argparse

import numpy as np

from fedsde._cli.common import show_progress


def order2_setup(args: argparse.Namespace, problem) -> int | None:
    """Quadratic clients: select the linear order-2 variant (``order2``, exact OU transitions unless ``--method
    euler``) and return ``None`` (the command goes on as for any linear variant).  Other problems: run the
    weak-order-2 scheme here and return the exit status."""
    from fedsde._cli.common import rule_from_args
    from fedsde.errors import FedsdeInputError
    from fedsde.problems import QuadraticProblem

    if rule_from_args(args) is not None:
        raise FedsdeInputError(f"--order={args.order}: with --aggregator the SDE is the rule's own first-order SDE")
    if isinstance(problem, QuadraticProblem):
        if args.variant != "corrected":
            raise FedsdeInputError(f"--variant={args.variant}: --order 2 integrates the order-2 SDE (its round-law "
                                   "form, docs/order2.md); drop --variant")
        from fedsde.sde.order2 import DEFAULT_FORM, ORDER2_FORMS

        args.variant = ORDER2_FORMS[DEFAULT_FORM]
        if args.method is None:
            args.method = "exact"
        return None
    if args.variant not in ("corrected", "general"):
        raise FedsdeInputError(f"--variant={args.variant}: --order 2 on a data problem integrates the order-2 SDE; "
                               "drop --variant")
    for flag, value, default in (("--method", args.method, None), ("--integrator", args.integrator, None),
                                 ("--ell", args.ell, None), ("--inner-samples", args.inner_samples, None),
                                 ("--chunk-size", args.chunk_size, None)):
        if value != default:
            raise FedsdeInputError(f"{flag}={value}: does not apply to --order 2 on a data problem (its scheme is "
                                   "the Runge–Kutta drift with the problem's own gradient noise, --substeps per round)")
    return _run_data(args, problem)


def _run_data(args: argparse.Namespace, problem) -> int:
    from fedsde._cli.common import check_start, emit, fmt_array, local_steps_from_args, parse_vector
    from fedsde.errors import FedsdeInputError
    from fedsde.params import Integrator, Precision, Recording, Replication, Schedule
    from fedsde.problems.metrics import evaluate_metrics
    from fedsde.sde.order2_paths import simulate_order2
    from fedsde.sde.svag import default_oracle_factory
    from fedsde.validity.core import default_start

    steps = local_steps_from_args(args, problem.Q)
    w0 = parse_vector("--w0", args.w0, problem.d)
    check_start(problem, w0)
    if args.rounds is None or args.rounds < 0:
        raise FedsdeInputError(f"--rounds={args.rounds}: must be an integer >= 0")
    if args.replicates is None or args.replicates < 2:
        raise FedsdeInputError(f"--replicates={args.replicates}: must be an integer >= 2")
    if args.substeps < 1:
        raise FedsdeInputError(f"--substeps={args.substeps}: must be an integer >= 1")
    every = args.record_every if args.record_every is not None else max(1, args.rounds // 100)
    if every < 1:
        raise FedsdeInputError(f"--record-every={every}: must be an integer >= 1")
    record = sorted(set(range(0, args.rounds + 1, every)) | {args.rounds})
    start = default_start(problem, w0)
    res = simulate_order2(problem, Schedule(args.eta, steps, args.rounds, args.server_lr, args.h),
                          Replication(args.replicates, args.seed),
                          Precision("float32" if args.float32 else "float64", args.device), w0=start,
                          oracle_factory=default_oracle_factory(problem), integrator=Integrator(substeps=args.substeps),
                          recording=Recording(record=record), progress=show_progress(args))
    from fedsde._samples import resolve_final_cov

    how = resolve_final_cov("--final-cov", args.final_cov, problem.d)  # no d × d array unless asked for
    final = res.weights[-1]
    mean, var = final.mean(0), final.var(0, ddof=1)
    cov = {"full": np.cov(final, rowvar=False).reshape(problem.d, problem.d) if how == "full" else None,
           "diag": var, "none": None}[how]
    s0 = np.zeros(problem.d) if start is None else np.asarray(start, dtype=np.float64)
    vals = evaluate_metrics(problem, res.weights, s0)
    metrics = {m: {"mean": v.mean(1), "se": v.std(1, ddof=1) / np.sqrt(res.replicates)} for m, v in vals.items()}
    result = {"final": {"mean": mean, "cov": cov, "mean_stderr": np.sqrt(var / res.replicates),
                        "round": args.rounds, "time": float(res.times[-1])},
              "times": res.times, "rounds": res.rounds, "mean": res.mean(), "paths": res.replicates,
              "metrics": metrics, "config": res.config | {"order": 2, "final_cov": how}}
    lines = [f"problem: Q={problem.Q}, d={problem.d}  order-2 SDE  integrator: Runge–Kutta drift (Hessian-vector "
             f"products) + the problem's gradient noise, substeps={args.substeps}  eta={args.eta}  "
             f"server_lr={args.server_lr}  h={res.h}",
             f"replicates={res.replicates}  rounds={args.rounds}  (t = n·h = {res.times[-1]:.6g})",
             f"final mean            {fmt_array(mean)}"]
    lines += [f"E {m} at T".ljust(28) + f"{v['mean'][-1]:.6g} ± {v['se'][-1]:.2g} (s.e.)" for m, v in metrics.items()]
    return emit(args, result, "\n".join(lines))
