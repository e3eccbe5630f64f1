"""Least-squares clients of a user's CSV file as a population: every client's rows read from disk when needed.

A ``kind = "regression"`` problem file with ``data = "….csv"`` and ``population = true``
(:mod:`fedsde.problems.regression.files`) gives a :class:`RegressionPopulation` to the commands that sample
participants (``fedsde simulate --participation m``): the file is streamed once and never held in memory
(:mod:`fedsde.problems.regression.store`: the clients in order of first appearance, as
:func:`~fedsde.problems.regression.data.csv_clients` orders them, each client's rows in file order, written to a
temporary memory-mapped file of ``N·(d + 1)·8`` bytes), and a round of the simulator reads only its participants'
rows (:class:`~fedsde.clients.least_squares_oracle.LeastSquaresMinibatchOracle`, through the bounded
:class:`~fedsde.problems.populations.base.ClientCache`), so a run gives the materialised problem's numbers bit for bit
(the minibatch draws depend only on the sizes and on ``n_max``, the largest client of the whole population).

The objective is a quadratic (:mod:`fedsde.problems.regression.problem`),

    F(w) = Σ_k p_k/(2 n_k) ‖X_k w − y_k‖² + (λ/2)‖w‖² = ½ wᵀ(A + λI)w − bᵀw + ½ c,

with ``A = Σ_k (p_k/n_k) X_kᵀX_k``, ``b = Σ_k (p_k/n_k) X_kᵀy_k`` and ``c = Σ_k (p_k/n_k) y_kᵀy_k``.  One pass over
the store (per weight vector ``p``, cached) gives ``H = A + λI``, the optimum ``w* = H⁻¹ b``, and a second one
``F* = F(w*)`` from the residuals; then ``F(w) = F* + ½ (w − w*)ᵀ H (w − w*)`` and ``∇F(w) = H (w − w*)``, the
formulas of :class:`~fedsde.problems.regression.problem.RegressionProblem`, exact at any size (the metrics
``train_loss``, ``grad_norm_sq`` and ``distance_from_start`` have standard error 0).  Other commands take the
materialised problem (:meth:`RegressionPopulation.materialise`, refused up front when it does not fit).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedsde._tolerances import SINGULAR_TOL
from fedsde._validate import choice, client_weights, positive_float, positive_int, start_point
from fedsde.errors import FedsdeInputError
from fedsde.problems.populations.base import CACHE_BYTES, OnDemandRows
from fedsde.problems.regression.problem import SAMPLINGS
from fedsde.problems.regression.store import RowStore


@dataclass(frozen=True, eq=False)
class RegressionPopulation(OnDemandRows):
    """Least-squares clients whose rows live in a :class:`~fedsde.problems.regression.store.RowStore` (module
    docstring).  Attributes as :class:`~fedsde.problems.regression.problem.RegressionProblem` without ``X`` and ``y``
    (``store`` instead; ``cache_bytes``: bound of the clients' rows kept read)."""

    store: RowStore
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
    cache_bytes: int = CACHE_BYTES
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    model = "least-squares"

    @classmethod
    def create(cls, store: RowStore, *, l2: float = 0.0, intercept: bool = False, p=None,
               batch_size: int | None = None, sampling: str = "without-replacement", w0=None,
               feature_names=None, client_names=None, name: str = "", info: dict | None = None,
               cache_bytes: int = CACHE_BYTES) -> RegressionPopulation:
        """A validated problem over ``store`` (checks and messages of
        :meth:`~fedsde.problems.regression.problem.RegressionProblem.from_clients`; ``feature_names`` without the
        intercept)."""
        Q, sizes = store.Q, store.sizes
        F = store.d - int(bool(intercept))
        names = tuple(f"x{j}" for j in range(F)) if feature_names is None else tuple(map(str, feature_names))
        if len(names) != F:
            raise FedsdeInputError(f"feature_names: {len(names)} names for {F} features")
        names += ("intercept",) if intercept else ()
        cnames = tuple(str(k) for k in range(Q)) if client_names is None else tuple(map(str, client_names))
        if len(cnames) != Q:
            raise FedsdeInputError(f"client_names: {len(cnames)} names for {Q} clients")
        p_arr = sizes / sizes.sum() if p is None else client_weights("p", p, Q)
        choice("sampling", sampling, SAMPLINGS)
        if batch_size is not None:
            batch_size = positive_int("batch_size", batch_size)
            if sampling == "without-replacement" and batch_size > sizes.min():
                k = int(np.argmin(sizes))
                raise FedsdeInputError(
                    f"batch_size={batch_size}: exceeds the {int(sizes[k])} rows of client {cnames[k]!r}; "
                    "sampling='without-replacement' needs batch_size <= every client's rows")
        return cls(store=store, p=p_arr, l2=positive_float("l2", l2, allow_zero=True), batch_size=batch_size,
                   sampling=sampling, w0=None if w0 is None else start_point(w0, store.d),
                   intercept=bool(intercept), feature_names=names, client_names=cnames, name=str(name),
                   info=dict(info or {}), cache_bytes=positive_int("cache_bytes", cache_bytes))

    def replace(self, **changes) -> RegressionPopulation:
        """A validated copy with some of ``l2, p, batch_size, sampling, w0, name, info, cache_bytes`` changed (the
        store and the rows' cache stay shared)."""
        allowed = ("l2", "p", "batch_size", "sampling", "w0", "name", "info", "cache_bytes")
        bad = sorted(set(changes) - set(allowed))
        if bad:
            raise FedsdeInputError(f"replace: unknown field(s) {', '.join(bad)} (allowed: {', '.join(allowed)})")
        kw = {f: getattr(self, f) for f in allowed} | changes
        names = self.feature_names[:-1] if self.intercept else self.feature_names
        out = RegressionPopulation.create(self.store, intercept=self.intercept, feature_names=names,
                                          client_names=self.client_names, **kw)
        out._cache["rows"] = self.rows_cache
        return out

    def with_weights(self, p) -> RegressionPopulation:
        """A copy with other client weights (normalised)."""
        return self.replace(p=p)

    def with_l2(self, l2: float) -> RegressionPopulation:
        """A copy with another ridge coefficient."""
        return self.replace(l2=l2)

    def initial_weights(self, seed: int | None = None) -> np.ndarray:
        """Starting weights ``w₀`` (the file's ``w0``, else zero), shape (d,); ``seed`` is not used."""
        return np.zeros(self.d) if self.w0 is None else self.w0.copy()

    # ------------------------------------------------------------------ shapes and rows
    @property
    def Q(self) -> int:
        return self.store.Q

    @property
    def d(self) -> int:
        return self.store.d

    @property
    def sizes(self) -> np.ndarray:
        return self.store.sizes

    @property
    def n_rows(self) -> int:
        return self.store.N

    def _read_client(self, k: int):
        return self.store.client(k)

    def materialise(self):
        """The :class:`~fedsde.problems.regression.problem.RegressionProblem` of the same rows (cached), refused up
        front when it does not fit in memory."""
        if "materialised" not in self._cache:
            from fedsde.problems.classification.models import check_memory
            from fedsde.problems.regression.problem import RegressionProblem

            N, d = self.n_rows, self.d
            check_memory(f"n_clients={self.Q}, rows={N}, dim={d}", 8 * 4 * N * (d + 1) + 400 * self.Q,
                         f"the least-squares population materialised has {N} rows; use a command that samples "
                         "participants (simulate with --participation) or fewer clients")
            F = d - int(self.intercept)
            parts = [self.store.client(k) for k in range(self.Q)]
            given = None if np.array_equal(self.p, self.sizes / self.sizes.sum()) else self.p
            self._cache["materialised"] = RegressionProblem.from_clients(
                [x[:, :F] for x, _ in parts], [y for _, y in parts], l2=self.l2, intercept=self.intercept, p=given,
                batch_size=self.batch_size, sampling=self.sampling, w0=self.w0,
                feature_names=self.feature_names[:F], client_names=self.client_names, name=self.name, info=self.info)
        return self._cache["materialised"]

    # ------------------------------------------------------------------ the quadratic (exact at any size)
    def quadratic(self) -> tuple[np.ndarray, np.ndarray, float]:
        """``(A, b, c)`` of the module docstring (one pass over the store; cached)."""
        if "quadratic" not in self._cache:
            d = self.d
            A, b, c = np.zeros((d, d)), np.zeros(d), 0.0
            s = self.p / self.sizes
            for ids, X, y in self.store.blocks():
                sw = s[ids]
                Xs = X * sw[:, None]
                A += Xs.T @ X
                b += Xs.T @ y
                c += float(sw @ (y * y))
            self._cache["quadratic"] = (0.5 * (A + A.T), b, c)
        return self._cache["quadratic"]

    def hessian(self, w=None) -> np.ndarray:
        """``H = A + λI = Σ_k p_k (Ā_k + λI)`` (constant; ``w`` is ignored), shape (d, d)."""
        return self.quadratic()[0] + self.l2 * np.eye(self.d)

    @property
    def optimum(self) -> np.ndarray:
        """``w* = H⁻¹ b``, shape (d,) (refused, as the materialised problem's, when ``H`` is singular)."""
        if "optimum" not in self._cache:
            H = self.hessian()
            lam = np.linalg.eigvalsh(H)
            if lam[0] <= SINGULAR_TOL * max(1.0, lam[-1]):
                raise FedsdeInputError(
                    f"l2={self.l2}: the Hessian Σ p_k (Ā_k + l2·I) is singular (smallest eigenvalue {lam[0]:.3g}), "
                    "so the least-squares solution is not unique; use l2 > 0 or fewer features")
            self._cache["optimum"] = np.linalg.solve(H, self.quadratic()[1])
        return self._cache["optimum"].copy()

    @property
    def min_loss(self) -> float:
        """``F* = F(w*)``, from the residuals at ``w*`` (a second pass over the store)."""
        if "min_loss" not in self._cache:
            ws, s, total = self.optimum, self.p / self.sizes, 0.0
            for ids, X, y in self.store.blocks():
                r = X @ ws - y
                total += float(s[ids] @ (r * r))
            self._cache["min_loss"] = 0.5 * total + 0.5 * self.l2 * float(ws @ ws)
        return self._cache["min_loss"]

    def _w(self, w) -> np.ndarray:
        w = np.asarray(w, dtype=np.float64)
        if w.ndim == 0 or w.shape[-1] != self.d:
            raise FedsdeInputError(f"w: last axis has {w.shape[-1] if w.ndim else 0} entries, the problem has "
                                   f"d={self.d}")
        return w

    def loss(self, w) -> np.ndarray | float:
        """``F(w) = F* + ½ (w − w*)ᵀ H (w − w*)``; ``w`` of shape (..., d)."""
        u = self._w(w) - self.optimum
        out = self.min_loss + 0.5 * np.einsum("...i,ij,...j->...", u, self.hessian(), u)
        return float(out) if np.ndim(out) == 0 else out

    def grad(self, w) -> np.ndarray:
        """``∇F(w) = H (w − w*)``; ``w`` of shape (..., d)."""
        return (self._w(w) - self.optimum) @ self.hessian().T

    # ------------------------------------------------------------------ simulator and records
    def round_memory(self, slots: int, *, whole_clients: bool = False) -> tuple[int, str]:
        """Bytes a simulated round needs for ``slots`` participant slots (replicates in flight × participants), and
        what drives them: the slots' rows (``d + 1`` float64 columns; the mean client's rows per slot, three
        copies: read, gathered, on the device; the largest client's, two), the bounded cache and the per-client
        vectors (sizes, offsets, weights, names); with ``whole_clients`` every slot also holds the largest
        client's rows (batches close to the largest client)."""
        cols = self.d + 1
        mean, largest = float(np.mean(self.sizes)), int(np.max(self.sizes))
        cache = min(self.cache_bytes, 8 * cols * int(np.sum(self.sizes)))  # the cache holds at most every row
        need = 8 * cols * (3 * slots * mean + 2 * largest) + cache + 120 * self.Q
        what = (f"{slots} participant slots a round holding about {slots * mean + largest:.3g} rows of {cols} "
                f"columns (mean client {mean:.3g} rows, largest {largest})")
        if whole_clients:
            need += 8 * slots * largest * (cols + 2)
            what += f"; every slot up to the largest client ({largest} rows)"
        return int(need), what

    def describe(self) -> dict:
        """Provenance for records (the file, columns, standardisation)."""
        return dict(self.info)

    def summary(self) -> dict:
        """Sizes, weights and settings in brief (quantiles, not one entry per client), for records."""
        q = np.quantile(self.sizes, [0.0, 0.5, 0.99, 1.0]).tolist()
        pq = np.quantile(self.p, [0.0, 0.5, 1.0]).tolist()
        return {"name": self.name, "model": self.model, "Q": self.Q, "d": self.d, "l2": self.l2,
                "intercept": self.intercept, "batch_size": self.batch_size, "sampling": self.sampling,
                "features": list(self.feature_names), "population": "on demand (rows in a temporary file)",
                "n_rows": self.n_rows, "store_bytes": self.store.disk_bytes,
                "sizes_quantiles": {"min": q[0], "median": q[1], "q99": q[2], "max": q[3]},
                "p_quantiles": {"min": pq[0], "median": pq[1], "max": pq[2]},
                "w0": None if self.w0 is None else self.w0.tolist(), **self.info}
