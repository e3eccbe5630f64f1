"""F3 — stationary variance vs E (log–log): exact chain vs corrected SDE vs the printed v0(∞) of Thm 6.3.

Run: python examples/f03_variance.py [--quick] [--out DIR]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from fedsde.exact import stationary_law
from fedsde.problems import paper_table_problem
from fedsde.sde.coefficients import quadratic_sde_coefficients

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--out", default="examples-output")
args = ap.parse_args()

pb = paper_table_problem()
Es = np.array([1, 2, 5, 10, 20] if args.quick else [1, 2, 5, 10, 20, 50, 100, 200])
fig, ax = plt.subplots(figsize=(6, 4))
for eta in (0.01, 0.05, 0.1):
    exact = [stationary_law(pb, eta, E).cov[0, 0] for E in Es]
    lin = {v: [quadratic_sde_coefficients(pb, eta, E, h=eta, variant=v).stationary().cov[0, 0] for E in Es]
           for v in ("paper", "corrected")}
    slope = np.polyfit(np.log(Es), np.log(exact), 1)[0]
    slope_p = np.polyfit(np.log(Es), np.log(lin["paper"]), 1)[0]
    line, = ax.plot(Es, exact, "-", label=f"η={eta:g} exact (slope {slope:+.2f})")
    ax.plot(Es, lin["corrected"], ":", color=line.get_color(), label=f"η={eta:g} corrected SDE")
    ax.plot(Es, lin["paper"], "--", color=line.get_color(), label=f"η={eta:g} printed v0(∞) (slope {slope_p:+.2f})")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("local steps E per round (server step s = 1)")
ax.set_ylabel("stationary variance")
ax.legend(fontsize=6)
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
fig.savefig(out / "f03_variance.png", dpi=120, bbox_inches="tight")
print(f"wrote {out / 'f03_variance.png'}")
