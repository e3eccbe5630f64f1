"""Labelled data of ``Q`` clients: validation of per-client arrays and the views every data problem needs.

The training samples of all clients are stored concatenated in client order (``X`` of shape (N, F), ``y`` of
shape (N,), ``N = Σ_k N_k``), the per-client test splits likewise (``X_test``, ``y_test``, ``test_sizes``).
:class:`LabelledClients` gives the per-client views (client of every sample, per-client arrays, label
histograms), the design rows ``x̃ = (x, 1)`` and the padded client-major layout of the vectorised oracles; it is
a base of :class:`~fedsde.problems.classification.problem.ClassificationProblem`, which holds the arrays.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedsde._validate import client_weights, positive_int
from fedsde.errors import FedsdeInputError


def checked_client_arrays(X_clients: Sequence[np.ndarray], y_clients: Sequence[np.ndarray],
                          X_test_clients: Sequence[np.ndarray] | None, y_test_clients: Sequence[np.ndarray] | None,
                          n_classes: int | None):
    """Validated per-client training and test arrays, concatenated in client order, and the number of classes.

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
    X, y, sizes, X_test, y_test, test_sizes, C
        As :func:`checked_arrays` returns them.
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
    if X_test_clients is None:
        Xt, yt, tsizes = np.zeros((0, F)), np.zeros(0, np.int64), np.zeros(Q, np.int64)
    else:
        if y_test_clients is None or len(X_test_clients) != Q or len(y_test_clients) != Q:
            raise FedsdeInputError("X_test_clients, y_test_clients: need one test array per client")
        Xts = [np.asarray(x, dtype=np.float64).reshape(-1, F) for x in X_test_clients]
        Xt, yt = np.concatenate(Xts), np.concatenate([np.asarray(v).reshape(-1) for v in y_test_clients])
        tsizes = np.array([x.shape[0] for x in Xts], dtype=np.int64)
    return checked_arrays(np.concatenate(Xs), np.concatenate(ys), [x.shape[0] for x in Xs], Xt, yt, tsizes,
                          n_classes, where="X_clients[{k}]")


def checked_arrays(X, y, sizes, X_test=None, y_test=None, test_sizes=None, n_classes: int | None = None, *,
                   where: str = "X (client {k})"):
    """Validated training and test arrays of ``Q`` clients, concatenated in client order (vectorised checks).

    Parameters
    ----------
    X : array, shape (N, F)
        Finite training features of all clients, client by client.
    y : int array, shape (N,)
        Labels ``0..C−1``.
    sizes : int array, shape (Q,)
        ``N_k >= 1``, summing to ``N``.
    X_test, y_test, test_sizes : arrays, shapes (M, F), (M,) and (Q,), optional
        The test splits likewise (default: empty).
    n_classes : int or None
        ``C`` (at least 2); default ``1 + max label`` (at least 2).
    where : str
        How an error names client ``k``'s features.

    Returns
    -------
    X, y, sizes, X_test, y_test, test_sizes, C
        float64 features, int64 labels and sizes, and ``C``.
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    sizes = np.asarray(sizes).reshape(-1)
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise FedsdeInputError(f"X, y: shapes {X.shape}, {y.shape} must be (N, F) and (N,)")
    if sizes.size < 1 or not np.issubdtype(sizes.dtype, np.integer) or sizes.sum() != X.shape[0]:
        raise FedsdeInputError(f"sizes: must be Q >= 1 integers summing to the {X.shape[0]} rows of X")
    sizes = sizes.astype(np.int64)
    if sizes.min() < 1:
        k = int(np.argmin(sizes))
        raise FedsdeInputError(f"{where.format(k=k)}: client {k} has no training samples")
    if not all(np.isfinite(X[a:a + 65536]).all() for a in range(0, X.shape[0], 65536)):  # small temporaries
        row = int(np.flatnonzero(~np.isfinite(X).all(axis=1))[0])
        k = int(np.searchsorted(np.cumsum(sizes), row, side="right"))
        raise FedsdeInputError(f"{where.format(k=k)}: contains NaN or inf")
    F, Q = X.shape[1], sizes.size
    if y_test is None:
        Xt, yt, ts = np.zeros((0, F)), np.zeros(0, np.int64), np.zeros(Q, np.int64)
    else:
        Xt, yt = np.asarray(X_test, dtype=np.float64).reshape(-1, F), np.asarray(y_test).reshape(-1)
        ts = np.asarray(test_sizes).reshape(-1).astype(np.int64)
        if yt.shape != (Xt.shape[0],) or ts.shape != (Q,) or ts.min() < 0 or ts.sum() != yt.size:
            raise FedsdeInputError(f"X_test, y_test, test_sizes: shapes {Xt.shape}, {yt.shape}, {ts.shape} must be "
                                   f"(M, {F}), (M,) and ({Q},) with test_sizes summing to M")
    y_all = np.concatenate([y.reshape(-1), yt])
    if y_all.size and ((not np.issubdtype(y_all.dtype, np.integer) and np.any(np.mod(y_all, 1) != 0))
                       or y_all.min() < 0):
        raise FedsdeInputError("y_clients: labels must be integers 0..C-1")
    C = int(y_all.max()) + 1 if n_classes is None else positive_int("n_classes", n_classes, minimum=2)
    C = max(C, 2)
    if y_all.max() >= C:
        raise FedsdeInputError(f"n_classes={n_classes}: labels go up to {int(y_all.max())}")
    return X, y.astype(np.int64), sizes, Xt, yt.astype(np.int64), ts, C


def checked_client_weights(p, sizes: np.ndarray) -> np.ndarray:
    """Client weights ``p`` normalised to sum one (default ``N_k/N``), shape (Q,)."""
    Q = sizes.size
    if p is None:
        return sizes / sizes.sum()
    return client_weights("p", p, Q)


class LabelledClients:
    """Views of the labelled data of ``Q`` clients.

    A base class for a (frozen) dataclass holding ``X, y, sizes, X_test, y_test, test_sizes, n_classes,
    fit_intercept`` and a ``_cache`` dict (see :class:`~fedsde.problems.classification.problem.ClassificationProblem`).
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
        C = int(self.n_classes)
        ids = np.repeat(np.arange(self.Q, dtype=np.int64) * C, sizes) + y
        return np.bincount(ids, minlength=self.Q * C).reshape(self.Q, C).astype(np.int64)

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
            if int(self.sizes.min()) == n_max:  # equal sizes: no padding, a view of the design rows
                self._cache["padded"] = (Xd.reshape(Q, n_max, -1), self.y.reshape(Q, n_max))
                return self._cache["padded"]
            real = np.arange(n_max) < self.sizes[:, None]  # (Q, N_max); rows in client-major order
            Xp = np.zeros((Q, n_max, self.n_features))
            yp = np.zeros((Q, n_max), dtype=np.int64)
            Xp[real] = Xd
            yp[real] = self.y
            self._cache["padded"] = (Xp, yp)
        return self._cache["padded"]
