"""F15 — first-order SDE scaling rules: exact discrepancy between the two ends of each rule vs κ (quadratics), and
the local-steps rule's horizon on a logistic regression with identical clients (docs/assets/scaling_horizon.png).

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
from fedsde.scaling.horizon import horizon_discrepancy, noisy_logistic_problem, quadratic_model

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--out", default="examples-output")
args = ap.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)

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
            try:
                ds.append(compare_quadratic(problem, base, rule, k, w0=[3.0]).max_rel)
                ks.append(k)
            except FedsdeInputError:  # this κ does not apply (e.g. a fractional number of clients)
                pass
        ax.plot(ks, ds, "o-", label=rule)
        print(f"{name:13s} {rule:13s} " + "  ".join(f"κ={k:g}: {d:.3g}" for k, d in zip(ks, ds, strict=True)))
    ax.axhline(0.05, color="k", ls=":", label="5%")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("κ")
    ax.set_title(f"{name} clients (η = 0.02, E = 4, s = 0.5)")
axes[0].set_ylabel("max relative discrepancy (exact)")
axes[0].legend()
fig.savefig(out / "f15_scaling.png", dpi=120, bbox_inches="tight")
print(f"wrote {out / 'f15_scaling.png'}")

# --- the local-steps rule (κ = 2, s = 1) over a long horizon: identical logistic clients vs their quadratic model
problem = noisy_logistic_problem()  # 4 clients holding the same 400 samples, minibatch 1, d = 3
model = quadratic_model(problem)  # same Hessian, optimum and noise at w*: no third derivative
etas, R = ((0.3,), 64) if args.quick else ((0.3, 0.15), 128)
fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
for i, eta in enumerate(etas):
    cfg = FedAvgConfig(eta=eta, local_steps=4, server_lr=1.0, rounds=2 * round(614.4 / (4 * eta) / 2))
    h = horizon_discrepancy(problem, cfg, "local-steps", 2, replicates=R, seed=0)
    exact = compare_quadratic(model, cfg, "local-steps", 2, w0=problem.initial_weights()).max_rel
    t, c = h.tau[1:], f"C{i}"
    ax.plot(t, h.distance[1:], "o-", color=c, ms=3, label=f"logistic, η = {eta:g} ({cfg.rounds} → {cfg.rounds // 2} "
            "rounds)")
    ax.fill_between(t, h.distance[1:] - 2 * h.distance_se[1:], h.distance[1:] + 2 * h.distance_se[1:], color=c,
                    alpha=0.15)
    ax2.plot(t, h.distance[1:] / h.spread[1:], "o-", color=c, ms=3, label=f"η = {eta:g}")
    ax2.fill_between(t, (h.distance[1:] - 2 * h.distance_se[1:]) / h.spread[1:],
                     (h.distance[1:] + 2 * h.distance_se[1:]) / h.spread[1:], color=c, alpha=0.15)
    k = len(t) // 3
    plateau_se = np.sqrt(np.mean(h.distance_se[-k:] ** 2) / k)
    print(f"horizon η={eta:g}: distance at τ={t[0]:.3g}: {h.distance[1]:.4f} ± {h.distance_se[1]:.4f}; "
          f"plateau (last {k} points) {h.distance[-k:].mean():.4f} ± {plateau_se:.4f}"
          f", spread {h.spread[-k:].mean():.3f}; train loss change at the end {h.loss_diff[-1]:+.2e} ± "
          f"{h.loss_diff_se[-1]:.1e}; quadratic model (exact) max_rel {exact:.1e}")
ax.axhline(0.0, color="k", lw=0.8, label="quadratic model (exact: 0)")
ax.set_ylabel("‖E w (E = 8) − E w (E = 4)‖, ± 2 s.e.")
ax2.set_ylabel("the same / spread √Tr Cov(w) of the base")
for a in (ax, ax2):
    a.set_xscale("log")
    a.set_xlabel("SDE time τ = n·s·η·E")
    a.legend(fontsize=8)
ax.set_title(f"local-steps rule κ = 2, s = 1: identical clients, {R} paired runs per end", fontsize=10)
ax2.set_title("in units of the base's spread", fontsize=10)
fig.savefig(out / "f15_horizon.png", dpi=120, bbox_inches="tight")
print(f"wrote {out / 'f15_horizon.png'}")
