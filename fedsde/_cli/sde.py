"""``fedsde sde``: simulate a FedAvg SDE (quadratic variants or the Monte-Carlo SDE of eq. (2)) on the round grid."""

from __future__ import annotations

import argparse

import numpy as np

from fedsde._cli import one_line_help
from fedsde._cli._names import SDE_ESTIMATORS, SDE_METHODS, SDE_MODELS
from fedsde._cli.common import (
    add_json_flag,
    add_problem_args,
    add_renamed,
    check_start,
    emit,
    flag,
    fmt_array,
    local_steps_from_args,
    parse_vector,
    refuse_known_divergence,
    refuse_least_squares,
    rule_from_args,
    rule_sampling_from_args,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sde",
        help=one_line_help("sde"),
        description="Simulate R paths of the FedAvg SDE dw = −A(w − c) dt + b dB (variants paper, corrected, "
        "matched) or of seed 002 eq. (2) with Monte-Carlo coefficients (general), on the clock t = n·h with "
        "server step s = h·η₀, and report the moments of the paths at the last round.",
    )
    add_problem_args(p)
    p.add_argument("--variant", choices=SDE_MODELS, default="corrected", help="SDE variant (default corrected)")
    p.add_argument("--h", type=float, default=None, metavar="h", help="time step of one round (default η)")
    p.add_argument("--rounds", type=int, required=True, metavar="n", help="rounds: the paths run to t = n·h")
    add_renamed(p, "--replicates", "--paths", type=int, required=True, metavar="R",
                help="number of independent paths (>= 2)")
    p.add_argument("--seed", type=int, required=True, metavar="SEED")
    p.add_argument("--substeps", type=int, default=1, metavar="k", help="Euler steps per round (dt = h/k)")
    p.add_argument("--method", choices=SDE_METHODS, default="euler",
                   help="euler (torchsde) or exact (OU transitions; linear variants)")
    p.add_argument("--w0", default=None, metavar="w1,w2,…",
                   help="start point (default: zero for quadratic clients, the problem's initial weights for a data "
                   "problem)")
    p.add_argument("--inner-samples", type=int, default=None, metavar="K",
                   help="general variant, mc-euler integrator: Monte-Carlo rollouts per path and step (default 16)")
    p.add_argument("--estimator", choices=SDE_ESTIMATORS, default="compensated",
                   help="general variant: diffusion estimator")
    p.add_argument("--integrator", choices=("mc-euler", "svag"), default=None,
                   help="general variant: mc-euler (Euler–Maruyama with Monte-Carlo M̂, V̂ from --inner-samples "
                   "rollouts per step; the default) or svag (the SVAG chain with parameter --ell: step h/ℓ, two client "
                   "rounds per step, weak order 1; the cheaper sampler of eq. (2)); with --aggregator on a data "
                   "problem the rule's SDE is sampled by the rule's SVAG chain (svag, the only one)")
    p.add_argument("--ell", type=int, default=None, metavar="ℓ",
                   help="svag integrator: SVAG parameter, ℓ steps of size h/ℓ per round (default 4; adaptive rules: "
                   "ℓ = k², a square)")
    p.add_argument("--record-every", type=int, default=None, metavar="m",
                   help="record the moments every m rounds (default: about 100 records)")
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda, …)")
    p.add_argument("--float32", action="store_true", help="integrate in float32 (default float64)")
    p.add_argument("--chunk-size", type=int, default=None, metavar="C", help="paths integrated at once")
    from fedsde._cli.common import add_rule_sde_args

    add_rule_sde_args(p, "sde integrates (linear and momentum rules: their first-order OU, --method exact or euler; "
                      "adaptive rules: the SDE of Malladi et al. with torchsde)")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from fedsde.errors import FedsdeInputError
    from fedsde.problems import load_problem, require_quadratic
    from fedsde.sde import quadratic_sde_coefficients
    from fedsde.sde.integrate import simulate_sde

    problem = load_problem(args.problem)
    agg = rule_from_args(args)
    sampling = rule_sampling_from_args(args, agg)
    if args.variant != "general" and agg is None:
        refuse_least_squares(problem, f"--variant={args.variant}")
        require_quadratic(problem, f"--variant={args.variant}", "the linear SDE variants have closed-form drift and "
                          "diffusion for quadratic losses only; use --variant general for a data problem")
    steps = local_steps_from_args(args, problem.Q)
    w0 = parse_vector("--w0", args.w0, problem.d)
    check_start(problem, w0)
    if args.rounds is None or args.rounds < 0:
        raise FedsdeInputError(f"--rounds={args.rounds}: must be an integer >= 0")
    if args.replicates is None or args.replicates < 2:
        raise FedsdeInputError(f"{flag(args, 'replicates')}={args.replicates}: must be an integer >= 2 (a covariance "
                               "needs two paths)")
    every = args.record_every if args.record_every is not None else max(1, args.rounds // 100)
    if every < 1:
        raise FedsdeInputError(f"--record-every={every}: must be an integer >= 1")
    record = sorted(set(range(0, args.rounds + 1, every)) | {args.rounds})
    if agg is not None:
        from fedsde._cli._sde_rule import run_rule

        refuse_known_divergence(problem, args.eta, steps, args.server_lr, aggregator=agg)
        return run_rule(args, problem, agg, steps, w0, record, sampling)
    if args.integrator is None:
        args.integrator = "mc-euler"
    refuse_known_divergence(problem, args.eta, steps, args.server_lr)
    general = _general_setup(args, problem, w0)
    if general is not None:
        oracle, w0 = general
    if args.integrator == "svag" and args.variant == "general":
        from fedsde.sde.svag import simulate_svag

        res = simulate_svag(
            problem, eta=args.eta, local_steps=steps, rounds=args.rounds, replicates=args.replicates, seed=args.seed,
            ell=args.ell, server_lr=args.server_lr, h=args.h, w0=w0, oracle_factory=oracle, record=record,
            device=args.device, dtype=torch.float32 if args.float32 else torch.float64, progress=not args.json,
        )
    else:
        res = simulate_sde(
            problem, eta=args.eta, local_steps=steps, rounds=args.rounds, replicates=args.replicates, seed=args.seed,
            variant=args.variant, server_lr=args.server_lr, h=args.h, substeps=args.substeps, w0=w0,
            method=args.method, inner_samples=16 if args.inner_samples is None else args.inner_samples,
            estimator=args.estimator, device=args.device,
            dtype=torch.float32 if args.float32 else torch.float64, chunk_size=args.chunk_size, record=record,
            # the linear variants stream moments over path chunks (memory bounded whatever --replicates); metrics need
            # the paths
            progress=not args.json, moments_only=general is None,
            **({} if general is None else {"oracle_factory": oracle}),
        )
    if general is None:
        means, covs = res.mean(), res.cov()
        mean, cov, trace_cov = means[-1], covs[-1], np.trace(covs, axis1=1, axis2=2)
    else:  # paths kept: no (T, d, d) covariances (d may be in the thousands for a data problem)
        means, mean = res.mean(), res.mean()[-1]
        cov = np.cov(res.weights[-1], rowvar=False).reshape(problem.d, problem.d)
        trace_cov = res.weights.var(axis=1, ddof=1).sum(-1)
    result: dict = {
        "final": {"mean": mean, "cov": cov, "mean_stderr": np.sqrt(np.diag(cov) / res.replicates),
                  "round": args.rounds, "time": float(res.times[-1])},
        "times": res.times,
        "rounds": res.rounds,
        "mean": means,
        "trace_cov": trace_cov,
        "paths": res.replicates,
        "config": res.config,
    }
    lines = [
        f"problem: Q={problem.Q}, d={problem.d}  variant={args.variant}  "
        + (f"integrator=svag  ℓ={args.ell}  " if res.config.get("integrator") == "svag" else
           f"method={args.method}  substeps={args.substeps}  ")
        + f"eta={args.eta}  server_lr={args.server_lr}  h={res.h}",
        f"replicates={res.replicates}  rounds={args.rounds}  (t = n·h = {res.times[-1]:.6g})",
        f"final mean            {fmt_array(mean)}",
        f"final cov             {fmt_array(cov)}",
    ]
    if general is not None:
        from fedsde.problems.metrics import evaluate_metrics

        start = np.zeros(problem.d) if w0 is None else np.asarray(w0, dtype=np.float64)
        vals = evaluate_metrics(problem, res.weights, start)
        result["metrics"] = {m: {"mean": v.mean(1), "se": v.std(1, ddof=1) / np.sqrt(res.replicates)}
                             for m, v in vals.items()}
        lines += [f"E {m} at T".ljust(28) + f"{v['mean'][-1]:.6g} ± {v['se'][-1]:.2g} (s.e.)"
                  for m, v in result["metrics"].items()]
    if args.variant != "general":
        lin = quadratic_sde_coefficients(problem, args.eta, steps, args.server_lr, res.h, args.variant)
        st = lin.stationary()
        result["coefficients"] = {"A": lin.A, "c": lin.c, "diffusion_cov": lin.diffusion_cov}
        result["stationary"] = None if st is None else {"mean": st.mean, "cov": st.cov}
        if st is not None:
            lines += [f"SDE stationary mean   {fmt_array(st.mean)}", f"SDE stationary cov    {fmt_array(st.cov)}"]
    return emit(args, result, "\n".join(lines))


def _general_setup(args: argparse.Namespace, problem, w0):
    """``(oracle_factory, w0)`` of the general variant (data problems: minibatches of the file's batch size and the
    problem's initial weights), else ``None``; rejects integrator options that do not apply."""
    from fedsde.errors import FedsdeInputError

    svag = args.variant == "general" and args.integrator == "svag"
    if args.ell is not None and not svag:
        raise FedsdeInputError(f"--ell={args.ell}: applies only to --variant general --integrator svag")
    if args.inner_samples is not None and not (args.variant == "general" and args.integrator == "mc-euler"):
        raise FedsdeInputError(f"--inner-samples={args.inner_samples}: applies only to --variant general with the "
                               "mc-euler integrator (the SVAG chain and the linear variants draw no inner rollouts)")
    if args.variant != "general":
        if args.integrator != "mc-euler":
            raise FedsdeInputError(f"--integrator={args.integrator}: only for --variant general (the linear variants "
                                   "are integrated by --method)")
        return None
    if svag:
        if args.method != "euler":
            raise FedsdeInputError(f"--method={args.method}: does not apply to --integrator svag (the SVAG chain is "
                                   "its own scheme, step h/ℓ)")
        if args.substeps != 1:
            raise FedsdeInputError(f"--substeps={args.substeps}: does not apply to --integrator svag (its step is "
                                   "h/ℓ: use --ell)")
        if args.ell is None:
            args.ell = 4
        if args.ell < 1:
            raise FedsdeInputError(f"--ell={args.ell}: must be an integer >= 1")
    from fedsde.sde.svag import default_oracle_factory
    from fedsde.validity.core import default_start

    return default_oracle_factory(problem), default_start(problem, w0)
