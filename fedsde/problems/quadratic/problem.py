"""Quadratic clients: the model problem of seed 002, Section 6 (Assumption 6.1).

Client ``k`` minimises ``F_k(w) = ½ (w − a_k)ᵀ U_k (w − a_k)`` and its stochastic gradient is
``∇F_k(w) + ξ`` with ``ξ ~ N(0, Σ_k)`` (Assumption 4.4: constant noise covariance).  The global objective
is ``F(w) = Σ_k p_k F_k(w)`` with normalised weights ``p_k``.

Shapes (Q clients, dimension d) accepted by :meth:`QuadraticProblem.from_arrays`:

* ``U`` and ``Sigma``: full matrices ``(Q, d, d)``, per-client diagonals ``(Q, d)``, or, when d = 1,
  one scalar per client ``(Q,)``;
* ``a``: ``(Q, d)`` or, when d = 1, ``(Q,)``;
* ``p``: ``(Q,)`` non-negative (normalised here), or ``None`` for uniform weights;
* ``label_distributions`` (optional): ``(Q, C)`` non-negative, one row per client over ``C`` labels (rows
  normalised here), for server rules that weight clients by their label skew (FedDisco, seed 004).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedsde._tolerances import PSD_TOL, SINGULAR_TOL, SYM_TOL
from fedsde._validate import client_weights, distributions
from fedsde.errors import FedsdeInputError


def _as_matrix_stack(name: str, value, Q: int, d: int) -> np.ndarray:
    """Normalise a per-client matrix argument to shape (Q, d, d)."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise FedsdeInputError(f"{name}: could not be read as an array of numbers") from None
    if arr.ndim == 1 and d == 1 and arr.shape[0] == Q:
        arr = arr.reshape(Q, 1, 1)
    elif arr.ndim == 2 and arr.shape == (Q, d):
        arr = np.einsum("qi,ij->qij", arr, np.eye(d))
    elif arr.ndim == 3 and arr.shape == (Q, d, d):
        arr = arr.copy()
    else:
        raise FedsdeInputError(
            f"{name}: shape {arr.shape} must be (Q, d, d)=({Q}, {d}, {d}), a per-client diagonal ({Q}, {d})"
            + (f" or one scalar per client ({Q},)" if d == 1 else "")
        )
    if not np.all(np.isfinite(arr)):
        raise FedsdeInputError(f"{name}: contains NaN or inf")
    scale = max(1.0, float(np.max(np.abs(arr))))
    asym = np.max(np.abs(arr - np.swapaxes(arr, 1, 2)), axis=(1, 2))
    if np.any(asym > SYM_TOL * scale):
        k = int(np.argmax(asym))
        raise FedsdeInputError(f"{name}[{k}]: not symmetric (max |M - Mᵀ| = {asym[k]:.3g})")
    arr = 0.5 * (arr + np.swapaxes(arr, 1, 2))
    lam_min = np.linalg.eigvalsh(arr)[:, 0]
    if np.any(lam_min < -PSD_TOL * scale):
        k = int(np.argmin(lam_min))
        raise FedsdeInputError(
            f"{name}[{k}]: not positive semi-definite (smallest eigenvalue {lam_min[k]:.6g} < 0)"
        )
    return arr


@dataclass(frozen=True, eq=False)
class QuadraticProblem:
    """Q quadratic clients ``F_k(w) = ½ (w − a_k)ᵀ U_k (w − a_k)`` with Gaussian gradient noise.

    Build with :meth:`from_arrays` (validates and normalises shapes); the fields are always full arrays.

    Attributes
    ----------
    U : ndarray, shape (Q, d, d)
        Client Hessians, symmetric PSD.
    a : ndarray, shape (Q, d)
        Client minimisers.
    Sigma : ndarray, shape (Q, d, d)
        Gradient-noise covariances, symmetric PSD.
    p : ndarray, shape (Q,)
        Client weights, non-negative and summing to one.
    name : str
        Free-text label used in reports.
    label_distributions : ndarray, shape (Q, C), or None
        Optional label distribution of each client (rows sum to one); read by FedDisco.
    """

    U: np.ndarray
    a: np.ndarray
    Sigma: np.ndarray
    p: np.ndarray
    name: str = ""
    label_distributions: np.ndarray | None = None
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def from_arrays(cls, U, a, Sigma, p=None, *, name: str = "", label_distributions=None) -> QuadraticProblem:
        """Validate the arrays (see the module docstring for accepted shapes) and build a problem."""
        try:
            a_arr = np.asarray(a, dtype=np.float64)
        except (TypeError, ValueError):
            raise FedsdeInputError("a: could not be read as an array of numbers") from None
        if a_arr.ndim == 1:
            a_arr = a_arr.reshape(-1, 1)
        if a_arr.ndim != 2 or a_arr.shape[0] < 1 or a_arr.shape[1] < 1:
            raise FedsdeInputError(f"a: shape {np.shape(a)} must be (Q, d), or (Q,) when d = 1")
        if not np.all(np.isfinite(a_arr)):
            raise FedsdeInputError("a: contains NaN or inf")
        Q, d = a_arr.shape
        U_arr = _as_matrix_stack("U", U, Q, d)
        S_arr = _as_matrix_stack("Sigma", Sigma, Q, d)
        p_arr = np.full(Q, 1.0 / Q) if p is None else client_weights("p", p, Q)
        H = np.einsum("q,qij->ij", p_arr, U_arr)
        if np.linalg.eigvalsh(0.5 * (H + H.T))[0] <= SINGULAR_TOL * max(1.0, np.abs(H).max()):
            raise FedsdeInputError(
                "U: the weighted Hessian Σ p_k U_k is singular; the global optimum is not unique"
            )
        dists = None if label_distributions is None else distributions("label_distributions", label_distributions, Q)
        return cls(U=U_arr, a=a_arr, Sigma=S_arr, p=p_arr, name=name, label_distributions=dists)

    # ------------------------------------------------------------------ shapes
    @property
    def Q(self) -> int:
        """Number of clients."""
        return int(self.a.shape[0])

    @property
    def d(self) -> int:
        """Dimension of the weights."""
        return int(self.a.shape[1])

    @property
    def is_diagonal(self) -> bool:
        """True when every ``U_k`` and ``Σ_k`` is diagonal (enables elementwise fast paths)."""
        if "diag" not in self._cache:
            off = ~np.eye(self.d, dtype=bool)
            self._cache["diag"] = bool(
                np.all(self.U[:, off] == 0) and np.all(self.Sigma[:, off] == 0)
            )
        return self._cache["diag"]

    # ------------------------------------------------------------------ objective
    @property
    def hessian(self) -> np.ndarray:
        """Global Hessian ``H = Σ_k p_k U_k``, shape (d, d)."""
        return np.einsum("q,qij->ij", self.p, self.U)

    @property
    def optimum(self) -> np.ndarray:
        """Global minimiser ``w* = (Σ p_k U_k)⁻¹ Σ p_k U_k a_k`` (seed 002, A.10), shape (d,)."""
        rhs = np.einsum("q,qij,qj->i", self.p, self.U, self.a)
        return np.linalg.solve(self.hessian, rhs)

    @property
    def min_loss(self) -> float:
        """``F* = F(w*)``, the constant term the paper's A.10 omits: ½Σp_k a_kᵀU_k a_k − ½ w*ᵀ H w*."""
        return float(self.loss(self.optimum))

    def client_loss(self, w) -> np.ndarray:
        """Client losses ``F_k(w)``; ``w`` of shape (..., d) gives shape (..., Q)."""
        w = np.asarray(w, dtype=np.float64)
        diff = w[..., None, :] - self.a
        return 0.5 * np.einsum("...qi,qij,...qj->...q", diff, self.U, diff)

    def loss(self, w) -> np.ndarray | float:
        """Global loss ``F(w) = Σ_k p_k F_k(w)`` including its constant term; ``w`` of shape (..., d)."""
        out = self.client_loss(w) @ self.p
        return float(out) if np.ndim(out) == 0 else out

    def grad(self, w) -> np.ndarray:
        """Global gradient ``∇F(w) = Σ p_k U_k (w − a_k)``; ``w`` of shape (..., d)."""
        w = np.asarray(w, dtype=np.float64)
        diff = w[..., None, :] - self.a
        return np.einsum("q,qij,...qj->...i", self.p, self.U, diff)

    def excess_loss(self, mean, cov) -> float:
        """``E F(w) − F*`` for ``w ~ (mean, cov)``: ½ (m − w*)ᵀH(m − w*) + ½ Tr(H cov)."""
        m = np.asarray(mean, dtype=np.float64) - self.optimum
        H = self.hessian
        return float(0.5 * m @ H @ m + 0.5 * np.trace(H @ np.asarray(cov, dtype=np.float64)))

    def max_curvature(self) -> np.ndarray:
        """Largest eigenvalue of each ``U_k``, shape (Q,)."""
        return np.linalg.eigvalsh(self.U)[:, -1]

    def noise_factors(self) -> np.ndarray:
        """Matrices ``L_k`` with ``L_k L_kᵀ = Σ_k`` (PSD-safe, via eigendecomposition), shape (Q, d, d)."""
        if "L" not in self._cache:
            lam, V = np.linalg.eigh(self.Sigma)
            self._cache["L"] = V * np.sqrt(np.clip(lam, 0.0, None))[:, None, :]
        return self._cache["L"]

    # ------------------------------------------------------------------ transforms
    def with_weights(self, p) -> QuadraticProblem:
        """A copy with other client weights."""
        return QuadraticProblem.from_arrays(self.U, self.a, self.Sigma, p, name=self.name,
                                            label_distributions=self.label_distributions)

    def replicated(self, times: int) -> QuadraticProblem:
        """The same clients repeated ``times`` times (Q → times·Q), weights renormalised."""
        r = int(times)
        return QuadraticProblem.from_arrays(
            np.tile(self.U, (r, 1, 1)),
            np.tile(self.a, (r, 1)),
            np.tile(self.Sigma, (r, 1, 1)),
            np.tile(self.p, r),
            name=f"{self.name}×{r}" if self.name else "",
            label_distributions=None if self.label_distributions is None else np.tile(self.label_distributions,
                                                                                      (r, 1)),
        )

    def to_dict(self, *, compact: bool = True) -> dict:
        """Plain-list dict with keys ``U, a, Sigma, p`` (diagonals/scalars when ``compact`` allows), and ``name`` and
        ``label_distributions`` when set."""

        def mat(M: np.ndarray):
            off = ~np.eye(self.d, dtype=bool)
            if compact and np.all(M[:, off] == 0):
                diag = np.einsum("qii->qi", M)
                return diag[:, 0].tolist() if self.d == 1 else diag.tolist()
            return M.tolist()

        out = {
            "U": mat(self.U),
            "a": self.a[:, 0].tolist() if (compact and self.d == 1) else self.a.tolist(),
            "Sigma": mat(self.Sigma),
            "p": self.p.tolist(),
        }
        if self.name:
            out["name"] = self.name
        if self.label_distributions is not None:
            out["label_distributions"] = self.label_distributions.tolist()
        return out
