"""F4 — stationary variance vs number of clients Q: the exact variance falls like 1/Q, the printed one is flat.

Run: python examples/f04_variance_Q.py [--quick] [--out DIR]
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

base = paper_table_problem()
copies = [1, 2, 4, 8] if args.quick else [1, 2, 4, 8, 16, 32, 64]
Q, exact, printed = [], [], []
for m in copies:
    pb = base.replicated(m)  # the same 3 clients repeated m times, uniform weights 1/Q
    Q.append(pb.Q)
    exact.append(stationary_law(pb, 0.05, 5).cov[0, 0])
    printed.append(quadratic_sde_coefficients(pb, 0.05, 5, variant="paper").stationary().cov[0, 0])
slope = np.polyfit(np.log(Q), np.log(exact), 1)[0]
fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(Q, exact, "o-", label=f"exact chain (slope {slope:+.3f})")
ax.plot(Q, printed, "s--", label="printed v0(∞)")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("number of clients Q (η = 0.05, E = 5, s = 1)")
ax.set_ylabel("stationary variance")
ax.legend()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
fig.savefig(out / "f04_variance_Q.png", dpi=120, bbox_inches="tight")
print(f"Q·Var exact: {np.array(Q) * np.array(exact)}; wrote {out / 'f04_variance_Q.png'}")
