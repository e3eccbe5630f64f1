"""Running the cells of a sweep: in-process, on a Dask LocalCluster, or on an existing Dask cluster.

Cells run through :func:`run_cell`, a pure function of (command, flags, seed) with torch pinned to one thread
while it runs, so a cell gives bit-identical results wherever it runs.  Results travel back to the process that
called :func:`run`, which writes each cell's file as soon as it arrives: the sweep folder need not be visible to
the workers.  Cells are produced one at a time and at most :data:`IN_FLIGHT` per worker thread wait on a cluster,
so a large grid is never held in memory; the workers of a LocalCluster start warm (:mod:`fedsde.sweep.warm`).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

from fedsde.errors import FedsdeInputError
from fedsde.sweep.command import command_info
from fedsde.sweep.spec import MAX_CELLS, Cell, SweepSpec, cell_argv, load_spec
from fedsde.sweep.store import Store

#: cells submitted ahead per worker thread of a cluster (enough to keep every worker busy between results)
IN_FLIGHT = 4


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    if before != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if before != n:
            torch.set_num_threads(before)


def run_cell(command: str, argv: list[str], commands: Mapping | None = None) -> dict[str, Any]:
    """Run one cell (``fedsde COMMAND argv --json``, COMMAND from the table ``commands``, default the command
    line's) on one torch thread; never raises for a failing cell."""
    from fedsde.sweep.command import CELL_LOCK, run_command

    with CELL_LOCK, _torch_threads(1):
        outcome = run_command(command, argv, commands)
    outcome["host"] = socket.gethostname()
    outcome["pid"] = os.getpid()
    return outcome


def _record(cell: Cell, argv: list[str], outcome: dict[str, Any]) -> dict[str, Any]:
    rec = {"id": cell.id, "coords": cell.coords, "index": list(cell.index), "seed": cell.seed, "argv": argv,
           **outcome}
    result = rec.get("result")
    if isinstance(result, dict) and result.get("warnings"):
        rec["warnings"] = result["warnings"]
    return rec


def _in_process(spec: SweepSpec, todo: Iterator[Cell]) -> Iterator[dict[str, Any]]:
    for cell in todo:
        argv = cell_argv(spec, cell)
        yield _record(cell, argv, run_cell(spec.command, argv, spec.commands))


@contextlib.contextmanager
def _client(workers: int, scheduler: str | None):
    import dask
    from dask.distributed import Client, LocalCluster

    if scheduler is not None:
        try:
            client = Client(scheduler, timeout="20s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise FedsdeInputError(f"--scheduler={scheduler!r}: cannot connect ({type(exc).__name__}: "
                                   f"{' '.join(str(exc).split())})") from None
        with client:
            yield client
        return
    with dask.config.set({"distributed.nanny.pre-spawn-environ": _worker_environ()}), \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                         silence_logs=logging.ERROR, preload=["fedsde.sweep.warm"]) as cluster, \
            Client(cluster) as client:
        yield client


def _worker_environ() -> dict:
    """Dask's environment for new workers without ``MALLOC_TRIM_THRESHOLD_``.

    Setting it turns off glibc's adaptive mmap threshold, so every mid-sized tensor a cell allocates is mapped and
    unmapped afresh (a ``simulate`` cell with 10⁴ replicates took 40–100 % more CPU time, most of it in the
    kernel); the other variables (one OpenMP/BLAS thread) stay.
    """
    import dask

    environ = dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {}
    return {k: v for k, v in environ.items() if k != "MALLOC_TRIM_THRESHOLD_"}


def _on_dask(spec: SweepSpec, todo: Iterator[Cell], workers: int, scheduler: str | None) -> Iterator[dict[str, Any]]:
    from dask.distributed import as_completed

    info = command_info(spec.command, spec.commands)
    entry = {info.name: info.register}  # what a worker needs of the table: this command, pickled by reference
    with _client(workers, scheduler) as client:
        pending: dict = {}
        done = as_completed()

        def submit(cell: Cell) -> None:
            argv = cell_argv(spec, cell)
            fut = client.submit(run_cell, spec.command, argv, entry, pure=False)
            pending[fut] = (cell, argv)
            done.add(fut)

        threads = max(1, sum(client.nthreads().values()))
        for cell in itertools.islice(todo, IN_FLIGHT * threads):
            submit(cell)
        for fut in done:
            cell, argv = pending.pop(fut)
            try:
                outcome = fut.result()
            except Exception as exc:  # lost worker, cancelled task: the cell failed, the others go on
                outcome = {"status": "failed", "error": f"{type(exc).__name__}: {' '.join(str(exc).split())}"}
            fut.release()
            nxt = next(todo, None)
            if nxt is not None:
                submit(nxt)
            yield _record(cell, argv, outcome)


def run(spec: Any, out: str | os.PathLike, *, workers: int = 1, scheduler: str | None = None,
        resume: bool = False, progress: bool = True, commands: Mapping | None = None,
        max_cells: int = MAX_CELLS) -> dict[str, Any]:
    """Run every cell of a sweep and store each one in ``out`` as it finishes.

    Parameters
    ----------
    spec
        a spec file (TOML), a dict with the same tables, or a :class:`~fedsde.sweep.SweepSpec`.
    out
        the sweep folder (created; see :mod:`fedsde.sweep.store` for its layout).
    workers
        1 (default): run the cells one after the other in this process; N > 1: a ``dask.distributed.LocalCluster``
        of N single-threaded worker processes, closed at the end.
    scheduler
        address of a running Dask scheduler (``tcp://HOST:PORT``) to run the cells on instead.
    resume
        continue the sweep stored in ``out``: cells finished there are skipped, missing and failed ones run
        (a failed record is replaced by the new outcome).  Refused when the spec differs from the stored one.
        Without ``resume``, a folder that already holds a sweep is refused (unless it holds this spec and no
        finished cell yet).
    progress
        show a progress bar over cells (on stderr).
    commands
        the commands a cell can run: name → ``register(subparsers)`` (see :mod:`fedsde.sweep.command`); default
        the ``fedsde`` command line's (:func:`fedsde.cli.cell_commands`).
    max_cells
        refuse a grid of more cells than this (default :data:`~fedsde.sweep.spec.MAX_CELLS`), counted from the
        axis lengths before anything is built or written.

    Returns
    -------
    dict
        ``cells`` (in the grid), ``done`` and ``failed`` (cells run now), ``skipped`` (finished cells found in
        ``out`` and not rerun), ``warned`` (cells run now whose result carries ``warnings``), ``wall_s``,
        ``out``, ``workers``, ``scheduler``, and ``failures``: up to 20 ``{"coords", "error"}`` of this run.
    """
    t0 = time.perf_counter()
    spec = load_spec(spec, commands=commands, max_cells=max_cells)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise FedsdeInputError(f"--workers={workers!r}: must be an integer >= 1")
    if scheduler is not None and workers != 1:
        raise FedsdeInputError("--workers and --scheduler: give one of them (the cluster at --scheduler has its "
                               "own workers)")
    from tqdm.auto import tqdm

    summary: dict[str, Any] = {"cells": spec.n_cells, "done": 0, "skipped": 0, "failed": 0, "warned": 0,
                               "wall_s": 0.0, "out": str(out), "workers": workers, "scheduler": scheduler,
                               "failures": []}
    with Store(out, spec, resume=resume) as store:
        finished = {k for k, rec in store.finished().items() if rec.get("status") == "done"}
        skipped = [0]

        def unfinished() -> Iterator[Cell]:  # streamed: a grid is never held in memory
            for cell in spec.cells():
                if cell.id in finished:
                    skipped[0] += 1
                else:
                    yield cell

        todo = unfinished()
        first = next(todo, None)
        if first is not None:
            todo = itertools.chain([first], todo)
            local = scheduler is None and workers == 1
            records = _in_process(spec, todo) if local else _on_dask(spec, todo, workers, scheduler)
            left = max(1, spec.n_cells - len(finished))
            with tqdm(total=left, desc="sweep", unit="cell", disable=not progress, file=sys.stderr) as bar:
                for rec in records:
                    store.write(rec)
                    if rec["status"] == "done":
                        summary["done"] += 1
                    else:
                        summary["failed"] += 1
                        if len(summary["failures"]) < 20:
                            summary["failures"].append({"coords": rec["coords"], "error": rec["error"]})
                    summary["warned"] += bool(rec.get("warnings"))
                    bar.update()
        summary["skipped"] = skipped[0]
    summary["wall_s"] = time.perf_counter() - t0
    return summary
