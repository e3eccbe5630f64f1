"""F9 — Cor 4.7: the gradient-norm plateau under a constant client lr η_c and a decaying server lr
η₀(t) = 1/(t+1), against η_c, with Cor 4.7's bound as printed and corrected (seed 002, Sec. 4)."""

from __future__ import annotations

import matplotlib.ticker
import numpy as np

from fedsde._stats import fit_slope_interval, loglog_slope
from fedsde.report.figures.common import colors, subplots
from fedsde.report.gallery import FigureOutput, RunContext


def make(cfg: dict, ctx: RunContext) -> FigureOutput:
    from fedsde.exact import round_law
    from fedsde.theory.bounds_002 import cor_4_7
    from fedsde.theory.constants import quadratic_constants, quadratic_region_radius
    from fedsde.theory.empirical import quadratic_exact_path, random_time_average
    from fedsde.theory.problems import sec4_quadratic
    from fedsde.theory.schedules import PowerSchedule

    pb = sec4_quadratic()
    E, h, T = cfg["local_steps"], cfg["h"], cfg["horizon"]
    w0 = np.full(pb.d, 3.0)
    rounds = round(T / h) + 1
    server = PowerSchedule(1.0, 1.0)
    N = np.array([rounds - 1])
    H2 = pb.hessian @ pb.hessian
    rows, paths = [], []
    for eta_c in cfg["eta_cs"]:
        sched = PowerSchedule(eta_c, 0.0)
        R = quadratic_region_radius(pb, sched, local_steps=E, h=h, rounds=rounds, w0=w0, server_schedule=server)
        const = quadratic_constants(pb, radius=R, local_steps=E, eta_max=eta_c, eta_min=eta_c, w0=w0)
        inp = const.bound_inputs(local_steps=E, h=h)
        path = quadratic_exact_path(pb, sched, local_steps=E, h=h, rounds=rounds, w0=w0, server_schedule=server)
        paths.append(path)
        avg, _ = random_time_average(path.grad_sq, path.eta0, N, exact=True)
        bias = round_law(pb, eta_c, E).c - pb.optimum  # the chain's limit point C4 (server steps sum to ∞)
        plateau = float(bias @ H2 @ bias)
        bp = cor_4_7(inp, np.array([T]), eta_c=eta_c, variant="paper")
        bc = cor_4_7(inp, np.array([T]), eta_c=eta_c, variant="corrected")
        rows.append([eta_c, plateau, float(path.grad_sq[-1, 0]), float(avg[0]), float(bp.value[0]),
                     float(bc.value[0]), float(bp.terms["local_drift"][0]), float(bc.terms["local_drift"][0])])
    arr = np.array(rows)
    slope = loglog_slope(arr[:, 0], arr[:, 1])
    fit = fit_slope_interval(arr[:, 0], arr[:, 1])  # exact moments: the interval is the fit's misfit
    fig, (ax1, ax2) = subplots(2, width=5.6, height=5.0)
    ax1.plot(arr[:, 0], arr[:, 1], "o-", lw=2, label=f"plateau ‖∇F(C4)‖² as t → ∞ (slope {slope:+.2f})")
    ax1.plot(arr[:, 0], arr[:, 3], "d-", label=f"η₀-weighted average up to t = {T:g}")
    ax1.plot(arr[:, 0], arr[:, 4], "s--", label=f"Cor 4.7 as printed at t = {T:g}")
    ax1.plot(arr[:, 0], arr[:, 5], "^:", label=f"Cor 4.7 corrected at t = {T:g}")
    ax1.plot(arr[:, 0], arr[:, 7], "k:", lw=1, label="corrected bound as t → ∞ (η_cC₁/E)")
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_xticks(arr[:, 0], [f"{v:g}" for v in arr[:, 0]])
    ax1.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax1.set_xlabel("constant client learning rate η_c")
    ax1.set_ylabel("gradient norm² (exact chain)")
    ax1.set_title(f"Plateau vs η_c (η₀(t) = 1/(t+1), E = {E}, h = {h:g})", fontsize=9)
    ax1.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    for eta_c, path, plateau, col in zip(arr[:, 0], paths, arr[:, 1], colors(len(paths)), strict=True):
        ax2.plot(path.t[1:], path.grad_sq[1:, 0], "-", color=col, label=f"η_c = {eta_c:g}")
        ax2.axhline(plateau, color=col, ls=":", lw=1)
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlabel("t = n·h (continuous time)")
    ax2.set_ylabel("E‖∇F(w_n)‖²")
    ax2.set_title("Approach to the plateau (dotted) under η₀(t) = 1/(t+1)", fontsize=9)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    caption = (
        f"Cor 4.7 on the Section 4 quadratic problem (exact chain moments, no sampling error), clock t = n·h with "
        f"h = {h:g}, server lr η₀(t) = 1/(t+1), constant client lr η_c, E = {E}. The server steps sum to infinity, "
        "so the chain converges to the fixed point C4 of local training, and E‖∇F‖² tends to the plateau "
        f"‖∇F(C4)‖², which grows like η_c^{slope:.2f} (fitted slope {fit.text('.2f')}, 95 % interval from the "
        f"fit's residuals; C4 − w* ∝ η_cE to first order): from {arr[0, 1]:.3g} at "
        f"η_c = {arr[0, 0]:g} to {arr[-1, 1]:.3g} at η_c = {arr[-1, 0]:g}. The approach is slow (right: the "
        "server's clock runs like log t). Cor 4.7 bounds the η₀-weighted average by an O(1/log t) term plus a "
        f"term linear in η_c; at t = {T:g} the printed bound is {np.min(arr[:, 4] / arr[:, 3]):.3g}× to "
        f"{np.max(arr[:, 4] / arr[:, 3]):.3g}× the average, the corrected one {np.min(arr[:, 5] / arr[:, 3]):.3g}× "
        f"to {np.max(arr[:, 5] / arr[:, 3]):.3g}×. Both hold; the linear-in-η_c term overstates the plateau's "
        "η_c² scaling for small η_c."
    )
    header = ["eta_c", "plateau_t_inf", "grad_sq_at_horizon", "eta0_weighted_average", "bound_printed",
              "bound_corrected", "bound_printed_t_inf", "bound_corrected_t_inf"]
    return FigureOutput(fig, caption, {"cor47_plateau": (header, rows)}, {"plateau_slope": slope,
                                                                        "plateau_slope_interval": fit.to_dict()})
