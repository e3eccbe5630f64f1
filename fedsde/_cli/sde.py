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
    show_progress,
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
    p.add_argument("--method", choices=SDE_METHODS, default=None,
                   help="euler (torchsde) or exact (OU transitions; linear variants). Default euler, and exact with "
                   "--order 2 (Euler–Maruyama's bias O(h/substeps) would make the order-2 SDE first order)")
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
    p.add_argument("--final-cov", choices=("full", "diag", "none"), default=None,
                   help="what is computed and printed as final.cov: full (the d×d covariance of the paths at the last "
                   "round), diag (the d variances) or none (null); default full up to d = 256 and diag above. "
                   "Moments are streamed over chunks of paths; trace_cov and final.mean_stderr come from the "
                   "variances whatever this says")
    from fedsde._cli.common import add_rule_sde_args

    add_rule_sde_args(p, "sde integrates (linear and momentum rules: their first-order OU, --method exact or euler; "
                      "adaptive rules: the SDE of Malladi et al. with torchsde)")
    from fedsde._cli.common import add_order_flag

    add_order_flag(p, "the SDE: 1, seed 002's (--variant); 2, the order-2 SDE (docs/order2.md): on quadratic clients "
                   "its round-law linear form (exact OU transitions by default), on data problems the "
                   "Hessian-vector-product drift with the problem's own gradient noise, --substeps Runge–Kutta steps "
                   "per round (weak order 2 already with 1)")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from fedsde._cli._data_flags import problem_from_args
    from fedsde._memory import json_bytes, keep_memory
    from fedsde._samples import cov_numbers, resolve_final_cov
    from fedsde.errors import FedsdeInputError
    from fedsde.problems import require_quadratic
    from fedsde.problems.metrics import metric_names
    from fedsde.sde import quadratic_sde_coefficients
    from fedsde.sde.integrate import simulate_sde

    problem = problem_from_args(args)
    agg = rule_from_args(args)
    sampling = rule_sampling_from_args(args, agg)
    if args.order == 2:
        if agg is not None:
            raise FedsdeInputError(f"--order=2: with --aggregator the SDE is the rule's own first-order SDE "
                                   f"({agg.name}); leave --order out")
        from fedsde._cli._sde_order2 import order2_setup

        done = order2_setup(args, problem)  # quadratic clients: the linear order-2 variant below; else run here
        if done is not None:
            return done
    if args.method is None:
        args.method = "euler"
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
    how = resolve_final_cov("--final-cov", args.final_cov, problem.d)
    dtype = torch.float32 if args.float32 else torch.float64
    names = list(metric_names(problem)) if general is not None else []
    # what the command keeps until it prints: the streamed moments (the integrators charge them) and the JSON
    keep_memory(f"the printed JSON ({len(record)} recorded means of d={problem.d} and the final covariance as "
                f"{how})", json_bytes(len(record) * (problem.d + 1) + 2 * problem.d + cov_numbers(how, problem.d)
                                     + 2 * len(names) * len(record)),
                "--record-every (fewer records)" + (" or --final-cov diag" if how == "full" else ""))
    # moments streamed over chunks of paths (memory does not grow with --replicates), a full covariance at the last
    # round only when asked; a data problem's metrics evaluated as the paths pass the recorded rounds
    full = [args.rounds] if how == "full" else []
    on_record = None
    if general is not None:
        from fedsde._validate import device_dtype, start_point
        from fedsde.validity.core import MetricGrid

        dev, dt = device_dtype(args.device, dtype)
        start = start_point(w0, problem.d)
        on_record = MetricGrid(problem, names, np.asarray(record), args.replicates, start, dev, dt)
    if args.integrator == "svag" and args.variant == "general":
        from fedsde.sde.svag import simulate_svag

        res = simulate_svag(
            problem, eta=args.eta, local_steps=steps, rounds=args.rounds, replicates=args.replicates, seed=args.seed,
            ell=args.ell, server_lr=args.server_lr, h=args.h, w0=w0, oracle_factory=oracle, record=record,
            device=args.device, dtype=dtype, progress=show_progress(args), moments_only=True, full_cov_rounds=full,
            on_record=on_record,
        )
    else:
        res = simulate_sde(
            problem, eta=args.eta, local_steps=steps, rounds=args.rounds, replicates=args.replicates, seed=args.seed,
            variant=args.variant, server_lr=args.server_lr, h=args.h, substeps=args.substeps, w0=w0,
            method=args.method, inner_samples=16 if args.inner_samples is None else args.inner_samples,
            estimator=args.estimator, device=args.device, dtype=dtype, chunk_size=args.chunk_size, record=record,
            progress=show_progress(args), moments_only=True, full_cov_rounds=full, on_record=on_record,
            **({} if general is None else {"oracle_factory": oracle}),
        )
    means, var = res.mean(), res.var()
    mean, trace_cov = means[-1], var.sum(-1)
    cov = {"full": res.streamed.cov_at(len(record) - 1) if how == "full" else None, "diag": var[-1],
           "none": None}[how]
    result: dict = {
        "final": {"mean": mean, "cov": cov, "mean_stderr": np.sqrt(var[-1] / res.replicates),
                  "round": args.rounds, "time": float(res.times[-1])},
        "times": res.times,
        "rounds": res.rounds,
        "mean": means,
        "trace_cov": trace_cov,
        "paths": res.replicates,
        "config": res.config | {"final_cov": how},
    }
    lines = [
        f"problem: Q={problem.Q}, d={problem.d}  variant={args.variant}  "
        + (f"integrator=svag  ℓ={args.ell}  " if res.config.get("integrator") == "svag" else
           f"method={args.method}  substeps={args.substeps}  ")
        + f"eta={args.eta}  server_lr={args.server_lr}  h={res.h}",
        f"replicates={res.replicates}  rounds={args.rounds}  (t = n·h = {res.times[-1]:.6g})",
    ]
    if general is not None:  # a data problem: its metrics (evaluated as the paths passed) lead, the weights follow
        vals = on_record.host()
        if "train_loss" in vals:  # a loss that explodes while the weights stay moderate (fedsde.sim.health)
            from fedsde.sim.health import growth_warning

            growth_warning(res.rounds, vals["train_loss"], what=f"the SDE ({args.variant})")
        result["metrics"] = {m: {"mean": v.mean(1), "se": v.std(1, ddof=1) / np.sqrt(res.replicates)}
                             for m, v in vals.items()}
        lines += [f"E {m} at T".ljust(28) + f"{v['mean'][-1]:.6g} ± {v['se'][-1]:.2g} (s.e.)"
                  for m, v in result["metrics"].items()]
    lines += [
        f"final mean            {fmt_array(mean)}",
        f"final cov ({how})".ljust(22) + f"{fmt_array(cov) if cov is not None else 'not computed (--final-cov none)'}",
        f"trace of the final covariance {trace_cov[-1]:.6g}",
    ]
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
