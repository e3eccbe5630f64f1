"""F9 — Cor 4.7: with a constant client lr η_c and server lr 1/(t+1) the gradient norm tends to the plateau
‖∇F(C4)‖² of local training's fixed point, which grows like η_c² (exact chain, clock t = n·h).

Run: python examples/f09_cor47.py [--quick] [--out DIR]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from fedsde.exact import round_law
from fedsde.theory.empirical import quadratic_exact_path
from fedsde.theory.problems import sec4_quadratic
from fedsde.theory.schedules import PowerSchedule

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--out", default="examples-output")
args = ap.parse_args()

pb, E, h = sec4_quadratic(), 5, 0.5
T = 200.0 if args.quick else 2000.0
H2 = pb.hessian @ pb.hessian
fig, ax = plt.subplots(figsize=(6, 4))
for eta_c in (0.05, 0.1, 0.2, 0.4):
    path = quadratic_exact_path(pb, PowerSchedule(eta_c, 0.0), local_steps=E, h=h, rounds=int(T / h) + 1, w0=[3.0],
                                server_schedule=PowerSchedule(1.0, 1.0))  # η₀(t) = 1/(t+1)
    bias = round_law(pb, eta_c, E).c - pb.optimum
    line, = ax.plot(path.t[1:], path.grad_sq[1:, 0], label=f"η_c = {eta_c:g}")
    ax.axhline(bias @ H2 @ bias, ls=":", color=line.get_color())
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("t = n·h")
ax.set_ylabel("E‖∇F(w_n)‖² (dotted: plateau ‖∇F(C4)‖²)")
ax.legend()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
fig.savefig(out / "f09_cor47.png", dpi=120, bbox_inches="tight")
print(f"wrote {out / 'f09_cor47.png'}")
