"""Run the gallery and write the report folder: ``figures/``, ``data/``, ``report.html``, ``report.md``,
``summary.json``.

Everything is first written to a scratch folder inside the output folder and moved into place at the end, so
an interrupted run leaves no half-written files that look complete.
"""

from __future__ import annotations

import platform
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from fedsde.errors import FedsdeInputError
from fedsde.problems import load_problem, paper_table_problem
from fedsde.problems.quadratic import QuadraticProblem
from fedsde.report.gallery import FigureRecord, RunContext, run_figures

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


def _claims(ctx: RunContext, scale: float) -> list[dict]:
    """The table of ``fedsde claims``, computed now (checks already run for a figure are reused)."""
    from fedsde.report.claims_memo import claim_result
    from fedsde.theory.claims import all_claims

    out = []
    for c in all_claims():
        claim, res, sec = claim_result(ctx, c.id, scale)
        out.append(claim.result_dict(res, sec))
    return out


def _errata() -> list[dict]:
    from fedsde.symbolic.errata import errata_entries

    return [e.to_dict() if hasattr(e, "to_dict") else dict(e) for e in errata_entries()]


def reproduce(cfg: dict, only: Sequence[str], out: Path, *, quick: bool, progress: bool = True,
              with_claims: bool = True) -> ReproduceResult:
    """Make the figures ``only`` with configuration ``cfg`` and write the report into ``out``."""
    import numpy as np
    import torch

    from fedsde.report.config import check_constraints

    run = cfg["run"]
    ctx = RunContext(seed=run["seed"], device=run["device"], problem=resolve_problem(run["problem"]),
                     progress=progress, quick=quick)
    check_constraints(cfg, only, ctx.problem)  # every cross-field constraint, before anything runs
    if out.exists() and not out.is_dir():
        raise FedsdeInputError(f"--out={str(out)!r}: exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=out, prefix=".partial-"))
    t0 = time.perf_counter()
    try:
        with tqdm(total=len(only) + int(with_claims), disable=not progress, desc="reproduce", unit="fig") as bar:
            records = run_figures(only, cfg, ctx, scratch, bar)
            claims = None
            if with_claims:
                bar.set_description("claims")
                claims = _claims(ctx, cfg["F8"]["scale"])
                bar.update(1)
        errata = _errata()
        wall = time.perf_counter() - t0
        meta = {
            "fedsde": _version(), "python": platform.python_version(), "torch": torch.__version__,
            "numpy": np.__version__, "platform": platform.platform(), "device": ctx.device,
            "torch threads": torch.get_num_threads(), "seed": ctx.seed, "quick": quick,
            "problem": ctx.problem.name or run["problem"], "figures": ", ".join(only),
            "wall time (s)": round(wall, 1),
        }
        meta.update({f"wall time {r.spec.id} (s)": round(r.wall_time_s, 2) for r in records})
        from fedsde.report.document import build_html, build_markdown
        from fedsde.report.output import atomic_write_text, write_json

        atomic_write_text(scratch / "report.html",
                          build_html(TITLE, INTRO, records, claims, errata, meta, scratch))
        atomic_write_text(scratch / "report.md", build_markdown(TITLE, INTRO, records, claims, errata, meta))
        write_json(scratch / "summary.json", {
            "metadata": meta, "config": cfg,
            "figures": {r.spec.id: {"title": r.spec.title, "error": r.error, "wall_time_s": r.wall_time_s,
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

