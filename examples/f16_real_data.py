"""F16 — real clients, exact answers: the stationary variance of FedAvg on Grunfeld's panel (11 firms, least squares
with real minibatch noise) vs E — exact, the constant-noise surrogate, the printed formula, the simulator — and the
validity test against the SDE's exact law.

Run: python examples/f16_real_data.py [--quick] [--out DIR]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from fedsde.exact import constant_noise_surrogate, least_squares_stationary_law, stationary_law
from fedsde.problems import load_problem
from fedsde.sde import quadratic_sde_coefficients
from fedsde.sim import simulate
from fedsde.validity import validity_test

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--out", default="examples-output")
args = ap.parse_args()
(out := Path(args.out)).mkdir(parents=True, exist_ok=True)

problem = load_problem(Path(__file__).parent / "problems" / "grunfeld.toml")  # batch 5, without replacement
surrogate = constant_noise_surrogate(problem)  # seed 002's model: Σ_k = the minibatch covariance at w*
eta, Es, R = 0.05, [1, 2, 4, 8], 200 if args.quick else 2000
rows = []
for E in Es:
    exact = least_squares_stationary_law(problem, eta, E)
    sur = stationary_law(surrogate, eta, E)
    printed = quadratic_sde_coefficients(surrogate, eta, E, 1.0, eta, variant="paper").stationary()
    n = int(np.ceil(np.log(1e-4) / np.log(max(exact.spectral_radius, exact.law.spectral_radius))))
    x = simulate(problem, eta=eta, local_steps=E, rounds=n, replicates=R, seed=E, record=[n]).final
    tr = ((x - x.mean(0)) ** 2).sum(1)
    rows.append([np.trace(exact.cov), np.trace(sur.cov), np.trace(printed.cov), tr.mean() * R / (R - 1),
                 1.96 * tr.std(ddof=1) / np.sqrt(R)])
    print(f"E={E}: exact {rows[-1][0]:.3g}, surrogate {rows[-1][1]:.3g}, printed {rows[-1][2]:.3g}, "
          f"simulated {rows[-1][3]:.3g} ± {rows[-1][4]:.2g}")
v = np.array(rows)
fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(Es, v[:, 0], "-", lw=2, label="exact (state-dependent noise)")
ax.plot(Es, v[:, 1], "--", label="constant-noise surrogate")
ax.plot(Es, v[:, 2], ":", label="printed formula (on the surrogate)")
ax.errorbar(Es, v[:, 3], yerr=v[:, 4], fmt="ko", ms=3, capsize=2, label="simulated ± 1.96 s.e.")
ax.set(xscale="log", yscale="log", xlabel="local steps E", ylabel="stationary variance tr Cov w∞",
       title=f"Grunfeld, η = {eta}, s = 1")
ax.set_xticks(Es, [str(E) for E in Es], minor=False)
ax.legend(fontsize=8)
for s in (1.0, 4.0):  # the SDE against its exact law: tracks with s = 1, not with a large server step
    res = validity_test(problem, eta=eta, local_steps=2, server_lr=s, rounds=20, replicates=R, seed=1,
                        fedavg="sampled")
    print(f"validity, E=2, s={s:g}: {res.verdict.sentence()}")
fig.savefig(out / "f16_real_data.png", dpi=120, bbox_inches="tight")
print(f"wrote {out / 'f16_real_data.png'}")
