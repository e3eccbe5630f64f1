"""F2 — stationary bias of FedAvg vs local steps E: exact law, simulation, and the printed C4 (seed 002 Thm 6.3).

Run: python examples/f02_bias.py [--quick] [--out DIR]
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
from fedsde.sim import simulate

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--out", default="examples-output")
args = ap.parse_args()

pb = paper_table_problem()  # Q = 3 scalar clients, w* = 1
Es = [1, 2, 5, 10] if args.quick else [1, 2, 5, 10, 20, 50]
R = 1000 if args.quick else 20000
fig, ax = plt.subplots(figsize=(6, 4))
for eta in (0.01, 0.05, 0.1):
    exact, printed, sim = [], [], []
    for E in Es:
        st = stationary_law(pb, eta, E)  # mean = c, covariance from the discrete Lyapunov equation
        printed.append(quadratic_sde_coefficients(pb, eta, E, variant="paper").c[0])  # the printed C4
        rounds = int(np.ceil(np.log(1e-6) / np.log(st.law.spectral_radius)))  # burn-in to stationarity
        res = simulate(pb, eta=eta, local_steps=E, rounds=rounds, replicates=R, seed=E, record=[rounds])
        exact.append(st.mean[0])
        sim.append(res.final[:, 0].mean())
    line, = ax.plot(Es, np.array(exact) - 1, "-", label=f"η={eta:g} exact")
    ax.plot(Es, np.array(printed) - 1, "x", color=line.get_color(), label=f"η={eta:g} printed C4")
    ax.plot(Es, np.array(sim) - 1, "o", ms=3, color=line.get_color(), label=f"η={eta:g} simulated")
ax.axhline(pb.p @ pb.a[:, 0] - 1, ls="-.", color="grey", label="asymptote Σ p_k a_k − w*")
ax.set_xscale("log")
ax.set_xlabel("local steps E per round (server step s = 1)")
ax.set_ylabel("stationary bias E[w∞] − w*")
ax.legend(fontsize=6, ncol=2)
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
fig.savefig(out / "f02_bias.png", dpi=120, bbox_inches="tight")
print(f"wrote {out / 'f02_bias.png'}")
