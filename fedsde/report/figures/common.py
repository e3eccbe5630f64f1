"""Plot styling and small helpers shared by the figure modules."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np

from fedsde._stats import loglog_slope  # noqa: F401


def subplots(ncols: int = 1, nrows: int = 1, width: float = 5.6, height: float = 4.3, **kw):
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), **kw)
    return fig, axes


def colors(n: int):
    return plt.cm.viridis(np.linspace(0.0, 0.85, n))


def integer_log_ticks(ax, values, axis: str = "x") -> None:
    """Label a log axis with the plotted integers (1, 2, 5, 10, …) instead of powers of ten."""
    vals = sorted(set(int(v) for v in values))
    target = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xticks if axis == "x" else ax.set_yticks)(vals, [str(v) for v in vals])
    target.set_minor_locator(matplotlib.ticker.NullLocator())


def fmt(x: float) -> str:
    return f"{x:.3g}"


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run a block on one torch thread and restore the setting after.

    The figures' batched tensors are small (replicates × clients ≤ a few hundred rows): intra-op threads only add
    overhead there, and on a busy machine contention multiplies the wall time.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
