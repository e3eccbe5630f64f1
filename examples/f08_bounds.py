"""F8 — Thm 4.5 (seed 002) as printed and corrected vs the η-weighted random-time average of E‖∇F‖² along the
exact chain, for η(t) = 0.5/(1+t) on a quadratic problem (clock t = n·h).

Run: python examples/f08_bounds.py [--quick] [--out DIR]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from fedsde.theory.bounds_002 import thm_4_5
from fedsde.theory.constants import quadratic_constants, quadratic_region_radius
from fedsde.theory.empirical import quadratic_exact_path, random_time_average
from fedsde.theory.problems import sec4_quadratic
from fedsde.theory.schedules import PowerSchedule

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--out", default="examples-output")
args = ap.parse_args()

pb, E, h, w0 = sec4_quadratic(), 5, 0.5, np.array([3.0])
sched = PowerSchedule(0.5, 1.0)  # η(t) = 0.5/(1+t)
horizons = np.array([5.0, 20.0, 50.0] if args.quick else [5.0, 20.0, 50.0, 200.0])
rounds = int(horizons[-1] / h) + 1
radius = quadratic_region_radius(pb, sched, local_steps=E, h=h, rounds=rounds, w0=w0)  # region where L is finite
inputs = quadratic_constants(pb, radius=radius, local_steps=E, eta_max=0.5, w0=w0).bound_inputs(local_steps=E, h=h)
path = quadratic_exact_path(pb, sched, local_steps=E, h=h, rounds=rounds, w0=w0)  # exact E‖∇F(w_n)‖²
emp, _ = random_time_average(path.grad_sq, path.eta, (horizons / h).astype(int), exact=True)
fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(horizons, emp, "o-", label="empirical (exact chain)")
for variant, ls in (("paper", "s--"), ("corrected", "^:")):
    ax.plot(horizons, thm_4_5(inputs, sched, horizons, variant=variant).value, ls, label=f"Thm 4.5 {variant}")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("t = n·h")
ax.set_ylabel("η-weighted E‖∇F‖²")
ax.legend()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
fig.savefig(out / "f08_bounds.png", dpi=120, bbox_inches="tight")
print(f"bound/empirical at t = {horizons[-1]:g}: {thm_4_5(inputs, sched, horizons).value[-1] / emp[-1]:.1f}")
