"""``fedsde validity``: the SVAG test of whether seed 002's SDE tracks FedAvg on a problem."""

from __future__ import annotations

import argparse

from fedsde._cli.common import (
    add_json_flag,
    add_problem_args,
    emit,
    local_steps_from_args,
    parse_vector,
    refuse_known_divergence,
)
from fedsde.problems import load_problem


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validity",
        help="SVAG test: does the SDE of FedAvg track FedAvg on this problem (ℓ = 1, 2, 4, 8)?",
        description="Run the SVAG chain lifted to the server round (Li, Malladi & Arora 2021) for each ℓ: ℓ× more "
        "rounds with server step s/ℓ and displacement Â_ℓ = (1+√(2ℓ−1))/2·Â⁽¹⁾ + (1−√(2ℓ−1))/2·Â⁽²⁾ from two "
        "independent client rounds (ℓ = 1 is FedAvg). The chains converge to the SDE (2) at rate 1/ℓ; where the "
        "metrics of successive ℓ agree within noise and --tolerance on the grid t = n·h, the SDE tracks FedAvg. "
        "Quadratic and data problem files (kind = \"classification\") are accepted.",
    )
    add_problem_args(p)
    p.add_argument("--rounds", type=int, required=True, metavar="n", help="base rounds: the test runs to t = n·h")
    p.add_argument("--ells", default="1,2,4,8", metavar="ℓ1,ℓ2,…",
                   help="SVAG parameters, at least two distinct integers >= 1 (default 1,2,4,8; include 1, FedAvg "
                   "itself, to test FedAvg)")
    p.add_argument("--replicates", type=int, required=True, metavar="R", help="independent chains per ℓ (>= 2)")
    p.add_argument("--seed", type=int, required=True, metavar="S")
    p.add_argument("--h", type=float, default=None, metavar="h", help="time step of one base round (default η)")
    p.add_argument("--w0", default=None, metavar="w1,w2,…",
                   help="start point (default: the problem's initial weights for a data problem — zero for linear "
                   "models, seeded for an MLP — and zero for quadratic clients)")
    p.add_argument("--tolerance", type=float, default=0.05, metavar="tol",
                   help="relative tolerance of the verdict: a gap between successive ℓ counts against tracking only "
                   "beyond tol·(metric's magnitude) + z·s.e. (default 0.05)")
    p.add_argument("--alpha", type=float, default=0.05, metavar="α",
                   help="family level of the noise allowance z (Bonferroni over all comparisons; default 0.05)")
    p.add_argument("--metrics", default=None, metavar="m1,m2,…",
                   help="metrics to record (default all: train_loss, grad_norm_sq, test_accuracy for data problems, "
                   "distance_from_start; train_loss always)")
    p.add_argument("--verdict-metrics", default=None, metavar="m1,m2,…",
                   help="metrics the verdict judges (default all recorded)")
    p.add_argument("--record-every", type=int, default=1, metavar="m", help="grid spacing in base rounds (default 1)")
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda, …)")
    p.add_argument("--float32", action="store_true", help="run the chains in float32 (default float64)")
    p.add_argument("--final-cov", choices=FINAL_COV, default="full",
                   help="what final_cov holds per ℓ: full (d×d covariance, default), diag (the d variances) or none "
                   "(null); use diag or none for large models (d×d per ℓ is hundreds of MB of JSON at d in the "
                   "thousands) and in sweeps")
    add_json_flag(p)
    p.set_defaults(func=run)


#: choices of ``--final-cov``
FINAL_COV = ("full", "diag", "none")


def final_cov_view(cov, how: str):
    """``final_cov`` as asked by ``--final-cov``: the (L, d, d) covariances, their (L, d) diagonals, or ``None``."""
    import numpy as np

    if how == "full":
        return cov
    if how == "diag":
        return np.diagonal(cov, axis1=-2, axis2=-1).copy()
    return None


def _names(option: str, text: str | None) -> list[str] | None:
    if text is None:
        return None
    out = [x.strip() for x in text.split(",") if x.strip()]
    if not out:
        from fedsde.errors import FedsdeInputError

        raise FedsdeInputError(f"{option}={text!r}: must name at least one metric")
    return out


def _ells(text: str) -> list[int]:
    from fedsde.errors import FedsdeInputError

    try:
        vals = [int(x) for x in str(text).replace(" ", "").split(",") if x]
    except ValueError:
        raise FedsdeInputError(f"--ells={text!r}: must be comma-separated integers >= 1") from None
    if not vals or min(vals) < 1:
        raise FedsdeInputError(f"--ells={text!r}: must be comma-separated integers >= 1")
    if len(set(vals)) < 2:
        raise FedsdeInputError(f"--ells={text!r}: need at least two distinct values of ℓ >= 1 for a verdict (1, "
                               "FedAvg itself, is not required but the test is about FedAvg only when it is included; "
                               "e.g. 1,2,4,8)")
    return vals


def run(args: argparse.Namespace) -> int:
    import torch

    from fedsde.errors import FedsdeInputError
    from fedsde.validity import validity_test

    problem = load_problem(args.problem)
    steps = local_steps_from_args(args, problem.Q)
    w0 = parse_vector("--w0", args.w0, problem.d)
    if args.rounds is None or args.rounds < 1:
        raise FedsdeInputError(f"--rounds={args.rounds}: must be an integer >= 1")
    if args.replicates is None or args.replicates < 2:
        raise FedsdeInputError(f"--replicates={args.replicates}: must be an integer >= 2 (a standard error needs two)")
    ells = _ells(args.ells)
    # known divergence on quadratic clients, up front: local SGD (eta·λ_max >= 2) and the server recursion of the
    # mean at the server step of every chain (s for ℓ = 1, s/ℓ for the SVAG chains)
    for ell in sorted(set(ells)):
        try:
            refuse_known_divergence(problem, args.eta, steps, args.server_lr / ell)
        except FedsdeInputError as err:
            if ell == 1:
                raise
            raise FedsdeInputError(f"SVAG chain ell={ell} (server step s/ell = {args.server_lr / ell:g}): {err}") \
                from None
    res = validity_test(
        problem, eta=args.eta, local_steps=steps, rounds=args.rounds, replicates=args.replicates, seed=args.seed,
        server_lr=args.server_lr, ells=ells, h=args.h, w0=w0, tolerance=args.tolerance, alpha=args.alpha,
        metrics=_names("--metrics", args.metrics), verdict_metrics=_names("--verdict-metrics", args.verdict_metrics),
        record_every=args.record_every, device=args.device,
        dtype=torch.float32 if args.float32 else torch.float64, progress=not args.json,
    )
    result = res.to_dict()
    result["final_cov"] = final_cov_view(res.final_cov, args.final_cov)
    result["config"] = {**result["config"], "final_cov": args.final_cov}
    T = res.times[-1]
    lines = [f"problem: Q={problem.Q}, d={problem.d}  eta={args.eta}  server_lr={args.server_lr}  h={res.config['h']}"
             f"  rounds={args.rounds} (t = n·h up to {T:.6g})  replicates={args.replicates} per ℓ"]
    header = "  ".join(f"ℓ={e:<14d}" for e in res.ells)
    lines.append(f"{'metric at T':22s}{header}")
    for name, s in res.metrics.items():
        cells = "  ".join(f"{m:.5g}±{se:.1g}".ljust(16) for m, se in zip(s["mean"][:, -1], s["se"][:, -1],
                                                                          strict=True))
        lines.append(f"{name:22s}{cells}")
    if res.verdict is not None:
        base = "FedAvg" if res.ells[0] == 1 else f"the ℓ={res.ells[0]} chain"
        lines.append(("TRACKS: " if res.verdict.tracks else "DOES NOT TRACK: ") + res.verdict.sentence(base))
        gap = {m: float(res.metrics[m]["mean"][0, -1] - res.extrapolated[m]["mean"][-1]) for m in res.metrics}
        first = "FedAvg" if res.ells[0] == 1 else f"ℓ={res.ells[0]}"
        lines.append(f"{first} − SDE at T (Richardson from the two largest ℓ): "
                     + ", ".join(f"{m} {v:+.3g}" for m, v in gap.items()))
    else:
        lines.append("(one ℓ: no verdict; give --ells with at least two values)")
    return emit(args, result, "\n".join(lines))
