"""F15 — first-order SDE scaling rules: exact discrepancy between the two ends of each rule vs κ on homogeneous and
heterogeneous quadratic clients.  The local-steps rule's horizon on a non-quadratic loss is
``examples/scaling_horizon.py``.

Run: python examples/f15_scaling.py [--quick] [--out DIR]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from fedsde.errors import FedsdeInputError
from fedsde.problems import QuadraticProblem, paper_table_problem
from fedsde.scaling import FedAvgConfig, compare_quadratic

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--out", default="examples-output")
args = ap.parse_args()
(out := Path(args.out)).mkdir(parents=True, exist_ok=True)

# --- exact discrepancy vs κ on quadratic clients
het = paper_table_problem()  # heterogeneous clients: U = 1, 2, 4 and a = -1, 0, 2
hom = QuadraticProblem.from_arrays(np.tile(het.hessian, (3, 1, 1)), np.tile(het.optimum, (3, 1)), het.Sigma)
base = FedAvgConfig(eta=0.02, local_steps=4, server_lr=0.5, rounds=64)  # τ horizon = n·s·η·E = 2.56
kappas = [0.25, 0.5, 2, 4, 8] if args.quick else [0.25, 0.5, 2, 4, 8, 16]
fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
for ax, (name, problem) in zip(axes, [("homogeneous", hom), ("heterogeneous", het)], strict=True):
    for rule in ("local-steps", "server-client", "clients", "client-lr"):
        ks, ds = [], []
        for k in kappas:
            try:  # a κ that does not apply (e.g. a fractional number of clients) is skipped
                ds.append(compare_quadratic(problem, base, rule, k, w0=[3.0]).max_rel)
                ks.append(k)
            except FedsdeInputError:
                pass
        ax.plot(ks, ds, "o-", label=rule)
        print(f"{name:13s} {rule:13s} " + "  ".join(f"κ={k:g}: {d:.3g}" for k, d in zip(ks, ds, strict=True)))
    ax.axhline(0.05, color="k", ls=":", label="5%")
    ax.set(xscale="log", yscale="log", xlabel="κ", title=f"{name} clients (η = 0.02, E = 4, s = 0.5)")
axes[0].set_ylabel("max relative discrepancy (exact)")
axes[0].legend()
fig.savefig(out / "f15_scaling.png", dpi=120, bbox_inches="tight")
print(f"wrote {out / 'f15_scaling.png'}")
