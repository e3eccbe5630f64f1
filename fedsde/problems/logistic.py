"""Logistic and softmax regression (and one-hidden-layer tanh network) clients on real or synthetic labelled data.

Client ``k`` holds ``N_k`` training samples ``(x_i, y_i)`` and minimises the regularised empirical risk

    F_k(w) = (1/N_k) Σ_{i ∈ I_k} ℓ(w; x_i, y_i) + (λ/2) ‖w‖²,        F(w) = Σ_k p_k F_k(w),

(seed 002 Sec. 3: ``F^k = (1/N_k) Σ_i F_i``, ``p_k = N_k/N`` by default) with

* ``model="logistic"`` (binary labels 0/1): ``ℓ = log(1 + e^z) − y z``, ``z = x̃ᵀw``, ``d = F + 1``;
* ``model="softmax"`` (``C`` classes): ``ℓ = logsumexp(z) − z_y``, ``z = Wᵀx̃``, ``W`` of shape ``(F + 1, C)``
  stored row-major in ``w`` (``d = (F + 1)·C``).

* ``model="mlp"`` (``C`` classes, ``hidden = H``): ``z = (tanh(x̃ᵀW₁), 1) W₂``, ``ℓ = logsumexp(z) − z_y``,
  ``d = (F + 1)·H + (H + 1)·C`` (non-convex; layout and initialisation in :mod:`fedsde.problems.mlp`).

``x̃ = (x, 1)`` when ``fit_intercept`` (the intercept is regularised too).  Gradients are
``∇ℓ = x̃ ⊗ (σ(z) − y)`` (logistic) and ``x̃ ⊗ (softmax(z) − e_y)`` (softmax).

A problem may carry the minibatch size of its clients (``batch_size``, used by default by
:func:`fedsde.sim.simulate`) and its starting point (:meth:`ClassificationProblem.initial_weights`: zero for the
linear models, seeded Glorot weights for the MLP).

The minibatch gradient covariance of seed 002, Sec. 3 (exact for a minibatch of ``S`` samples drawn without
replacement) is :meth:`ClassificationProblem.minibatch_covariance`:

    Σ_k(w) = (1/S − 1/N_k) · (1/(N_k − 1)) Σ_{i∈I_k} (∇ℓ_i(w) − ∇F_k(w)) (∇ℓ_i(w) − ∇F_k(w))ᵀ.

Besides the training data every client keeps a test split; the global test set is the union of the clients'
test splits.  :func:`fedsde.problems.datasets.federated_classification` builds such a problem from
scikit-learn's bundled data sets.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.optimize
from scipy.special import expit, log_expit, logsumexp, softmax

from fedsde._validate import positive_float, positive_int
from fedsde.errors import FedsdeInputError
from fedsde.problems import mlp as _mlp

MODELS = ("logistic", "softmax", "mlp")
SAMPLINGS = ("minibatch", "epoch")


def _segments(sizes: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)


def _segment_sum(a: np.ndarray, sizes: np.ndarray, axis: int) -> np.ndarray:
    """Sums of consecutive blocks of ``sizes`` along ``axis`` (empty blocks give 0)."""
    a = np.moveaxis(a, axis, 0)
    out = np.zeros((sizes.size, *a.shape[1:]))
    nz = sizes > 0
    if nz.any():
        out[nz] = np.add.reduceat(a, _segments(sizes)[nz], axis=0)
    return np.moveaxis(out, 0, axis)


@dataclass(frozen=True, eq=False)
class ClassificationProblem:
    """Q clients fitting a logistic or softmax regression or an MLP on their own data (see the module docstring).

    Build with :meth:`from_clients` (validates) or :func:`federated_classification`.

    Attributes
    ----------
    X : ndarray, shape (N, F)
        Training features of all clients, concatenated in client order (no intercept column).
    y : ndarray of int, shape (N,)
        Training labels (``0..C−1``).
    sizes : ndarray of int, shape (Q,)
        ``N_k``: training samples per client.
    X_test, y_test : ndarray, shapes (M, F) and (M,)
        Test samples of all clients, concatenated in client order (the global test set).
    test_sizes : ndarray of int, shape (Q,)
        Test samples per client.
    n_classes : int
        ``C``.
    model : {"logistic", "softmax", "mlp"}
    l2 : float
        Ridge coefficient ``λ >= 0``.
    p : ndarray, shape (Q,)
        Client weights (default ``N_k/N``), normalised.
    fit_intercept : bool
    name : str
    info : dict
        Provenance (data set, partition, seeds, scaling) for records.
    hidden : int
        Hidden units ``H`` of the MLP (0 for the linear models).
    batch_size : int or None
        Minibatch size ``S`` of every client (capped at ``N_k``), used by the simulator's default gradient
        oracle; ``None``: none given (pass ``EpochSteps`` or an oracle).
    sampling : {"minibatch", "epoch"}
        Minibatches drawn afresh every step, or consecutive batches of a per-epoch permutation.
    init_seed : int or None
        Seed of :meth:`initial_weights` for the MLP (``None``: 0).
    """

    X: np.ndarray
    y: np.ndarray
    sizes: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    test_sizes: np.ndarray
    n_classes: int
    model: str
    l2: float
    p: np.ndarray
    fit_intercept: bool = True
    name: str = ""
    info: dict = field(default_factory=dict)
    hidden: int = 0
    batch_size: int | None = None
    sampling: str = "minibatch"
    init_seed: int | None = None
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_clients(
        cls,
        X_clients: Sequence[np.ndarray],
        y_clients: Sequence[np.ndarray],
        X_test_clients: Sequence[np.ndarray] | None = None,
        y_test_clients: Sequence[np.ndarray] | None = None,
        *,
        model: str | None = None,
        n_classes: int | None = None,
        l2: float = 1e-3,
        p=None,
        fit_intercept: bool = True,
        name: str = "",
        info: dict | None = None,
        hidden: int | None = None,
        batch_size: int | None = None,
        sampling: str = "minibatch",
        init_seed: int | None = None,
    ) -> ClassificationProblem:
        """A problem from per-client arrays.

        Parameters
        ----------
        X_clients : sequence of Q arrays, shapes (N_k, F)
        y_clients : sequence of Q int arrays, shapes (N_k,)
        X_test_clients, y_test_clients : sequences of Q arrays, optional
            Per-client test splits (default: empty).
        model : {"logistic", "softmax", "mlp"}, optional
            Default: logistic for two classes, softmax otherwise.
        n_classes : int, optional
            Default: ``1 + max label``.
        l2 : float
            Ridge coefficient ``λ >= 0`` (with ``λ = 0`` the optimum may not exist on separable data).
        p : array, shape (Q,), optional
            Client weights; default ``N_k / N``.
        hidden : int, optional
            Hidden units of the MLP (required for, and only allowed with, ``model="mlp"``).
        batch_size, sampling, init_seed
            See the class attributes.
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
        if model is None:
            model = "logistic" if C == 2 else "softmax"
        if model not in MODELS:
            raise FedsdeInputError(f"model={model!r}: must be one of {', '.join(MODELS)}")
        if model == "logistic" and C != 2:
            raise FedsdeInputError(f"model='logistic': needs binary labels, found n_classes={C}")
        if model == "mlp":
            if hidden is None:
                raise FedsdeInputError("hidden: required for model='mlp' (number of hidden units, an integer >= 1)")
            hidden = positive_int("hidden", hidden)
        elif hidden is not None:
            raise FedsdeInputError(f"hidden={hidden!r}: only allowed with model='mlp' (model={model!r})")
        if batch_size is not None:
            batch_size = positive_int("batch_size", batch_size)
        if sampling not in SAMPLINGS:
            raise FedsdeInputError(f"sampling={sampling!r}: must be one of {', '.join(SAMPLINGS)}")
        if init_seed is not None:
            init_seed = positive_int("init_seed", init_seed, minimum=0)
        l2 = positive_float("l2", l2, allow_zero=True)
        sizes = np.array([x.shape[0] for x in Xs], dtype=np.int64)
        if p is None:
            p_arr = sizes / sizes.sum()
        else:
            p_arr = np.asarray(p, dtype=np.float64).reshape(-1)
            if p_arr.shape != (Q,) or not np.all(np.isfinite(p_arr)) or np.any(p_arr < 0) or p_arr.sum() <= 0:
                raise FedsdeInputError(f"p: shape {np.shape(p)} must be ({Q},), finite, >= 0, not all zero")
            p_arr = p_arr / p_arr.sum()
        return cls(
            X=np.concatenate(Xs), y=np.concatenate(ys).astype(np.int64), sizes=sizes,
            X_test=np.concatenate(Xt) if Xt else np.zeros((0, F)),
            y_test=np.concatenate(yt).astype(np.int64) if yt else np.zeros(0, np.int64),
            test_sizes=np.array([x.shape[0] for x in Xt], dtype=np.int64),
            n_classes=C, model=model, l2=l2, p=p_arr, fit_intercept=bool(fit_intercept), name=name,
            info=dict(info or {}), hidden=int(hidden or 0), batch_size=batch_size, sampling=sampling,
            init_seed=init_seed,
        )

    def replace(self, **changes) -> ClassificationProblem:
        """A validated copy with some of ``model, hidden, l2, p, batch_size, sampling, init_seed, name, info``
        changed (the data stay)."""
        allowed = ("model", "hidden", "l2", "p", "batch_size", "sampling", "init_seed", "name", "info")
        bad = sorted(set(changes) - set(allowed))
        if bad:
            raise FedsdeInputError(f"replace: unknown field(s) {', '.join(bad)} (allowed: {', '.join(allowed)})")
        kw = {"model": self.model, "hidden": self.hidden or None, "l2": self.l2, "p": self.p,
              "batch_size": self.batch_size, "sampling": self.sampling, "init_seed": self.init_seed,
              "name": self.name, "info": self.info}
        if changes.get("model", self.model) != "mlp":
            kw["hidden"] = None
        kw |= changes
        return ClassificationProblem.from_clients(
            *self.client_data(), *self.client_data("test"), n_classes=self.n_classes,
            fit_intercept=self.fit_intercept, **kw,
        )

    def with_weights(self, p) -> ClassificationProblem:
        """A copy with other client weights (normalised)."""
        return self.replace(p=p)

    def with_l2(self, l2: float) -> ClassificationProblem:
        """A copy with another ridge coefficient."""
        return self.replace(l2=l2)

    def initial_weights(self, seed: int | None = None) -> np.ndarray:
        """Starting weights ``w₀``, shape (d,): zero for the linear models; for the MLP Glorot-normal weights
        with zero biases drawn from ``seed`` (default :attr:`init_seed`, else 0), see :mod:`fedsde.problems.mlp`.
        """
        if self.model != "mlp":
            return np.zeros(self.d)
        s = self.init_seed if seed is None else positive_int("seed", seed, minimum=0)
        return _mlp.init_weights(self.n_features, self.hidden, self.n_classes, 0 if s is None else s,
                                 intercept=self.fit_intercept)

    # ------------------------------------------------------------------ shapes
    @property
    def Q(self) -> int:
        """Number of clients."""
        return int(self.sizes.size)

    @property
    def n_features(self) -> int:
        """Columns of the design matrix ``x̃`` (features + intercept)."""
        return int(self.X.shape[1]) + int(self.fit_intercept)

    @property
    def n_outputs(self) -> int:
        """Logits per sample: 1 (logistic) or ``C`` (softmax, mlp)."""
        return 1 if self.model == "logistic" else int(self.n_classes)

    @property
    def d(self) -> int:
        """Dimension of ``w``: ``n_features · n_outputs`` (linear) or ``n_features·H + (H + 1)·C`` (mlp)."""
        if self.model == "mlp":
            return _mlp.n_params(self.n_features, self.hidden, self.n_outputs)
        return self.n_features * self.n_outputs

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
            rows = np.arange(self.y.size) - np.repeat(_segments(self.sizes), self.sizes)
            Xp[self.client_ids, rows] = Xd
            yp[self.client_ids, rows] = self.y
            self._cache["padded"] = (Xp, yp)
        return self._cache["padded"]

    # ------------------------------------------------------------------ per-sample pieces
    def _w(self, w) -> np.ndarray:
        w = np.asarray(w, dtype=np.float64)
        if w.ndim == 0 or w.shape[-1] != self.d:
            raise FedsdeInputError(f"w: last axis has {w.shape[-1] if w.ndim else 0} entries, the problem has "
                                   f"d={self.d}")
        return w

    def _W(self, w) -> np.ndarray:
        w = self._w(w)
        return w.reshape(*w.shape[:-1], self.n_features, self.n_outputs)

    def _logits(self, W: np.ndarray, Xd: np.ndarray) -> np.ndarray:
        return np.einsum("nf,...fk->...nk", Xd, W)

    def _forward(self, w, Xd: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """Hidden activations (mlp; ``None`` otherwise) and logits (..., n, K) of design rows ``Xd``."""
        if self.model == "mlp":
            return _mlp.forward(self._w(w), Xd, self.n_features, self.hidden, self.n_outputs)
        return None, self._logits(self._W(w), Xd)

    def _backward(self, w, Xd: np.ndarray, A: np.ndarray | None, E: np.ndarray) -> np.ndarray:
        """``Σ_n ∇_w ℓ_n`` for residuals ``E`` (..., n, K) with the sample weights applied, shape (..., d)."""
        if self.model == "mlp":
            return _mlp.backward(self._w(w), Xd, A, E, self.n_features, self.hidden, self.n_outputs)
        return np.einsum("nf,...nk->...fk", Xd, E).reshape(*E.shape[:-2], self.d)

    def _sample_losses(self, Z: np.ndarray, y: np.ndarray) -> np.ndarray:
        if self.model == "logistic":
            z = Z[..., 0]
            return -log_expit(z) + (1 - y) * z  # log(1 + e^z) − y z
        idx = np.broadcast_to(y[:, None], (*Z.shape[:-1], 1))
        return logsumexp(Z, axis=-1) - np.take_along_axis(Z, idx, axis=-1)[..., 0]

    def _residuals(self, Z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``∂ℓ/∂z``: ``σ(z) − y`` or ``softmax(z) − e_y``, shape of ``Z``."""
        if self.model == "logistic":
            return expit(Z) - y[:, None]
        R = softmax(Z, axis=-1)
        R[..., np.arange(y.size), y] -= 1.0
        return R

    # ------------------------------------------------------------------ objective
    def client_loss(self, w) -> np.ndarray:
        """``F_k(w)`` for every client; ``w`` of shape (..., d) gives shape (..., Q)."""
        ell = self._sample_losses(self._forward(w, self.design(self.X))[1], self.y)
        reg = 0.5 * self.l2 * np.sum(np.asarray(w, dtype=np.float64) ** 2, axis=-1)
        return _segment_sum(ell, self.sizes, -1) / self.sizes + np.asarray(reg)[..., None]

    def loss(self, w) -> np.ndarray | float:
        """``F(w) = Σ_k p_k F_k(w)``; ``w`` of shape (..., d)."""
        out = self.client_loss(w) @ self.p
        return float(out) if np.ndim(out) == 0 else out

    def client_grad(self, w) -> np.ndarray:
        """``∇F_k(w)`` for every client; ``w`` of shape (..., d) gives shape (..., Q, d)."""
        if self.model == "mlp":
            w = self._w(w)
            Xd = self.design(self.X)
            A, Z = self._forward(w, Xd)
            E = self._residuals(Z, self.y)
            cuts = np.concatenate([[0], np.cumsum(self.sizes)])
            G = np.stack([self._backward(w, Xd[a:b], A[..., a:b, :], E[..., a:b, :]) / (b - a)
                          for a, b in itertools.pairwise(cuts)], axis=-2)
            return G + self.l2 * w[..., None, :]
        W = self._W(w)
        Xd = self.design(self.X)
        E = self._residuals(self._logits(W, Xd), self.y)  # (..., N, K)
        per = np.einsum("nf,...nk->...nfk", Xd, E)
        G = _segment_sum(per, self.sizes, per.ndim - 3) / self.sizes.reshape(-1, 1, 1)
        G = G.reshape(*G.shape[:-2], self.d)
        return G + self.l2 * np.asarray(w, dtype=np.float64)[..., None, :]

    def grad(self, w) -> np.ndarray:
        """``∇F(w) = Σ_k p_k ∇F_k(w)``; ``w`` of shape (..., d)."""
        w = self._w(w)
        Xd = self.design(self.X)
        s = np.repeat(self.p / self.sizes, self.sizes)  # per-sample weight p_k / N_k
        A, Z = self._forward(w, Xd)
        E = self._residuals(Z, self.y) * s[:, None]
        return self._backward(w, Xd, A, E) + self.l2 * w

    def _loss_and_grad(self, w: np.ndarray) -> tuple[float, np.ndarray]:
        Xd = self.design(self.X)
        A, Z = self._forward(w, Xd)
        s = np.repeat(self.p / self.sizes, self.sizes)
        f = float(s @ self._sample_losses(Z, self.y) + 0.5 * self.l2 * w @ w)
        g = self._backward(w, Xd, A, self._residuals(Z, self.y) * s[:, None]) + self.l2 * w
        return f, g

    def per_sample_grads(self, w, client: int) -> np.ndarray:
        """``∇ℓ_i(w) + λw`` for every training sample of ``client`` (their mean is ``∇F_k``), shape (N_k, d)."""
        k = int(client)
        if not 0 <= k < self.Q:
            raise FedsdeInputError(f"client={client}: must lie in [0, {self.Q - 1}]")
        w = np.asarray(w, dtype=np.float64).reshape(self.d)
        start = int(_segments(self.sizes)[k])
        Xd = self.design(self.X[start:start + self.sizes[k]])
        yk = self.y[start:start + self.sizes[k]]
        if self.model == "mlp":
            E = self._residuals(self._forward(w, Xd)[1], yk)
            return _mlp.per_sample_grads(w, Xd, E, self.n_features, self.hidden, self.n_outputs) + self.l2 * w
        E = self._residuals(Xd @ self._W(w), yk)
        return np.einsum("nf,nk->nfk", Xd, E).reshape(-1, self.d) + self.l2 * w

    def minibatch_covariance(self, w, batch_size: int | Sequence[int] | np.ndarray) -> np.ndarray:
        """``Σ_k(w) = (1/S − 1/N_k) · sample covariance of the per-sample gradients`` (seed 002, Sec. 3).

        The exact covariance of the mean gradient of ``S`` samples drawn without replacement from client
        ``k``'s ``N_k`` samples (zero when ``S >= N_k``).

        Parameters
        ----------
        w : array, shape (d,)
        batch_size : int or array of int, shape (Q,)

        Returns
        -------
        ndarray, shape (Q, d, d)
        """
        S = np.broadcast_to(np.asarray(batch_size), (self.Q,))
        out = np.zeros((self.Q, self.d, self.d))
        for k in range(self.Q):
            Nk = int(self.sizes[k])
            Sk = positive_int(f"batch_size[{k}]", int(S[k]))
            if Sk >= Nk or Nk < 2:
                continue
            G = self.per_sample_grads(w, k)
            Gc = G - G.mean(0)
            out[k] = (1.0 / Sk - 1.0 / Nk) * (Gc.T @ Gc) / (Nk - 1)
        return out

    def _weighted_hessian(self, Xd: np.ndarray, Z: np.ndarray, s: np.ndarray) -> np.ndarray:
        """``Σ_n s_n (x̃_n x̃_nᵀ) ⊗ ∂²ℓ_n/∂z²`` in the layout of ``w`` (row-major ``(F, K)``), shape (d, d).

        Softmax: ``∂²ℓ/∂z² = diag(P) − PPᵀ``, so the sum is ``blockdiag_k(X̃ᵀ diag(s P_k) X̃) − YᵀYs`` with
        ``Y_n = x̃_n ⊗ P_n`` (two BLAS products instead of a four-index contraction).
        """
        F, K = self.n_features, self.n_outputs
        if self.model == "logistic":
            sig = expit(Z[:, 0])
            return (Xd * (s * sig * (1 - sig))[:, None]).T @ Xd
        P = softmax(Z, axis=-1)
        H = np.zeros((F, K, F, K))
        for k in range(K):
            H[:, k, :, k] = (Xd * (s * P[:, k])[:, None]).T @ Xd
        Y = (Xd[:, :, None] * P[:, None, :]).reshape(-1, F * K)
        return H.reshape(F * K, F * K) - (Y * s[:, None]).T @ Y

    def _fd_hessian(self, w: np.ndarray, grad) -> np.ndarray:
        """Central differences of an analytic gradient ``grad`` ((m, d) -> (m, …, d)), symmetrised; MLP only.

        Step ``h = 1e-5·max(1, ‖w‖_∞)``: truncation error O(h²) ≈ 1e-10 relative.
        """
        h = 1e-5 * max(1.0, float(np.abs(w).max()))
        cols = []
        for a in range(0, self.d, 64):
            eye = np.eye(self.d)[a:a + 64] * h
            cols.append((grad(w + eye) - grad(w - eye)) / (2 * h))  # (m, …, d)
        H = np.moveaxis(np.concatenate(cols, axis=0), 0, -1)
        return 0.5 * (H + np.swapaxes(H, -1, -2))

    def client_hessian(self, w) -> np.ndarray:
        """``∇²F_k(w)`` for every client, shape (Q, d, d) (MLP: central differences of the gradient)."""
        w = np.asarray(w, dtype=np.float64).reshape(self.d)
        if self.model == "mlp":
            return self._fd_hessian(w, self.client_grad)
        Xd = self.design(self.X)
        Z = Xd @ self._W(w)
        out = np.empty((self.Q, self.d, self.d))
        for k, (a, b) in enumerate(zip(_segments(self.sizes), _segments(self.sizes) + self.sizes, strict=True)):
            out[k] = self._weighted_hessian(Xd[a:b], Z[a:b], np.full(b - a, 1.0 / self.sizes[k]))
            out[k] += self.l2 * np.eye(self.d)
        return out

    def hessian(self, w) -> np.ndarray:
        """``∇²F(w) = Σ_k p_k ∇²F_k(w)``, shape (d, d) (MLP: central differences of the gradient)."""
        w = np.asarray(w, dtype=np.float64).reshape(self.d)
        if self.model == "mlp":
            return self._fd_hessian(w, self.grad)
        Xd = self.design(self.X)
        s = np.repeat(self.p / self.sizes, self.sizes)
        return self._weighted_hessian(Xd, Xd @ self._W(w), s) + self.l2 * np.eye(self.d)

    # ------------------------------------------------------------------ optimum
    @property
    def optimum(self) -> np.ndarray:
        """``w* = argmin F`` by L-BFGS, polished by Newton steps (``d <= 2000``), shape (d,).

        Raises :class:`FedsdeInputError` when the gradient cannot be driven to ``1e-8`` (e.g. ``l2 = 0`` on
        separable data, where no minimiser exists).  For the (non-convex) MLP: the local minimiser that L-BFGS
        reaches from :meth:`initial_weights` (no Newton polish; tolerance ``1e-6``).
        """
        if "optimum" not in self._cache:
            mlp = self.model == "mlp"
            res = scipy.optimize.minimize(
                self._loss_and_grad, self.initial_weights(), jac=True, method="L-BFGS-B",
                options={"maxiter": 20000, "gtol": 1e-12, "ftol": 1e-15, "maxcor": 30},
            )
            w = res.x
            if self.d <= 2000 and not mlp:
                for _ in range(20):
                    g = self.grad(w)
                    if np.linalg.norm(g) < 1e-13:
                        break
                    try:
                        w = w - np.linalg.solve(self.hessian(w), g)
                    except np.linalg.LinAlgError:
                        break
            gnorm = float(np.linalg.norm(self.grad(w)))
            if not np.isfinite(gnorm) or gnorm > (1e-6 if mlp else 1e-8):
                raise FedsdeInputError(
                    f"l2={self.l2}: could not find the minimiser of F (|grad F| = {gnorm:.3g} after L-BFGS and "
                    "Newton); with l2 = 0 on separable data none exists, so use l2 > 0"
                )
            self._cache["optimum"] = w
        return self._cache["optimum"].copy()

    @property
    def min_loss(self) -> float:
        """``F* = F(w*)``."""
        return float(self.loss(self.optimum))

    # ------------------------------------------------------------------ evaluation
    def predict(self, w, X) -> np.ndarray:
        """Predicted labels for rows of ``X`` (shape (n, F)); ``w`` of shape (..., d) gives (..., n)."""
        Z = self._forward(w, self.design(X))[1]
        if self.model == "logistic":
            return (Z[..., 0] > 0).astype(np.int64)
        return np.argmax(Z, axis=-1)

    def accuracy(self, w, split: str = "test") -> np.ndarray | float:
        """Fraction of correctly classified samples of the global ``"test"`` (or ``"train"``) set.

        ``w`` of shape (..., d) gives shape (...).
        """
        X, y, _ = self._split(split)
        if y.size == 0:
            raise FedsdeInputError(f"split={split!r}: the problem has no {split} samples")
        out = np.mean(self.predict(w, X) == y, axis=-1)
        return float(out) if np.ndim(out) == 0 else out

    def client_accuracy(self, w, split: str = "test") -> np.ndarray:
        """Accuracy on every client's own split; ``w`` of shape (..., d) gives (..., Q) (NaN for empty splits)."""
        X, y, sizes = self._split(split)
        hits = (self.predict(w, X) == y).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return _segment_sum(hits, sizes, -1) / np.where(sizes > 0, sizes, np.nan)

    def max_curvature(self) -> np.ndarray:
        """Upper bound on the largest Hessian eigenvalue of each ``F_k``, shape (Q,).

        ``c·λ_max((1/N_k) Σ x̃x̃ᵀ) + λ`` with ``c = 1/4`` (logistic) or ``1/2`` (softmax).  None exists for the
        MLP (its curvature is unbounded in ``w``): :class:`FedsdeInputError`.
        """
        if self.model == "mlp":
            raise FedsdeInputError("model='mlp': no global curvature bound exists for a neural network "
                                   "(max_curvature is defined for logistic and softmax models)")
        c = 0.25 if self.model == "logistic" else 0.5
        out = np.empty(self.Q)
        for k, Xk in enumerate(self.client_data()[0]):
            Xd = self.design(Xk)
            out[k] = c * np.linalg.eigvalsh(Xd.T @ Xd / Xd.shape[0])[-1] + self.l2
        return out

    def summary(self) -> dict:
        """Sizes, weights and label counts, for records."""
        return {"name": self.name, "model": self.model, "Q": self.Q, "d": self.d, "n_classes": self.n_classes,
                "l2": self.l2, "hidden": self.hidden, "batch_size": self.batch_size, "sampling": self.sampling,
                "sizes": self.sizes.tolist(), "test_sizes": self.test_sizes.tolist(),
                "p": self.p.tolist(), "label_counts": self.label_counts().tolist(), **self.info}

