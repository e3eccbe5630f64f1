"""Dask worker resources for sweep cells: a cell that asks for an accelerator runs only on a worker that has one.

**Which cells.** A cell's device is the value of its command's ``--device`` flag: from ``[base]``, from an axis,
or else the flag's default (:class:`CellDevices`).  The device's torch type names the Dask resource the cell needs,
one unit of it (:data:`DEVICE_RESOURCES`):

* ``cuda``, ``cuda:K`` → ``GPU`` (the name hand-started workers declare with ``--resources "GPU=1"``);
* ``mps`` → ``MPS``;
* ``cpu`` and anything else → none: the cell may run on any worker (a device torch does not know fails in the
  cell with the command's one-line error, wherever it runs).

Cells are submitted with ``resources={"GPU": 1}``, so the scheduler places them only on workers that declare at
least one ``GPU``; such a worker runs one cell at a time (one thread), and may run CPU cells too.

**Multi-GPU machines.** One worker per GPU, each declaring ``GPU=1``, with ``CUDA_VISIBLE_DEVICES`` rotated so that
its own GPU comes first (dask-cuda's ``LocalCUDACluster`` does the same): in a worker, ``cuda`` (= ``cuda:0``) is
that worker's GPU, and ``cuda:K`` the K-th one after it.  A spec meant for a cluster therefore says
``device = "cuda"`` and lets the scheduler spread its cells over the GPUs; ``cuda:K`` pins the K-th visible GPU of
whichever worker runs the cell (another worker's GPU when K >= 1), which is meaningful in-process only.

**The local cluster.** :func:`plan_workers` lays out the ``LocalCluster`` of ``--workers N``: ``gpu_workers`` of
them (default: one per visible CUDA device, at most N, when some cell needs a GPU; one on a machine with MPS)
declare the resource, the rest are CPU workers.  **A cluster without the resource** is refused before any cell
runs (:func:`check_cluster`); a resource that disappears while cells wait for it (its last worker lost) fails
those cells after :data:`GRACE_S` seconds with a one-line error, instead of leaving them queued forever
(:class:`Watch`).
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from fedsde.errors import FedsdeInputError

#: the Dask resource a cell needs (one unit), by the torch type of its device (the part before ':')
DEVICE_RESOURCES: dict[str, str] = {"cuda": "GPU", "mps": "MPS"}
#: seconds a resource may be missing from every worker while cells wait for it, before those cells fail
GRACE_S = 60.0
#: seconds between two looks at the cluster's workers while cells wait for a resource
CHECK_S = 5.0


def device_resources(device: Any) -> dict[str, int]:
    """The Dask resources a cell on ``device`` needs: ``{"GPU": 1}`` for ``cuda``/``cuda:K``, ``{"MPS": 1}`` for
    ``mps``, ``{}`` for ``cpu``, ``None`` (the flag's default where it has none) and anything else."""
    if device is None:
        return {}
    name = DEVICE_RESOURCES.get(str(device).split(":", 1)[0])
    return {name: 1} if name else {}


class CellDevices:
    """The device each cell of ``spec`` names, read from the spec's options for the command's ``--device`` flag.

    Parameters
    ----------
    spec
        a validated :class:`~fedsde.sweep.SweepSpec`.
    info
        its command (:func:`fedsde.sweep.command.command_info`): the option whose destination is ``device``, under
        any of its long flags; a command without one runs every cell without resources.
    """

    def __init__(self, spec, info):
        action = next((a for a in info.options.values() if a.dest == "device" and a.option_strings), None)
        self.keys = tuple(k for k, a in info.options.items() if a is action) if action is not None else ()
        self.default = None if action is None else action.default
        self.spec = spec

    def device(self, coords: Mapping[str, Any]) -> Any:
        """The device of the cell at ``coords`` (its value in ``[base]`` or an axis, else the flag's default)."""
        for key in self.keys:
            if key in coords:
                return coords[key]
            if key in self.spec.base:
                return self.spec.base[key]
        return self.default

    def resources(self, coords: Mapping[str, Any]) -> dict[str, int]:
        """What the cell at ``coords`` needs of a worker (:func:`device_resources` of its device)."""
        return device_resources(self.device(coords)) if self.keys else {}

    def needs(self) -> dict[str, str]:
        """Every resource some cell needs → where the first device that needs it is named (``grid.device='cuda'``),
        from the spec's values alone (no cell is built)."""
        spec, named = self.spec, []
        for key in self.keys:
            if key in spec.base:
                named.append((f"base.{key}", spec.base[key]))
            named += [(f"grid.{key}", v) for v in spec.grid.get(key, ())]
            for dim, group in spec.zips.items():
                named += [(f"{'zip' if dim == 'zip' else 'zip.' + dim}.{key}", v) for v in group.get(key, ())]
        if self.keys and not named:
            named.append((f"--{self.keys[0].replace('_', '-')} (default)", self.default))
        out: dict[str, str] = {}
        for where, device in named:
            for name in device_resources(device):
                out.setdefault(name, f"{where}={device!r}")
        return out


def visible_accelerator() -> tuple[str, list[str]] | None:
    """The accelerator of this machine as a worker resource: ``("GPU", ids)`` with the CUDA devices torch sees
    (their ``CUDA_VISIBLE_DEVICES`` entries, or 0..G-1), ``("MPS", [""])``, or ``None``."""
    import torch

    count = torch.cuda.device_count()
    if count:
        env = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        ids = [s.strip() for s in env.split(",") if s.strip()] or [str(i) for i in range(count)]
        return "GPU", ids[:count]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "MPS", [""]
    return None


def plan_workers(workers: int, gpu_workers: int | None, needs: Mapping[str, str]) -> list[tuple[str, dict]]:
    """The workers of the ``LocalCluster`` of ``--workers N``: ``(name, extra Nanny options)`` each.

    ``gpu_workers`` of them (``None``: one per visible CUDA device, at most ``workers``, when ``needs`` holds a
    resource; else none) declare the machine's accelerator (:func:`visible_accelerator`) as one unit of ``GPU``
    (``CUDA_VISIBLE_DEVICES`` rotated so that worker k's first device is GPU k mod G) or ``MPS``; they are named
    ``gpu-0``, … (``mps-0``), the others ``cpu-0``, ….  Refuses (FedsdeInputError) ``gpu_workers > 0`` on a
    machine without an accelerator, and a plan in which no worker declares a resource that ``needs`` names.
    """
    accel, given = None, gpu_workers
    if gpu_workers is None:
        accel = visible_accelerator() if needs else None
        gpu_workers = 0 if accel is None else min(workers, len(accel[1]))
    elif gpu_workers:
        accel = visible_accelerator()
        if accel is None:
            raise FedsdeInputError(f"--gpu-workers={gpu_workers}: no CUDA or MPS device is visible here "
                                   "(torch.cuda.device_count() is 0)")
    plan = []
    for k in range(gpu_workers):
        name, ids = accel
        options: dict[str, Any] = {"resources": {name: 1}}
        if name == "GPU":
            j = k % len(ids)
            options["env"] = {"CUDA_VISIBLE_DEVICES": ",".join(ids[j:] + ids[:j])}
        plan.append((f"{name.lower()}-{k}", options))
    plan += [(f"cpu-{k}", {}) for k in range(workers - gpu_workers)]
    for name, where in needs.items():
        if gpu_workers and accel[0] == name:
            continue
        if given == 0:
            why = "--gpu-workers=0 starts none"
        else:
            why = "no CUDA device is visible here" if name == "GPU" else f"this machine has no {name} device"
        raise FedsdeInputError(f"{where}: its cells need a worker that declares the Dask resource {name}, and none "
                               f"of the --workers={workers} workers does ({why}); run in-process (--workers 1) or "
                               "on a cluster with such workers (--scheduler, see docs/sweeps.md)")
    return plan


def _workers_info(client) -> dict[str, dict]:
    """Every worker of the cluster as ``scheduler_info()`` describes it (all of them: distributed 2025.4–2026.6
    listed five unless asked for ``n_workers=-1``)."""
    params = inspect.signature(client.scheduler_info).parameters
    info = client.scheduler_info(n_workers=-1) if "n_workers" in params else client.scheduler_info()
    return dict(info.get("workers", {}))


def declared_resources(client) -> tuple[int, dict[str, int]]:
    """The number of workers of the cluster, and per resource the number of workers that declare at least one
    unit of it (what a cell needs)."""
    workers = _workers_info(client)
    counts: dict[str, int] = {}
    for w in workers.values():
        for name, quantity in (w.get("resources") or {}).items():
            if quantity >= 1:
                counts[name] = counts.get(name, 0) + 1
    return len(workers), counts


def check_cluster(client, needs: Mapping[str, str], where: str) -> None:
    """Refuse (FedsdeInputError, one line) a cluster where no worker declares a resource that ``needs`` names."""
    n, counts = declared_resources(client)
    for name, named in needs.items():
        if not counts.get(name):
            raise FedsdeInputError(
                f"{named}: its cells need a worker that declares the Dask resource {name}, and none of the {n} "
                f"workers {where} does; start such workers with `dask worker ADDRESS --nthreads 1 --resources "
                f"\"{name}=1\"` (one per device, see docs/sweeps.md), or run in-process")


class Watch:
    """Cells waiting for a resource that no worker declares any more: after :data:`GRACE_S` seconds they fail.

    :meth:`poll` looks at the cluster's workers at most every :data:`CHECK_S` seconds; a resource missing from
    every worker for longer than :data:`GRACE_S` is *lost*: the futures of the cells that need it are cancelled and
    their error (:meth:`error`) kept for their records, and further cells that need it fail without being
    submitted (:meth:`lacking`) until a worker declares it again.
    """

    def __init__(self, client, needs: Iterable[str]):
        self.client = client
        self.needs = tuple(needs)
        self.missing_since: dict[str, float] = {}
        self.checked = -float("inf")
        self.errors: dict[str, str] = {}  # key of a cancelled future → its error

    def _lost(self, name: str, now: float) -> bool:
        since = self.missing_since.get(name)
        return since is not None and now - since >= GRACE_S

    def _message(self, name: str) -> str:
        return (f"no worker of the cluster has declared the Dask resource {name} that this cell's --device needs "
                f"for {GRACE_S:.0f} s (its workers were lost); start one (`dask worker ADDRESS --resources "
                f"\"{name}=1\"`) and rerun with --resume")

    def lacking(self, need: Mapping[str, int]) -> str | None:
        """The error of a cell that needs a lost resource, or ``None`` (the cell can be submitted)."""
        now = time.monotonic()
        return next((self._message(name) for name in need if self._lost(name, now)), None)

    def poll(self, pending: Mapping[Any, tuple]) -> None:
        """Look at the workers (at most every :data:`CHECK_S` s) and cancel the pending cells whose resource is lost
        (``pending``: future → (cell, argv, resources needed))."""
        now = time.monotonic()
        if now - self.checked < CHECK_S:
            return
        self.checked = now
        _, counts = declared_resources(self.client)
        for name in self.needs:
            if counts.get(name):
                self.missing_since.pop(name, None)
            else:
                self.missing_since.setdefault(name, now)
        lost = {name for name in self.needs if self._lost(name, now)}
        if not lost:
            return
        for fut, (_, _, need) in pending.items():
            name = next((n for n in need if n in lost), None)
            if name is not None and fut.key not in self.errors and not fut.done():
                self.errors[fut.key] = self._message(name)
                fut.cancel()

    def error(self, fut) -> str | None:
        """The error of a future this watch cancelled (once), else ``None``."""
        return self.errors.pop(fut.key, None)
