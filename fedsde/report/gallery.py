"""The figure gallery of ``fedsde reproduce``: registry, shared types and the runner.

Each figure lives in ``fedsde/report/figures/fNN_*.py`` and exposes ``make(cfg, ctx) -> FigureOutput``; it
computes its data through the library (exact laws, simulator, SDE, theory), returns the matplotlib figure, the
tables behind it and a caption that states the numbers.
"""

from __future__ import annotations

import importlib
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedsde.problems.quadratic import QuadraticProblem


@dataclass
class FigureOutput:
    """What a figure module returns.

    Attributes
    ----------
    fig : matplotlib.figure.Figure
    caption : str
        What the figure shows and the numbers that matter (one paragraph, plain text).
    tables : dict[str, tuple[list[str], list[list]]]
        CSV name → (header, rows): the data behind the figure.
    numbers : dict
        Key numbers for the summary (JSON-able).
    """

    fig: Any
    caption: str
    tables: dict[str, tuple[list[str], list[list]]] = field(default_factory=dict)
    numbers: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunContext:
    """Shared settings of one reproduce run."""

    seed: int
    device: str
    problem: QuadraticProblem
    progress: bool = True
    quick: bool = False
    cache: dict = field(default_factory=dict, compare=False, repr=False)

    def memo(self, key, fn):
        """Compute ``fn()`` once per run for ``key`` (figures that share data reuse it)."""
        if key not in self.cache:
            self.cache[key] = fn()
        return self.cache[key]


@dataclass(frozen=True)
class FigureSpec:
    id: str
    slug: str
    title: str
    module: str

    def maker(self) -> Callable[[dict, RunContext], FigureOutput]:
        return importlib.import_module(f"fedsde.report.figures.{self.module}").make


GALLERY: dict[str, FigureSpec] = {
    s.id: s
    for s in [
        FigureSpec("F1", "trajectories", "Discrete FedAvg vs SDE trajectories", "f01_trajectories"),
        FigureSpec("F2", "bias_vs_E", "Stationary bias vs E and vs ηE", "f02_bias"),
        FigureSpec("F3", "variance_vs_E", "Stationary variance vs E (log–log)", "f03_variance"),
        FigureSpec("F4", "variance_vs_Q", "Stationary variance vs number of clients Q", "f04_variance_Q"),
        FigureSpec("F5", "excess_loss_heatmap", "Stationary excess loss over (η, E)", "f05_heatmap"),
        FigureSpec("F6", "thm63_transient", "Thm 6.3 transient variance", "f06_transient"),
        FigureSpec("F7", "normality_vs_Q", "Normality of the server update vs Q", "f07_normality"),
        FigureSpec("F8", "bounds_vs_empirical", "Bounds vs empirical (Thm 4.5 / Cor 4.6, Thm 4.9 / Cor 4.10)",
                   "f08_bounds"),
        FigureSpec("F9", "cor47_plateau", "Cor 4.7: gradient plateau vs constant client lr", "f09_cor47"),
        FigureSpec("F10", "client_drift", "Client drift vs Lemma A.1", "f10_drift"),
        FigureSpec("F11", "aggregators", "Aggregators under statistical / hybrid / hybrid+ heterogeneity",
                   "f11_aggregators"),
        FigureSpec("F12", "weak_error", "Weak error vs step size", "f12_weak_error"),
        FigureSpec("F13", "validity", "SVAG validity test: does the SDE track FedAvg on digits?", "f13_validity"),
        FigureSpec("F14", "general_sde", "The general SDE vs FedAvg on a real loss: weak error and cost",
                   "f14_general_sde"),
        FigureSpec("F15", "scaling_rules", "First-order SDE scaling rules: where they hold", "f15_scaling"),
    ]
}


@dataclass
class FigureRecord:
    """Outcome of one figure in a run."""

    spec: FigureSpec
    wall_time_s: float
    output: FigureOutput | None = None
    files: list[Path] = field(default_factory=list)
    error: str | None = None


def run_figures(ids: Sequence[str], cfg: dict, ctx: RunContext, scratch: Path, bar=None) -> list[FigureRecord]:
    """Make each figure, writing ``figures/<id>_<slug>.{png,pdf}`` and ``data/<id>_<table>.csv`` into ``scratch``.

    A figure that raises is recorded with its error (the run goes on); nothing of it is written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedsde.report.output import save_figure, write_csv

    records = []
    for fid in ids:
        spec = GALLERY[fid]
        if bar is not None:
            bar.set_description(f"{fid} {spec.slug}")
        t0 = time.perf_counter()
        try:
            out = spec.maker()(cfg[fid], ctx)
            files = save_figure(out.fig, scratch / "figures" / f"{fid}_{spec.slug}", formats=("png", "pdf"))
            plt.close(out.fig)
            for name, (header, rows) in out.tables.items():
                files.append(write_csv(scratch / "data" / f"{fid}_{name}.csv", header, rows))
            rec = FigureRecord(spec, time.perf_counter() - t0, out, files)
        except Exception as exc:
            tb = traceback.format_exc(limit=3)
            rec = FigureRecord(spec, time.perf_counter() - t0, error=f"{type(exc).__name__}: {exc}\n{tb}")
        records.append(rec)
        if bar is not None:
            bar.update(1)
    return records
