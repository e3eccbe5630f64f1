"""The least-squares chain's second-moment map without its ``d² × d²`` matrix (internal).

Used by :mod:`fedsde.exact.least_squares`.  Write the round's covariance recursion (centred at the chain's fixed
point ``m*``, ``δ_n = m_n − m*``) as

    P_{n+1} = T(P_n) + K* + F(δ_n),     T(P) = A P A + Q₂(P),     δ_{n+1} = A δ_n,

with ``A`` the mean map (symmetric: ``I + s Σ μ_k ((I − ηU_k)^{τ_k} − I)``), ``K* = Cov[w_{n+1} | w_n = m*]`` and
``Q₂`` the part of the noise that is quadratic in ``w − m*`` (``F(δ) = L₁(δ) + Q₂(δδᵀ)``, ``L₁`` linear).
``T`` maps symmetric matrices to symmetric matrices and is

* **positive** (it maps PSD matrices to PSD matrices; so is ``Q₂``), and
* **self-adjoint** for the Frobenius inner product: each client's local recursion ``P ↦ G P G + η²κ 𝒩(P)`` is
  (``G = I − ηU`` and the rows' terms ``x_i x_iᵀ ⟨x_i x_iᵀ, P⟩`` are symmetric), so is its ``τ``-fold power, and
  so are ``A P A`` and the participation term ``Σ Cδ_kj J_k P J_j``.

Hence ``‖Tⁿ‖ = ρ(T)ⁿ`` exactly (Frobenius operator norm) and ``ρ(T)`` is the largest eigenvalue of ``T``, found by
Lanczos (``scipy.sparse.linalg.eigsh``).  When ``ρ(T) < 1`` the stationary equation ``(I − T) P = K*`` has an
SPD operator and is solved by **preconditioned conjugate gradients** with the Stein operator ``M = I − S``,
``S(P) = A P A`` (inverted exactly in the eigenbasis of ``A``: ``(VᵀRV)_ab / (1 − λ_a λ_b)``).  Both ``S`` and
``Q₂`` are positive, so ``I − T = M − Q₂`` is a regular splitting and ``ρ(M⁻¹Q₂) < 1`` iff ``ρ(T) < 1``
(T. Damm, *Rational Matrix Equations in Stochastic Control*, LNCIS 297, Springer 2004, Thm 3.2.10; H. Schneider,
*Positive operators and an inertia theorem*, Numer. Math. 7, 1965): the preconditioned spectrum lies in
``(1 − ρ', 1 + ρ')`` with ``ρ' = ρ(M⁻¹Q₂) < 1``, so PCG converges at least at the rate
``(√κ − 1)/(√κ + 1)``, ``κ = (1 + ρ')/(1 − ρ')``, and ``M⁻¹K*`` (the law without ``Q₂``) is its start.  The
solve stops at the relative residual :data:`CG_RTOL`; the true residual ``‖P − T(P) − K*‖_F/‖K*‖_F`` is then
recomputed and one refinement pass runs when it is above :data:`REFINE_RTOL`.  Each application of ``T`` costs
``O(Σ_k τ_k n_k d² + Q d³)``.

**Transient at any round.**  The mean is exact in closed form, ``δ_n = Aⁿ δ_0`` (``A = V Λ Vᵀ``).  For the
covariance, ``E_n = P_n − P*`` obeys ``E_{n+m} = T^m E_n + Σ_j T^{m−1−j} F(A^j δ_n)``, and positivity bounds the
forcing: ``Q₂(δδᵀ) ⪯ T(δδᵀ)`` gives ``‖Q₂(δδᵀ)‖_F <= ρ(T)‖δ‖²``, and ``Cov[w' | w] ⪰ 0`` along ``m* + tδ`` for
every ``t`` gives ``|uᵀL₁(δ)u| <= 2 √(uᵀK*u · uᵀQ₂(δδᵀ)u)``, so ``‖L₁(δ)‖_F <= 2 √(d ‖K*‖₂ ρ(T)) ‖δ‖``.  Hence

    ‖E_{n+m}‖_F <= ρ(T)^m ‖E_n‖_F + m r^{m−1} (2 √(d ‖K*‖₂ ρ(T)) ‖δ_n‖ + ρ(T) ‖δ_n‖²),   r = max(ρ(T), ρ(A)),

and once this is below :data:`TAIL_RTOL` times ``‖P*‖_F`` the covariance is ``P*`` to rounding
(:func:`tail_bound`); before that the rounds are applied one by one.  Small ``d`` uses the explicit matrix of the
affine recursion of ``(P, δδᵀ, δ, 1)`` and repeated squaring instead (:func:`affine_power`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse.linalg as spla

#: relative residual at which the conjugate-gradient solve of the stationary covariance stops
CG_RTOL = 1e-13
#: a true relative residual above this triggers one refinement pass of the stationary solve
REFINE_RTOL = 1e-11
#: relative accuracy asked of the Lanczos estimate of ``ρ(T)``
LANCZOS_TOL = 1e-6
#: the transient covariance is replaced by the stationary one once the bound on their distance is below this
#: fraction of ``‖P*‖_F``
TAIL_RTOL = 1e-14


def sym(P: np.ndarray) -> np.ndarray:
    return 0.5 * (P + np.swapaxes(P, -1, -2))


class SteinInverse:
    """``R ↦ (I − S)⁻¹ R`` with ``S(P) = A P A`` for a symmetric ``A`` with ``ρ(A) < 1`` (exact, ``O(d³)``)."""

    def __init__(self, A: np.ndarray):
        lam, V = np.linalg.eigh(sym(A))
        self.lam, self.V = lam, V
        self.denom = 1.0 - np.outer(lam, lam)

    def __call__(self, R: np.ndarray) -> np.ndarray:
        V = self.V
        return sym(V @ ((V.T @ R @ V) / self.denom) @ V.T)

    def power(self, n: int, x: np.ndarray) -> np.ndarray:
        """``Aⁿ x`` (any ``n >= 0``) from the eigendecomposition."""
        return self.V @ (self.lam ** float(n) * (self.V.T @ x))


def stationary_covariance(apply_T, K: np.ndarray, A: np.ndarray | None, *, maxiter: int | None = None,
                          preconditioner=None) -> tuple[np.ndarray, int, float]:
    """Solve ``P = T(P) + K`` by PCG (module docstring); ``apply_T`` maps (d, d) to (d, d).

    ``preconditioner`` (a map of (d, d) matrices, default the Stein inverse of ``A``) approximates ``(I − T)⁻¹``
    and is self-adjoint and positive definite (the SDE's stationary solve passes a Lyapunov inverse).
    Returns ``(P, iterations, relative residual)``; the residual is ``inf`` when CG did not converge.
    """
    d = K.shape[0]
    pre = SteinInverse(A) if preconditioner is None else preconditioner
    count = [0]

    def op(v):
        count[0] += 1
        P = sym(v.reshape(d, d))
        return (P - apply_T(P)).ravel()

    lin = spla.LinearOperator((d * d, d * d), matvec=op, dtype=np.float64)
    M = spla.LinearOperator((d * d, d * d), matvec=lambda v: pre(sym(v.reshape(d, d))).ravel(), dtype=np.float64)
    scale = float(np.linalg.norm(K))
    if scale == 0.0:
        return np.zeros((d, d)), 0, 0.0
    maxiter = maxiter or max(200, 20 * d)
    x, info = spla.cg(lin, K.ravel(), x0=pre(K).ravel(), rtol=CG_RTOL, atol=0.0, M=M, maxiter=maxiter)
    if info != 0:
        return sym(x.reshape(d, d)), count[0], float("inf")
    P = sym(x.reshape(d, d))
    res = K - (P - apply_T(P))
    rel = float(np.linalg.norm(res)) / scale
    if rel > REFINE_RTOL:
        dx, info = spla.cg(lin, res.ravel(), x0=pre(res).ravel(), rtol=CG_RTOL, atol=0.0, M=M, maxiter=maxiter)
        P = P + sym(dx.reshape(d, d))
        rel = float(np.linalg.norm(K - (P - apply_T(P)))) / scale
    return P, count[0], rel


def perron_root(apply_T, d: int, start: np.ndarray | None = None) -> float:
    """``ρ(T)``: the largest eigenvalue of the positive self-adjoint ``T`` on symmetric (d, d) matrices (Lanczos)."""
    if d <= 2:  # too small for ARPACK: the matrix of T from its action on the basis
        cols = [sym(apply_T(sym(np.eye(d * d)[i].reshape(d, d)))).ravel() for i in range(d * d)]
        return float(np.max(np.linalg.eigvalsh(np.array(cols).T)))
    op = spla.LinearOperator((d * d, d * d), matvec=lambda v: sym(apply_T(sym(v.reshape(d, d)))).ravel(),
                             dtype=np.float64)
    v0 = np.eye(d) if start is None or not np.any(start) else sym(start)
    val = spla.eigsh(op, k=1, which="LA", v0=v0.ravel(), tol=LANCZOS_TOL, ncv=min(d * d - 1, 20),
                     return_eigenvectors=False, maxiter=max(1000, 10 * d * d))
    return float(val[0])


def tail_bound(m: int, E: np.ndarray, delta: np.ndarray, rho_T: float, rho_A: float, K_norm2: float) -> float:
    """Upper bound on ``‖P_{n+m} − P*‖_F`` from ``E = P_n − P*`` and ``δ = m_n − m*`` (module docstring)."""
    d = delta.size
    r = max(rho_T, rho_A)
    nd = float(np.linalg.norm(delta))
    forcing = 2.0 * np.sqrt(max(d * K_norm2 * rho_T, 0.0)) * nd + rho_T * nd * nd
    with np.errstate(under="ignore"):
        geo = m * r ** (m - 1) if m > 0 else 0.0
        return float(rho_T**m * np.linalg.norm(E) + geo * forcing)


def tail_moments(step, A: np.ndarray, m0: np.ndarray, P0: np.ndarray, keep: np.ndarray, mstar: np.ndarray,
                 stationary: tuple[np.ndarray, float, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Means and covariances at the rounds ``keep`` of a chain whose round is ``step(m, P)`` (module docstring):
    rounds applied one by one until :func:`tail_bound` puts the covariance within ``TAIL_RTOL·‖P*‖_F`` of the
    stationary ``P*``, then ``(m* + Aⁿ(m₀ − m*), P*)``.  ``stationary`` is ``(P*, ρ(T), K*)``; ``ρ(T)`` is raised
    by the Lanczos tolerance so that the bound stays an upper bound."""
    Pstar, rho_T, K = stationary
    rho_T = min(1.0, rho_T * (1.0 + 10 * LANCZOS_TOL))
    pw = SteinInverse(A)
    rho_A = float(np.max(np.abs(pw.lam)))
    K2 = float(np.linalg.norm(K, 2))
    d = m0.size
    means, covs = np.empty((keep.size, d)), np.empty((keep.size, d, d))
    delta0 = m0 - mstar
    scale = float(np.linalg.norm(Pstar)) or float(np.linalg.norm(P0) + delta0 @ delta0) or 1.0
    m, P, n = m0, P0, 0
    for i, r in enumerate(keep):
        r = int(r)
        while n < r and tail_bound(r - n, P - Pstar, m - mstar, rho_T, rho_A, K2) > TAIL_RTOL * scale:
            m, P = step(m, P)
            n += 1
        if n == r:
            means[i], covs[i] = m, P
        else:
            means[i], covs[i] = mstar + pw.power(r, delta0), Pstar
    return means, covs


def affine_power(Z: np.ndarray, n: int, z: np.ndarray) -> np.ndarray:
    """``Zⁿ z`` by repeated squaring (``O(log n)`` products)."""
    out = z.copy()
    base = Z.copy()
    while n:
        if n & 1:
            out = base @ out
        n >>= 1
        if n:
            base = base @ base
    return out


def relative_gap(a: np.ndarray, b: np.ndarray) -> float:
    """``‖a − b‖_F / ‖b‖_F`` (``‖a − b‖_F`` when ``b = 0``)."""
    den = float(np.linalg.norm(b))
    return float(np.linalg.norm(a - b)) / (den if den > 0 else 1.0)


