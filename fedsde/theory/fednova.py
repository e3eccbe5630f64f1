"""FedNova's theory (seed 003, Wang et al. 2021): quantities A, B, C, χ², Theorems 1–5, objective inconsistency.

Notation (reference/seed-fednova.md §0, §3): ``m`` clients with weights ``p_i``, accumulation vectors ``a_i``
(``Δ_i = −η G_i a_i``), aggregation weights ``w_i`` and effective steps ``τ_eff`` of the generalized update
rule (6) ``x⁺ = x − τ_eff Σ_i w_i η d_i``.  FedAvg-type methods have ``τ_eff = Σ p_i ‖a_i‖₁`` and
``w_i = p_i ‖a_i‖₁ / τ_eff`` (eq. (7)); FedNova has ``w_i = p_i``.

Quantities (eqs. (10)–(12))::

    A = m τ_eff Σ_i w_i² ‖a_i‖₂²/‖a_i‖₁²,   B = Λ Σ_i w_i (τ_i − 1) ‖a_i‖₂²/‖a_i‖₁,   C = Λ² max_i τ_i(τ_i − 1),
    χ²_{p‖w} = Σ_i (p_i − w_i)²/w_i,   Λ = max entry of the a_i.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize

from fedsde._compat import renamed
from fedsde._tolerances import SLSQP_FTOL_MULTISTART
from fedsde._validate import choice, client_weights, positive_float, positive_int, unit_interval
from fedsde.aggregators import Aggregator, get_aggregator
from fedsde.errors import FedsdeInputError
from fedsde.exact import round_law
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.theory.results import CLOSED_FORM, OPTIMISATION, BoundValue, Constant

SOLVERS = ("vanilla", "prox", "momentum")


@renamed(tau="local_steps")
def accumulation_vector(local_steps: int, solver: str = "vanilla", *, alpha: float = 0.0,
                        rho: float = 0.0) -> np.ndarray:
    """Accumulation vector ``a`` of a local solver after ``τ = local_steps`` local steps (old name: ``tau``), oldest
    gradient first (reference/seed-fednova.md §1.4).

    * ``"vanilla"``: ``[1, …, 1]``;
    * ``"prox"`` (``α = ημ``): ``[(1−α)^{τ−1}, …, (1−α), 1]``;
    * ``"momentum"`` (heavy ball ``ρ``, buffer reset each round): ``[1 − ρ^τ, …, 1 − ρ]/(1 − ρ)``.
    """
    tau = positive_int("local_steps", local_steps)
    choice("solver", solver, SOLVERS)
    if solver == "vanilla":
        return np.ones(tau)
    if solver == "prox":
        unit_interval("alpha", alpha, closed_right=True)  # FedProx's α = ημ
        return (1.0 - alpha) ** np.arange(tau - 1, -1, -1, dtype=np.float64)
    unit_interval("rho", rho)  # "momentum"
    return (1.0 - rho ** np.arange(tau, 0, -1, dtype=np.float64)) / (1.0 - rho)


@dataclass(frozen=True)
class FedNovaQuantities:
    """``τ_eff``, ``w``, ``‖a_i‖₁``, ``‖a_i‖₂²``, ``Λ``, ``A``, ``B``, ``C``, ``χ²_{p‖w}``; slowdown ``τ̄/τ_eff``."""

    p: np.ndarray
    tau: np.ndarray
    w: np.ndarray
    tau_eff: float
    a1: np.ndarray
    a2sq: np.ndarray
    Lambda: float
    A: float
    B: float
    C: float
    chi2: float

    @property
    def m(self) -> int:
        return int(self.p.shape[0])

    @property
    def tau_bar(self) -> float:
        return float(self.tau.mean())

    @property
    def slowdown(self) -> float:
        return self.tau_bar / self.tau_eff

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("p", "tau", "w", "tau_eff", "a1", "a2sq", "Lambda", "A", "B", "C",
                                              "chi2", "tau_bar", "slowdown")}


def fednova_quantities(p, a_vectors, *, aggregator: str | Aggregator = "fedavg",
                       tau_eff: float | None = None) -> FedNovaQuantities:
    """Quantities of eqs. (10)–(12) for FedAvg-type (``w ∝ p‖a‖₁``) or FedNova (``w = p``) aggregation.

    Parameters
    ----------
    p : array, shape (m,)
        Client weights (normalised here).
    a_vectors : sequence of arrays
        Accumulation vector of each client (:func:`accumulation_vector`).
    aggregator : {"fedavg", "fednova"} or Aggregator
        A rule linear in the client displacements; its weights ``w`` of the generalised update (6) are
        :meth:`~fedsde.aggregators.Aggregator.generalised_weights`.
    tau_eff : float, optional
        Effective steps; default ``Σ p_i ‖a_i‖₁`` for both.
    """
    p = client_weights("p", p)
    if len(a_vectors) != p.shape[0]:
        raise FedsdeInputError(f"a_vectors: need one accumulation vector per client ({p.shape[0]})")
    avs = [np.asarray(a, dtype=np.float64).reshape(-1) for a in a_vectors]
    tau = np.array([a.size for a in avs], dtype=np.float64)
    a1 = np.array([a.sum() for a in avs])
    a2sq = np.array([np.sum(a**2) for a in avs])
    Lam = float(max(a.max() for a in avs))
    teff = float(np.sum(p * a1)) if tau_eff is None else positive_float("tau_eff", tau_eff)
    w = get_aggregator(aggregator).generalised_weights(p, a1, tau)
    m = p.shape[0]
    pos = w > 0
    A = m * teff * float(np.sum(w**2 * a2sq / a1**2))
    B = Lam * float(np.sum(w * (tau - 1.0) * a2sq / a1))
    C = Lam**2 * float(np.max(tau * (tau - 1.0)))
    chi2 = float(np.sum((p[pos] - w[pos]) ** 2 / w[pos])) if np.all(pos | (p == 0)) else float("inf")
    return FedNovaQuantities(p, tau, w, teff, a1, a2sq, Lam, A, B, C, chi2)


def isotropic_dissimilarity(problem: QuadraticProblem) -> tuple[Constant, Constant]:
    """``β²`` and ``κ²`` of Assumption 3 for quadratics with a common isotropic Hessian ``U_i = λI``.

    Then ``Σ w_i‖∇F_i(x)‖² = ‖Σ w_i ∇F_i(x)‖² + λ² Σ w_i ‖a_i − ā_w‖²`` for every ``x`` and weights ``w``, so
    ``β² = 1`` (closed form) and ``κ² = λ² max_{w∈Δ} Σ_i w_i ‖a_i − Σ_j w_j a_j‖²`` — the assumption is stated
    for any weights on the simplex; the concave maximisation is solved with SLSQP.
    """
    lam = problem.U[:, 0, 0]
    if not (np.allclose(problem.U, lam[0] * np.eye(problem.d)[None]) and lam[0] > 0):
        raise FedsdeInputError("problem: isotropic_dissimilarity needs U_i = λI, the same λ > 0 for every client")
    a = problem.a
    m = problem.Q

    def neg_var(w):
        mean = w @ a
        return -(w @ np.sum(a**2, axis=1) - mean @ mean)

    best = None
    for w0 in (np.full(m, 1.0 / m), *np.eye(m) * 0.5 + 0.5 / m):
        res = optimize.minimize(neg_var, w0, method="SLSQP", bounds=[(0, 1)] * m,
                                constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1.0}],
                                options={"ftol": SLSQP_FTOL_MULTISTART, "maxiter": 500})
        if best is None or res.fun < best.fun:
            best = res
    kappa2 = float(lam[0] ** 2 * -best.fun)
    return (Constant(1.0, CLOSED_FORM, note="isotropic identical Hessians"),
            Constant(kappa2, OPTIMISATION, note="λ² · max over the simplex of the w-weighted variance of the a_i "
                                                f"(SLSQP; argmax w = {np.round(best.x, 4).tolist()})"))


def _lemma3_D(q: FedNovaQuantities, eta: float, L: float) -> float:
    return 4.0 * eta**2 * L**2 * q.Lambda**2 * float(np.max(q.tau * (q.tau - 1.0)))


def thm1_conditions(q: FedNovaQuantities, *, eta: float, L: float, beta2: float) -> dict:
    """Learning-rate conditions of Thm 1: (a) ``ητ_eff L ≤ ½``; (b) Lemma 3's ``4η²L²Λ² max τ(τ−1) ≤ 1/(2β²+1)``;
    (b′) the paper's summary (52)–(53), ``ηL ≤ ½ min{1/(max‖a_i‖₁ √(2β²+1)), 1/τ_eff}``."""
    a = eta * q.tau_eff * L <= 0.5
    D = _lemma3_D(q, eta, L)
    b = D <= 1.0 / (2.0 * beta2 + 1.0)
    bp = eta * L <= 0.5 * min(1.0 / (q.a1.max() * np.sqrt(2.0 * beta2 + 1.0)), 1.0 / q.tau_eff)
    return {"a": bool(a), "b": bool(b), "b_prime": bool(bp), "eta_tau_eff_L": eta * q.tau_eff * L, "D": D,
            "D_limit": 1.0 / (2.0 * beta2 + 1.0)}


def thm1_bound(q: FedNovaQuantities, *, eta: float, T: int, L: float, sigma2: float, beta2: float, kappa2: float,
               F0_gap: float, variant: str = "corrected") -> BoundValue:
    """Theorem 1, explicit form (eq. (49)): bound on ``(1/T) Σ_{t<T} E‖∇F̃(x^{(t,0)})‖²``::

        ε_opt = 4ΔF̃/(η τ_eff T) + 4ηLσ²A/m + 6η²L²σ²B + 12η²L²κ²C

    ``variant="paper"`` requires the learning-rate conditions as the paper summarises them, (a) and (b′);
    ``"corrected"`` the ones the proof uses, (a) and Lemma 3's (b) (reference §3.3).  ``ΔF̃ = F̃(x⁰) − F̃_inf``.
    """
    eta = positive_float("eta", eta)
    T = positive_int("T", T)
    terms = {
        "initial": 4.0 * F0_gap / (eta * q.tau_eff * T),
        "noise": 4.0 * eta * L * sigma2 * q.A / q.m,
        "local_noise": 6.0 * eta**2 * L**2 * sigma2 * q.B,
        "heterogeneity": 12.0 * eta**2 * L**2 * kappa2 * q.C,
    }
    cond = thm1_conditions(q, eta=eta, L=L, beta2=beta2)
    need = ("a", "b_prime") if variant == "paper" else ("a", "b")
    notes = tuple(f"condition ({k}) fails" for k in need if not cond[k])
    return BoundValue(float(sum(terms.values())), terms, variant, "seed 003, Thm 1 / eq. (49)", notes,
                      valid=not notes)


def thm2_bound(q: FedNovaQuantities, eps_opt: float, *, beta2: float, kappa2: float) -> BoundValue:
    """Theorem 2 (eq. (13), rebuilt from (60)): ``min_t E‖∇F‖² ≤ 2[χ²(β²−1)+1] ε_opt + 2χ²κ²``."""
    terms = {"optimisation": 2.0 * (q.chi2 * (beta2 - 1.0) + 1.0) * eps_opt,
             "inconsistency": 2.0 * q.chi2 * kappa2}
    return BoundValue(float(sum(terms.values())), terms, "corrected", "seed 003, Thm 2 / eq. (13) from (60)")


def pl_learning_rates(q: FedNovaQuantities, *, c: float, L: float, nu: float, rounds: int) -> np.ndarray:
    """Theorem 4's client learning rates ``η^{(t)} = 6/(c τ_eff (t + γ))``, ``γ = L/(cν)``, shape (rounds,)."""
    gamma = L / (c * nu)
    return 6.0 / (c * q.tau_eff * (np.arange(rounds) + gamma))


def thm4_bound(q: FedNovaQuantities, *, T: int, c: float, L: float, nu: float, sigma2: float, kappa2: float,
               beta2: float, F0_gap: float, variant: str = "corrected") -> BoundValue:
    """Theorem 4 (PL / strongly convex), eq. (83): bound on ``E F̃(x^{(T,0)}) − F̃_inf``::

        36 L σ² A / (s c² (T+γ) τ̄ m) + 216/(s² c³ (T+γ)² τ̄²) · (3/2 L²σ²B + 3L²κ²C),   s = τ_eff/τ̄,

    valid when the induction's base case (79) holds.  The paper turns (79) into an upper bound on ``τ_eff``:
    printed (19)/(82) ``τ_eff² ≤ 648ν²(σ²B+κ²C)/(cL²ΔF̃ − 36νL²σ²)``; corrected (from (81) with ``γ = L/(cν)``)
    ``τ_eff² ≤ 648ν²(σ²B+κ²C)/(cΔF̃ − 36νσ²)`` (each holds trivially when its denominator is <= 0).
    The corrected variant also checks the conditions the proof leaves implicit: ``η^{(0)}τ_eff L ≤ ½``
    (i.e. ``ν ≤ 1/12``) and Lemma 3's condition (b) at ``η^{(0)}``.
    """
    T = positive_int("T", T, minimum=0)
    gamma = L / (c * nu)
    s = q.tau_eff / q.tau_bar
    terms = {
        "noise": 36.0 * L * sigma2 * q.A / (s * c**2 * (T + gamma) * q.tau_bar * q.m),
        "local": 216.0 / (s**2 * c**3 * (T + gamma) ** 2 * q.tau_bar**2)
        * (1.5 * L**2 * sigma2 * q.B + 3.0 * L**2 * kappa2 * q.C),
    }
    num = 648.0 * nu**2 * (sigma2 * q.B + kappa2 * q.C)
    den_p = c * L**2 * F0_gap - 36.0 * nu * L**2 * sigma2
    den_c = c * F0_gap - 36.0 * nu * sigma2
    cond_printed = den_p <= 0 or q.tau_eff**2 <= num / den_p
    cond_corrected = den_c <= 0 or q.tau_eff**2 <= num / den_c
    eta0 = 6.0 / (c * q.tau_eff * gamma)
    cond_step = eta0 * q.tau_eff * L <= 0.5
    cond_lemma3 = _lemma3_D(q, eta0, L) <= 1.0 / (2.0 * beta2 + 1.0)
    conds = {"tau_eff_printed_(19)": bool(cond_printed), "tau_eff_corrected_(81)": bool(cond_corrected),
             "eta0_tau_eff_L<=1/2": bool(cond_step), "lemma3_(b)_at_eta0": bool(cond_lemma3)}
    if variant == "paper":
        need = ["tau_eff_printed_(19)"]
    else:
        need = ["tau_eff_corrected_(81)", "eta0_tau_eff_L<=1/2", "lemma3_(b)_at_eta0"]
    notes = tuple(f"condition {k} fails" for k in need if not conds[k])
    terms_out = dict(terms)
    return BoundValue(float(sum(terms.values())), terms_out, variant, "seed 003, Thm 4 / eq. (83)",
                      notes + tuple(f"{k}: {v}" for k, v in conds.items()), valid=not notes)


def lemma5_constants(tau1: int, tau2: int, a: float = 1.0, *, variant: str = "corrected") -> dict:
    """Lemma 5's two-client example (``F₁ = ½(x−a)²``, ``F₂ = ½(x+a)²``, ``p = (½, ½)``, small-η FedAvg).

    The limit ``x_∞ = a(τ₁−τ₂)/(τ₁+τ₂)`` has ``‖∇F(x_∞)‖² = ((τ₁−τ₂)/(τ₁+τ₂))² a²``.  Printed:
    ``κ² = 2w₁w₂a²``, ``χ² = (τ₂−τ₁)²/(2τ₁τ₂)``; corrected: ``κ² = 4w₁w₂a²``, ``χ² = (τ₂−τ₁)²/(4τ₁τ₂)``
    (reference/seed-fednova.md §2.4; the products agree).
    """
    t1, t2 = positive_int("tau1", tau1), positive_int("tau2", tau2)
    w1, w2 = t1 / (t1 + t2), t2 / (t1 + t2)
    k = 2.0 if variant == "paper" else 4.0
    kappa2 = k * w1 * w2 * a**2
    chi2 = (t2 - t1) ** 2 / (k * t1 * t2)
    # the actual κ² of the example: Σ w_i ‖∇F_i − ∇F̃‖² with ∇F_1 − ∇F_2 = −2a
    actual_kappa2 = w1 * w2 * (2.0 * a) ** 2
    actual_chi2 = (0.5 - w1) ** 2 / w1 + (0.5 - w2) ** 2 / w2
    return {"kappa2": kappa2, "chi2": chi2, "product": kappa2 * chi2,
            "grad_sq_limit": ((t1 - t2) / (t1 + t2)) ** 2 * a**2,
            "actual_kappa2": actual_kappa2, "actual_chi2": actual_chi2}


def fixed_point(problem: QuadraticProblem, eta: float, local_steps, *,
                aggregator: str | Aggregator = "fedavg") -> np.ndarray:
    """Stationary mean of FedAvg, FedNova (vanilla SGD, ``τ_eff = Σ p_i τ_i``) or another rule linear in the
    client displacements, on quadratic clients.

    The round is linear in the displacements with the rule's weights ``ω`` (FedNova: ``ω_i = p_i τ_eff/τ_i``,
    :meth:`fedsde.aggregators.FedNova.linear_weights`), so the exact round law with those weights gives its fixed
    point (:func:`fedsde.exact.round_law`).
    """
    law = round_law(problem, eta, local_steps, weights=aggregation_weights(problem, local_steps, aggregator),
                    warn=False)
    return law.c


def aggregation_weights(problem: QuadraticProblem, local_steps, aggregator: str | Aggregator = "fedavg"
                        ) -> np.ndarray:
    """Weights ``ω_i`` of the server rule as a linear map of the displacements, shape (Q,) (``p`` for FedAvg;
    :meth:`fedsde.aggregators.Aggregator.exact_weights`)."""
    return get_aggregator(aggregator).exact_weights(problem, local_steps)


def objective_inconsistency_gap(problem: QuadraticProblem, eta: float, local_steps, *,
                                aggregator: str | Aggregator = "fedavg") -> dict:
    """Where the algorithm converges vs the true optimum (seed 003, Sec. III, Lemma 1).

    Returns ``fixed_point``, ``optimum``, ``distance`` ``‖x̃ − x*‖``, ``loss_gap`` ``F(x̃) − F*`` and
    ``grad_sq`` ``‖∇F(x̃)‖²`` of the deterministic limit (the stationary mean), plus, when every ``U_i`` is the
    same multiple of ``I``, the small-η limit ``Σ ω_i τ_i a_i/Σ ω_i τ_i`` (``ω``: the rule's weights; eq. (5)
    for FedAvg, ``ω_i τ_i ∝ p_i``, the true optimum, for FedNova).
    """
    omega = aggregation_weights(problem, local_steps, aggregator)
    law = round_law(problem, eta, local_steps, weights=omega, warn=False)
    x = law.c
    xs = problem.optimum
    out = {"fixed_point": x, "optimum": xs, "distance": float(np.linalg.norm(x - xs)),
           "loss_gap": float(problem.loss(x) - problem.min_loss), "grad_sq": float(np.sum(problem.grad(x) ** 2))}
    if np.allclose(problem.U, problem.U[0, 0, 0] * np.eye(problem.d)[None]):
        wt = omega * law.local_steps
        out["small_eta_limit"] = (wt / wt.sum()) @ problem.a
    return out
