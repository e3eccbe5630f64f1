"""F13 — Does seed 002's SDE track FedAvg on digits softmax?  FedAvg (ℓ = 1) against the SDE (the Richardson limit
of the SVAG chains ℓ = 4, 8), train loss vs t = n·h, in a small-step setting and with a large server step; each
title gives the outcome of the equivalence test (tracks / does not track / inconclusive) and the worst gap
d = |E F_FedAvg − E F_SDE| / (range of the SDE's loss path) with its simultaneous bounds.

Run: python examples/f13_validity.py [--quick] [--out DIR]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch

from fedsde.problems import data_problem_from_dict
from fedsde.validity import validity_test

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--out", default="examples-output")
args = ap.parse_args()
torch.set_num_threads(1)

pb = data_problem_from_dict({"kind": "classification", "dataset": "digits", "model": "softmax", "clients": 5,
                             "partition": "dirichlet", "alpha": 0.5, "batch_size": 16, "seed": 0})
fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
for ax, (eta, E, s) in zip(axes, [(0.05, 2, 1.0), (0.2, 5, 8.0)], strict=True):
    res = validity_test(pb, eta=eta, local_steps=E, server_lr=s, rounds=4 if args.quick else 10,
                        replicates=8 if args.quick else 32, seed=0, ells=[1, 2, 4, 8], reference="svag",
                        metrics=["train_loss"])
    loss, sde = res.metrics["train_loss"], res.sde["train_loss"]
    for i, ell in enumerate(res.ells):
        ax.plot(res.times, loss["mean"][i], "o-" if ell == 1 else "-", ms=3, lw=1.6 if ell == 1 else 0.8,
                label="ℓ = 1 (FedAvg)" if ell == 1 else f"ℓ = {ell}")
    ax.plot(res.times, sde["mean"], "k--", label="SDE (Richardson limit)")
    ax.fill_between(res.times, sde["mean"] - 1.96 * sde["se"], sde["mean"] + 1.96 * sde["se"], color="k", alpha=0.1)
    v, w = res.verdict, res.verdict.worst
    ax.set_title(f"η={eta}, E={E}, s={s}: {v.outcome}\nd = {w['gap']:.3g} ∈ [{w['lower']:.3g}, {w['upper']:.3g}], "
                 f"tolerance {w['tolerance']:g}", fontsize=9)
    ax.set_xlabel("t = n·h")
    ax.set_ylabel("train loss F(w)")
    ax.legend(fontsize=7)
    print(v.sentence())
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
fig.savefig(out / "f13_validity.png", dpi=120, bbox_inches="tight")
print(f"wrote {out / 'f13_validity.png'}")
