"""FedDisco's theory (seed 004, Ye et al. 2023): the bound of Theorem 4.5 and its bound-optimal weights.

Setting (reference/seed-feddisco.md §2): ``K`` clients with dataset fractions ``n_k`` and discrepancies ``d_k``,
aggregation weights ``p`` on the simplex, ``τ`` local SGD steps of size ``η``, ``L``-smooth clients, noise
``σ²``, and Assumption 4.4 ``‖∇F_k(w)‖² ≤ ‖∇F(w)‖² + B d_k`` with ``F = Σ n_k F_k``.

Theorem 4.5::

    (1/T) Σ_t E‖∇F(w^{(t,0)})‖² ≤ (T1 + T2 + T3 + T4 + T5) / (1 − 3A − W_D(1 − A)),
    A = 2τ(τ−1)η²L²,  W_D = 2K Σ_k (n_k − p_k)²   (appendix; the main text prints 2 Σ_k (n_k − p_k)²),
    T1 = 2(1−A)ΔF/(τηT),  T2 = (1−A) W_D (B/K) Σ_k d_k,  T3 = 2(1−A) L η σ² Σ_k p_k²,
    T4 = 2(τ−1)σ²L²η²,  T5 = 2AB Σ_k p_k d_k,

valid for ``ηL ≤ 1/(2τ)`` and a positive denominator.  The functions take ``τ`` as ``local_steps`` (old name,
accepted for one release: ``tau``).
"""

from __future__ import annotations

import numpy as np
from scipy import optimize

from fedsde._compat import renamed
from fedsde._tolerances import SLSQP_FTOL
from fedsde._validate import positive_float, positive_int
from fedsde.errors import FedsdeInputError
from fedsde.theory.results import BoundValue

WD_SCALES = ("2K", "2")


def _vec(name: str, x, K: int | None = None) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64).reshape(-1)
    if K is not None and arr.shape != (K,):
        raise FedsdeInputError(f"{name}: shape {arr.shape} must be ({K},)")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise FedsdeInputError(f"{name}: entries must be finite and >= 0")
    return arr


def _wd_factor(wd_scale: str, K: int) -> float:
    if wd_scale not in WD_SCALES:
        raise FedsdeInputError(f"wd_scale={wd_scale!r}: must be '2K' (appendix, correct) or '2' (main text)")
    return 2.0 * K if wd_scale == "2K" else 2.0


@renamed(tau="local_steps")
def disco_bound(n, d, p, *, local_steps: int, eta: float, L: float, sigma2: float, B: float, T: int, F0_gap: float,
                wd_scale: str = "2K") -> BoundValue:
    """Theorem 4.5's right-hand side (see the module docstring); ``inf`` (``valid=False``) when it is vacuous.

    ``wd_scale="2K"`` is the appendix's (and the re-derived, correct) ``W_D``; ``"2"`` the main text's.
    """
    n = _vec("n", n)
    K = n.shape[0]
    d = _vec("d", d, K)
    p = _vec("p", p, K)
    tau = positive_int("local_steps", local_steps)  # τ of the paper
    eta = positive_float("eta", eta)
    T = positive_int("T", T)
    A = 2.0 * tau * (tau - 1) * eta**2 * L**2
    WD = _wd_factor(wd_scale, K) * float(np.sum((n - p) ** 2))
    terms = {
        "T1": 2.0 * (1 - A) * F0_gap / (tau * eta * T),
        "T2": (1 - A) * WD * (B / K) * float(d.sum()),
        "T3": 2.0 * (1 - A) * L * eta * sigma2 * float(np.sum(p**2)),
        "T4": 2.0 * (tau - 1) * sigma2 * L**2 * eta**2,
        "T5": 2.0 * A * B * float(p @ d),
    }
    den = 1.0 - 3.0 * A - WD * (1.0 - A)
    notes = []
    if eta * L > 1.0 / (2 * tau):
        notes.append(f"ηL = {eta * L:.4g} > 1/(2τ) = {1 / (2 * tau):.4g}")
    if A >= 1:
        notes.append(f"A = {A:.4g} >= 1")
    if den <= 0:
        notes.append(f"denominator 1 − 3A − W_D(1 − A) = {den:.4g} <= 0")
    terms.update({"A": A, "W_D": WD, "denominator": den})
    value = float(sum(terms[k] for k in ("T1", "T2", "T3", "T4", "T5")) / den) if den > 0 and A < 1 else float("inf")
    variant = "corrected" if wd_scale == "2K" else "paper"
    return BoundValue(value, terms, variant, "seed 004, Thm 4.5" + (" (W_D = 2KΣ(n−p)²)" if wd_scale == "2K"
                                                                      else " (main text W_D = 2Σ(n−p)²)"),
                      tuple(notes), valid=not notes)


def project_simplex(v) -> np.ndarray:
    """Euclidean projection of ``v`` onto the probability simplex (sort-based; Held et al., Duchi et al. 2008).

    ``p_k = max(0, v_k − θ)`` with ``θ`` chosen so that ``Σ p_k = 1``.
    """
    v = np.asarray(v, dtype=np.float64).reshape(-1)
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    k = np.arange(1, v.size + 1)
    rho = int(np.nonzero(u - css / k > 0)[0][-1])
    theta = css[rho] / (rho + 1.0)
    return np.maximum(v - theta, 0.0)


def _reformulated_coeffs(n, d, *, tau, eta, L, sigma2, B, lam, wd_scale):
    K = n.shape[0]
    A = 2.0 * tau * (tau - 1) * eta**2 * L**2
    omega = _wd_factor(wd_scale, K)
    alpha = (1 - A) * omega * (B * float(d.sum()) / K + lam)
    beta = 2.0 * (1 - A) * L * eta * sigma2
    gamma = 2.0 * A * B
    return alpha, beta, gamma


@renamed(tau="local_steps")
def reformulated_objective(p, n, d, *, local_steps: int, eta: float, L: float, sigma2: float, B: float, T: int,
                           F0_gap: float, lam: float, wd_scale: str = "2K") -> float:
    """The paper's surrogate ``T1 + … + T5 − λ(1 − 3A − W_D(1 − A))`` minimised over ``p`` (Sec. 4, App. C.5)."""
    bv = disco_bound(n, d, p, local_steps=local_steps, eta=eta, L=L, sigma2=sigma2, B=B, T=T, F0_gap=F0_gap,
                     wd_scale=wd_scale)
    t = bv.terms
    return float(t["T1"] + t["T2"] + t["T3"] + t["T4"] + t["T5"] - lam * t["denominator"])


@renamed(tau="local_steps")
def bound_optimal_weights(n, d, *, local_steps: int, eta: float, L: float, sigma2: float, B: float, lam: float,
                          wd_scale: str = "2K") -> np.ndarray:
    """Minimiser over the simplex of the reformulated bound: ``Proj_Δ(v)``.

    Up to constants the reformulated objective is ``α‖n − p‖² + β‖p‖² + γ⟨p, d⟩`` with
    ``α = (1−A)·ω·(B Σd/K + λ)`` (``ω`` = 2K or 2, the ``W_D`` factor), ``β = 2(1−A)Lησ²``, ``γ = 2AB``; it is
    an isotropic quadratic, so the minimiser is the projection of ``v = (αn − γd/2)/(α + β)`` onto the simplex.
    For ``ω = 2K`` this is ``v_k = (G/H) n_k − (AB/(2(1−A)H)) d_k``, ``G = BΣd + Kλ``, ``H = G + Lησ²``
    (reference/seed-feddisco.md §2.5); clients whose ``v_k`` falls below the threshold get weight 0.
    """
    n = _vec("n", n)
    d = _vec("d", d, n.shape[0])
    alpha, beta, gamma = _reformulated_coeffs(n, d, tau=local_steps, eta=eta, L=L, sigma2=sigma2, B=B, lam=lam,
                                              wd_scale=wd_scale)
    return project_simplex((alpha * n - 0.5 * gamma * d) / (alpha + beta))


@renamed(tau="local_steps")
def minimise_bound(n, d, *, local_steps: int, eta: float, L: float, sigma2: float, B: float, T: int, F0_gap: float,
                   wd_scale: str = "2K", start=None) -> np.ndarray:
    """Direct minimiser over the simplex of the original bound of Thm 4.5 (SLSQP from ``start``, default ``n``)."""
    n = _vec("n", n)
    d = _vec("d", d, n.shape[0])
    K = n.shape[0]

    def f(p):
        v = disco_bound(n, d, np.clip(p, 0, None), local_steps=local_steps, eta=eta, L=L, sigma2=sigma2, B=B, T=T,
                        F0_gap=F0_gap, wd_scale=wd_scale).value
        return v if np.isfinite(v) else 1e300

    res = optimize.minimize(f, n.copy() if start is None else np.asarray(start, float), method="SLSQP",
                            bounds=[(0, 1)] * K, constraints=[{"type": "eq", "fun": lambda p: p.sum() - 1.0}],
                            options={"ftol": SLSQP_FTOL, "maxiter": 1000})
    p = np.clip(res.x, 0, None)
    return p / p.sum()
