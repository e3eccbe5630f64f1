"""F18 — the SDE of every aggregator: each rule's exact chain against its own first-order SDE (FedNova centred at
its own fixed point, FedAvgM with step s/(1 − β)); FedNova's round law against the simulator (its exact weak-error
slope would be 1 by construction: its chain is the Euler–Maruyama scheme of its SDE's moments), and FedAvgM's exact
weak-error slope with its local slopes (asymptotic: below 1 at coarse steps).

Run: python examples/f18_rule_sdes.py [--quick] [--out DIR]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from fedsde._stats import local_loglog_slopes
from fedsde.aggregators import FedAvgM, FedNova
from fedsde.compare.rule_svag_weak import round_law_vs_simulator
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
    ax.plot(ch.rounds * s, ch.mean[:, 0], label="chain mean")
    ax.plot(ch.rounds * s, sde, "k--", label="SDE mean")
    ax.axhline(r.sde.c[0], color="C3", lw=0.7, label=f"rule's fixed point {r.sde.c[0]:.3f}")
    if r.momentum is None:
        z = round_law_vs_simulator(pb, agg, eta=eta, local_steps=tau, server_lr=s, w=[2.0, 2.0],
                                   replicates=2000 if args.quick else 20000, seed=0)["max_z"]
        what = f"round law vs simulator: max |z| = {z:.2f}"
    else:
        steps = [0.032 / 2**j for j in range(4 if args.quick else 6)]
        wk = rule_weak_error_vs_step(pb, agg, eta, tau, t_end=1.024, time_steps=steps, w0=[2.0, 2.0])
        local = local_loglog_slopes(wk.steps, wk.errors)
        what = f"weak-error slope {wk.slope:.3f} (local {local[0]:.2f} at h = {steps[0]:g} → {local[-1]:.2f})"
    ax.set_title(f"{label}: {what}", fontsize=8)
    ax.set_xlabel("t = n·s")
    ax.legend()
    print(f"{label}: fixed point {np.round(r.sde.c, 4)}, effective server step {r.effective_server_lr:g}, {what}")
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
fig.savefig(out / "f18_rule_sdes.png", dpi=120, bbox_inches="tight")
print(f"wrote {out / 'f18_rule_sdes.png'}")
