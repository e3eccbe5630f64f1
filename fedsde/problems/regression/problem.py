"""Least-squares regression clients on real data, with true minibatch noise.

Client ``k`` holds ``n_k`` rows ``(x_i, y_i)`` (``x_i`` a row of the design, with a trailing 1 when ``intercept``)
and minimises

    F_k(w) = (1/(2 n_k)) Σ_{i∈I_k} (x_iᵀw − y_i)² + (λ/2) ‖w‖²,        F(w) = Σ_k p_k F_k(w)

(seed 002 Sec. 3: ``F^k = (1/N_k) Σ_i F_i``, ``p_k ∝ n_k`` unless given).  A local step draws a minibatch ``S`` of
``b`` rows afresh (with replacement: ``b`` independent uniform rows; without: a uniform ``b``-subset) and takes

    w ← w − η g_S(w),   g_S(w) = (1/b) Σ_{i∈S} x_i (x_iᵀw − y_i) + λw = A_S w − c_S,

with ``A_S = (1/b) Σ_{i∈S} x_i x_iᵀ + λI`` and ``c_S = (1/b) Σ_{i∈S} x_i y_i``.  The gradient is linear in ``w`` and
the minibatch noise is quadratic in ``w`` (state dependent), yet the first two moments of local SGD close exactly
(:mod:`fedsde.exact.least_squares`).  For a batch mean of per-row quantities ``r_i``
``Cov(r̄_S) = κ_k · (1/n_k) Σ_i (r_i − r̄)(r_i − r̄)ᵀ`` with

    κ_k = 1/b                       (with replacement),
    κ_k = (n_k − b) / (b (n_k − 1))  (without replacement; 0 when b = n_k),

so the minibatch gradient covariance is ``Σ_k(w) = κ_k Cov_i(x_i(x_iᵀw − y_i))`` (without replacement this is
seed 002 Sec. 3's ``(1/S − 1/N_k)·`` sample covariance).

Build with :meth:`RegressionProblem.from_clients`, or from a problem file (``kind = "regression"``,
:mod:`fedsde.problems.regression.files`).  The simulator samples minibatches as the
problem says with :func:`fedsde.clients.least_squares_oracle.least_squares_oracle`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fedsde._tolerances import SINGULAR_TOL
from fedsde._validate import choice, client_weights, positive_float, positive_int, start_point
from fedsde.errors import FedsdeInputError
from fedsde.problems.regression.data import check_magnitudes

MODELS = ("least-squares",)
SAMPLINGS = ("without-replacement", "with-replacement")
#: largest ratio of row counts within one group of :meth:`RegressionProblem.size_groups`
GROUP_GROWTH = 1.25


def _segments(sizes: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)


def noise_factors(sizes: np.ndarray, batch_size: int, sampling: str) -> np.ndarray:
    """``κ_k``: the minibatch mean's covariance over the rows' population covariance (module docstring), (Q,)."""
    n = np.asarray(sizes, dtype=np.float64)
    b = float(batch_size)
    if sampling == "with-replacement":
        return np.full(n.shape, 1.0 / b)
    with np.errstate(invalid="ignore", divide="ignore"):
        k = (n - b) / (b * (n - 1.0))
    return np.where(n > b, k, 0.0)


@dataclass(frozen=True, eq=False)
class RegressionProblem:
    """Q least-squares clients on their own rows (see the module docstring).

    Attributes
    ----------
    X : ndarray, shape (N, d)
        Design rows of all clients, concatenated in client order (the intercept column, if any, is the last).
    y : ndarray, shape (N,)
        Targets.
    sizes : ndarray of int, shape (Q,)
        ``n_k``: rows per client.
    p : ndarray, shape (Q,)
        Client weights (default ``n_k/N``), normalised.
    l2 : float
        Ridge coefficient ``λ >= 0`` (applies to every coordinate of ``w``, the intercept included).
    batch_size : int or None
        Rows per local step ``b`` (the same for every client); ``None``: none given.
    sampling : {"without-replacement", "with-replacement"}
        How the ``b`` rows of a step are drawn (afresh every step).
    w0 : ndarray, shape (d,), or None
        Starting weights (``None``: zero).
    intercept : bool
        Whether the design has a trailing column of ones.
    feature_names : tuple of str
        Names of the ``d`` columns of ``X``.
    client_names : tuple of str
        Names of the ``Q`` clients.
    name : str
    info : dict
        Provenance (data source, partition, standardisation) for records.
    """

    X: np.ndarray
    y: np.ndarray
    sizes: np.ndarray
    p: np.ndarray
    l2: float = 0.0
    batch_size: int | None = None
    sampling: str = "without-replacement"
    w0: np.ndarray | None = None
    intercept: bool = False
    feature_names: tuple[str, ...] = ()
    client_names: tuple[str, ...] = ()
    name: str = ""
    info: dict = field(default_factory=dict)
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    model = "least-squares"

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_clients(
        cls,
        X_clients: Sequence[np.ndarray],
        y_clients: Sequence[np.ndarray],
        *,
        l2: float = 0.0,
        intercept: bool = False,
        p=None,
        batch_size: int | None = None,
        sampling: str = "without-replacement",
        w0=None,
        feature_names: Sequence[str] | None = None,
        client_names: Sequence[str] | None = None,
        name: str = "",
        info: dict | None = None,
    ) -> RegressionProblem:
        """A problem from per-client arrays (validated).

        Parameters
        ----------
        X_clients : sequence of Q arrays, shapes (n_k, F)
            Features of each client (without an intercept column; ``intercept=True`` appends one).
        y_clients : sequence of Q arrays, shapes (n_k,)
        l2, p, batch_size, sampling, w0, name, info
            See the class attributes; ``p`` of shape (Q,) is normalised.
        intercept : bool
            Append a column of ones to the design (``d = F + 1``).
        feature_names : sequence of F str, optional
        client_names : sequence of Q str, optional
        """
        Q = len(X_clients)
        if Q < 1 or len(y_clients) != Q:
            raise FedsdeInputError(
                f"X_clients, y_clients: need the same number (>= 1) of clients, got {Q} and {len(y_clients)}"
            )
        Xs = [np.asarray(x, dtype=np.float64) for x in X_clients]
        ys = [np.asarray(v, dtype=np.float64) for v in y_clients]
        F = Xs[0].shape[1] if Xs[0].ndim == 2 else -1
        for k, (x, v) in enumerate(zip(Xs, ys, strict=True)):
            if x.ndim != 2 or x.shape[1] != F or F < 1 or v.shape != (x.shape[0],):
                raise FedsdeInputError(
                    f"X_clients[{k}], y_clients[{k}]: shapes {x.shape}, {v.shape} must be (n_k, {F}) and (n_k,)"
                )
            if x.shape[0] < 1:
                raise FedsdeInputError(f"X_clients[{k}]: client {k} has no rows")
            if not (np.all(np.isfinite(x)) and np.all(np.isfinite(v))):
                raise FedsdeInputError(f"X_clients[{k}], y_clients[{k}]: contain NaN or inf")
        rows = sum(x.shape[0] for x in Xs)
        for k, (x, v) in enumerate(zip(Xs, ys, strict=True)):
            check_magnitudes(np.column_stack([x, v]), rows, F, lambda i, j, k=k: (
                f"X_clients[{k}][{i}, {j}]" if j < F else f"y_clients[{k}][{i}]"))
        if intercept:
            Xs = [np.hstack([x, np.ones((x.shape[0], 1))]) for x in Xs]
        d = F + int(bool(intercept))
        names = tuple(f"x{j}" for j in range(F)) if feature_names is None else tuple(map(str, feature_names))
        if len(names) != F:
            raise FedsdeInputError(f"feature_names: {len(names)} names for {F} features")
        names += ("intercept",) if intercept else ()
        cnames = tuple(str(k) for k in range(Q)) if client_names is None else tuple(map(str, client_names))
        if len(cnames) != Q:
            raise FedsdeInputError(f"client_names: {len(cnames)} names for {Q} clients")
        sizes = np.array([x.shape[0] for x in Xs], dtype=np.int64)
        if p is None:
            p_arr = sizes / sizes.sum()
        else:
            p_arr = client_weights("p", p, Q)
        choice("sampling", sampling, SAMPLINGS)
        if batch_size is not None:
            batch_size = positive_int("batch_size", batch_size)
            if sampling == "without-replacement" and batch_size > sizes.min():
                k = int(np.argmin(sizes))
                raise FedsdeInputError(
                    f"batch_size={batch_size}: exceeds the {int(sizes[k])} rows of client {cnames[k]!r}; "
                    "sampling='without-replacement' needs batch_size <= every client's rows"
                )
        w_start = None if w0 is None else start_point(w0, d)
        return cls(
            X=np.concatenate(Xs), y=np.concatenate(ys), sizes=sizes, p=p_arr,
            l2=positive_float("l2", l2, allow_zero=True), batch_size=batch_size, sampling=sampling, w0=w_start,
            intercept=bool(intercept), feature_names=names, client_names=cnames, name=str(name),
            info=dict(info or {}),
        )

    def replace(self, **changes) -> RegressionProblem:
        """A validated copy with some of ``l2, p, batch_size, sampling, w0, name, info`` changed (the rows stay)."""
        allowed = ("l2", "p", "batch_size", "sampling", "w0", "name", "info")
        bad = sorted(set(changes) - set(allowed))
        if bad:
            raise FedsdeInputError(f"replace: unknown field(s) {', '.join(bad)} (allowed: {', '.join(allowed)})")
        kw = {"l2": self.l2, "p": self.p, "batch_size": self.batch_size, "sampling": self.sampling,
              "w0": self.w0, "name": self.name, "info": self.info} | changes
        Xs, ys = self.client_data()
        if self.intercept:
            Xs = [x[:, :-1] for x in Xs]
        names = self.feature_names[:-1] if self.intercept else self.feature_names
        return RegressionProblem.from_clients(Xs, ys, intercept=self.intercept, feature_names=names,
                                              client_names=self.client_names, **kw)

    def with_weights(self, p) -> RegressionProblem:
        """A copy with other client weights (normalised)."""
        return self.replace(p=p)

    def with_l2(self, l2: float) -> RegressionProblem:
        """A copy with another ridge coefficient."""
        return self.replace(l2=l2)

    def initial_weights(self, seed: int | None = None) -> np.ndarray:
        """Starting weights ``w₀`` (the file's ``w0``, else zero), shape (d,); ``seed`` is not used."""
        return np.zeros(self.d) if self.w0 is None else self.w0.copy()

    # ------------------------------------------------------------------ shapes and rows
    @property
    def Q(self) -> int:
        """Number of clients."""
        return int(self.sizes.size)

    @property
    def d(self) -> int:
        """Dimension of ``w`` (columns of the design)."""
        return int(self.X.shape[1])

    @property
    def client_ids(self) -> np.ndarray:
        """Client of every row, shape (N,)."""
        return np.repeat(np.arange(self.Q), self.sizes)

    def client_data(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per-client ``(X_k, y_k)`` lists (design rows, targets)."""
        cuts = np.cumsum(self.sizes)[:-1]
        return list(np.split(self.X, cuts)), list(np.split(self.y, cuts))

    def padded_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows in a padded client-major layout for vectorised code.

        Returns
        -------
        X : ndarray, shape (Q, n_max, d)
            Design rows of client ``k`` in ``X[k, :n_k]`` (zeros after).
        y : ndarray, shape (Q, n_max)
        weights : ndarray, shape (Q, n_max)
            ``1/n_k`` on the rows of client ``k``, 0 on padding.
        """
        if "padded" not in self._cache:
            Q, n_max = self.Q, int(self.sizes.max())
            rows = np.arange(self.y.size) - np.repeat(_segments(self.sizes), self.sizes)
            Xp = np.zeros((Q, n_max, self.d))
            yp = np.zeros((Q, n_max))
            wp = np.zeros((Q, n_max))
            Xp[self.client_ids, rows] = self.X
            yp[self.client_ids, rows] = self.y
            wp[self.client_ids, rows] = np.repeat(1.0 / self.sizes, self.sizes)
            self._cache["padded"] = (Xp, yp, wp)
        return self._cache["padded"]

    def size_groups(self, growth: float = GROUP_GROWTH) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """Clients grouped by row count, each group padded only to its own largest client (for vectorised code
        whose memory must grow with the rows, not with ``Q · max n_k``).

        Clients are sorted by ``n_k`` and a group closes when the next client has more than ``growth`` times the
        group's smallest count, so the padding adds at most a factor ``growth`` to the ``N · d`` numbers of the rows.

        Returns
        -------
        list of (clients, X, y, weights)
            ``clients`` (c,) indices, ``X`` (c, n, d), ``y`` (c, n), ``weights`` (c, n): ``1/n_k`` on a client's
            rows, 0 on padding.
        """
        key = ("groups", float(growth))
        if key not in self._cache:
            order = np.argsort(self.sizes, kind="stable")
            starts = _segments(self.sizes)
            groups, current = [], [int(order[0])]
            for k in order[1:]:
                if self.sizes[k] > growth * self.sizes[current[0]]:
                    groups.append(current)
                    current = []
                current.append(int(k))
            groups.append(current)
            out = []
            for members in groups:
                idx = np.asarray(members, dtype=np.int64)
                n = int(self.sizes[idx].max())
                X = np.zeros((idx.size, n, self.d))
                y = np.zeros((idx.size, n))
                w = np.zeros((idx.size, n))
                for j, k in enumerate(idx):
                    a, nk = int(starts[k]), int(self.sizes[k])
                    X[j, :nk], y[j, :nk], w[j, :nk] = self.X[a:a + nk], self.y[a:a + nk], 1.0 / nk
                out.append((idx, X, y, w))
            self._cache[key] = out
        return self._cache[key]

    def moments(self) -> tuple[np.ndarray, np.ndarray]:
        """``Ā_k = (1/n_k) Σ x_i x_iᵀ`` (Q, d, d) and ``c̄_k = (1/n_k) Σ x_i y_i`` (Q, d): the data's first moments."""
        if "moments" not in self._cache:
            A = np.empty((self.Q, self.d, self.d))
            c = np.empty((self.Q, self.d))
            for k, (Xk, yk) in enumerate(zip(*self.client_data(), strict=True)):
                A[k] = Xk.T @ Xk / Xk.shape[0]
                c[k] = Xk.T @ yk / Xk.shape[0]
            self._cache["moments"] = (0.5 * (A + np.swapaxes(A, 1, 2)), c)
        return self._cache["moments"]

    # ------------------------------------------------------------------ objective
    def _w(self, w) -> np.ndarray:
        w = np.asarray(w, dtype=np.float64)
        if w.ndim == 0 or w.shape[-1] != self.d:
            raise FedsdeInputError(f"w: last axis has {w.shape[-1] if w.ndim else 0} entries, the problem has "
                                   f"d={self.d}")
        return w

    def client_hessian(self, w=None) -> np.ndarray:
        """``U_k = ∇²F_k = Ā_k + λI`` for every client (constant; ``w`` is ignored), shape (Q, d, d)."""
        return self.moments()[0] + self.l2 * np.eye(self.d)

    def hessian(self, w=None) -> np.ndarray:
        """``H = Σ_k p_k U_k`` (constant; ``w`` is ignored), shape (d, d)."""
        return np.einsum("q,qij->ij", self.p, self.client_hessian())

    def client_grad(self, w) -> np.ndarray:
        """``∇F_k(w) = U_k w − c̄_k``; ``w`` of shape (..., d) gives shape (..., Q, d)."""
        w = self._w(w)
        return np.einsum("qij,...j->...qi", self.client_hessian(), w) - self.moments()[1]

    def grad(self, w) -> np.ndarray:
        """``∇F(w) = H (w − w*)``; ``w`` of shape (..., d)."""
        return (self._w(w) - self.optimum) @ self.hessian().T

    def client_loss(self, w) -> np.ndarray:
        """``F_k(w)``; ``w`` of shape (..., d) gives shape (..., Q) (exact expansion about ``w*``)."""
        w = self._w(w)
        ws = self.optimum
        u = w - ws
        f0, g0 = self._cache_at_optimum()
        return f0 + u @ g0.T + 0.5 * np.einsum("...i,qij,...j->...q", u, self.client_hessian(), u)

    def loss(self, w) -> np.ndarray | float:
        """``F(w) = F* + ½ (w − w*)ᵀ H (w − w*)``; ``w`` of shape (..., d)."""
        u = self._w(w) - self.optimum
        out = self.min_loss + 0.5 * np.einsum("...i,ij,...j->...", u, self.hessian(), u)
        return float(out) if np.ndim(out) == 0 else out

    def _cache_at_optimum(self) -> tuple[np.ndarray, np.ndarray]:
        """``F_k(w*)`` (Q,) from the residuals and ``∇F_k(w*)`` (Q, d)."""
        if "at_opt" not in self._cache:
            ws = self.optimum
            res = self.X @ ws - self.y
            f0 = (0.5 * np.bincount(self.client_ids, weights=res * res, minlength=self.Q) / self.sizes
                  + 0.5 * self.l2 * float(ws @ ws))
            self._cache["at_opt"] = (f0, self.client_grad(ws))
        return self._cache["at_opt"]

    @property
    def optimum(self) -> np.ndarray:
        """``w* = H⁻¹ Σ_k p_k c̄_k`` (the global least-squares solution), shape (d,)."""
        if "optimum" not in self._cache:
            H = self.hessian()
            lam = np.linalg.eigvalsh(H)
            if lam[0] <= SINGULAR_TOL * max(1.0, lam[-1]):
                raise FedsdeInputError(
                    f"l2={self.l2}: the Hessian Σ p_k (Ā_k + l2·I) is singular (smallest eigenvalue {lam[0]:.3g}), "
                    "so the least-squares solution is not unique; use l2 > 0 or fewer features"
                )
            self._cache["optimum"] = np.linalg.solve(H, self.p @ self.moments()[1])
        return self._cache["optimum"].copy()

    @property
    def client_optima(self) -> np.ndarray:
        """``a_k = U_k⁻¹ c̄_k``: every client's own solution, shape (Q, d)."""
        U = self.client_hessian()
        lam = np.linalg.eigvalsh(U)
        bad = np.flatnonzero(lam[:, 0] <= SINGULAR_TOL * np.maximum(1.0, lam[:, -1]))
        if bad.size:
            k = int(bad[0])
            raise FedsdeInputError(
                f"l2={self.l2}: client {self.client_names[k]!r} ({int(self.sizes[k])} rows) has a singular Hessian, "
                "so its own least-squares solution is not unique; use l2 > 0"
            )
        return np.linalg.solve(U, self.moments()[1][..., None])[..., 0]

    @property
    def min_loss(self) -> float:
        """``F* = F(w*)`` (from the residuals at ``w*``)."""
        return float(self.p @ self._cache_at_optimum()[0])

    def max_curvature(self) -> np.ndarray:
        """Largest eigenvalue of every ``U_k``, shape (Q,)."""
        return np.linalg.eigvalsh(self.client_hessian())[:, -1]

    # ------------------------------------------------------------------ minibatch noise
    def _batch(self, batch_size, sampling) -> tuple[int, str]:  # the problem's own: checked when it was built
        sampling = self.sampling if sampling is None else choice("sampling", sampling, SAMPLINGS)
        b = self.batch_size if batch_size is None else positive_int("batch_size", batch_size)
        if b is None:
            raise FedsdeInputError("batch_size: the problem has none; give batch_size (rows per local step)")
        if sampling == "without-replacement" and b > self.sizes.min():
            k = int(np.argmin(self.sizes))
            raise FedsdeInputError(f"batch_size={b}: exceeds the {int(self.sizes[k])} rows of client "
                                   f"{self.client_names[k]!r} (sampling='without-replacement')")
        return b, sampling

    def noise_factors(self, batch_size: int | None = None, sampling: str | None = None) -> np.ndarray:
        """``κ_k`` of the module docstring for the problem's (or the given) batch size and sampling, shape (Q,)."""
        b, s = self._batch(batch_size, sampling)
        return noise_factors(self.sizes, b, s)

    def per_sample_grads(self, w, client: int) -> np.ndarray:
        """``x_i(x_iᵀw − y_i) + λw`` for every row of ``client`` (their mean is ``∇F_k``), shape (n_k, d)."""
        k = int(client)
        if not 0 <= k < self.Q:
            raise FedsdeInputError(f"client={client}: must lie in [0, {self.Q - 1}]")
        w = self._w(w).reshape(self.d)
        a = int(_segments(self.sizes)[k])
        Xk, yk = self.X[a:a + self.sizes[k]], self.y[a:a + self.sizes[k]]
        return Xk * (Xk @ w - yk)[:, None] + self.l2 * w

    def minibatch_covariance(self, w, batch_size: int | None = None, sampling: str | None = None) -> np.ndarray:
        """``Σ_k(w) = κ_k · (1/n_k) Σ_i (g_i − ∇F_k)(g_i − ∇F_k)ᵀ``: the covariance of one minibatch gradient at
        ``w`` (exact for either sampling scheme), shape (Q, d, d)."""
        kappa = self.noise_factors(batch_size, sampling)
        w = self._w(w).reshape(self.d)
        out = np.empty((self.Q, self.d, self.d))
        for k, (Xk, yk) in enumerate(zip(*self.client_data(), strict=True)):
            r = Xk * (Xk @ w - yk)[:, None]  # (n_k, d)
            rc = r - r.mean(axis=0)
            out[k] = kappa[k] * (rc.T @ rc) / Xk.shape[0]
        return out

    def summary(self) -> dict:
        """Sizes, weights and settings, for records."""
        return {"name": self.name, "model": self.model, "Q": self.Q, "d": self.d, "l2": self.l2,
                "intercept": self.intercept, "batch_size": self.batch_size, "sampling": self.sampling,
                "features": list(self.feature_names), "clients": list(self.client_names),
                "sizes": self.sizes.tolist(), "p": self.p.tolist(),
                "w0": None if self.w0 is None else self.w0.tolist(), **self.info}
