"""F13 — SVAG validity test on digits softmax: does seed 002's SDE track FedAvg?  Train loss vs t = n·h for
ℓ = 1 (FedAvg), 2, 4, 8 in a small-step setting (it tracks) and with a large server step (it does not).

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
ells = [1, 2, 4] if args.quick else [1, 2, 4, 8]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
for ax, (eta, E, s) in zip(axes, [(0.05, 2, 1.0), (0.2, 5, 8.0)], strict=True):
    res = validity_test(pb, eta=eta, local_steps=E, server_lr=s, rounds=4 if args.quick else 10,
                        replicates=8 if args.quick else 32, seed=0, ells=ells, metrics=["train_loss"])
    loss = res.metrics["train_loss"]
    for i, ell in enumerate(res.ells):
        ax.plot(res.times, loss["mean"][i], "o-" if ell == 1 else "-", ms=3, label=f"ℓ = {ell}")
        ax.fill_between(res.times, loss["mean"][i] - 1.96 * loss["se"][i], loss["mean"][i] + 1.96 * loss["se"][i],
                        alpha=0.2)
    v = res.verdict
    ax.set_title(f"η={eta}, E={E}, s={s}: {'tracks' if v.tracks else 'does not track'} (margin {v.margin:+.3f})")
    ax.set_xlabel("t = n·h")
    ax.set_ylabel("train loss F(w)")
    ax.legend()
    print(v.sentence())
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
fig.savefig(out / "f13_validity.png", dpi=120, bbox_inches="tight")
print(f"wrote {out / 'f13_validity.png'}")
