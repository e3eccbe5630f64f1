"""Labelled data of ``Q`` clients: validation of per-client arrays and the views every data problem needs.

The training samples of all clients are stored concatenated in client order (``X`` of shape (N, F), ``y`` of
shape (N,), ``N = Σ_k N_k``), the per-client test splits likewise (``X_test``, ``y_test``, ``test_sizes``).
:class:`LabelledClients` gives the per-client views (client of every sample, per-client arrays, label
histograms), the design rows ``x̃ = (x, 1)`` and the padded client-major layout of the vectorised oracles; it is
a base of :class:`~fedsde.problems.logistic.ClassificationProblem`, which holds the arrays.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedsde._validate import positive_int
from fedsde.errors import FedsdeInputError
from fedsde.problems.models import segment_starts


def checked_client_arrays(X_clients: Sequence[np.ndarray], y_clients: Sequence[np.ndarray],
                          X_test_clients: Sequence[np.ndarray] | None, y_test_clients: Sequence[np.ndarray] | None,
                          n_classes: int | None):
    """Validated per-client training and test arrays and the number of classes.

    Parameters
    ----------
    X_clients : sequence of Q arrays, shapes (N_k, F)
        Finite features; every client has at least one sample.
    y_clients : sequence of Q int arrays, shapes (N_k,)
        Labels ``0..C−1``.
    X_test_clients, y_test_clients : sequences of Q arrays, or None
        Per-client test splits (``None``: empty).
    n_classes : int or None
        ``C`` (at least 2); default ``1 + max label`` (at least 2).

    Returns
    -------
    Xs, ys, Xt, yt : lists of Q arrays
        Training features (float64) and labels, test features (float64, shape (M_k, F)) and labels.
    C : int
    """
    Q = len(X_clients)
    if Q < 1 or len(y_clients) != Q:
        raise FedsdeInputError(
            f"X_clients, y_clients: need the same number (>= 1) of clients, got {Q} and {len(y_clients)}"
        )
    Xs = [np.asarray(x, dtype=np.float64) for x in X_clients]
    ys = [np.asarray(v) for v in y_clients]
    F = Xs[0].shape[1] if Xs[0].ndim == 2 else -1
    for k, (x, v) in enumerate(zip(Xs, ys, strict=True)):
        if x.ndim != 2 or x.shape[1] != F or v.shape != (x.shape[0],):
            raise FedsdeInputError(
                f"X_clients[{k}], y_clients[{k}]: shapes {x.shape}, {v.shape} must be (N_k, {F}) and (N_k,)"
            )
        if x.shape[0] < 1:
            raise FedsdeInputError(f"X_clients[{k}]: client {k} has no training samples")
        if not np.all(np.isfinite(x)):
            raise FedsdeInputError(f"X_clients[{k}]: contains NaN or inf")
    if X_test_clients is None:
        Xt = [np.zeros((0, F)) for _ in range(Q)]
        yt = [np.zeros(0, np.int64) for _ in range(Q)]
    else:
        if y_test_clients is None or len(X_test_clients) != Q or len(y_test_clients) != Q:
            raise FedsdeInputError("X_test_clients, y_test_clients: need one test array per client")
        Xt = [np.asarray(x, dtype=np.float64).reshape(-1, F) for x in X_test_clients]
        yt = [np.asarray(v).reshape(-1) for v in y_test_clients]
    y_all = np.concatenate(ys + yt)
    if y_all.size and (np.any(np.mod(y_all, 1) != 0) or y_all.min() < 0):
        raise FedsdeInputError("y_clients: labels must be integers 0..C-1")
    C = int(y_all.max()) + 1 if n_classes is None else positive_int("n_classes", n_classes, minimum=2)
    C = max(C, 2)
    if y_all.max() >= C:
        raise FedsdeInputError(f"n_classes={n_classes}: labels go up to {int(y_all.max())}")
    return Xs, ys, Xt, yt, C


def checked_client_weights(p, sizes: np.ndarray) -> np.ndarray:
    """Client weights ``p`` normalised to sum one (default ``N_k/N``), shape (Q,)."""
    Q = sizes.size
    if p is None:
        return sizes / sizes.sum()
    p_arr = np.asarray(p, dtype=np.float64).reshape(-1)
    if p_arr.shape != (Q,) or not np.all(np.isfinite(p_arr)) or np.any(p_arr < 0) or p_arr.sum() <= 0:
        raise FedsdeInputError(f"p: shape {np.shape(p)} must be ({Q},), finite, >= 0, not all zero")
    return p_arr / p_arr.sum()


class LabelledClients:
    """Views of the labelled data of ``Q`` clients.

    A base class for a (frozen) dataclass holding ``X, y, sizes, X_test, y_test, test_sizes, n_classes,
    fit_intercept`` and a ``_cache`` dict (see :class:`~fedsde.problems.logistic.ClassificationProblem`).
    """

    X: np.ndarray
    y: np.ndarray
    sizes: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    test_sizes: np.ndarray
    n_classes: int
    fit_intercept: bool
    _cache: dict

    @property
    def Q(self) -> int:
        """Number of clients."""
        return int(self.sizes.size)

    @property
    def n_features(self) -> int:
        """Columns of the design matrix ``x̃`` (features + intercept)."""
        return int(self.X.shape[1]) + int(self.fit_intercept)

    @property
    def client_ids(self) -> np.ndarray:
        """Client of every training sample, shape (N,)."""
        return np.repeat(np.arange(self.Q), self.sizes)

    def client_data(self, split: str = "train") -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per-client ``(X_k, y_k)`` lists of the ``"train"`` or ``"test"`` split."""
        X, y, sizes = self._split(split)
        cuts = np.cumsum(sizes)[:-1]
        return list(np.split(X, cuts)), list(np.split(y, cuts))

    def label_counts(self, split: str = "train") -> np.ndarray:
        """Label histogram of every client, shape (Q, C)."""
        _, y, sizes = self._split(split)
        ids = np.repeat(np.arange(self.Q), sizes)
        out = np.zeros((self.Q, self.n_classes), dtype=np.int64)
        np.add.at(out, (ids, y), 1)
        return out

    def label_distributions(self) -> np.ndarray:
        """``D_k``: training label distribution of every client (rows sum to one), shape (Q, C)."""
        counts = self.label_counts().astype(np.float64)
        return counts / counts.sum(1, keepdims=True)

    def _split(self, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if split == "train":
            return self.X, self.y, self.sizes
        if split == "test":
            return self.X_test, self.y_test, self.test_sizes
        raise FedsdeInputError(f"split={split!r}: must be 'train' or 'test'")

    def design(self, X: np.ndarray) -> np.ndarray:
        """``x̃``: the features with the intercept column appended, shape (n, n_features)."""
        X = np.asarray(X, dtype=np.float64)
        return np.hstack([X, np.ones((X.shape[0], 1))]) if self.fit_intercept else X

    def padded(self) -> tuple[np.ndarray, np.ndarray]:
        """Training data in a padded client-major layout for vectorised oracles.

        Returns
        -------
        X : ndarray, shape (Q, N_max, n_features)
            Design rows ``x̃`` of client ``k`` in ``X[k, :N_k]`` (zeros after).
        y : ndarray of int, shape (Q, N_max)
            Labels (zeros after ``N_k``).
        """
        if "padded" not in self._cache:
            Q, n_max = self.Q, int(self.sizes.max())
            Xd = self.design(self.X)
            Xp = np.zeros((Q, n_max, self.n_features))
            yp = np.zeros((Q, n_max), dtype=np.int64)
            rows = np.arange(self.y.size) - np.repeat(segment_starts(self.sizes), self.sizes)
            Xp[self.client_ids, rows] = Xd
            yp[self.client_ids, rows] = self.y
            self._cache["padded"] = (Xp, yp)
        return self._cache["padded"]
