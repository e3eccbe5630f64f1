"""``fedsde simulate``: Monte-Carlo simulation of the discrete algorithm on quadratic clients."""

from __future__ import annotations

import argparse

import numpy as np

from fedsde._cli.common import (
    add_json_flag,
    add_problem_args,
    emit,
    fmt_array,
    local_steps_from_args,
    parse_vector,
)
from fedsde.aggregators import AGGREGATORS
from fedsde.problems import load_problem
from fedsde.sim import WEIGHTINGS, simulate


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="simulate the discrete algorithm (replicates × clients, vectorised)",
        description="Simulate R independent runs of federated training on quadratic clients and report the "
        "moments of the server weights after the last round.",
    )
    add_problem_args(p)
    p.add_argument("--rounds", type=int, required=True, metavar="n")
    p.add_argument("--replicates", type=int, required=True, metavar="R")
    p.add_argument("--seed", type=int, required=True, metavar="S")
    p.add_argument("--w0", default=None, metavar="w1,w2,…", help="start point (default zero)")
    p.add_argument("--participation", type=int, default=None, metavar="m", help="clients sampled per round")
    p.add_argument("--weighting", choices=WEIGHTINGS, default="unbiased",
                   help="weights of sampled clients: p_k Q/m (unbiased) or p_k/Σ_S p_j (renormalised)")
    p.add_argument("--aggregator", default="fedavg", choices=sorted(AGGREGATORS), metavar="NAME",
                   help=f"server rule with its default settings ({', '.join(sorted(AGGREGATORS))})")
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda, cuda:1, …)")
    p.add_argument("--float32", action="store_true", help="simulate in float32 (default float64)")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    problem = load_problem(args.problem)
    steps = local_steps_from_args(args, problem.Q)
    w0 = parse_vector("--w0", args.w0, problem.d)
    res = simulate(
        problem, eta=args.eta, local_steps=steps, rounds=args.rounds, replicates=args.replicates,
        seed=args.seed, server_lr=args.server_lr, w0=w0, participation=args.participation,
        weighting=args.weighting, aggregator=getattr(args, "aggregator", "fedavg"),
        record=[0, args.rounds] if args.rounds else [0], device=args.device,
        dtype=torch.float32 if args.float32 else torch.float64, progress=not args.json,
    )
    mean, cov = res.mean()[-1], res.cov()[-1]
    se = np.sqrt(np.diag(cov) / res.replicates)
    result = {
        "final": {"mean": mean, "cov": cov, "mean_stderr": se, "round": args.rounds},
        "replicates": res.replicates,
        "config": {k: v for k, v in res.config.items() if k != "local_steps"} | {
            "local_steps": np.atleast_1d(steps).tolist()},
    }
    human = "\n".join([
        f"{res.replicates} replicates, {args.rounds} rounds, seed {args.seed} ({res.config['device']})",
        f"final mean  {fmt_array(mean)}  (± {fmt_array(se)} s.e.)",
        f"final cov   {fmt_array(cov)}",
    ])
    return emit(args, result, human)
