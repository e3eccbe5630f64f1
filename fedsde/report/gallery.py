"""The figure gallery of ``fedsde reproduce``: registry, shared types and the runner.

Each figure lives in ``fedsde/report/figures/fNN_*.py`` and exposes ``make(cfg, ctx) -> FigureOutput``; it
computes its data through the library (exact laws, simulator, SDE, theory), returns the matplotlib figure, the
tables behind it and a caption that states the numbers.

:func:`run_figures` makes figures one after the other in this process; :mod:`fedsde.report.parallel` spreads
them over worker processes (the same :func:`run_figure` in each) and gives the same records.
"""

from __future__ import annotations

import importlib
import resource
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedsde.problems.quadratic.problem import QuadraticProblem


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
    """Shared settings of one reproduce run.

    Attributes
    ----------
    seed, device, problem, progress, quick
        ``run.seed``, ``run.device``, the resolved ``run.problem``, whether to show progress, ``--quick``.
    jobs : int
        Worker processes that make the figures (1: one after the other in this process;
        :func:`fedsde.report.parallel.run_figures`).
    pending : tuple of tuple
        Memo keys of what the report needs after the figures (claim checks, the errata table; see
        :mod:`fedsde.report.pending`): a run on several processes computes them alongside the figures, a
        sequential one when they are asked for.
    cache : dict
        What :meth:`memo` computed (data that figures share, claim checks, errata).
    """

    seed: int
    device: str
    problem: QuadraticProblem
    progress: bool = True
    quick: bool = False
    jobs: int = 1
    pending: tuple[tuple, ...] = ()
    cache: dict = field(default_factory=dict, compare=False, repr=False)

    def memo(self, key, fn):
        """Compute ``fn()`` once per run for ``key`` (figures that share data reuse it)."""
        if key not in self.cache:
            self.cache[key] = fn()
        return self.cache[key]


@dataclass(frozen=True)
class FigureSpec:
    """A figure of the gallery.

    Attributes
    ----------
    id, slug, title : str
        ``"F2"``, the file-name part and the heading.
    module : str
        The module of :mod:`fedsde.report.figures` whose ``make(cfg, ctx)`` makes it.
    cost : float
        Rough CPU seconds of its ``--quick`` configuration on one thread: the parallel runner starts the costly
        figures first (a hint; a wrong value costs balance, never a result).
    shares : str or None
        Figures with the same label compute shared data through :meth:`RunContext.memo` (F2 and F3: one grid
        of stationary laws) and run in the same process.
    claims : tuple of str
        Checks of ``fedsde claims`` the figure runs (at its ``scale`` field); the claims table reuses them.
    """

    id: str
    slug: str
    title: str
    module: str
    cost: float = 1.0
    shares: str | None = None
    claims: tuple[str, ...] = ()

    def maker(self) -> Callable[[dict, RunContext], FigureOutput]:
        return importlib.import_module(f"fedsde.report.figures.{self.module}").make


#: the claims that F8 draws (seed 002, Section 4 bounds)
BOUND_CLAIMS = ("002/thm-4.5", "002/cor-4.6", "002/thm-4.9", "002/cor-4.10")

GALLERY: dict[str, FigureSpec] = {
    s.id: s
    for s in [
        FigureSpec("F1", "trajectories", "Discrete FedAvg vs SDE trajectories", "f01_trajectories", cost=1.0),
        FigureSpec("F2", "bias_vs_E", "Stationary bias vs E and vs ηE", "f02_bias", cost=2.7,
                   shares="stationary_scan"),
        FigureSpec("F3", "variance_vs_E", "Stationary variance vs E (log–log)", "f03_variance", cost=0.8,
                   shares="stationary_scan"),
        FigureSpec("F4", "variance_vs_Q", "Stationary variance vs number of clients Q", "f04_variance_Q", cost=2.7),
        FigureSpec("F5", "excess_loss_heatmap", "Stationary excess loss over (η, E)", "f05_heatmap", cost=1.0),
        FigureSpec("F6", "thm63_transient", "Thm 6.3 transient variance", "f06_transient", cost=2.0),
        FigureSpec("F7", "normality_vs_Q", "Normality of the server update vs Q", "f07_normality", cost=1.3),
        FigureSpec("F8", "bounds_vs_empirical", "Bounds vs empirical (Thm 4.5 / Cor 4.6, Thm 4.9 / Cor 4.10)",
                   "f08_bounds", cost=7.0, claims=BOUND_CLAIMS),
        FigureSpec("F9", "cor47_plateau", "Cor 4.7: gradient plateau vs constant client lr", "f09_cor47", cost=4.0),
        FigureSpec("F10", "client_drift", "Client drift vs Lemma A.1", "f10_drift", cost=0.4,
                   claims=("002/lemma-a.1",)),
        FigureSpec("F11", "aggregators", "Aggregators under statistical / hybrid / hybrid+ heterogeneity",
                   "f11_aggregators", cost=15.0),
        FigureSpec("F12", "weak_error", "Weak error vs step size", "f12_weak_error", cost=0.8),
        FigureSpec("F13", "validity", "SVAG validity test: does the SDE track FedAvg on digits?", "f13_validity",
                   cost=5.0),
        FigureSpec("F14", "general_sde", "The general SDE vs FedAvg on a real loss: weak error and cost",
                   "f14_general_sde", cost=3.9),
        FigureSpec("F15", "scaling_rules", "First-order SDE scaling rules: where they hold", "f15_scaling",
                   cost=8.4),
        FigureSpec("F16", "real_data", "Real clients, exact answers: stationary variance and bias on Grunfeld",
                   "f16_real_data", cost=3.5),
        FigureSpec("F17", "module_validity", "Your own network: SVAG validity of a CNN (GroupNorm, dropout) on digits",
                   "f17_module_validity", cost=8.5),
        FigureSpec("F18", "rule_sdes", "The SDE of every aggregator: chain vs its own SDE, and the weak-error slope",
                   "f18_rule_sdes", cost=1.5),
        FigureSpec("F19", "order2", "Where the first-order SDE stops: order 1 and order 2 against the exact chain",
                   "f19_order2", cost=0.3),
    ]
}


@dataclass
class FigureRecord:
    """Outcome of one figure in a run (``cpu_time_s``: CPU seconds of the process that made it, all its threads).

    ``output.fig`` is ``None`` once the figure is saved and closed.
    """

    spec: FigureSpec
    wall_time_s: float
    output: FigureOutput | None = None
    files: list[Path] = field(default_factory=list)
    error: str | None = None
    cpu_time_s: float | None = None


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (every thread)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_figure(fid: str, cfg: dict, ctx: RunContext, scratch: Path) -> FigureRecord:
    """Make one figure, writing ``figures/<id>_<slug>.{png,pdf}`` and ``data/<id>_<table>.csv`` into ``scratch``.

    A figure that raises is recorded with its error; nothing of it is written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedsde.report.output import save_figure, write_csv

    spec = GALLERY[fid]
    t0, c0 = time.perf_counter(), cpu_seconds()
    try:
        out = spec.maker()(cfg[fid], ctx)
        files = save_figure(out.fig, scratch / "figures" / f"{fid}_{spec.slug}", formats=("png", "pdf"))
        plt.close(out.fig)
        out.fig = None
        for name, (header, rows) in out.tables.items():
            files.append(write_csv(scratch / "data" / f"{fid}_{name}.csv", header, rows))
        return FigureRecord(spec, time.perf_counter() - t0, out, files, cpu_time_s=cpu_seconds() - c0)
    except Exception as exc:
        tb = traceback.format_exc(limit=3)
        return FigureRecord(spec, time.perf_counter() - t0, error=f"{type(exc).__name__}: {exc}\n{tb}",
                            cpu_time_s=cpu_seconds() - c0)


def run_figures(ids: Sequence[str], cfg: dict, ctx: RunContext, scratch: Path, bar=None) -> list[FigureRecord]:
    """Make each figure in this process, in the order of ``ids`` (see :func:`run_figure`); the run goes on past a
    figure that fails."""
    records = []
    for fid in ids:
        if bar is not None:
            bar.set_description(f"{fid} {GALLERY[fid].slug}")
        records.append(run_figure(fid, cfg, ctx, scratch))
        if bar is not None:
            bar.update(1)
    return records
