"""Moments over replicates accumulated chunk by chunk, and the blow-up watch of a run (internal).

:class:`StreamingMoments` keeps, for every recorded time, the sums ``S1 = Σ_r (w_r − c)`` and
``S2 = Σ_r (w_r − c)(w_r − c)ᵀ`` with a shift ``c`` (the mean of the first replicate block, which every chunking
sees first), so memory does not grow with the number of replicates ``R``.  The sums are formed per replicate block
of fixed size (the same reduction whatever the chunk) and added to the running total in the global block order by
a sequential ``cumsum``: the moments are **bit-identical however the replicates are chunked**.  Mean and covariance
(ddof = 1) follow as ``c + S1/R`` and ``(S2 − S1 S1ᵀ/R)/(R − 1)``; the shift keeps the cancellation small.

:class:`BlowUpWatch` compares the largest ``|w|`` of every round with a scale of the problem (start point,
optimum, client optima, noise) and issues one :class:`fedsde.errors.DivergenceWarning` per run when it is exceeded
by :data:`BLOWUP_FACTOR`: growth far beyond anything the problem explains.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from fedsde._memory import memory_fits
from fedsde.errors import DivergenceWarning

#: a run is "blowing up" when max |w| exceeds this many times the problem's scale (see problem_scale)
BLOWUP_FACTOR = 1e6


class StreamingMoments:
    """Running mean and covariance over replicates at ``T`` recorded times (see the module docstring).

    Parameters
    ----------
    T, d : int
        Recorded times and dimension.
    block : int
        Replicates per block: chunks start on block boundaries and every block is reduced on its own.
    """

    def __init__(self, T: int, d: int, block: int):
        self.block = int(block)
        self.shift = np.zeros((T, d))
        self.s1 = np.zeros((T, d))
        self.s2 = np.zeros((T, d, d))
        self.count = np.zeros(T, np.int64)

    def add(self, t: int, start: int, w: torch.Tensor | np.ndarray) -> None:
        """Add the rows ``[start, start + len(w))`` (``start`` a multiple of the block) at recorded time ``t``."""
        x = w.detach().to("cpu", torch.float64).numpy() if hasattr(w, "detach") else np.asarray(w, np.float64)
        R, d = x.shape
        if start == 0:
            self.shift[t] = x[: min(self.block, R)].mean(0)
        nb = -(-R // self.block)
        y = np.zeros((nb * self.block, d))
        np.subtract(x, self.shift[t], out=y[:R])
        y = y.reshape(nb, self.block, d)
        b1 = y.sum(1)  # (nb, d): one reduction per block, the same whatever nb
        b2 = np.einsum("nbi,nbj->nij", y, y)  # (nb, d, d)
        self.s1[t] = np.cumsum(np.concatenate([self.s1[t][None], b1]), axis=0)[-1]
        self.s2[t] = np.cumsum(np.concatenate([self.s2[t][None], b2]), axis=0)[-1]
        self.count[t] += R

    def mean(self) -> np.ndarray:
        """Mean over replicates, shape (T, d)."""
        n = np.maximum(self.count, 1)[:, None]
        return self.shift + self.s1 / n

    def cov(self) -> np.ndarray:
        """Covariance over replicates (ddof = 1), shape (T, d, d)."""
        n = np.maximum(self.count, 1)[:, None, None]
        outer = np.einsum("ti,tj->tij", self.s1, self.s1)
        return (self.s2 - outer / n) / np.maximum(n - 1, 1)


def problem_scale(problem, w_start: np.ndarray) -> float:
    """``1 + max|w0| + max|w*| + max|a_k| + max √Σ_k,ii`` (the terms a problem has), the yardstick of a blow-up."""
    parts = [1.0, float(np.max(np.abs(w_start), initial=0.0))]
    for name in ("optimum", "a", "Sigma"):
        if name == "optimum" and hasattr(problem, "padded") and "optimum" not in getattr(problem, "_cache", {}):
            continue  # a data problem's w* is a full solve (seconds): used only once computed
        try:
            v = np.asarray(getattr(problem, name), dtype=np.float64)
        except Exception:  # an attribute a problem lacks or cannot compute (singular Hessian)
            continue
        if name == "Sigma":
            v = np.sqrt(np.abs(np.diagonal(v, axis1=-2, axis2=-1)))
        if v.size and np.all(np.isfinite(v)):
            parts.append(float(np.max(np.abs(v))))
    return float(sum(parts))


class BlowUpWatch:
    """One :class:`DivergenceWarning` per run when ``max |w|`` exceeds ``BLOWUP_FACTOR × scale``."""

    def __init__(self, scale: float, what: str, factor: float = BLOWUP_FACTOR):
        self.scale = float(scale)
        self.limit = factor * self.scale
        self.what = what
        self.warned = False

    def check(self, biggest: float, where: str, stacklevel: int = 3) -> None:
        """``biggest`` = max |w| now (finite); ``where`` names the round/time and replicate."""
        if not self.warned and biggest > self.limit and math.isfinite(biggest):
            self.warned = True
            warnings.warn(
                f"{self.what} is blowing up: max |w| = {biggest:.3g} at {where}, more than "
                f"{self.limit / self.scale:.0e} × the problem's scale {self.scale:.3g} (start, optimum, client optima, "
                "noise); the settings probably diverge — reduce eta or server_lr",
                DivergenceWarning, stacklevel=stacklevel,
            )

    def scan(self, w: torch.Tensor, where: str, *, first: int = 0, noun: str = "replicate") -> bool:
        """Check the weights ``w`` (R, d) after a step with one reduction.

        Returns False when an entry is NaN/inf (the caller raises :class:`~fedsde.errors.SimulationDivergedError`
        naming the place); otherwise warns once when ``max |w|`` exceeds the limit, at ``where`` and the first such
        row (``noun first + row``), and returns True.
        """
        biggest = float(w.abs().amax()) if w.numel() else 0.0  # NaN propagates: one reduction for both checks
        if not math.isfinite(biggest):
            return False
        if biggest > self.limit and not self.warned:
            r = int(torch.nonzero(w.abs().amax(-1) > self.limit)[0, 0])
            self.check(biggest, f"{where} ({noun} {first + r})", stacklevel=4)
        return True


def plan_chunks(what: str, R: int, chunk_size: int | None, block: int, per_rep: int, stored: int, available: int,
                hint: str) -> int | None:
    """How many replicates to run at once so that the run fits in ``available`` bytes.

    ``stored`` bytes are kept for the whole run, ``per_rep`` bytes per replicate of a chunk.  A run that cannot fit
    even one block (or the given ``chunk_size``) raises a one-line :class:`~fedsde.errors.FedsdeInputError` with the
    estimate.  Without ``chunk_size``: ``None`` (one chunk) when everything fits in a working set of at most 512 MiB
    and half of what is left, else the largest block multiple that does.
    """
    memory_fits(what, stored + per_rep * min(R, block), available, hint)
    if chunk_size is not None:
        memory_fits(f"chunk_size={chunk_size}", stored + per_rep * min(R, int(chunk_size)), available,
                    "use a smaller chunk_size")
        return chunk_size
    budget = min(available - stored, 1 << 30) // 2
    size = max(block, budget // per_rep // block * block)
    return None if size >= R else int(size)
