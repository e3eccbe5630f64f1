"""``fedsde compare --aggregator fedadam|fedyogi``: the adaptive server rules against their SDE, by Monte Carlo
(:func:`fedsde.validity.adaptive.adaptive_weak_error`: SVAG chains ``ℓ = k²`` against torchsde paths of the SDE of
Malladi et al. 2022, the weak error of ``E F(w_T)`` with 95 % intervals and its slope in the step ``s²/ℓ``)."""

from __future__ import annotations

import argparse

from fedsde._cli.common import emit
from fedsde.errors import FedsdeInputError


def run_adaptive(args: argparse.Namespace, problem, agg, steps, w0) -> int:
    from fedsde.validity.adaptive import adaptive_weak_error

    if args.replicates is None:
        raise FedsdeInputError(f"--aggregator={agg.name}: an adaptive rule has no exact law; give --replicates R for "
                               "the Monte-Carlo weak error")
    agg.check_problem(problem, args.problem)
    out = {}
    for phi in ("loss", "dist2"):
        c = adaptive_weak_error(problem, agg, eta=args.eta, local_steps=steps, rounds=args.rounds,
                                replicates=args.replicates, seed=args.seed, server_lr=args.server_lr, w0=w0,
                                substeps=args.substeps, phi=phi, device=args.device)
        out[phi] = {"steps": c.steps, "rounds": c.rounds, "errors": c.errors, "stderr": c.stderr, "ci": c.ci,
                    "slope": c.slope, "slope_interval": [c.slope_fit.lower, c.slope_fit.upper],
                    "slope_basis": c.slope_fit.basis, "chain": c.chain, "sde": c.sde}
    result = {"aggregator": agg.describe(), "sde": "adaptive", "clock": "t = n*s^2",
              "t_end": args.rounds * args.server_lr**2, "weak_error": out, "config": c.config}
    lines = [f"aggregator={agg.name}  sde=adaptive (Malladi et al. 2022)  eta={args.eta}  server_lr={args.server_lr}  "
             f"rounds={args.rounds} (t = n·s² = {result['t_end']:.6g})  replicates={args.replicates}"]
    for phi, v in out.items():
        cells = ", ".join(f"ℓ={round(args.server_lr**2 / h)}: {e:.3g} ± {1.96 * se:.2g}"
                          for h, e, se in zip(v["steps"], v["errors"], v["stderr"], strict=True))
        lines.append(f"weak error {phi:5s} (SVAG chain vs SDE): {cells}; slope in s²/ℓ {v['slope']:.3f} "
                     f"[{v['slope_interval'][0]:.3f}, {v['slope_interval'][1]:.3f}]")
    return emit(args, result, "\n".join(lines))
