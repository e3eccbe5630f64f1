"""One BLAS thread for computations made of many small matrix products.

The exact least-squares laws (:mod:`fedsde.exact.least_squares`) apply their maps as thousands of d × d products
(d ≲ a few hundred).  Threads do not speed such products up, and when another process shares the cores, OpenBLAS's
spinning threads make them many times slower: ``fedsde exact`` on a 100-feature CSV took 28–39 s with two BLAS
threads next to one busy process on a 2-core machine, and 7 s with one (``benchmarks/bench_exact_least_squares.py``
measures the computation itself).  One thread also makes their last digits independent of the machine's core count.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import contextmanager
from typing import TypeVar

F = TypeVar("F", bound=Callable)

#: above this dimension the d × d products are large enough for BLAS threads to pay
SMALL_PRODUCTS_D = 256


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
