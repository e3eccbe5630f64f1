"""F8 — bounds vs empirical: Thm 4.5 / Cor 4.6 (gradient norm) and Thm 4.9 / Cor 4.10 (optimality gap),
each as printed and corrected, from the checks of ``fedsde claims`` (seed 002, Section 4)."""

from __future__ import annotations

import numpy as np

from fedsde.report.claims_memo import claim_result, verdict_text
from fedsde.report.gallery import BOUND_CLAIMS as CLAIMS
from fedsde.report.gallery import FigureOutput, RunContext


def make(cfg: dict, ctx: RunContext) -> FigureOutput:
    from fedsde.theory.claims.base import Figure
    from fedsde.theory.claims.figures import draw_claim_figure

    merged = Figure(suptitle="seed 002, Section 4: bounds (printed, corrected) vs the chain, clock t = n·h")
    rows, verdicts, tight = [], [], []
    for cid in CLAIMS:
        _, res, _ = claim_result(ctx, cid, cfg["scale"])
        verdicts.append(f"{cid}: as printed {verdict_text(res.printed)}, corrected {verdict_text(res.corrected)}")
        for title, xlabel, ylabel, series, scales in res.figure.panels:
            merged.panels.append((f"{cid.split('/')[1]}: {title}", xlabel, ylabel, series, scales))
            emp = next(s for s in series if s.label.startswith("empirical"))
            for s in series:
                if s.label.startswith("bound"):
                    ratio = np.asarray(s.y, float) / np.asarray(emp.y, float)
                    tight.append((cid, title, s.label, float(ratio[-1])))
                for x, y in zip(np.asarray(s.x, float), np.asarray(s.y, float), strict=True):
                    rows.append([cid, title, s.label, float(x), float(y)])
    fig = draw_claim_figure("F8", merged, max_cols=3)
    corr = [r for r in tight if "corrected" in r[2]]
    caption = (
        "Each panel compares the η-weighted random-time average of E‖∇F‖² (Thm 4.5, Cor 4.6) or of E[F − F*] "
        "(Thm 4.9, Cor 4.10) along the chain (exact moments for quadratic clients; Monte Carlo with 3-s.e. bars "
        "for logistic regression) with the bound as printed and as corrected, against t = n·h. Verdicts: "
        + "; ".join(verdicts) + ". The corrected bounds hold but are loose: at the last horizon they are "
        f"{min(r[3] for r in corr):.3g}× to {max(r[3] for r in corr):.3g}× the empirical value. Thm 4.9's printed "
        "first term ‖w₀ − w*‖/(τφ) fails on the counterexample with ‖w₀ − w*‖ = 10, where the energy argument needs "
        "‖w₀ − w*‖²/2."
    )
    return FigureOutput(fig, caption, {"bounds": (["claim", "panel", "series", "t", "value"], rows)},
                        {"tightness_last_horizon": tight})
