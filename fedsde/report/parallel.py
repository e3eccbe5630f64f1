"""The figures of ``fedsde reproduce`` on several worker processes.

The run is cut into *units*, each made by one worker process from start to end:

* one unit per figure, except figures that share data through :meth:`RunContext.memo` (a common
  :attr:`FigureSpec.shares` label: F2 and F3 use one grid of stationary laws), which make one unit together;
* one unit per piece of work the report needs later (:attr:`RunContext.pending`: the errata table, the claim
  checks of the claims table) that no figure of the run computes itself (F8 and F10 run their checks of
  ``fedsde claims``; the table reuses them).

Units start costliest first (:attr:`FigureSpec.cost`, :data:`PENDING_COSTS`), so the last ones to finish are
short.

Each worker is a fresh interpreter (``spawn``) on one torch, BLAS and OpenMP thread, as a sequential run is
(:func:`single_threaded`); a figure there computes with the same seeds as in a sequential run and writes its files
into the same scratch folder, and the records come back in the order of the figures asked for. Every number is the
one of the sequential run (``tests/test_reproduce.py`` compares them).

Like any ``spawn`` process pool, this needs the script that calls :func:`fedsde.report.runner.reproduce` with
``jobs > 1`` to guard its top level with ``if __name__ == "__main__":`` (the ``fedsde`` command does).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from fedsde.errors import FedsdeInputError
from fedsde.report.gallery import GALLERY, FigureRecord, RunContext, run_figure
from fedsde.report.gallery import run_figures as run_figures_here

#: rough CPU seconds (one thread) of the pieces of :attr:`RunContext.pending` that take more than a fraction of a
#: second at the quick scale: the errata table, claim checks by id (scheduling hints only: a wrong value costs
#: balance, never a result)
PENDING_COSTS = {"errata": 3.4, "002/thm-4.5": 1.9, "002/eq-2-model": 1.5, "002/thm-5.4": 0.9}
#: hint for every other piece
DEFAULT_PENDING_COST = 0.2


@dataclass(frozen=True)
class Unit:
    """What one worker process does in one go: ``figures`` (in gallery order, on one run context, so that they
    share what they memoise), then the ``pending`` pieces (memo keys, :mod:`fedsde.report.pending`); ``cost``
    is the scheduling hint."""

    figures: tuple[str, ...] = ()
    pending: tuple[tuple, ...] = ()
    cost: float = 0.0


def usable_cores() -> int:
    """The CPU cores this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` where that is missing)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def check_jobs(jobs: int | None) -> int:
    """``jobs`` validated; ``None`` → :func:`usable_cores`."""
    if jobs is None:
        return usable_cores()
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise FedsdeInputError(f"jobs={jobs!r}: must be an integer >= 1 (1 makes the figures one after the other "
                               "in this process)")
    return jobs


def plan(ids: Sequence[str], cfg: dict, pending: Sequence[tuple] = ()) -> list[Unit]:
    """The units of a run that makes the figures ``ids`` and then needs the ``pending`` pieces, costliest first.

    A figure's own claim checks (:attr:`FigureSpec.claims`, at its ``scale`` field) are not run a second time.
    """
    from fedsde.report.pending import claim_key

    groups: dict[str, list[str]] = {}
    for fid in ids:
        groups.setdefault(GALLERY[fid].shares or fid, []).append(fid)
    units = [Unit(figures=tuple(fids), cost=sum(GALLERY[f].cost for f in fids)) for fids in groups.values()]
    done = {claim_key(cid, cfg[fid]["scale"]) for fid in ids for cid in GALLERY[fid].claims}
    units += [Unit(pending=(key,), cost=PENDING_COSTS.get(key[1] if len(key) > 1 else key[0], DEFAULT_PENDING_COST))
              for key in dict.fromkeys(pending) if key not in done]
    return sorted(units, key=lambda u: -u.cost)  # stable: equal costs keep the gallery order


def worker_count(ids: Sequence[str], cfg: dict, ctx: RunContext) -> int:
    """Processes that :func:`run_figures` makes the figures on (1: this one)."""
    units = len(plan(ids, cfg, ctx.pending))
    return 1 if ctx.jobs <= 1 or units <= 1 else min(ctx.jobs, units)


def run_figures(ids: Sequence[str], cfg: dict, ctx: RunContext, scratch: Path, bar=None) -> list[FigureRecord]:
    """Make the figures ``ids`` on ``ctx.jobs`` worker processes (and the pieces of ``ctx.pending``, stored in
    ``ctx``'s memo); with one job, or one unit of work, in this process as :func:`fedsde.report.gallery.run_figures`
    does. Returns the records in the order of ``ids``.

    A figure that raises is recorded with its error, as in a sequential run; so is every figure of a worker that
    died. A pending piece that failed in a worker is left to be computed again when the report asks for it.
    """
    if worker_count(ids, cfg, ctx) == 1:
        return run_figures_here(ids, cfg, ctx, scratch, bar)
    units = plan(ids, cfg, ctx.pending)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from fedsde.report.pending import store

    worker_ctx = replace(ctx, progress=False, jobs=1, pending=(), cache={})
    n_pending = sum(len(u.pending) for u in units)
    records: dict[str, FigureRecord] = {}
    done_pending = 0
    pool = ProcessPoolExecutor(max_workers=worker_count(ids, cfg, ctx), initializer=_init_worker,
                               mp_context=multiprocessing.get_context("spawn"))
    try:
        futures = {pool.submit(_run_unit, unit, cfg, worker_ctx, str(scratch)): unit for unit in units}
        for fut in as_completed(futures):
            unit = futures[fut]
            try:
                recs, pieces = fut.result()
            except Exception as exc:  # the worker died, or the unit could not be sent or returned
                recs, pieces = [FigureRecord(GALLERY[f], 0.0, error=f"worker process failed: {type(exc).__name__}: "
                                             f"{exc}") for f in unit.figures], {}
            store(ctx, pieces)
            records.update((r.spec.id, r) for r in recs)
            done_pending += len(unit.pending)
            if bar is not None and recs:
                bar.set_description(f"{recs[-1].spec.id} {recs[-1].spec.slug}")
                bar.update(len(recs))
            elif bar is not None:
                bar.set_description(f"claims, errata {done_pending}/{n_pending}")
    except BaseException:  # interrupted: stop the workers, so that none writes into the scratch folder after it goes
        _stop(pool)
        raise
    pool.shutdown(wait=True)
    return [records[fid] for fid in ids]


def _stop(pool) -> None:
    """Cancel what has not started, end the worker processes now and wait until they are gone."""
    terminate = getattr(pool, "terminate_workers", None)  # Python >= 3.14
    if terminate is not None:
        terminate()
    else:
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


@contextmanager
def single_threaded() -> Iterator[None]:
    """Run a block on one torch, BLAS and OpenMP thread in this process, and restore the settings after.

    A reproduce run computes this way whatever its ``jobs`` (here, or in each worker: :func:`_init_worker`): the
    figures' arrays are small, every intra-op thread only competes with the other workers, and the last digits
    of a BLAS reduction depend on how many threads share it, so the numbers would otherwise depend on ``jobs``.
    """
    import numpy  # noqa: F401  (threadpoolctl limits the libraries already loaded: load every BLAS first)
    import scipy.linalg  # noqa: F401
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    limits = _limit_blas()
    try:
        yield
    finally:
        if limits is not None:
            limits.restore_original_limits()
        torch.set_num_threads(threads)


def _limit_blas():
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # a dependency of scikit-learn, so normally present
        return None
    return threadpool_limits(1)


def _init_worker() -> None:
    """A worker computes on one thread, as :func:`single_threaded` does: the environment variables hold for the
    libraries this fresh interpreter loads later, the limits for those already loaded."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    import numpy  # noqa: F401
    import scipy.linalg  # noqa: F401
    import torch

    torch.set_num_threads(1)
    _limit_blas()


def _run_unit(unit: Unit, cfg: dict, ctx: RunContext, scratch: str):
    """In a worker: make ``unit``'s figures, then its pending pieces; returns ``(records, pieces)``
    (:func:`fedsde.report.pending.computed`)."""
    from fedsde.report.pending import compute, computed

    ctx = replace(ctx, cache={})
    records = [run_figure(fid, cfg, ctx, Path(scratch)) for fid in unit.figures]
    for key in unit.pending:
        compute(ctx, key)
    return records, computed(ctx)
