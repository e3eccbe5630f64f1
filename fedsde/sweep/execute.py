"""Running the cells of a sweep: in-process, on a Dask LocalCluster, or on an existing Dask cluster.

Cells run through :func:`run_cell`, a pure function of (command, flags, seed) with torch pinned to one thread
while it runs, so a cell gives bit-identical results wherever it runs.  Results travel back to the process that
called :func:`run`, which writes each cell's file as soon as it arrives: the sweep folder need not be visible to
the workers.  Cells are produced one at a time and at most :data:`IN_FLIGHT` per worker thread wait on a cluster,
so a large grid is never held in memory; the workers of a LocalCluster start warm (:mod:`fedsde.sweep.warm`).
A cell whose ``--device`` is an accelerator is submitted with a Dask resource requirement (``GPU=1``), so that it
runs only on a worker that declares one (:mod:`fedsde.sweep.resources`); a cluster without such a worker is
refused before any cell runs.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
import time
from collections.abc import Iterator, Mapping
from typing import Any

from fedsde.errors import FedsdeInputError
from fedsde.params import takes_values, value_fields
from fedsde.sweep import resources
from fedsde.sweep.command import command_info
from fedsde.sweep.options import DEFAULT_EXECUTION, SweepExecution
from fedsde.sweep.spec import Cell, SweepSpec, cell_argv, load_spec
from fedsde.sweep.store import Store

#: cells submitted ahead per worker thread of a cluster (enough to keep every worker busy between results)
IN_FLIGHT = 4
#: seconds between looks for finished cells while cells wait for a resource (see resources.Watch)
POLL_S = 0.05


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


def _on_worker(command: str, argv: list[str], commands: Mapping | None = None) -> dict[str, Any]:
    """:func:`run_cell` on a Dask worker; the outcome also names the worker (``worker``: its address,
    ``worker_name``: its name)."""
    from distributed import get_worker

    outcome = run_cell(command, argv, commands)
    worker = get_worker()
    outcome["worker"], outcome["worker_name"] = worker.address, str(worker.name)
    return outcome


def _record(cell: Cell, argv: list[str], outcome: dict[str, Any], need: Mapping | None = None) -> dict[str, Any]:
    rec = {"id": cell.id, "coords": cell.coords, "index": list(cell.index), "seed": cell.seed, "argv": argv,
           **outcome}
    if need:
        rec["resources"] = dict(need)
    result = rec.get("result")
    if isinstance(result, dict) and result.get("warnings"):
        rec["warnings"] = result["warnings"]
    return rec


def _in_process(spec: SweepSpec, todo: Iterator[Cell]) -> Iterator[dict[str, Any]]:
    for cell in todo:
        argv = cell_argv(spec, cell)
        yield _record(cell, argv, run_cell(spec.command, argv, spec.commands))


@contextlib.contextmanager
def _client(workers: int, scheduler: str | None, plan: list[tuple[str, dict]] | None = None):
    """A client of the cluster at ``scheduler``, or of a LocalCluster of ``workers`` single-threaded, warm worker
    processes laid out by ``plan`` (:func:`fedsde.sweep.resources.plan_workers`; default: CPU workers), closed
    at the end."""
    import dask
    from dask.distributed import Client

    if scheduler is not None:
        try:
            client = Client(scheduler, timeout="20s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise FedsdeInputError(f"--scheduler={scheduler!r}: cannot connect ({type(exc).__name__}: "
                                   f"{' '.join(str(exc).split())})") from None
        with client:
            yield client
        return
    plan = plan if plan is not None else [(f"cpu-{k}", {}) for k in range(workers)]
    with dask.config.set({"distributed.nanny.pre-spawn-environ": _worker_environ()}), \
            _local_cluster(plan) as cluster, Client(cluster) as client:
        yield client


def _local_cluster(plan: list[tuple[str, dict]]):
    """A ``SpecCluster`` on this machine (what ``LocalCluster(processes=True)`` starts) whose workers, one thread
    and an equal share of the memory each, differ in their resources and environment as ``plan`` says."""
    from dask.distributed import Nanny, Scheduler, SpecCluster

    # the HTTP servers (health checks) on free ports: a fixed one (8787) taken by another cluster warns, and under
    # --strict a warning fails the sweep
    local = {"host": "127.0.0.1", "protocol": "tcp://", "dashboard": False, "dashboard_address": ":0"}
    worker = {"cls": Nanny, "options": {**local, "nthreads": 1, "memory_limit": 1 / len(plan),
                                        "silence_logs": logging.ERROR, "preload": ["fedsde.sweep.warm"]}}
    workers = {name: {"cls": Nanny, "options": {**worker["options"], **extra}} for name, extra in plan}
    return SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": local}, worker=worker,
                       silence_logs=logging.ERROR)


def _worker_environ() -> dict:
    """Dask's environment for new workers without ``MALLOC_TRIM_THRESHOLD_``.

    Setting it turns off glibc's adaptive mmap threshold, so every mid-sized tensor a cell allocates is mapped and
    unmapped afresh (a ``simulate`` cell with 10⁴ replicates took 40–100 % more CPU time, most of it in the
    kernel); the other variables (one OpenMP/BLAS thread) stay.
    """
    import dask

    environ = dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {}
    return {k: v for k, v in environ.items() if k != "MALLOC_TRIM_THRESHOLD_"}


def _on_dask(spec: SweepSpec, todo: Iterator[Cell], workers: int, scheduler: str | None,
             plan: list | None = None) -> Iterator[dict[str, Any]]:
    from dask.distributed import as_completed

    info = command_info(spec.command, spec.commands)
    entry = {info.name: info.register}  # what a worker needs of the table: this command, pickled by reference
    devices = resources.CellDevices(spec, info)
    needs = devices.needs()
    with _client(workers, scheduler, plan) as client:
        watch = None
        if needs:
            where = f"at --scheduler={scheduler}" if scheduler is not None else f"of --workers={workers}"
            resources.check_cluster(client, needs, where)
            watch = resources.Watch(client, needs)
        pending: dict = {}
        refused: list = []  # records of cells failed without running (their resource is lost)
        done = as_completed()

        def submit(cell: Cell) -> None:
            argv = cell_argv(spec, cell)
            need = devices.resources(cell.coords)
            error = watch.lacking(need) if watch is not None and need else None
            if error is not None:
                refused.append(_record(cell, argv, {"status": "failed", "error": error, "wall_s": 0.0}, need))
                return
            fut = client.submit(_on_worker, spec.command, argv, entry, resources=need or None, pure=False)
            pending[fut] = (cell, argv, need)
            done.add(fut)

        capacity = IN_FLIGHT * max(1, sum(client.nthreads().values()))
        while True:
            while len(pending) < capacity and (cell := next(todo, None)) is not None:
                submit(cell)
                while refused:
                    yield refused.pop()
            if not pending:
                return
            fut = _next_done(done, watch, pending)
            cell, argv, need = pending.pop(fut)
            error = watch.error(fut) if watch is not None else None
            if error is not None:
                outcome = {"status": "failed", "error": error, "wall_s": 0.0}
            else:
                try:
                    outcome = fut.result()
                except Exception as exc:  # lost worker, cancelled task: the cell failed, the others go on
                    outcome = {"status": "failed", "error": f"{type(exc).__name__}: {' '.join(str(exc).split())}"}
            fut.release()
            yield _record(cell, argv, outcome, need)


def _next_done(done, watch: resources.Watch | None, pending: dict):
    """The next finished future; while cells wait on a resource, the watch looks at the workers meanwhile."""
    if watch is None:
        return next(done)
    while True:
        watch.poll(pending)
        if done.has_ready():
            return next(done)
        time.sleep(POLL_S)


@takes_values(types={"execution": SweepExecution}, execution=value_fields(SweepExecution))
def run(spec: Any, out: str | os.PathLike, execution: SweepExecution | None = None, *,
        commands: Mapping | None = None) -> dict[str, Any]:
    """Run every cell of a sweep and store each one in ``out`` as it finishes.

    Parameters
    ----------
    spec
        a spec file (TOML), a dict with the same tables, or a :class:`~fedsde.sweep.SweepSpec`.
    out
        the sweep folder (created; see :mod:`fedsde.sweep.store` for its layout).
    execution
        how the cells run (:class:`~fedsde.sweep.options.SweepExecution`: ``workers``, ``scheduler``,
        ``gpu_workers``, ``resume``, ``max_cells``, ``progress``; default: in this process, with a progress bar),
        checked where it was built.  Each field may be given instead as the keyword of its name, the call of
        earlier releases (:func:`fedsde.params.takes_values`); the fields mean:
    workers
        1 (default): run the cells one after the other in this process; N > 1: a local Dask cluster of N
        single-threaded worker processes, closed at the end (the "LocalCluster": a ``dask.distributed.SpecCluster``
        with the workers ``LocalCluster(processes=True)`` starts, except that they may differ in resources).
    scheduler
        address of a running Dask scheduler (``tcp://HOST:PORT``) to run the cells on instead; checked before
        anything is written, within a bounded time (:func:`fedsde.sweep.reach.check_scheduler`: an address where
        no Dask scheduler answers is refused in one line).  A cell whose
        ``--device`` is ``cuda``/``cuda:K`` (``mps``) runs only on workers that declare the Dask resource ``GPU``
        (``MPS``); a cluster where none does is refused before any cell runs (see :mod:`fedsde.sweep.resources`).
    gpu_workers
        with ``workers`` > 1: how many of the LocalCluster's workers get the machine's accelerator (each declares
        ``GPU=1``, its own GPU first in ``CUDA_VISIBLE_DEVICES``; several share the GPUs in turn when there are
        more workers than GPUs); the others are CPU workers.  Default: one per visible CUDA device, at most
        ``workers``, when some cell's device needs one, else none.
    resume
        continue the sweep stored in ``out``: cells finished there are skipped, missing and failed ones run
        (a failed record is replaced by the new outcome).  Refused when the spec differs from the stored one.
        The workers (and the accelerators the cells name) are needed only when a cell is left to run: a sweep of
        ``cuda`` cells that all finished resumes on a machine without a GPU.
        Without ``resume``, a folder that already holds a sweep is refused (unless it holds this spec and no
        finished cell yet).
    max_cells
        refuse a grid of more cells than this (default :data:`~fedsde.sweep.spec.MAX_CELLS`), counted from the
        axis lengths before anything is built or written.
    progress
        show a progress bar over cells (on stderr).
    commands
        the commands a cell can run: name → ``register(subparsers)`` (see :mod:`fedsde.sweep.command`); default
        the ``fedsde`` command line's (:func:`fedsde.cli.cell_commands`).

    Returns
    -------
    dict
        ``cells`` (in the grid), ``done`` and ``failed`` (cells run now), ``skipped`` (finished cells found in
        ``out`` and not rerun), ``warned`` (cells run now whose result carries ``warnings``), ``wall_s``,
        ``out``, ``workers``, ``scheduler``, ``gpu_workers`` (workers of the LocalCluster that declare an
        accelerator; ``None`` on a cluster at ``scheduler``), and ``failures``: up to 20 ``{"coords", "error"}`` of
        this run.  Each stored cell run on Dask names its ``worker`` (address) and ``worker_name``, and the
        ``resources`` it needed.
    """
    t0 = time.perf_counter()
    execution = execution or DEFAULT_EXECUTION
    workers, scheduler, gpu_workers = execution.workers, execution.scheduler, execution.gpu_workers
    resume, progress = execution.resume, execution.progress
    spec = load_spec(spec, commands=commands, max_cells=execution.max_cells)
    plan = None
    local_cluster = execution.local_cluster

    def plan_cluster() -> list:
        return resources.plan_workers(workers, gpu_workers,
                                      resources.CellDevices(spec, command_info(spec.command, spec.commands)).needs())

    if local_cluster and not resume:  # refused here, before the sweep folder or any worker is made
        plan = plan_cluster()
    if scheduler is not None:  # a bounded handshake, before the sweep folder is made (fedsde.sweep.reach)
        from fedsde.sweep.reach import check_scheduler

        check_scheduler(scheduler)
    from fedsde._progress import progress_bar

    summary: dict[str, Any] = {"cells": spec.n_cells, "done": 0, "skipped": 0, "failed": 0, "warned": 0,
                               "wall_s": 0.0, "out": str(out), "workers": workers, "scheduler": scheduler,
                               "gpu_workers": None, "failures": []}
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
            if local_cluster and plan is None:  # resumed: the workers are needed (and checked) only for cells left
                plan = plan_cluster()
            todo = itertools.chain([first], todo)
            local = scheduler is None and workers == 1
            records = _in_process(spec, todo) if local else _on_dask(spec, todo, workers, scheduler, plan)
            left = max(1, spec.n_cells - len(finished))
            with progress_bar(left, "sweep", unit="cell", enabled=progress) as bar:
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
    if scheduler is None:  # workers of the LocalCluster that declare an accelerator (none started: 0)
        summary["gpu_workers"] = sum(bool(extra.get("resources")) for _, extra in plan or ())
    summary["wall_s"] = time.perf_counter() - t0
    return summary
