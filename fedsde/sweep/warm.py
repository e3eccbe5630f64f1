"""Warm Dask workers: a worker preload that imports fedsde's heavy modules once, when the worker starts.

A cell's command imports torch, scipy and fedsde's numerical subpackages the first time it runs in a process
(one to two seconds on a small machine).  In a fresh worker that cost would fall on its first cell, inflating that
cell's ``wall_s`` and leaving the worker idle while the parent already waits for results.  The workers of the
``LocalCluster`` that :func:`fedsde.sweep.run` starts preload this module, so each pays it once while the cluster
starts (the workers in parallel, while the parent reads the spec and opens the sweep folder).  Workers started
elsewhere take it the same way: ``dask worker SCHEDULER --preload fedsde.sweep.warm``.
"""

from __future__ import annotations

import importlib

#: imported by every worker as it starts: what every cell command's handler imports (torch and the layers below the
#: SDEs, about 2 s of CPU); a command that needs more (fedsde.sde, sympy) imports it with its first cell
HEAVY = ("torch", "fedsde.problems", "fedsde.aggregators", "fedsde.sim", "fedsde.exact")


def warm_up() -> None:
    """Import :data:`HEAVY` into this process and pin torch to one thread (what :func:`fedsde.sweep.run_cell`
    does for each cell anyway)."""
    for name in HEAVY:
        importlib.import_module(name)
    import torch

    torch.set_num_threads(1)


def dask_setup(worker=None) -> None:
    """Dask's preload hook: called once in each worker process as it starts."""
    warm_up()
