"""F18 — the SDE of every aggregator: each rule's exact chain against its own first-order SDE (FedNova centred at
its own fixed point, FedAvgM with step s/(1 − β)) and the exact weak-error slope as h → 0.

Run: python examples/f18_rule_sdes.py [--quick] [--out DIR]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from fedsde.aggregators import FedAvgM, FedNova
from fedsde.compare.rule_weak import rule_weak_error_vs_step
from fedsde.problems import QuadraticProblem
from fedsde.sde.rules import rule_chain_moments, rule_sde

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--out", default="examples-output")
args = ap.parse_args()

pb = QuadraticProblem.from_arrays([[1.0, 0.5], [2.0, 1.0], [0.7, 3.0]], [[1.0, -1.0], [0.0, 2.0], [-2.0, 0.5]],
                                  [[0.1, 0.2], [0.3, 0.1], [0.2, 0.2]], [0.2, 0.3, 0.5])
tau, eta, s = np.array([2, 5, 9]), 0.05, 0.1
fig, axes = plt.subplots(1, 2, figsize=(10, 4))
for ax, (label, agg) in zip(axes, (("FedNova", FedNova()), ("FedAvgM β=0.8", FedAvgM(0.8))), strict=True):
    r = rule_sde(pb, agg, eta, tau, s, s)
    ch = rule_chain_moments(r, 200, [2.0, 2.0])
    sde = [r.sde.moments(n * s, [2.0, 2.0]).mean[0] for n in ch.rounds]
    steps = [0.004 / 2**j for j in range(3 if args.quick else 5)]
    slope = rule_weak_error_vs_step(pb, agg, eta, tau, t_end=1.0, time_steps=steps, w0=[2.0, 2.0]).slope
    ax.plot(ch.rounds * s, ch.mean[:, 0], label="chain mean")
    ax.plot(ch.rounds * s, sde, "k--", label="SDE mean")
    ax.axhline(r.sde.c[0], color="C3", lw=0.7, label=f"rule's fixed point {r.sde.c[0]:.3f}")
    ax.set_title(f"{label}: weak-error slope {slope:.3f}")
    ax.set_xlabel("t = n·s")
    ax.legend()
    print(f"{label}: fixed point {np.round(r.sde.c, 4)}, effective server step {r.effective_server_lr:g}, "
          f"weak-error slope {slope:.3f}")
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
fig.savefig(out / "f18_rule_sdes.png", dpi=120, bbox_inches="tight")
print(f"wrote {out / 'f18_rule_sdes.png'}")
