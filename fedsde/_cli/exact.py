"""``fedsde exact``: exact one-round, stationary and transient laws of the FedAvg chain.

Quadratic clients (seed 002, Assumption 6.1): the closed forms of :mod:`fedsde.exact`.  Least-squares regression
clients (``kind = "regression"``, real minibatch noise): the exact first and second moments of
:mod:`fedsde.exact.least_squares` (:mod:`fedsde._cli._exact_regression`), with the constant-noise surrogate's
stationary law beside them.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from fedsde._cli import one_line_help
from fedsde._cli._names import AGGREGATOR_NAMES
from fedsde._cli.common import (
    add_aggregator_option,
    add_json_flag,
    add_problem_args,
    aggregator_from_args,
    aggregator_options,
    check_aggregator_problem,
    emit,
    fmt_array,
    local_steps_from_args,
    parse_vector,
    warn,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "exact",
        help=one_line_help("exact"),
        description="Exact one-round law, stationary law and (with --rounds) transient law of FedAvg on "
        "quadratic clients, or exact first and second moments on least-squares regression clients (kind = "
        "\"regression\": minibatch noise that depends on w), with the stationary law of the constant-noise "
        "surrogate fitted to the same data and its relative error. Clock: rounds n (t = n·h in the SDE's "
        "notation).",
    )
    add_problem_args(p, problem_help="quadratic problem or least-squares regression file (kind = \"regression\"; "
                     ".toml or .json)")
    p.add_argument("--rounds", type=int, default=None, metavar="n", help="also give the law after n rounds")
    p.add_argument("--w0", default=None, metavar="w1,w2,…",
                   help="start point (default zero; a regression file: its w0, else zero)")
    p.add_argument("--participation", type=int, default=None, metavar="m",
                   help="clients sampled per round (uniform without replacement, weights p_k Q/m)")
    p.add_argument("--aggregator", default="fedavg", choices=AGGREGATOR_NAMES, metavar="NAME",
                   help="server rule: exact laws exist for the rules linear in the client displacements, fedavg, "
                   "fednova and feddisco (feddisco reads label_distributions from the problem file; fednova and "
                   "feddisco only under full participation); the others give an error")
    add_aggregator_option(p)
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fedsde._cli._data_flags import problem_from_args
    from fedsde.errors import NoStationaryLawError
    from fedsde.exact import aggregator_round_weights, round_law, stationary_law, transient_moments
    from fedsde.exact.stability import known_divergence
    from fedsde.problems import require_quadratic

    problem = problem_from_args(args)
    if getattr(problem, "model", None) == "least-squares":
        from fedsde._cli._exact_regression import run_regression

        return run_regression(args, problem)
    require_quadratic(problem, "exact", "the exact law of the discrete chain is a closed form for quadratic "
                       "losses only; sample FedAvg with `fedsde simulate` or test the SDE with `fedsde validity`")
    steps = local_steps_from_args(args, problem.Q)
    w0 = parse_vector("--w0", args.w0, problem.d)
    check_aggregator_problem(args.aggregator, problem, args.problem)
    agg = aggregator_from_args(args)
    omega = aggregator_round_weights(problem, agg, steps, participation=args.participation)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        law = round_law(problem, args.eta, steps, args.server_lr, participation=args.participation, weights=omega)
    notes = [str(w.message) for w in caught]
    for why in known_divergence(problem, args.eta, steps, args.server_lr, aggregator=agg,
                                participation=args.participation):
        warn(f"the algorithm diverges with these settings: {why}")
    try:
        st = stationary_law(problem, args.eta, steps, args.server_lr, participation=args.participation,
                            weights=omega)
        stationary = {"mean": st.mean, "cov": st.cov}
    except NoStationaryLawError as exc:
        stationary = None
        notes.append(str(exc))
    result: dict = {
        "aggregator": args.aggregator,
        "aggregator_options": aggregator_options(args),
        "weights": omega,
        "optimum": problem.optimum,
        "round_law": {"B": law.B, "c": law.c, "noise_cov": law.noise_cov,
                      "spectral_radius": law.spectral_radius},
        "stationary": stationary,
        "expanding_clients": list(law.expanding_clients),
        "notes": notes,
    }
    if args.rounds is not None:
        tr = transient_moments(problem, args.eta, steps, args.rounds, args.server_lr, w0=w0,
                               participation=args.participation, weights=omega, record=[args.rounds])
        result["transient"] = {"rounds": args.rounds, "mean": tr.final_mean, "cov": tr.final_cov}
    lines = [
        f"problem: Q={problem.Q}, d={problem.d}  eta={args.eta}  server_lr={args.server_lr}  "
        f"local steps={np.atleast_1d(steps).tolist()}  aggregator={args.aggregator}"
        + "".join(f" {k}={v}" for k, v in aggregator_options(args).items()),
        f"aggregation weights   {fmt_array(omega)}",
        f"optimum w*            {fmt_array(problem.optimum)}",
        f"round law B           {fmt_array(law.B)}",
        f"round law c (= C4)    {fmt_array(law.c)}",
        f"Cov eps               {fmt_array(law.noise_cov)}",
        f"rho(I - sB)           {law.spectral_radius:.6g}",
    ]
    if stationary is not None:
        lines += [f"stationary mean       {fmt_array(stationary['mean'])}",
                  f"stationary cov        {fmt_array(stationary['cov'])}"]
    if "transient" in result:
        lines += [f"after {args.rounds} rounds: mean {fmt_array(result['transient']['mean'])}",
                  f"                   cov  {fmt_array(result['transient']['cov'])}"]
    lines += [f"note: {n}" for n in notes]
    return emit(args, result, "\n".join(lines))
