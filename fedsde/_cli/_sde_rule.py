"""``fedsde sde --aggregator A``: paths of a server rule's own SDE (:mod:`fedsde.sde.rules`,
:mod:`fedsde.sde.adaptive`)."""

from __future__ import annotations

import argparse

import numpy as np

from fedsde._cli.common import emit, fmt_array, refuse_least_squares
from fedsde.errors import FedsdeInputError


def run_rule(args: argparse.Namespace, problem, agg, steps, w0, record) -> int:
    """Simulate ``--replicates`` paths of the rule's SDE and report their moments at the recorded rounds."""
    from fedsde.problems import require_quadratic

    if args.variant != "corrected":
        raise FedsdeInputError(f"--variant={args.variant}: with --aggregator the SDE is the rule's own; drop --variant")
    refuse_least_squares(problem, "sde --aggregator")
    require_quadratic(problem, "sde --aggregator", "the rules' SDEs are built from closed-form round laws of "
                      "quadratic clients")
    agg.check_problem(problem, args.problem)
    if agg.sde_kind == "adaptive":
        from fedsde.sde.adaptive import adaptive_sde_paths

        if args.method != "euler":
            raise FedsdeInputError(f"--method={args.method}: the adaptive SDE is nonlinear, it has no exact "
                                   "transition; it is integrated by torchsde's Euler–Maruyama (--substeps)")

        res = adaptive_sde_paths(problem, agg, eta=args.eta, local_steps=steps, rounds=args.rounds,
                                 replicates=args.replicates, seed=args.seed, server_lr=args.server_lr, h=args.h,
                                 w0=w0, substeps=args.substeps, record=record, device=args.device)
        rounds, paths, h, extra = res["rounds"], res["weights"], res["h"], {"state": res["state"]}
    else:
        from fedsde.sde.rules import rule_sde, simulate_rule_sde

        r = rule_sde(problem, agg, args.eta, steps, args.server_lr, args.h)
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
    means = paths.mean(axis=1)
    cov = np.atleast_2d(np.cov(paths[-1], rowvar=False))
    result = {"aggregator": agg.describe(), "sde": agg.sde_kind,
              "final": {"mean": means[-1], "cov": cov, "mean_stderr": np.sqrt(np.diag(cov) / args.replicates),
                        "round": args.rounds, "time": float(rounds[-1] * h)},
              "times": rounds * h, "rounds": rounds, "mean": means, "trace_cov": paths.var(axis=1, ddof=1).sum(-1),
              "paths": args.replicates, **extra}
    lines = [f"aggregator={agg.name}  sde={agg.sde_kind}  eta={args.eta}  server_lr={args.server_lr}  h={h}",
             f"replicates={args.replicates}  rounds={args.rounds}  (t = n·h = {rounds[-1] * h:.6g})",
             f"final mean            {fmt_array(means[-1])}", f"final cov             {fmt_array(cov)}"]
    return emit(args, result, "\n".join(lines))
