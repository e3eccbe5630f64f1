"""FedAWARE's theory (seeds 000/001, Zeng et al.): Theorem 4.1 with its validity condition, Theorem 4.2, Lemma B.2.

Notation (reference/seed-fedaware.md §3): ``N`` clients with objective weights ``λ`` (simplex), adaptive weights
``λ̃^t``, local steps ``K_i``, client lr ``η_l``, server lr ``η``, momentum ``α``, participation probability
``p``, ``β = (1 − α)p``, ``L``-smooth clients, local noise ``σ_l²``, global variance ``σ_g²`` (A3.1).

Per round ``t`` (``χ²_t = Σ_i (λ̃_i/λ_i)²``, ``χ_t = Σ_i λ̃_i/λ_i``)::

    A_t = N + χ²_t − 2χ_t = Σ_i (1 − λ̃_i/λ_i)²,
    D̃(x) = √(Σ_i λ_i‖∇f_i‖² / ‖Σ_i λ̃_i ∇f_i‖²),   G̃ = max_t √(Σ_i λ_i‖∇f_i(x^t)‖²),
    ρ^t = 1 − √A_t − A_t − 6 K̃ β L G̃ √χ²_t / D̃(x^t).

Theorem 4.1 (eq. (9)) needs ``ρ^t > 0`` for every ``t``, i.e. at least ``A_t < 0.382``: for the sparse
``λ̃`` that min-norm solvers return, ``A_t`` is at least the number of clients with zero weight, so the bound
is vacuous — :func:`thm_4_1` then reports ``valid=False`` and no number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsde._tolerances import DIVISION_FLOOR, ROUNDING_SLACK, ZERO_WEIGHT
from fedsde._validate import choice, positive_float, unit_interval
from fedsde.errors import FedsdeInputError
from fedsde.params import takes_values
from fedsde.theory.results import BoundValue

VARIANTS = ("paper", "corrected")


@dataclass(frozen=True)
class FedAwareSettings:
    """FedAWARE's algorithm settings in seed 000's symbols (reference/seed-fedaware.md §3).

    Parameters
    ----------
    eta : float
        Server learning rate ``η > 0``.
    eta_l : float
        Client learning rate ``η_l > 0``.
    K : int or array of int, shape (N,)
        Local steps ``K_i >= 1`` (one number for every client, or one per client; its length is checked against
        ``N`` where the weights are known).
    alpha : float
        Server momentum ``α`` in ``[0, 1)``.
    p : float
        Participation probability ``p`` in ``(0, 1]`` (``β = (1 − α)p``).
    """

    eta: float
    eta_l: float
    K: Any
    alpha: float
    p: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "eta", positive_float("eta", self.eta))
        object.__setattr__(self, "eta_l", positive_float("eta_l", self.eta_l))
        K = np.asarray(self.K)
        if K.ndim > 1 or K.size == 0 or not np.issubdtype(K.dtype, np.number) or np.any(K < 1) \
                or np.any(K != np.round(K)):
            raise FedsdeInputError(f"K={self.K!r}: must be an int >= 1 or one int >= 1 per client")
        K = K.astype(np.float64)
        K.setflags(write=False)
        object.__setattr__(self, "K", K)
        object.__setattr__(self, "alpha", unit_interval("alpha", self.alpha))
        object.__setattr__(self, "p", unit_interval("p", self.p, closed_right=True, open_left=True))

    @property
    def beta(self) -> float:
        """``β = (1 − α)p``."""
        return (1.0 - self.alpha) * self.p


@dataclass(frozen=True)
class FedAwareConstants:
    """The problem's constants in Theorem 4.1 (seed 000, A3.1): ``L``-smooth clients, local noise ``σ_l²``, global
    variance ``σ_g²``.

    Parameters
    ----------
    L : float
        Smoothness ``L > 0``.
    sigma_l2 : float
        Local stochastic-gradient variance ``σ_l² >= 0``.
    sigma_g2 : float
        Global (between-client) variance ``σ_g² >= 0``.
    """

    L: float
    sigma_l2: float
    sigma_g2: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "L", positive_float("L", self.L))
        object.__setattr__(self, "sigma_l2", positive_float("sigma_l2", self.sigma_l2, allow_zero=True))
        object.__setattr__(self, "sigma_g2", positive_float("sigma_g2", self.sigma_g2, allow_zero=True))


def _check(lam_tilde: np.ndarray, lam: np.ndarray, grads: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lt = np.asarray(lam_tilde, dtype=np.float64)
    lam = np.asarray(lam, dtype=np.float64).reshape(-1)
    g = np.asarray(grads, dtype=np.float64)
    if lt.ndim == 1:
        lt = lt[None]
    if g.ndim == 2:
        g = g[None]
    N = lam.shape[0]
    if lt.shape[1] != N or g.shape[:2] != (lt.shape[0], N) or np.any(lam <= 0):
        raise FedsdeInputError("lam_tilde (T, N), lam (N,) > 0 and grads (T, N, d): shapes must agree")
    return lt, lam, g


def chi_quantities(lam_tilde, lam) -> dict:
    """``χ²_t``, ``χ_t`` and ``A_t = Σ_i (1 − λ̃_i/λ_i)²`` for weights ``lam_tilde`` of shape (T, N)."""
    lt = np.atleast_2d(np.asarray(lam_tilde, dtype=np.float64))
    lam = np.asarray(lam, dtype=np.float64).reshape(-1)
    r = lt / lam
    return {"chi2": np.sum(r**2, axis=1), "chi": np.sum(r, axis=1), "A": np.sum((1.0 - r) ** 2, axis=1),
            "zero_weights": np.sum(lt <= ZERO_WEIGHT, axis=1)}


@takes_values(types={"settings": FedAwareSettings, "constants": FedAwareConstants},
              settings=("eta", "eta_l", "K", "alpha", "p"), constants=("L", "sigma_l2", "sigma_g2"))
def thm_4_1(lam_tilde, lam, grads, losses, settings: FedAwareSettings, constants: FedAwareConstants, *,
            variant: str = "paper") -> BoundValue:
    """Theorem 4.1 (eq. (9)) of seed 000 along a trajectory, with its validity condition.

    ``thm_4_1(lt, lam, g, f, FedAwareSettings(eta=…, eta_l=…, K=…, alpha=…, p=…), FedAwareConstants(L=…,
    sigma_l2=…, sigma_g2=…))``, or with the symbols as keywords (``thm_4_1(lt, lam, g, f, L=…, eta=…, …)``),
    folded into the two values at the call.

    Parameters
    ----------
    lam_tilde : ndarray, shape (T, N)
        Adaptive weights of rounds ``t = 0 … T−1``.
    lam : ndarray, shape (N,)
        Objective weights.
    grads : ndarray, shape (T, N, d)
        Client gradients ``∇f_i(x^t)``.
    losses : ndarray, shape (T + 1,)
        ``f(x^t)`` for ``t = 0 … T`` (the "vanishing" telescoping part of ``ε_opt``).
    settings : FedAwareSettings
        ``η``, ``η_l``, ``K_i``, ``α``, ``p`` (or their keywords ``eta``, ``eta_l``, ``K``, ``alpha``, ``p``).
    constants : FedAwareConstants
        ``L``, ``σ_l²``, ``σ_g²`` (or their keywords ``L``, ``sigma_l2``, ``sigma_g2``).
    variant : {"paper", "corrected"}
        ``"paper"``: ``Φ_t = Σ_i 30η_l(K_i − K_min)ζ_i`` and ``σ² = 5η_l(σ_l² + 6K_min²σ_g²)`` as printed;
        ``"corrected"``: the λ-weighted ``Φ_t`` and ``6K_min σ_g²`` re-derived from Lemma A.1.

    Returns
    -------
    BoundValue
        ``value = ε_opt + Σ_t βLG̃√χ²_t √(σ² + Φ_t) / (T ρ^t D̃(x^t))`` when every ``ρ^t > 0``; otherwise
        ``value = nan`` and ``valid = False`` (the theorem does not apply).  ``terms`` carries ``rho`` (T,),
        ``A`` (T,), ``zero_weights`` (T,) and the other per-round pieces either way.
    """
    choice("variant", variant, VARIANTS)
    lt, lam, g = _check(lam_tilde, lam, grads)
    T, N, _ = g.shape
    if settings.K.ndim == 1 and settings.K.shape[0] != N:
        raise FedsdeInputError(f"K: {settings.K.shape[0]} values for {N} clients; give one int or one per client")
    K = np.broadcast_to(settings.K, (N,))
    eta, eta_l, beta = settings.eta, settings.eta_l, settings.beta
    L, sigma_l2, sigma_g2 = constants.L, constants.sigma_l2, constants.sigma_g2
    Kmin, Kt = float(K.min()), float(lam @ K)
    gf = np.einsum("i,tid->td", lam, g)  # ∇f
    gft = np.einsum("ti,tid->td", lt, g)  # ∇f̃
    sq = np.sum(g**2, axis=-1)  # (T, N)
    zeta = np.sum((g - gf[:, None, :]) ** 2, axis=-1)
    num = sq @ lam
    D = np.sqrt(num / np.maximum(np.sum(gft**2, axis=1), DIVISION_FLOOR))
    G = float(np.sqrt(num.max()))
    cq = chi_quantities(lt, lam)
    A, chi2 = cq["A"], cq["chi2"]
    if variant == "paper":
        Phi = 30.0 * eta_l * ((K - Kmin)[None, :] * zeta).sum(1)
        sigma2 = 5.0 * eta_l * (sigma_l2 + 6.0 * Kmin**2 * sigma_g2)
    else:  # "corrected"
        Phi = 30.0 * eta_l * ((lam * (K - Kmin))[None, :] * zeta).sum(1)
        sigma2 = 5.0 * eta_l * (sigma_l2 + 6.0 * Kmin * sigma_g2)
    rho = 1.0 - np.sqrt(A) - A - 6.0 * Kt * beta * L * G * np.sqrt(chi2) / D
    Delta = Phi + sigma2 + 5.0 * eta_l * 6.0 * Kt * np.sum(gf**2, axis=1)
    f = np.asarray(losses, dtype=np.float64).reshape(-1)
    if f.shape[0] != T + 1:
        raise FedsdeInputError(f"losses: need T + 1 = {T + 1} values f(x^0) … f(x^T)")
    conds = {
        "rho>0_all_rounds": bool(np.all(rho > 0)),
        "eta_l<=1/K_i": bool(np.all(eta_l <= 1.0 / K)),
        "momentum_(1-beta)^2(1+2L^2eta^2chi^2)<=1": bool(np.all((1 - beta) ** 2 * (1 + 2 * L**2 * eta**2 * chi2)
                                                                <= 1)),
        "grad_f<=grad_f_tilde": bool(np.all(np.sum(gf**2, 1) <= np.sum(gft**2, 1) * (1 + ROUNDING_SLACK))),
    }
    terms = {"rho": rho, "A": A, "chi2": chi2, "zero_weights": cq["zero_weights"], "D_tilde": D, "G_tilde": G,
             "Phi": Phi, "sigma2": sigma2, "conditions": conds}
    notes = []
    if not conds["rho>0_all_rounds"]:
        bad = int(np.sum(rho <= 0))
        notes.append(f"ρ^t <= 0 in {bad} of {T} rounds (min ρ = {rho.min():.3g}, max A_t = {A.max():.3g}, "
                     f"up to {int(cq['zero_weights'].max())} zero weights): the bound does not apply")
        return BoundValue(float("nan"), terms, variant, "seed 000, Thm 4.1 / eq. (9)", tuple(notes), valid=False)
    eps = np.mean(((f[:-1] - f[1:]) / eta + eta * chi2 * beta**2 * L**3 * Delta) / rho)
    het = float(np.sum(beta * L * G * np.sqrt(chi2) * np.sqrt(sigma2 + Phi) / (T * rho * D)))
    terms.update({"eps_opt": float(eps), "heterogeneity": het})
    other = [k for k, v in conds.items() if not v and k != "rho>0_all_rounds"]
    notes += [f"side condition {k} fails" for k in other]
    return BoundValue(float(eps + het), terms, variant, "seed 000, Thm 4.1 / eq. (9)", tuple(notes),
                      valid=not other)


def thm_4_2(lam_tilde, lam, grads, *, sigma_g2: float) -> BoundValue:
    """Theorem 4.2: ``min_t ‖∇f̃(x^t)‖² ≤ 2Aσ_g² + 2(1 + A)(1/T)Σ_t ‖∇f(x^t)‖²`` with ``A = max_t A_t``."""
    lt, lam, g = _check(lam_tilde, lam, grads)
    gf = np.einsum("i,tid->td", lam, g)
    A = float(chi_quantities(lt, lam)["A"].max())
    terms = {"variance": 2.0 * A * sigma_g2, "gradient": 2.0 * (1.0 + A) * float(np.mean(np.sum(gf**2, 1)))}
    return BoundValue(float(sum(terms.values())), terms, "paper", "seed 000, Thm 4.2")


def lemma_b_2(lam_tilde, lam, grads, *, sigma_g2: float, variant: str = "paper") -> tuple[np.ndarray, np.ndarray]:
    """Lemma B.2's step ``‖Σ_i(λ̃_i − λ_i)∇f_i‖² ≤ RHS`` at each point: returns ``(lhs, rhs)``, shape (T,).

    Printed: ``RHS = A‖∇f‖²`` (invalid where ``∇f = 0`` but ``∇f_i ≠ 0``); corrected (Cauchy–Schwarz with
    ``a_i = λ̃_i/λ_i − 1``): ``RHS = A(σ_g² + ‖∇f‖²)``.
    """
    choice("variant", variant, VARIANTS)
    lt, lam, g = _check(lam_tilde, lam, grads)
    diff = np.einsum("ti,tid->td", lt - lam[None, :], g)
    lhs = np.sum(diff**2, axis=1)
    gf2 = np.sum(np.einsum("i,tid->td", lam, g) ** 2, axis=1)
    A = chi_quantities(lt, lam)["A"]
    rhs = A * gf2 if variant == "paper" else A * (sigma_g2 + gf2)
    return lhs, rhs
