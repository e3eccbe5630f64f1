"""F5 — stationary excess loss over (η, E): exact chain vs the printed C4 and v0(∞).

Run: python examples/f05_heatmap.py [--quick] [--out DIR]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors as mcolors
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
etas = [0.01, 0.05, 0.1] if args.quick else [0.005, 0.01, 0.02, 0.05, 0.1, 0.2]
Es = [1, 5, 20] if args.quick else [1, 2, 5, 10, 20, 50]

def exact_excess(eta, E):
    st = stationary_law(pb, eta, E)
    return pb.excess_loss(st.mean, st.cov)


exact = np.array([[exact_excess(eta, E) for E in Es] for eta in etas])
printed = np.array([[pb.excess_loss(*quadratic_sde_coefficients(pb, eta, E, variant="paper").stationary())
                     for E in Es] for eta in etas])
norm = mcolors.LogNorm(min(exact.min(), printed.min()), max(exact.max(), printed.max()))
fig, axes = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
for ax, data, title in zip(axes, (exact, printed), ("exact chain", "printed formulas"), strict=True):
    im = ax.imshow(data, origin="lower", aspect="auto", norm=norm, cmap="magma")
    ax.set_xticks(range(len(Es)), Es)
    ax.set_yticks(range(len(etas)), etas)
    ax.set_xlabel("local steps E")
    ax.set_ylabel("client lr η")
    ax.set_title(f"stationary excess loss — {title}")
fig.colorbar(im, ax=axes, label="E F(w∞) − F*")
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
fig.savefig(out / "f05_heatmap.png", dpi=120, bbox_inches="tight")
print(f"printed/exact from {(printed / exact).min():.3g} to {(printed / exact).max():.3g}")
