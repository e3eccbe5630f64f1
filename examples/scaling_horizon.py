"""The local-steps scaling rule (κ = 2, s = 1) over a long horizon on a logistic regression whose clients hold the
same data, against its quadratic model (same Hessian, optimum and noise at w*: no third derivative, where the rule is
exact).  Writes the figure of docs/scaling.md (``--out docs/assets``: scaling_horizon.png).

Run: python examples/scaling_horizon.py [--quick] [--out DIR]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from fedsde.scaling import FedAvgConfig, compare_quadratic
from fedsde.scaling.horizon import horizon_discrepancy, noisy_logistic_problem, quadratic_model

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--out", default="examples-output")
args = ap.parse_args()
(out := Path(args.out)).mkdir(parents=True, exist_ok=True)

# --- the local-steps rule (κ = 2, s = 1) over a long horizon: identical logistic clients vs their quadratic model
problem = noisy_logistic_problem()  # 4 clients holding the same 400 samples, minibatch 1, d = 3
model = quadratic_model(problem)  # same Hessian, optimum and noise at w*: no third derivative
etas, R = ((0.3,), 64) if args.quick else ((0.3, 0.15), 128)
fig, ax = plt.subplots(figsize=(6, 4))
for i, eta in enumerate(etas):
    cfg = FedAvgConfig(eta=eta, local_steps=4, server_lr=1.0, rounds=2 * round(614.4 / (4 * eta) / 2))
    h = horizon_discrepancy(problem, cfg, "local-steps", 2, replicates=R, seed=0)
    exact = compare_quadratic(model, cfg, "local-steps", 2, w0=problem.initial_weights()).max_rel
    t, d, se = h.tau[1:], h.distance[1:], h.distance_se[1:]
    ax.plot(t, d, "o-", color=f"C{i}", ms=3, label=f"logistic, η = {eta:g}")
    ax.fill_between(t, d - 2 * se, d + 2 * se, color=f"C{i}", alpha=0.15)
    print(f"horizon η={eta:g}: distance {d[0]:.4f} ± {se[0]:.4f} at τ={t[0]:.3g}, {d[-1]:.4f} ± {se[-1]:.4f} at "
          f"τ={t[-1]:.3g} (spread {h.spread[-1]:.3f}); quadratic model (exact) max_rel {exact:.1e}")
ax.axhline(0.0, color="k", lw=0.8, label="quadratic model (exact: 0)")
ax.set(xscale="log", xlabel="SDE time τ = n·s·η·E", ylabel="‖E w (E = 8) − E w (E = 4)‖, ± 2 s.e.",
       title=f"local-steps rule κ = 2, s = 1: identical clients, {R} paired runs")
ax.legend(fontsize=8)
fig.savefig(out / "scaling_horizon.png", dpi=120, bbox_inches="tight")
print(f"wrote {out / 'scaling_horizon.png'}")
