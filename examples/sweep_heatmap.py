"""A sweep of `fedsde simulate` over (η, E), loaded as xarray and drawn as a heatmap of the server variance.

Run: python examples/sweep_heatmap.py [--quick] [--out DIR] [--workers N]
(the same grid from the shell: `fedsde sweep SPEC.toml --out DIR`; see docs/sweeps.md)
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import LogNorm

import fedsde.sweep

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--out", default="examples-output")
ap.add_argument("--workers", type=int, default=1, help="> 1: a Dask LocalCluster of that many processes")
args = ap.parse_args()

problem = Path(__file__).resolve().parent / "problems" / "paper_table.toml"
spec = {
    "run": {"command": "simulate", "seed": 7},
    "base": {"problem": str(problem), "rounds": 100, "replicates": 500 if args.quick else 4000},
    "grid": {"eta": [0.01, 0.02, 0.05, 0.1, 0.2, 0.5],  # η = 0.5: η·max eig(U_k) = 2, diverges
             "local_steps": [1, 2, 5, 10] if args.quick else [1, 2, 3, 5, 10, 20]},
}
out = Path(args.out)
# resume=True: a second run finds every cell on disk and reruns none (a changed spec would be refused)
summary = fedsde.sweep.run(spec, out / "sweep_heatmap", workers=args.workers, resume=True, progress=False)
ds = fedsde.sweep.load(out / "sweep_heatmap")            # dims (eta, local_steps, d, d2)
var = ds.final_cov.isel(d=0, d2=0)                        # Var w_n after 100 rounds, NaN where a cell failed

fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
im = ax.imshow(var.values, origin="lower", aspect="auto", cmap="viridis", norm=LogNorm())
for i, j in zip(*np.nonzero(ds.status.values != "done"), strict=True):  # failed (or missing) cells
    ax.text(j, i, ds.status.values[i, j], ha="center", va="center", color="red", fontsize=8)
ax.set_xticks(range(ds.sizes["local_steps"]), ds.local_steps.values)
ax.set_yticks(range(ds.sizes["eta"]), ds.eta.values)
ax.set_xlabel("local steps E")
ax.set_ylabel("client lr η")
ax.set_title(f"{summary['cells']} cells, {int((ds.status == 'done').sum())} done (seed 7)")
fig.colorbar(im, ax=ax, label="Var(w) after n = 100 rounds")
fig.savefig(out / "sweep_heatmap.png", dpi=120, bbox_inches="tight")
frame = fedsde.sweep.load_frame(out / "sweep_heatmap")     # the same, one row per cell
print(frame.groupby("local_steps")["final_cov[0,0]"].mean().round(5).to_string())
