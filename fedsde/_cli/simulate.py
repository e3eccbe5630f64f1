"""``fedsde simulate``: Monte-Carlo simulation of the discrete algorithm on quadratic clients."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from fedsde._cli.common import (
    add_json_flag,
    add_problem_args,
    check_aggregator_problem,
    emit,
    fmt_array,
    local_steps_from_args,
    parse_vector,
)
from fedsde.aggregators import AGGREGATORS
from fedsde.errors import FedsdeInputError
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
    p.add_argument("--replicates", type=int, required=True, metavar="R", help="independent runs (>= 2)")
    p.add_argument("--seed", type=int, required=True, metavar="S")
    p.add_argument("--w0", default=None, metavar="w1,w2,…", help="start point (default zero)")
    p.add_argument("--participation", type=int, default=None, metavar="m", help="clients sampled per round")
    p.add_argument("--weighting", choices=WEIGHTINGS, default="unbiased",
                   help="how the m clients of --participation are drawn and weighted (no effect without it): "
                   "unbiased (default): a uniform m-subset S, client k in S weighted p_k Q/m, so the update is "
                   "unbiased for Σ p_k Δ_k; renormalised: a uniform m-subset S, weights p_k/Σ_{j∈S} p_j (summing "
                   "to one, biased); multinomial: m draws with replacement with probabilities p_k, each draw "
                   "weighted 1/m (seed 003, eq. (14))")
    p.add_argument("--aggregator", default="fedavg", choices=sorted(AGGREGATORS), metavar="NAME",
                   help=f"server rule with its default settings ({', '.join(sorted(AGGREGATORS))}; feddisco reads "
                   "label_distributions from the problem file)")
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda, cuda:1, …)")
    p.add_argument("--float32", action="store_true", help="simulate in float32 (default float64)")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    problem = load_problem(args.problem)
    steps = local_steps_from_args(args, problem.Q)
    w0 = parse_vector("--w0", args.w0, problem.d)
    check_aggregator_problem(args.aggregator, problem, args.problem)
    if args.replicates is None or args.replicates < 2:
        raise FedsdeInputError(f"--replicates={args.replicates}: must be an integer >= 2 (a covariance needs two "
                               "replicates)")
    if args.weighting != "unbiased" and args.participation is None:
        sys.stderr.write(f"note: --weighting={args.weighting} only matters with --participation; without it every "
                         "client takes part each round with weight p_k\n")
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
