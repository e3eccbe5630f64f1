"""Moments over replicates of recorded weights, shared by simulation and SDE results (internal)."""

from __future__ import annotations

import numpy as np


class ReplicateMoments:
    """Mixin for results holding ``weights`` of shape (T, R, d): T recorded times, R replicates, dimension d."""

    weights: np.ndarray

    @property
    def replicates(self) -> int:
        """Number of replicates (paths) R."""
        return int(self.weights.shape[1])

    def mean(self) -> np.ndarray:
        """Mean over replicates, shape (T, d)."""
        return self.weights.mean(axis=1)

    def cov(self) -> np.ndarray:
        """Covariance over replicates (unbiased, ddof=1), shape (T, d, d)."""
        x = self.weights - self.weights.mean(axis=1, keepdims=True)
        return np.einsum("tri,trj->tij", x, x) / max(1, self.replicates - 1)

    @property
    def final(self) -> np.ndarray:
        """Weights at the last recorded time, shape (R, d)."""
        return self.weights[-1]
