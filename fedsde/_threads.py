"""The thread policy of a command, and one BLAS thread for computations made of many small matrix products.

**The policy.**  A command computes on ``--threads N`` threads (:func:`thread_policy`, once at its start): torch's
intra-op threads, its inter-op threads where torch still allows setting them, and the BLAS libraries numpy and scipy
loaded (threadpoolctl).  The default (:func:`default_threads`) is the CPUs this process may use
(``os.sched_getaffinity``, a cgroup's ``cpu.max`` quota, ``OMP_NUM_THREADS`` when set), at most
:data:`MAX_DEFAULT_THREADS`: a command on a shared machine no longer takes every core because torch counts them.
Work spread over workers divides the policy: the simulator's chunk threads run one torch thread each and there are
at most N of them (:mod:`fedsde.sim.workers`); sweep cells and report workers run on one thread each.

The exact least-squares laws (:mod:`fedsde.exact.least_squares`) apply their maps as thousands of d × d products
(d ≲ a few hundred).  Threads do not speed such products up, and when another process shares the cores, OpenBLAS's
spinning threads make them many times slower: ``fedsde exact`` on a 100-feature CSV took 28–39 s with two BLAS
threads next to one busy process on a 2-core machine, and 7 s with one (``benchmarks/bench_exact_least_squares.py``
measures the computation itself).  One thread also makes their last digits independent of the machine's core count.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from contextlib import contextmanager
from typing import TypeVar

F = TypeVar("F", bound=Callable)

#: above this dimension the d × d products are large enough for BLAS threads to pay
SMALL_PRODUCTS_D = 256
#: the most threads a command uses unless told (``--threads``): beyond it a run's kernels rarely gain, and the
#: other users of a shared machine lose
MAX_DEFAULT_THREADS = 16
#: the environment variables that size the OpenMP and BLAS thread pools of libraries loaded later
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_APPLIED: int | None = None  # the policy of the command running in this process
_OMP_AT_START = os.environ.get("OMP_NUM_THREADS")  # the user's, before any policy was applied


def available_cpus() -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup's ``cpu.max`` quota (rounded up)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as fh:
            quota, period = fh.read().split()[:2]
        if quota != "max":
            n = min(n, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return max(1, n)


def default_threads() -> int:
    """The threads a command uses without ``--threads``: :func:`available_cpus`, at most ``OMP_NUM_THREADS`` when
    that is set, at most :data:`MAX_DEFAULT_THREADS`, and inside a Python process that already runs torch (a command
    called from Python) at most the threads torch was given there."""
    n = min(available_cpus(), MAX_DEFAULT_THREADS)
    torch = sys.modules.get("torch")
    if torch is not None:
        n = min(n, int(torch.get_num_threads()))
    try:
        omp = int(_OMP_AT_START or "0")
    except ValueError:
        omp = 0
    return max(1, min(n, omp) if omp > 0 else n)


@contextmanager
def thread_policy(threads: int | None = None):
    """Apply the thread policy for a command's run (``None``: :func:`default_threads`), yielding it; the settings
    before are restored on exit (a command run in-process leaves its caller's threads as they were).

    torch's intra-op threads (set now when torch is loaded, else through ``OMP_NUM_THREADS``, which it reads when it
    loads), its inter-op threads where torch still allows it (before any inter-op work), and the BLAS pools already
    loaded (threadpoolctl; those loaded later read the environment variables).
    """
    global _APPLIED
    n = default_threads() if threads is None else int(threads)
    env = {var: os.environ.get(var) for var in THREAD_ENV}
    before, previous = None, _APPLIED
    for var in THREAD_ENV:
        os.environ[var] = str(n)
    torch = sys.modules.get("torch")
    if torch is not None:
        before = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            torch.set_num_interop_threads(n)
        except RuntimeError:  # inter-op work has started (or it was set before): torch keeps its pool
            pass
    limits = None
    if "numpy" in sys.modules:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # a dependency of scikit-learn, so normally present
            threadpool_limits = None
        if threadpool_limits is not None:
            limits = threadpool_limits(n)
    _APPLIED = n
    try:
        yield n
    finally:
        _APPLIED = previous
        if limits is not None:
            limits.restore_original_limits()
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(before if before is not None else n)
        for var, value in env.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def applied_threads() -> int:
    """The threads the running command computes on: torch's count where torch is loaded (inside a sweep cell or a
    worker, the one thread it is pinned to), else the policy applied (:func:`thread_policy`) or the default."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return int(torch.get_num_threads())
    return _APPLIED if _APPLIED is not None else default_threads()


@contextmanager
def one_blas_thread(active: bool = True):
    """Limit the BLAS libraries already loaded (numpy's, scipy's) to one thread inside the block, then restore."""
    limits = None
    if active:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # a dependency of scikit-learn, so normally present
            threadpool_limits = None
        if threadpool_limits is not None:
            limits = threadpool_limits(1, user_api="blas")
    try:
        yield
    finally:
        if limits is not None:
            limits.restore_original_limits()


def small_products(fn: F) -> F:
    """Run ``fn(problem, ...)`` on one BLAS thread when ``problem.d <= SMALL_PRODUCTS_D``."""

    @functools.wraps(fn)
    def wrapper(problem, *args, **kwargs):
        d = getattr(problem, "d", None)
        with one_blas_thread(isinstance(d, int) and d <= SMALL_PRODUCTS_D):
            return fn(problem, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
