"""The convergence bounds of seed 002 (Overman & Klabjan), Sec. 4 and Lemma A.1, as printed and corrected.

Every function takes a :class:`BoundInputs` (plain numbers; :mod:`fedsde.theory.constants` computes them with
their provenance), a time ``t`` (continuous clock ``t = n·h``, scalar or array) and ``variant``:

* ``"paper"``: the statement as printed (reference/seed-fedsde.md §2);
* ``"corrected"``: the form that follows from the proof once the errata of reference §4 are applied
  (items 5, 7, 8, 9).

Notation: ``E`` local steps, ``h`` time step (actual server step ``h·η₀``), ``L`` = sup of ‖∇F_i‖₂ on the
region visited (erratum 6: the proofs use the 2-norm), ``μ`` smoothness, ``V*`` = sup ‖V̂₁‖_S, ``d`` dimension,
``τ`` weak quasi-convexity constant, ``R₀ = ‖w₀(0) − w*‖``, ``ΔF₀ = F(w₀(0)) − F*``, and the schedule integrals
``φ, I₂, J, K`` of :class:`fedsde.theory.schedules.PowerSchedule`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedsde._compat import renamed
from fedsde._validate import choice, positive_float, positive_int
from fedsde.errors import FedsdeInputError
from fedsde.theory.results import BoundValue
from fedsde.theory.schedules import PowerSchedule

VARIANTS = ("paper", "corrected")


@dataclass(frozen=True)
class BoundInputs:
    """Numbers entering seed 002's bounds.

    Attributes
    ----------
    L : float
        ``sup_{i, w∈W} ‖∇F_i(w)‖₂`` on the region ``W`` (corrected reading of Assumption 4.1).
    mu : float
        Smoothness constant (the paper's ``μ``; its ``L``/``μ`` are swapped w.r.t. common usage).
    trace_sigma : ndarray, shape (Q,)
        ``Tr Σ_k``.
    p : ndarray, shape (Q,)
        Client weights.
    V_star : float
        ``sup_t ‖V̂₁(w₀(t))‖_S`` (Assumption 4.3).
    d : int
        Dimension.
    E : int
        Local steps.
    h : float
        Time step of the lift ``t = n·h``.
    F0_gap : float
        ``F(w₀(0)) − F*``.
    dist0 : float
        ``‖w₀(0) − w*‖``.
    tau : float
        Weak quasi-convexity constant (Assumption 4.8; 1 for convex, 2 for an aggregate quadratic).
    eta0 : float
        Server learning rate per unit time (constant; Thm 4.9).
    L_inf : float, optional
        The ∞-norm bound of Assumption 4.1 as printed (Lemma A.1, ``variant="paper"``); default ``L``.
    trace_V_star : float, optional
        ``sup_t Tr V̂₁`` (tighter alternative in Thm 4.5's corrected Itô term); default ``d·V*``.
    """

    L: float
    mu: float
    trace_sigma: np.ndarray
    p: np.ndarray
    V_star: float
    d: int
    E: int
    h: float
    F0_gap: float
    dist0: float
    tau: float = 1.0
    eta0: float = 1.0
    L_inf: float | None = None
    trace_V_star: float | None = None
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        positive_float("L", self.L, allow_zero=True)
        positive_float("mu", self.mu, allow_zero=True)
        positive_float("V_star", self.V_star, allow_zero=True)
        positive_int("d", self.d)
        positive_int("E", self.E)
        positive_float("h", self.h)
        positive_float("F0_gap", self.F0_gap, allow_zero=True)
        positive_float("dist0", self.dist0, allow_zero=True)
        positive_float("tau", self.tau)
        positive_float("eta0", self.eta0)
        ts = np.asarray(self.trace_sigma, dtype=np.float64).reshape(-1)
        p = np.asarray(self.p, dtype=np.float64).reshape(-1)
        if ts.shape != p.shape or np.any(ts < 0) or np.any(p < 0) or not np.isclose(p.sum(), 1.0):
            raise FedsdeInputError("trace_sigma, p: need equal lengths, trace_sigma >= 0, p >= 0 summing to 1")
        object.__setattr__(self, "trace_sigma", ts)
        object.__setattr__(self, "p", p)

    @property
    def noise_gradient_sum(self) -> float:
        """``Σ_k p_k (L + √Tr Σ_k)``, the factor shared by ``C₁`` and ``C₂``."""
        return float(np.sum(self.p * (self.L + np.sqrt(self.trace_sigma))))

    @property
    def l_inf(self) -> float:
        return self.L if self.L_inf is None else float(self.L_inf)

    @property
    def tr_v(self) -> float:
        return self.d * self.V_star if self.trace_V_star is None else float(self.trace_V_star)


def _variant(variant: str) -> str:
    return choice("variant", variant, VARIANTS)


def _time(t) -> np.ndarray:
    arr = np.asarray(t, dtype=np.float64)
    if np.any(~np.isfinite(arr)) or np.any(arr <= 0):
        raise FedsdeInputError("t: times must be finite and > 0 (continuous clock t = n·h)")
    return arr


def _out(x):
    return float(x) if np.ndim(x) == 0 else x


def C1(inp: BoundInputs, *, tight: bool = False) -> float:
    """``C₁ = E² L μ Σ_k p_k (L + √Tr Σ_k) / 2`` (Thm 4.5); ``tight``: ``E(E−1)/2`` in place of ``E²/2``."""
    e2 = inp.E * (inp.E - 1) if tight else inp.E**2
    return 0.5 * e2 * inp.L * inp.mu * inp.noise_gradient_sum


def C2(inp: BoundInputs, *, tight: bool = False) -> float:
    """``C₂ = μ E² Σ_k p_k (L + √Tr Σ_k)`` (Thm 4.9); ``tight``: ``E(E−1)/2`` in place of ``E²``."""
    e2 = inp.E * (inp.E - 1) / 2 if tight else inp.E**2
    return inp.mu * e2 * inp.noise_gradient_sum


def C3(inp: BoundInputs, *, tight: bool = False) -> float:
    """``C₃ = d h η₀² V*/2 + η₀ C₂ ‖w₀(0) − w*‖`` (Thm 4.9)."""
    return 0.5 * inp.d * inp.h * inp.eta0**2 * inp.V_star + inp.eta0 * C2(inp, tight=tight) * inp.dist0


def thm_4_5(inp: BoundInputs, schedule: PowerSchedule, t, *, variant: str = "corrected",
            use_trace: bool = False, tight: bool = False) -> BoundValue:
    """Theorem 4.5 (non-convex), ``η₀ ≡ 1``: bound on ``E_t̃ ‖∇F(w₀(t̃))‖²``, ``t̃ ~ η/φ(t)`` on ``[0, t]``.

    As printed::

        ΔF₀/(E φ) + (1/(E φ)) ∫₀ᵗ [C₁ η² + h η² V* L / 2]

    Corrected (erratum 5: Lemma A.2's ``d`` and ‖∇²F‖_S ≤ μ): the Itô term becomes ``d h η² V* μ / 2``
    (``use_trace``: ``h η² μ sup Tr V̂₁ / 2``, tighter).  ``tight`` uses ``E(E−1)/2`` in ``C₁`` (corrected only).
    """
    variant = _variant(variant)
    t = _time(t)
    phi = schedule.phi(t)
    i2 = schedule.int_eta2(t)
    E = inp.E
    if variant == "paper":
        c1 = C1(inp)
        ito = 0.5 * inp.h * inp.V_star * inp.L
    else:
        c1 = C1(inp, tight=tight)
        ito = 0.5 * inp.h * inp.mu * (inp.tr_v if use_trace else inp.d * inp.V_star)
    terms = {
        "initial": inp.F0_gap / (E * phi),
        "local_drift": c1 * i2 / (E * phi),
        "ito": ito * i2 / (E * phi),
    }
    return BoundValue(_out(sum(terms.values())), {k: _out(v) for k, v in terms.items()}, variant,
                      "seed 002, Thm 4.5" + (" (corrected: erratum 5)" if variant == "corrected" else ""))


#: claimed rates of Cor. 4.6 for η = (t+1)^(−b): (description, exponent of t, power of log t)
def cor_4_6_rate(b: float) -> tuple[str, float, float]:
    """The rate Cor. 4.6 states for ``η = (t+1)^(−b)``: ``t^a · (log t)^c`` returned as ``(text, a, c)``."""
    if not 0 < b <= 1:
        raise FedsdeInputError(f"b={b!r}: Cor. 4.6 covers 0 < b <= 1")
    if b < 0.5:
        return (f"O(t^-{b:g})", -b, 0.0)
    if b == 0.5:
        return ("O(log t/√t)", -0.5, 1.0)
    if b < 1:
        return (f"O(t^-{1 - b:g})", -(1 - b), 0.0)
    return ("O(1/log t)", 0.0, -1.0)


def cor_4_6(inp: BoundInputs, t, *, b: float = 1.0, variant: str = "corrected") -> BoundValue:
    """Corollary 4.6: Thm 4.5 with ``η = (t+1)^(−b)`` (scale 1).

    As printed, for b = 1 (uses ``∫η² = t/(t+1) ≤ 1``)::

        ΔF₀/(E log(t+1)) + (C₁ + h V* L/2)/(E log(t+1))

    and for b = ½ (``∫η² = log(t+1)``, exact)::

        ΔF₀/(E(2√(t+1) − 2)) + (C₁ + h V* L/2) log(t+1)/(E(2√(t+1) − 2)).

    Other b: the statement gives only a rate (:func:`cor_4_6_rate`); the value returned is Thm 4.5 with the
    exact integrals.  Corrected: ``h V* L/2 → d h V* μ/2`` (erratum 5), same integrals.
    """
    variant = _variant(variant)
    t = _time(t)
    sched = PowerSchedule(1.0, b)
    if b not in (0.5, 1.0):
        bv = thm_4_5(inp, sched, t, variant=variant)
        return BoundValue(bv.value, bv.terms, variant, f"seed 002, Cor 4.6 (b={b:g}, via Thm 4.5)")
    ito = 0.5 * inp.h * (inp.V_star * inp.L if variant == "paper" else inp.d * inp.V_star * inp.mu)
    c = C1(inp) + ito
    if b == 1.0:
        den = inp.E * np.log1p(t)
        terms = {"initial": inp.F0_gap / den, "noise": c / den}
    else:
        den = inp.E * (2.0 * np.sqrt(1.0 + t) - 2.0)
        terms = {"initial": inp.F0_gap / den, "noise": c * np.log1p(t) / den}
    return BoundValue(_out(sum(terms.values())), {k: _out(v) for k, v in terms.items()}, variant,
                      f"seed 002, Cor 4.6 (b={b:g})")


def cor_4_7(inp: BoundInputs, t, *, eta_c: float, variant: str = "corrected") -> BoundValue:
    """Corollary 4.7: constant client lr ``η_c`` and server lr ``η₀(t) = 1/(t+1)``.

    As printed (``t̃`` with density ``η/∫η``, i.e. uniform on ``[0, t]`` since η is constant)::

        (ΔF₀ + η_c² h V* L/2)/(E η_c log(t+1)) + η_c C₁

    Corrected (erratum 9: ``t̃`` with density ``η₀/∫η₀``; the proof's ``η_c C₁/E``; erratum 5's ``d``, ``μ``;
    ``∫η₀² = t/(t+1)`` kept exact)::

        (ΔF₀ + η_c² d h V* μ t/(2(t+1)))/(E η_c log(t+1)) + η_c C₁/E
    """
    variant = _variant(variant)
    t = _time(t)
    eta_c = positive_float("eta_c", eta_c)
    den = inp.E * eta_c * np.log1p(t)
    if variant == "paper":
        terms = {"initial": inp.F0_gap / den, "ito": 0.5 * eta_c**2 * inp.h * inp.V_star * inp.L / den,
                 "local_drift": eta_c * C1(inp) + 0 * t}
    else:
        terms = {"initial": inp.F0_gap / den,
                 "ito": 0.5 * eta_c**2 * inp.d * inp.h * inp.V_star * inp.mu * (t / (t + 1.0)) / den,
                 "local_drift": eta_c * C1(inp) / inp.E + 0 * t}
    return BoundValue(_out(sum(terms.values())), {k: _out(v) for k, v in terms.items()}, variant,
                      "seed 002, Cor 4.7")


def thm_4_9(inp: BoundInputs, schedule: PowerSchedule, t, *, variant: str = "corrected",
            tight: bool = False) -> BoundValue:
    """Theorem 4.9 (weakly quasi-convex), constant ``η₀``: bound on ``E_t̃ [F(w₀(t̃)) − F*]``.

    As printed::

        R₀/(τ φ) + C₂/(τ φ) ∫₀ᵗ η(s)² (L E φ(s) + √h V* √I₂(s)) ds + C₃/(τ φ) I₂

    Corrected (erratum 7: energy ½‖·‖², the proof's ``η₀``, Itô isometry with ``√(d V*)``)::

        R₀²/(2 τ η₀ φ) + η₀ C₂/(τ φ) ∫₀ᵗ η² (L E φ + √h √(d V*) √I₂) + C₃/(τ η₀ φ) I₂

    ``tight`` (corrected only, erratum 7 (iv)): every denominator gains the factor ``E`` and ``C₂`` uses
    ``E(E−1)/2``.
    """
    variant = _variant(variant)
    t = _time(t)
    phi = schedule.phi(t)
    i2 = schedule.int_eta2(t)
    J = schedule.int_eta2_phi(t)
    K = schedule.int_eta2_sqrt_int_eta2(t)
    tau, eta0, E, R0 = inp.tau, inp.eta0, inp.E, inp.dist0
    sh = np.sqrt(inp.h)
    if variant == "paper":
        c2, c3 = C2(inp), C3(inp)
        terms = {
            "initial": R0 / (tau * phi),
            "local_drift": c2 / (tau * phi) * (inp.L * E * J + sh * inp.V_star * K),
            "noise": c3 * i2 / (tau * phi),
        }
    else:
        c2, c3 = C2(inp, tight=tight), C3(inp, tight=tight)
        f = E if tight else 1.0
        terms = {
            "initial": R0**2 / (2.0 * tau * eta0 * phi * f),
            "local_drift": eta0 * c2 / (tau * phi * f) * (inp.L * E * J + sh * np.sqrt(inp.d * inp.V_star) * K),
            "noise": c3 * i2 / (tau * eta0 * phi * f),
        }
    return BoundValue(_out(sum(terms.values())), {k: _out(v) for k, v in terms.items()}, variant,
                      "seed 002, Thm 4.9" + (" (corrected: erratum 7)" if variant == "corrected" else ""))


def cor_4_10(inp: BoundInputs, t, *, variant: str = "corrected") -> BoundValue:
    """Corollary 4.10: Thm 4.9 with ``η = 1/(t+1)`` and constant ``η₀``.

    As printed::

        η₀² C₂ L E/(τ η₀) · (t − log(t+1))/(t log(t+1)) + (R₀ + C₃ + η₀² C₂ √h V*)/(τ η₀ log(t+1))

    Corrected (erratum 8): the corrected Thm 4.9 with the exact integrals
    ``J = (t − log(t+1))/(t+1)``, ``K = ⅔ (t/(t+1))^{3/2}``, ``I₂ = t/(t+1)``.
    """
    variant = _variant(variant)
    t = _time(t)
    if variant == "corrected":
        bv = thm_4_9(inp, PowerSchedule(1.0, 1.0), t, variant="corrected")
        return BoundValue(bv.value, bv.terms, variant, "seed 002, Cor 4.10 (corrected: erratum 8)")
    tau, eta0, E = inp.tau, inp.eta0, inp.E
    c2, c3 = C2(inp), C3(inp)
    lg = np.log1p(t)
    terms = {
        "local_drift": eta0**2 * c2 * inp.L * E / (tau * eta0) * (t - lg) / (t * lg),
        "rest": (inp.dist0 + c3 + eta0**2 * c2 * np.sqrt(inp.h) * inp.V_star) / (tau * eta0 * lg),
    }
    return BoundValue(_out(sum(terms.values())), {k: _out(v) for k, v in terms.items()}, variant,
                      "seed 002, Cor 4.10")


@renamed(steps="step_indices")
def lemma_a_1(inp: BoundInputs, eta: float, step_indices, *, variant: str = "corrected") -> BoundValue:
    """Lemma A.1 (client drift): ``E‖w₀(t) − w^k(t, i)‖ ≤ i η (L + √Tr Σ_k)``.

    Parameters
    ----------
    eta : float
        Client learning rate of the round.
    step_indices : array of int, shape (I,)
        Local step indices ``i`` within a round (old name: ``steps``).

    Returns
    -------
    BoundValue
        ``value`` of shape (I, Q).  ``variant="paper"`` uses the ∞-norm constant of Assumption 4.1 as printed
        (``L_inf``); ``"corrected"`` the 2-norm ``L`` the proof needs (erratum 6).
    """
    variant = _variant(variant)
    eta = positive_float("eta", eta)
    i = np.asarray(step_indices, dtype=np.float64).reshape(-1, 1)
    L = inp.l_inf if variant == "paper" else inp.L
    val = i * eta * (L + np.sqrt(inp.trace_sigma)[None, :])
    return BoundValue(val, {"gradient": i * eta * L, "noise": i * eta * np.sqrt(inp.trace_sigma)[None, :]},
                      variant, "seed 002, Lemma A.1" + (" (2-norm L, erratum 6)" if variant == "corrected" else ""))
