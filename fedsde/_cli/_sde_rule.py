"""``fedsde sde --aggregator A``: paths of a server rule's own SDE (:mod:`fedsde.sde.rules`,
:mod:`fedsde.sde.adaptive`; under client sampling :mod:`fedsde.sde.sampled_sde`); on a data problem, the rule's SDE
sampled by its SVAG chain (:func:`fedsde.sde.rule_svag.rule_svag_chain`)."""

from __future__ import annotations

import argparse

import numpy as np

from fedsde._cli.common import emit, fmt_array
from fedsde.errors import FedsdeInputError

#: largest dimension whose final d × d covariance a data problem's ``sde --aggregator`` reports (``final.var``: always)
FULL_COV_MAX_D = 100


def run_rule(args: argparse.Namespace, problem, agg, steps, w0, record, sampling=(None, "unbiased")) -> int:
    """Simulate ``--replicates`` paths of the rule's SDE and report their moments at the recorded rounds."""
    from fedsde.problems import QuadraticProblem
    from fedsde.sde.rules import NoSDEError

    if agg.sde_kind is None:
        raise NoSDEError(agg.sde_refusal)
    if args.variant != "corrected":
        raise FedsdeInputError(f"--variant={args.variant}: with --aggregator the SDE is the rule's own (it has no "
                               "variants, on any problem kind); leave --variant out")
    agg.check_problem(problem, args.problem)
    if not isinstance(problem, QuadraticProblem):
        return _run_data(args, problem, agg, steps, w0, record, sampling)
    for option, value in (("--integrator", args.integrator), ("--ell", args.ell),
                          ("--inner-samples", args.inner_samples), ("--chunk-size", args.chunk_size),
                          ("--float32", args.float32 or None)):
        if value is not None:
            raise FedsdeInputError(f"{option}={value}: on quadratic clients a rule's SDE has closed-form coefficients "
                                   "and is integrated directly (--method, --substeps); leave it out")
    participation, weighting = sampling
    if agg.sde_kind == "adaptive":
        from fedsde.sde.adaptive import adaptive_sde_paths

        if args.method != "euler":
            raise FedsdeInputError(f"--method={args.method}: the adaptive SDE is nonlinear, it has no exact "
                                   "transition; it is integrated by torchsde's Euler–Maruyama (--substeps)")

        res = adaptive_sde_paths(problem, agg, eta=args.eta, local_steps=steps, rounds=args.rounds,
                                 replicates=args.replicates, seed=args.seed, server_lr=args.server_lr, h=args.h,
                                 w0=w0, substeps=args.substeps, record=record, device=args.device,
                                 participation=participation, weighting=weighting)
        rounds, paths, h, extra = res["rounds"], res["weights"], res["h"], {"state": res["state"]}
    else:
        from fedsde.sde.rules import rule_sde, simulate_rule_sde

        r = rule_sde(problem, agg, args.eta, steps, args.server_lr, args.h, participation=participation,
                     weighting=weighting)
        if r.sampling is not None and args.method == "exact":
            raise FedsdeInputError("--method=exact: under client sampling (--participation) the rule's SDE has a "
                                   "diffusion that depends on w and no exact Gaussian transition; use --method euler "
                                   "(with --substeps)")
        if args.method == "euler":
            dt = r.sde.h / args.substeps
            rho = float(np.max(np.abs(np.linalg.eigvals(np.eye(problem.d) - dt * r.sde.A))))
            if rho >= 1.0:
                from fedsde._cli.common import warn

                warn(f"--method euler: the Euler–Maruyama step dt = h/substeps = {dt:g} is unstable for this SDE "
                     f"(spectral radius of I − dt·A = {rho:.4g} >= 1, server step {r.effective_server_lr:g}); use "
                     "--method exact or more --substeps")
        rounds, paths = simulate_rule_sde(r, args.rounds, args.replicates, args.seed, w0, method=args.method,
                                          substeps=args.substeps, record=record)
        h = r.sde.h
        st = r.sde.stationary()
        extra = {"coefficients": {"A": r.sde.A, "c": r.sde.c, "diffusion_cov": r.sde.diffusion_cov},
                 "effective_server_lr": r.effective_server_lr,
                 "stationary": None if st is None else {"mean": st.mean, "cov": st.cov}}
        if r.sampling is not None:
            extra["coefficients"]["sampling"] = {"C": r.sampling.C, "scale": r.sde.scale}
    extra["participation"], extra["weighting"] = participation, weighting
    means = paths.mean(axis=1)
    cov = np.atleast_2d(np.cov(paths[-1], rowvar=False))
    result = {"aggregator": agg.describe(), "sde": agg.sde_kind,
              "final": {"mean": means[-1], "cov": cov, "mean_stderr": np.sqrt(np.diag(cov) / args.replicates),
                        "round": args.rounds, "time": float(rounds[-1] * h)},
              "times": rounds * h, "rounds": rounds, "mean": means, "trace_cov": paths.var(axis=1, ddof=1).sum(-1),
              "paths": args.replicates, **extra}
    lines = [f"aggregator={agg.name}  sde={agg.sde_kind}  eta={args.eta}  server_lr={args.server_lr}  h={h}"
             + ("" if participation is None else f"  participation={participation} ({weighting})"),
             f"replicates={args.replicates}  rounds={args.rounds}  (t = n·h = {rounds[-1] * h:.6g})",
             f"final mean            {fmt_array(means[-1])}", f"final cov             {fmt_array(cov)}"]
    return emit(args, result, "\n".join(lines))


def _run_data(args: argparse.Namespace, problem, agg, steps, w0, record, sampling) -> int:
    """A data (or module, or least-squares) problem: the rule's SDE sampled by its SVAG chain with ``--ell``."""
    from fedsde.params import ClientSampling, Precision, Recording, Replication, Schedule
    from fedsde.problems.metrics import evaluate_metrics
    from fedsde.sde.rule_svag import rule_svag_chain
    from fedsde.sde.svag import default_oracle_factory
    from fedsde.validity.core import default_start

    for option, value, why in (
            ("--integrator", None if args.integrator in (None, "svag") else args.integrator,
             "a rule's SDE on a data problem is sampled by its SVAG chain (svag)"),
            ("--inner-samples", args.inner_samples, "the SVAG chain draws no inner rollouts"),
            ("--method", None if args.method == "euler" else args.method, "the SVAG chain is its own scheme"),
            ("--substeps", None if args.substeps == 1 else args.substeps, "the SVAG chain's step is h/ℓ: use --ell")):
        if value is not None:
            raise FedsdeInputError(f"{option}={value}: not used with --aggregator on a data problem ({why}); leave "
                                   f"{option} out")
    ell = 4 if args.ell is None else args.ell
    if ell < 1:
        raise FedsdeInputError(f"--ell={ell}: must be an integer >= 1")
    start = default_start(problem, w0)
    from fedsde._cli.common import options_named

    with options_named(args, "ell", "participation", "weighting"):
        res = rule_svag_chain(problem, agg, Schedule(args.eta, steps, args.rounds, args.server_lr, args.h),
                              Replication(args.replicates, args.seed),
                              Precision("float32" if args.float32 else "float64", args.device), ell=ell, w0=start,
                              sampling=ClientSampling(*sampling), oracle_factory=default_oracle_factory(problem),
                              recording=Recording(record=record))
    times = res.rounds * res.h
    means = res.weights.mean(1)
    var = res.weights[-1].var(0, ddof=1)
    # a d × d covariance only for small models (a network's d is in the thousands: hundreds of MB of JSON)
    cov = np.atleast_2d(np.cov(res.weights[-1], rowvar=False)) if problem.d <= FULL_COV_MAX_D else None
    w0_arr = np.zeros(problem.d) if start is None else np.asarray(start, dtype=np.float64)
    vals = evaluate_metrics(problem, res.weights, w0_arr)
    metrics = {m: {"mean": v.mean(1), "se": v.std(1, ddof=1) / np.sqrt(args.replicates)} for m, v in vals.items()}
    result = {"aggregator": agg.describe(), "sde": agg.sde_kind, "integrator": "svag", "ell": ell,
              "final": {"mean": means[-1], "cov": cov, "var": var, "mean_stderr": np.sqrt(var / args.replicates),
                        "round": args.rounds, "time": float(times[-1])},
              "times": times, "rounds": res.rounds, "mean": means, "trace_cov": res.weights.var(axis=1, ddof=1).sum(-1),
              "paths": args.replicates, "metrics": metrics, "participation": sampling[0], "weighting": sampling[1],
              "config": res.config}
    lines = [f"aggregator={agg.name}  sde={agg.sde_kind} (sampled by its SVAG chain, ℓ={ell})  problem: Q={problem.Q}, "
             f"d={problem.d}  eta={args.eta}  server_lr={args.server_lr}  h={res.h}"
             + ("" if sampling[0] is None else f"  participation={sampling[0]} ({sampling[1]})"),
             f"replicates={args.replicates}  rounds={args.rounds}  (t = n·h = {times[-1]:.6g})"]
    lines += [f"E {m} at T".ljust(28) + f"{v['mean'][-1]:.6g} ± {v['se'][-1]:.2g} (s.e.)" for m, v in metrics.items()]
    return emit(args, result, "\n".join(lines))
