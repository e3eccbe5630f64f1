"""The least-squares SDE's moment equations without their ``(2d² + d + 1)²`` matrix (internal).

Used by :class:`fedsde.exact.LeastSquaresSDE` where ``d > DENSE_MAX_D`` (or ``method="matrix-free"``).  Centred at
the drift's zero ``m*`` (``δ = m − m*``, ``D = δδᵀ``), the moments obey the linear ODE ``ż = Z z`` of
``z = (vec P, vec D, δ, 1)`` (:mod:`fedsde.exact.least_squares_sde`):

    Ṗ = G P + P Gᵀ + 𝒬(P + D) + ℓ(δ) + k,     Ḋ = G D + D Gᵀ,     δ̇ = G δ,

with ``𝒬`` the part of ``E σσᵀ`` quadratic in ``w − m*`` (applied matrix-free, :meth:`LeastSquaresRoundLaw.pieces`
on ``[[X, 0], [0, 0]]``: ``O(N d²)`` per local step), ``ℓ`` its linear part (a ``d² × d`` matrix, built once from
``d`` applications) and ``k = σσᵀ(m*)``.  ``G`` is symmetric and ``𝒬`` self-adjoint for the Frobenius inner
product (:mod:`fedsde.exact._least_squares_solve`: each client's local noise recursion is), so ``Zᵀ`` is applied
as cheaply as ``Z`` (:func:`generator_operator`).

* **Moments at a time** ``t``: ``e^{Zt} z₀`` by ``scipy.sparse.linalg.expm_multiply`` (Al-Mohy & Higham, SIAM J.
  Sci. Comput. 33(2), 2011: a truncated Taylor series with scaling, to the unit roundoff), which needs ``Z`` and
  ``Zᵀ`` only through products; the requested times are visited in increasing order, each from the previous one.
  Its cost grows with ``‖Z‖₁ t`` (like the chain's with its rounds).  The 1-norm estimator it calls draws random
  signs from numpy's global generator: it runs on a fixed seed, and the global state is put back
  (:func:`_fixed_global_seed`), so the numbers are the same on every run and no caller's draws change.
* **Stationary law**: ``ℒ(P) = G P + P Gᵀ + 𝒬(P)`` is self-adjoint and resolvent positive, so the SDE has a
  stationary law iff its largest eigenvalue (Lanczos, :func:`fedsde.exact._least_squares_solve.perron_root`) is
  ``< 0``; then ``−ℒ P = k`` is solved by preconditioned conjugate gradients with the Lyapunov operator
  ``M = −(G · + · G)`` (:class:`LyapunovInverse`, exact in the eigenbasis of ``G``): ``−ℒ = M − 𝒬`` is a regular
  splitting and ``ρ(M⁻¹𝒬) < 1`` iff the spectral abscissa of ``ℒ`` is negative (T. Damm, *Rational Matrix Equations
  in Stochastic Control*, LNCIS 297, Springer 2004, Thm 3.2.10), the continuous-time twin of the chain's solve.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np
import scipy.sparse.linalg as spla

#: seed of numpy's global generator while ``expm_multiply`` estimates norms (its estimator draws from it)
NORM_ESTIMATE_SEED = 0
_GLOBAL_RNG_LOCK = threading.Lock()


@contextmanager
def _fixed_global_seed(seed: int = NORM_ESTIMATE_SEED):
    """Numpy's global generator seeded with ``seed`` inside the block, its former state restored after it."""
    with _GLOBAL_RNG_LOCK:
        # scipy's estimator reads the legacy global generator; it is seeded here and put back as it was
        state = np.random.get_state()  # noqa: NPY002
        np.random.seed(seed)  # noqa: NPY002
        try:
            yield
        finally:
            np.random.set_state(state)  # noqa: NPY002


class LyapunovInverse:
    """``R ↦ X`` with ``−(G X + X G) = R`` for a symmetric ``G`` with negative eigenvalues (exact, ``O(d³)``)."""

    def __init__(self, G: np.ndarray):
        g, V = np.linalg.eigh(0.5 * (G + G.T))
        self.V = V
        self.denom = -(g[:, None] + g[None, :])

    def __call__(self, R: np.ndarray) -> np.ndarray:
        V = self.V
        X = V @ ((V.T @ R @ V) / self.denom) @ V.T
        return 0.5 * (X + X.T)


def generator_operator(G: np.ndarray, quad, ell: np.ndarray, k: np.ndarray) -> spla.LinearOperator:
    """``Z`` of ``z = (vec P, vec D, δ, 1)`` (module docstring) as a linear operator with ``Zᵀ``.

    Parameters
    ----------
    G : ndarray, shape (d, d)
        The drift matrix (symmetric).
    quad : callable
        ``X ↦ 𝒬(X)``, (d, d) to (d, d), self-adjoint.
    ell : ndarray, shape (d², d)
        ``ℓ`` (row-major ``vec``).
    k : ndarray, shape (d²,)
        ``vec σσᵀ(m*)``.
    """
    d = G.shape[0]
    dd = d * d
    n = 2 * dd + d + 1

    def split(z):
        z = np.asarray(z, dtype=np.float64).reshape(-1)
        return z[:dd].reshape(d, d), z[dd:2 * dd].reshape(d, d), z[2 * dd:2 * dd + d], z[-1]

    def matvec(z):
        P, D, delta, one = split(z)
        out = np.empty(n)
        out[:dd] = (G @ P + P @ G.T + quad(P + D)).reshape(-1) + ell @ delta + one * k
        out[dd:2 * dd] = (G @ D + D @ G.T).reshape(-1)
        out[2 * dd:2 * dd + d] = G @ delta
        out[-1] = 0.0
        return out

    def rmatvec(y):
        YP, YD, ydelta, _ = split(y)
        q = quad(YP)
        out = np.empty(n)
        out[:dd] = (G.T @ YP + YP @ G + q).reshape(-1)
        out[dd:2 * dd] = (q + G.T @ YD + YD @ G).reshape(-1)
        out[2 * dd:2 * dd + d] = ell.T @ YP.reshape(-1) + G.T @ ydelta
        out[-1] = k @ YP.reshape(-1)
        return out

    return spla.LinearOperator((n, n), matvec=matvec, rmatvec=rmatvec, dtype=np.float64)


def propagate(op: spla.LinearOperator, trace: float, times: np.ndarray, z0: np.ndarray) -> np.ndarray:
    """``e^{Z t} z₀`` at every ``t`` of ``times`` (each ``>= 0``, any order), shape (T, n).

    ``trace`` is the part of ``tr Z`` known in closed form: ``expm_multiply`` uses it only to shift ``Z`` by a
    multiple of the identity before its norm estimates (``e^{Zt} = e^{μt} e^{(Z − μ)t}`` holds for every ``μ``)."""
    out = np.empty((times.size, z0.size))
    z, now = z0.copy(), 0.0
    with _fixed_global_seed():
        for i in np.argsort(times, kind="stable"):
            step = float(times[i]) - now
            if step > 0.0:
                z = spla.expm_multiply(step * op, z, traceA=step * trace)
                now = float(times[i])
            out[i] = z
    return out


def largest_eigenvalue(apply_L, d: int, start: np.ndarray) -> float:
    """The largest eigenvalue of a self-adjoint map ``apply_L`` of symmetric (d, d) matrices (Lanczos).

    The map is restricted to the symmetric matrices through an orthonormal basis of them (``X_ii`` and
    ``√2 X_ij``, ``i < j``), so that the antisymmetric ones (which a projection would send to 0) add no eigenvalue.
    """
    from fedsde.exact._least_squares_solve import LANCZOS_TOL

    iu = np.triu_indices(d)
    scale = np.where(iu[0] == iu[1], 1.0, np.sqrt(2.0))

    def to_matrix(u):
        X = np.zeros((d, d))
        X[iu] = np.asarray(u).reshape(-1) / scale
        return X + np.triu(X, 1).T

    def op(u):
        Y = apply_L(to_matrix(u))
        return 0.5 * (Y + Y.T)[iu] * scale

    n = iu[0].size
    if n <= 3:  # too small for ARPACK: the matrix from the basis
        return float(np.max(np.linalg.eigvalsh(np.array([op(e) for e in np.eye(n)]).T)))
    lin = spla.LinearOperator((n, n), matvec=op, dtype=np.float64)
    v0 = (0.5 * (start + start.T))[iu] * scale
    val = spla.eigsh(lin, k=1, which="LA", v0=v0 if np.any(v0) else np.ones(n), tol=LANCZOS_TOL,
                     ncv=min(n - 1, 20), return_eigenvectors=False, maxiter=max(1000, 10 * n))
    return float(val[0])
