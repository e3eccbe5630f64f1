"""``fedsde compare --aggregator fedadam|fedyogi``: the adaptive server rules against their SDE, by Monte Carlo
(:func:`fedsde.validity.adaptive.adaptive_weak_error`: SVAG chains ``ℓ = k²`` against torchsde paths of the SDE of
Malladi et al. 2022, the weak error of ``E F(w_T)`` with 95 % intervals and its slope in the step ``s²/ℓ``)."""

from __future__ import annotations

import argparse

from fedsde._cli.common import emit
from fedsde.errors import FedsdeInputError


def run_adaptive(args: argparse.Namespace, problem, agg, steps, w0, sampling=(None, "unbiased")) -> int:
    import math

    from fedsde.compare.rule_svag_weak import slope_summary
    from fedsde.validity.adaptive import adaptive_weak_error

    if args.replicates is None:
        raise FedsdeInputError(f"--aggregator={agg.name}: an adaptive rule has no exact law; give --replicates R for "
                               "the Monte-Carlo weak error")
    agg.check_problem(problem, args.problem)
    ks = (1, 2, 4)
    if args.ells is not None:
        ells = [int(x) for x in str(args.ells).split(",") if x.strip()]
        ks = [math.isqrt(e) for e in ells]
        if not ells or any(e < 1 or k * k != e for k, e in zip(ks, ells, strict=True)):
            raise FedsdeInputError(f"--ells={args.ells!r}: the adaptive SVAG chain has ℓ = k², so each value must be a "
                                   "square >= 1 (e.g. 1,4,16)")
    out, summaries = {}, {}
    for phi in ("loss", "dist2"):
        c = adaptive_weak_error(problem, agg, eta=args.eta, local_steps=steps, rounds=args.rounds,
                                replicates=args.replicates, seed=args.seed, server_lr=args.server_lr, w0=w0,
                                ks=ks, substeps=args.substeps, phi=phi, device=args.device, participation=sampling[0],
                                weighting=sampling[1])
        out[phi] = {"steps": c.steps, "rounds": c.rounds, "errors": c.errors, "stderr": c.stderr, "ci": c.ci,
                    "slope": c.slope, "slope_interval": c.config["slope_interval"],
                    "resolved": c.config["resolved"], "chain": c.chain, "sde": c.sde}
        summaries[phi] = slope_summary(c)
    result = {"aggregator": agg.describe(), "sde": "adaptive", "clock": "t = n*s^2",
              "t_end": args.rounds * args.server_lr**2, "weak_error": out, "config": c.config}
    lines = [f"aggregator={agg.name}  sde=adaptive (Malladi et al. 2022)  eta={args.eta}  server_lr={args.server_lr}  "
             f"rounds={args.rounds} (t = n·s² = {result['t_end']:.6g})  replicates={args.replicates}"]
    for phi, v in out.items():
        cells = ", ".join(f"ℓ={round(args.server_lr**2 / h)}: {e:.3g} ± {1.96 * se:.2g}"
                          for h, e, se in zip(v["steps"], v["errors"], v["stderr"], strict=True))
        lines.append(f"weak error {phi:5s} (SVAG chain vs SDE): {cells}; in s²/ℓ {summaries[phi]}")
    return emit(args, result, "\n".join(lines))
