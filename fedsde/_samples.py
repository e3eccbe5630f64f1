"""Moments over replicates of recorded weights, shared by simulation and SDE results (internal)."""

from __future__ import annotations

import numpy as np


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

    @property
    def final(self) -> np.ndarray:
        """Weights at the last recorded time, shape (R, d)."""
        if self.weights is None:
            from fedsde.errors import FedsdeInputError

            raise FedsdeInputError(f"final: the run kept moments only (moments_only=True); no {self._noun} to return")
        return self.weights[-1]
