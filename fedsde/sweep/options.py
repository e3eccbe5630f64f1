"""How a sweep's cells run — in-process, on a LocalCluster or at a scheduler, resumed or not — as one frozen value,
checked once where it is built (:class:`SweepExecution`) and passed whole to :func:`fedsde.sweep.run` and
:func:`fedsde.maps.run_map`.  None of it changes a cell's result."""

from __future__ import annotations

from dataclasses import dataclass, field

from fedsde._validate import positive_int
from fedsde.errors import FedsdeInputError
from fedsde.sweep.spec import MAX_CELLS


@dataclass(frozen=True)
class SweepExecution:
    """Where and how a sweep's cells run (the flags of ``fedsde sweep`` and ``fedsde map`` of the same names).

    Parameters
    ----------
    workers : int
        1 (default): the cells run one after the other in this process; N > 1: a local Dask cluster of N
        single-threaded worker processes (:func:`fedsde.sweep.run`).
    scheduler : str, optional
        Address of a running Dask scheduler (``tcp://HOST:PORT``) to run the cells on instead of ``workers``
        (reached, within a bounded time, when the sweep starts).
    gpu_workers : int, optional
        With ``workers`` > 1: how many of the local workers get the machine's accelerator (default: one per visible
        CUDA device when some cell needs one, at most ``workers``).
    resume : bool
        Continue the sweep stored in the folder: finished cells are kept, missing and failed ones run.
    max_cells : int
        Refuse a grid of more cells than this before anything is built or written (default
        :data:`~fedsde.sweep.spec.MAX_CELLS`).
    progress : bool
        A progress bar over cells on stderr.

    Notes
    -----
    Validated once, here (one line naming the flag: ``--workers=0: must be an integer >= 1``); the folder, the
    cluster and the accelerators are checked where the sweep starts.
    """

    workers: int = 1
    scheduler: str | None = None
    gpu_workers: int | None = None
    resume: bool = False
    max_cells: int = MAX_CELLS
    progress: bool = True
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        workers = positive_int("--workers", self.workers)
        object.__setattr__(self, "workers", workers)
        if self.scheduler is not None and workers != 1:
            raise FedsdeInputError("--workers and --scheduler: give one of them (the cluster at --scheduler has its "
                                   "own workers)")
        gpu = self.gpu_workers
        if gpu is not None:
            gpu = positive_int("--gpu-workers", gpu, minimum=0)
            if self.scheduler is not None:
                raise FedsdeInputError(f"--gpu-workers={gpu}: only with --workers N (the cluster at --scheduler "
                                       "has its own workers)")
            if gpu > workers or (gpu and workers == 1):
                raise FedsdeInputError(f"--gpu-workers={gpu}: must be at most --workers={workers}, and given "
                                       "with --workers N > 1 (one worker runs the cells in this process)")
            object.__setattr__(self, "gpu_workers", gpu)
        object.__setattr__(self, "max_cells", positive_int("--max-cells", self.max_cells))
        object.__setattr__(self, "resume", bool(self.resume))
        object.__setattr__(self, "progress", bool(self.progress))
        object.__setattr__(self, "validated", True)

    @property
    def local_cluster(self) -> bool:
        """Whether the cells run on a LocalCluster this sweep starts (``workers`` > 1, no ``scheduler``)."""
        return self.scheduler is None and self.workers > 1


#: the default, built (and checked) once: cells in-process, a progress bar
DEFAULT_EXECUTION = SweepExecution()
