"""F3 — stationary variance vs E (log–log) with fitted slopes: exact, simulated, corrected SDE, printed v0(∞)."""

from __future__ import annotations

import numpy as np

from fedsde._stats import fit_slope_interval, loglog_slope
from fedsde.report.figures.common import colors, integer_log_ticks, subplots
from fedsde.report.figures.f02_bias import scan
from fedsde.report.gallery import FigureOutput, RunContext
from fedsde.report.stationary import COLUMNS


def make(cfg: dict, ctx: RunContext) -> FigureOutput:
    pb = ctx.problem
    rows = scan(cfg, ctx)
    etas = sorted({r.eta for r in rows})
    fig, ax = subplots(1, width=8.0, height=5.2)
    slopes, fits = {}, {}
    for eta, col in zip(etas, colors(len(etas)), strict=True):
        rs = sorted((r for r in rows if r.eta == eta), key=lambda r: r.E)
        E = np.array([r.E for r in rs])
        ex = np.array([r.exact_var for r in rs])
        pr = np.array([r.paper_v0_inf for r in rs])
        co = np.array([r.corrected_sde_var for r in rs])
        sl = {"exact": loglog_slope(E, ex), "printed": loglog_slope(E, pr), "corrected": loglog_slope(E, co)}
        slopes[f"{eta:g}"] = sl
        fits[f"{eta:g}"] = {k: fit_slope_interval(E, y) for k, y in (("exact", ex), ("printed", pr),
                                                                       ("corrected", co))}
        ax.plot(E, ex, "-", color=col, lw=2, label=f"η={eta:g} exact chain (slope {sl['exact']:+.2f})")
        ax.errorbar(E, [r.sim_var for r in rs], yerr=[2 * r.sim_var_se for r in rs], fmt="o", color=col, ms=3.5,
                    capsize=2, label=f"η={eta:g} simulated ± 2 s.e.")
        ax.plot(E, co, ":", color=col, lw=1.6, label=f"η={eta:g} corrected SDE (slope {sl['corrected']:+.2f})")
        ax.plot(E, pr, "--", color=col, lw=1.4, label=f"η={eta:g} printed v0(∞) (slope {sl['printed']:+.2f})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    integer_log_ticks(ax, [r.E for r in rows])
    ax.set_xlabel("local steps E per round")
    ax.set_ylabel("stationary variance Var[w∞]")
    ax.set_title("Stationary variance vs E: the printed formula grows like E²–E³, the algorithm's is flat",
                 fontsize=10)
    ax.legend(fontsize=6.5, ncol=2, loc="upper left")
    fig.tight_layout()
    ratio = [r.paper_v0_inf / r.exact_var for r in rows]
    z = max(abs(r.sim_var - r.exact_var) / r.sim_var_se for r in rows)
    caption = (
        f"Stationary variance of the server weights on '{pb.name}' (server step s = 1) vs E, log–log. Fitted "
        "slopes d log Var / d log E with 95 % intervals (the fit's residuals: exact values) — exact chain: "
        + ", ".join(f"{v['exact'].text('+.3f')} (η={k})" for k, v in fits.items())
        + "; printed v0(∞) of Thm 6.3: " + ", ".join(f"{v['printed'].text('+.2f')}" for v in fits.values())
        + f". The printed variance is {min(ratio):.2g}× to {max(ratio):.2g}× the exact one; the claim that the "
        "variance grows as O(E²) is an artefact of the printed diffusion (bare E, p_k instead of p_k², perfectly "
        f"correlated noise). Simulation agrees with the exact law within {z:.1f} standard errors. The corrected "
        "SDE (leading-order moment matching) underestimates the variance by the factor 1 − sβ/2, which shrinks "
        "as the per-round contraction sβ ≈ ηE·Ū grows."
    )
    return FigureOutput(fig, caption, {"stationary_scan": (list(COLUMNS), [r.as_row() for r in rows])},
                        {"log_slopes": slopes, "log_slope_intervals": {k: {n: f.to_dict() for n, f in v.items()}
                                                                      for k, v in fits.items()},
                         "printed_over_exact": [min(ratio), max(ratio)], "max_sim_z": z})
