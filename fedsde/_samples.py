"""Moments over replicates of recorded weights, shared by simulation and SDE results (internal), and what a weight
covariance keeps (``--final-cov full|diag|none``, decided where it is computed)."""

from __future__ import annotations

import numpy as np

#: what a weight covariance keeps: the (d, d) matrix, its diagonal (the d variances), or nothing
FINAL_COV = ("full", "diag", "none")
#: the largest dimension whose weight covariances are full by default; above it they are diagonal (a d × d matrix
#: of float64 is 512 KiB at d = 256, about 1.5 MB as JSON; at a network's d = 53,002 it is 22.5 GB)
FULL_COV_MAX_D = 256


def resolve_final_cov(name: str, how: str | None, d: int) -> str:
    """``how`` checked against :data:`FINAL_COV`, or the default for dimension ``d``: ``"full"`` up to
    :data:`FULL_COV_MAX_D`, ``"diag"`` above (``name`` names the argument in the error)."""
    if how is None:
        return "full" if int(d) <= FULL_COV_MAX_D else "diag"
    if how not in FINAL_COV:
        from fedsde.errors import FedsdeInputError

        raise FedsdeInputError(f"{name}={how!r}: must be one of {', '.join(FINAL_COV)}")
    return how


def cov_numbers(how: str, d: int) -> int:
    """Numbers a covariance kept as ``how`` holds: d², d or 0."""
    return {"full": int(d) * int(d), "diag": int(d), "none": 0}[how]


def replicate_cov(x: np.ndarray, how: str) -> np.ndarray | None:
    """Covariance over the replicates of ``x`` (R, d) (unbiased, ddof=1) as kept by ``how``: (d, d), the variances
    (d,), or ``None``; a diagonal is computed as such (``O(R·d)``), never cut from a d × d matrix."""
    if how == "full":
        return np.cov(x, rowvar=False).reshape(x.shape[1], x.shape[1])
    if how == "diag":
        return x.var(axis=0, ddof=1)
    return None


class ReplicateMoments:
    """Mixin for results holding ``weights`` of shape (T, R, d): T recorded times, R replicates, dimension d.

    A run that kept moments only (``moments_only=True``) has ``weights = None`` and its moments in ``streamed``
    (a :class:`fedsde.sim.moments.StreamingMoments`); its replicate count is ``config[_count_key]``.
    """

    weights: np.ndarray | None
    config: dict
    streamed = None
    _count_key = "replicates"  # config key holding R when no weights are kept
    _noun = "samples"

    @property
    def replicates(self) -> int:
        """Number of replicates (paths) R."""
        if self.weights is None:
            return int(self.config[self._count_key])
        return int(self.weights.shape[1])

    def mean(self) -> np.ndarray:
        """Mean over replicates, shape (T, d)."""
        if self.weights is None:
            return self.streamed.mean()
        return self.weights.mean(axis=1)

    def cov(self) -> np.ndarray:
        """Covariance over replicates (unbiased, ddof=1), shape (T, d, d)."""
        if self.weights is None:
            return self.streamed.cov()
        x = self.weights - self.weights.mean(axis=1, keepdims=True)
        return np.einsum("tri,trj->tij", x, x) / max(1, self.replicates - 1)

    def var(self) -> np.ndarray:
        """Variances over replicates (unbiased, ddof=1), shape (T, d): the covariances' diagonals, in ``O(T·d)``."""
        if self.weights is None:
            return self.streamed.var()
        return self.weights.var(axis=1, ddof=1)

    @property
    def final(self) -> np.ndarray:
        """Weights at the last recorded time, shape (R, d)."""
        if self.weights is None:
            from fedsde.errors import FedsdeInputError

            raise FedsdeInputError(f"final: the run kept moments only (moments_only=True); no {self._noun} to return")
        return self.weights[-1]
