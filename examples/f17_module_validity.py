"""F17 — your own network: does seed 002's SDE describe FedAvg on a small CNN (GroupNorm, dropout) trained on
digits as 1×8×8 images?  FedAvg (ℓ = 1) and the SVAG chains ℓ = 2, 4, 8 against the SDE (their Richardson limit),
train loss and test accuracy vs t = n·h, at a small and a large server step, with the verdict of the equivalence
test in each title.  The model is examples/models/digits_cnn.py, the problem file examples/models/digits_cnn.toml.

Run: python examples/f17_module_validity.py [--quick] [--out DIR]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch

from fedsde.problems import load_problem
from fedsde.validity import validity_test

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--out", default="examples-output")
args = ap.parse_args()
torch.set_num_threads(1)

problem = load_problem(Path(__file__).parent / "models" / "digits_cnn.toml")  # kind = "module"
fig, axes = plt.subplots(2, 2, figsize=(10, 7))
for i, (row, s) in enumerate(zip(axes, [1.0, 8.0], strict=True)):
    res = validity_test(problem, eta=0.1, local_steps=2, server_lr=s, rounds=3 if args.quick else 12,
                        replicates=8 if args.quick else 32, seed=i, ells=[1, 2, 4, 8], reference="svag",
                        metrics=["train_loss", "test_accuracy"])
    for ax, m in zip(row, ["train_loss", "test_accuracy"], strict=True):
        for i, ell in enumerate(res.ells):
            ax.plot(res.times, res.metrics[m]["mean"][i], "o-" if ell == 1 else "-", ms=3,
                    lw=1.6 if ell == 1 else 0.8, label="ℓ = 1 (FedAvg)" if ell == 1 else f"ℓ = {ell}")
        ax.plot(res.times, res.sde[m]["mean"], "k--", label="SDE (Richardson limit)")
        ax.set(xlabel="t = n·h", ylabel=m.replace("_", " "))
    row[0].set_title(f"s = {s:g}: {res.verdict.outcome}", fontsize=9)
    row[0].legend(fontsize=7)
    print(f"s = {s:g}: {res.verdict.sentence()}")
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
fig.tight_layout()
fig.savefig(out / "f17_module_validity.png", dpi=120, bbox_inches="tight")
print(f"wrote {out / 'f17_module_validity.png'}")
