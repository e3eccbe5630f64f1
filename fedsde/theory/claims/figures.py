"""Drawing the figures that checks return (bound against empirical value, …) with matplotlib (Agg)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedsde._atomic import atomic_save_figure
from fedsde.theory.claims.base import Figure


def figure_filename(claim_id: str) -> str:
    """``"002/thm-4.5"`` → ``"002_thm-4.5.png"``."""
    return claim_id.replace("/", "_") + ".png"


def draw_claim_figure(claim_id: str, figure: Figure, *, max_cols: int = 3):
    """Draw ``figure`` (one axis per panel) and return the matplotlib figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(1, len(figure.panels))
    cols = min(n, max_cols)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    for ax, (title, xlabel, ylabel, series, scales) in zip(axes.ravel(), figure.panels, strict=False):
        for s in series:
            x, y = np.asarray(s.x, dtype=float), np.asarray(s.y, dtype=float)
            ok = np.isfinite(y) & ((y > 0) if scales.get("logy") else True)
            if not ok.any():
                continue
            if s.yerr is not None and np.any(np.asarray(s.yerr) > 0):
                ax.errorbar(x[ok], y[ok], yerr=3 * np.asarray(s.yerr, dtype=float)[ok], fmt=s.style, label=s.label,
                            capsize=2, ms=4)
            else:
                ax.plot(x[ok], y[ok], s.style, label=s.label, ms=4)
        if scales.get("logx"):
            from matplotlib.ticker import NullFormatter

            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
        if scales.get("logy"):
            ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6.5)
    for ax in axes.ravel()[n:]:
        ax.set_visible(False)
    fig.suptitle(f"{claim_id}: {figure.suptitle}" if figure.suptitle else claim_id, fontsize=10)
    fig.tight_layout()
    return fig


def save_claim_figure(claim_id: str, figure: Figure, directory) -> Path:
    """Draw ``figure`` and write it atomically to ``directory/<id>.png``."""
    import matplotlib.pyplot as plt

    fig = draw_claim_figure(claim_id, figure)
    target = Path(directory) / figure_filename(claim_id)
    try:
        return atomic_save_figure(fig, target, fmt="png", dpi=120)
    finally:
        plt.close(fig)
