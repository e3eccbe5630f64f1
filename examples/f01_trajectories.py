"""F1 — discrete FedAvg vs its SDE: mean ± 2 sd over rounds for the simulated chain, its exact law and torchsde
paths of the printed, corrected and matched SDEs (clock t = n·h with h = η).

Run: python examples/f01_trajectories.py [--quick] [--out DIR]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from fedsde.exact import transient_moments
from fedsde.problems import paper_table_problem
from fedsde.sde import simulate_sde
from fedsde.sim import simulate

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--out", default="examples-output")
args = ap.parse_args()

pb, eta, E, s, n = paper_table_problem(), 0.05, 5, 0.5, 30
R = 1000 if args.quick else 20000
t = np.arange(n + 1) * eta  # h = η: round n sits at t = n·η; server step s = h·η₀
exact = transient_moments(pb, eta, E, n, s, w0=[2.0])
sim = simulate(pb, eta=eta, local_steps=E, rounds=n, server_lr=s, replicates=R, seed=1, w0=[2.0])
fig, ax = plt.subplots(figsize=(6.5, 4))
sd = np.sqrt(exact.cov[:, 0, 0])
ax.fill_between(t, exact.mean[:, 0] - 2 * sd, exact.mean[:, 0] + 2 * sd, color="grey", alpha=0.3,
                label="exact chain ± 2 sd")
ax.errorbar(t, sim.mean()[:, 0], yerr=2 * np.sqrt(sim.cov()[:, 0, 0]), fmt="k.", label="simulated ± 2 sd")
for variant, col in (("corrected", "C0"), ("paper", "C3")):
    sde = simulate_sde(pb, eta=eta, local_steps=E, rounds=n, replicates=R, seed=2, variant=variant, server_lr=s,
                       h=eta, w0=[2.0])  # torchsde Euler–Maruyama, one step per round
    x = sde.weights[:, :, 0]
    ax.plot(t, x.mean(1) + 2 * x.std(1), ":", color=col)
    ax.plot(t, x.mean(1) - 2 * x.std(1), ":", color=col, label=f"SDE {variant} ± 2 sd")
ax.set_ylim(0, 2.5)
ax.set_xlabel("t = n·η")
ax.set_ylabel("server weight w")
ax.legend(fontsize=7)
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
fig.savefig(out / "f01_trajectories.png", dpi=120, bbox_inches="tight")
print(f"exact sd at t = {t[-1]:g}: {sd[-1]:.4f}; wrote {out / 'f01_trajectories.png'}")
