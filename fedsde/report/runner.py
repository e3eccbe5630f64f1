"""Run the gallery and write the report folder: ``figures/``, ``data/``, ``report.html``, ``report.md``,
``summary.json``.

Everything is first written to a scratch folder inside the output folder and moved into place at the end, so
an interrupted run leaves no half-written files that look complete. The figures are made on several worker
processes (:mod:`fedsde.report.parallel`; ``jobs``), with the numbers of a run on one.
"""

from __future__ import annotations

import platform
import resource
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fedsde._progress import progress_bar
from fedsde.errors import FedsdeInputError
from fedsde.problems import load_problem, paper_table_problem
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.report.claims_memo import claim_result
from fedsde.report.gallery import FigureRecord, RunContext, cpu_seconds
from fedsde.report.parallel import check_jobs, run_figures, single_threaded, worker_count
from fedsde.report.pending import ERRATA, claim_key, errata_table

TITLE = "fedsde reproduction report — continuous-time analysis of federated averaging"
INTRO = (
    "How discrete FedAvg compares with its SDE, how the theorems' bounds compare with what the algorithm does, "
    "and what the quadratic generalisation analysis of seed 002 (Overman & Klabjan) looks like: printed formula "
    "vs corrected formula vs the algorithm itself. Every number below was computed by this run."
)


@dataclass
class ReproduceResult:
    """Outcome of :func:`reproduce`."""

    out: Path
    records: list[FigureRecord]
    claims: list[dict] | None
    errata: list[dict] | None
    metadata: dict
    wall_time_s: float

    @property
    def failed(self) -> list[str]:
        return [r.spec.id for r in self.records if r.error]


def resolve_problem(spec: str) -> QuadraticProblem:
    """``"paper_table"`` or the path of a problem file."""
    if spec == "paper_table":
        return paper_table_problem()
    p = Path(spec)
    if not p.exists():
        raise FedsdeInputError(f"run.problem={spec!r}: must be 'paper_table' or an existing problem file")
    return load_problem(p)


def _all_claims():
    from fedsde.theory.claims import all_claims

    return all_claims()


def _table_claims(ids: Sequence[str] | None):
    """The claims of the claims table: every claim, or those of ``ids`` in the registry's order."""
    claims = _all_claims()
    return claims if ids is None else [c for c in claims if c.id in set(ids)]


def _children_cpu_seconds() -> float:
    """User + system CPU seconds of this process's finished child processes (the workers, once shut down)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _claims(ctx: RunContext, scale: float, ids: Sequence[str] | None = None) -> list[dict]:
    """The table of ``fedsde claims``, or of its checks ``ids`` (checks already run, for a figure or by a worker,
    are reused)."""
    out = []
    for c in _table_claims(ids):
        claim, res, sec = claim_result(ctx, c.id, scale)
        out.append(claim.result_dict(res, sec))
    return out


def reproduce(cfg: dict, only: Sequence[str], out: Path, *, quick: bool, progress: bool = True,
              with_claims: bool = True, jobs: int | None = None,
              claim_ids: Sequence[str] | None = None) -> ReproduceResult:
    """Make the figures ``only`` with configuration ``cfg`` and write the report into ``out``.

    Parameters
    ----------
    cfg : dict
        The validated configuration (:func:`fedsde.report.config.load_config`).
    only : sequence of str
        Figure ids, in the order of the report.
    out : Path
        Output folder (created; files of an earlier run are replaced).
    quick : bool
        Whether ``cfg`` is the quick configuration (recorded, and used by figures with built-in sizes).
    progress : bool
        Show a progress bar on stderr.
    with_claims : bool
        Add the table of ``fedsde claims``.
    jobs : int or None
        Worker processes for the figures and claim checks; ``None``: the usable cores
        (``os.sched_getaffinity``); 1: one after the other in this process. The numbers do not depend on it.
    claim_ids : sequence of str or None
        The checks of the claims table (with ``with_claims``); ``None``: every claim of ``fedsde claims``.
    """
    import numpy as np
    import torch

    from fedsde.report.config import check_constraints

    run = cfg["run"]
    jobs = check_jobs(jobs)
    pending = (ERRATA,) + (tuple(claim_key(c.id, cfg["F8"]["scale"]) for c in _table_claims(claim_ids))
                           if with_claims else ())
    ctx = RunContext(seed=run["seed"], device=run["device"], problem=resolve_problem(run["problem"]),
                     progress=progress, quick=quick, jobs=jobs, pending=pending)
    check_constraints(cfg, only, ctx.problem)  # every cross-field constraint, before anything runs
    workers = worker_count(only, cfg, ctx)
    if out.exists() and not out.is_dir():
        raise FedsdeInputError(f"--out={str(out)!r}: exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=out, prefix=".partial-"))
    t0, c0, children0 = time.perf_counter(), cpu_seconds(), _children_cpu_seconds()
    try:
        with single_threaded(), progress_bar(len(only) + int(with_claims), "reproduce", unit="fig",
                                             enabled=progress) as bar:
            records = run_figures(only, cfg, ctx, scratch, bar)
            claims = None
            if with_claims:
                bar.set_description("claims")
                claims = _claims(ctx, cfg["F8"]["scale"], claim_ids)
                bar.update(1)
            errata = errata_table(ctx)
            threads = torch.get_num_threads()
        wall = time.perf_counter() - t0
        cpu = cpu_seconds() - c0 + _children_cpu_seconds() - children0
        meta = {
            "fedsde": _version(), "python": platform.python_version(), "torch": torch.__version__,
            "numpy": np.__version__, "platform": platform.platform(), "device": ctx.device,
            "worker processes": workers, "torch threads": threads, "seed": ctx.seed, "quick": quick,
            "problem": ctx.problem.name or run["problem"], "figures": ", ".join(only),
            "wall time (s)": round(wall, 1), "cpu time (s)": round(cpu, 1),
        }
        meta.update({f"wall time {r.spec.id} (s)": round(r.wall_time_s, 2) for r in records})
        meta.update({f"cpu time {r.spec.id} (s)": round(r.cpu_time_s, 2) for r in records
                     if r.cpu_time_s is not None})
        from fedsde.report.document import build_html, build_markdown
        from fedsde.report.output import atomic_write_text, write_json

        atomic_write_text(scratch / "report.html",
                          build_html(TITLE, INTRO, records, claims, errata, meta, scratch))
        atomic_write_text(scratch / "report.md", build_markdown(TITLE, INTRO, records, claims, errata, meta))
        write_json(scratch / "summary.json", {
            "metadata": meta, "config": cfg,
            "figures": {r.spec.id: {"title": r.spec.title, "error": r.error, "wall_time_s": r.wall_time_s,
                                    "cpu_time_s": r.cpu_time_s,
                                    "numbers": None if r.output is None else r.output.numbers,
                                    "caption": None if r.output is None else r.output.caption}
                        for r in records},
            "claims": claims,
        })
        for f in sorted(scratch.rglob("*")):
            if f.is_file():
                target = out / f.relative_to(scratch)
                target.parent.mkdir(parents=True, exist_ok=True)
                f.replace(target)
        for r in records:  # report where the files are now, not where they were written
            r.files = [out / Path(f).relative_to(scratch) for f in r.files]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return ReproduceResult(out, records, claims, errata, meta, wall)


def _version() -> str:
    from fedsde import __version__

    return __version__

