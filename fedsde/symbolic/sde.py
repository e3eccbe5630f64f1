"""SDE coefficients of FedAvg on quadratic clients, three variants (seed 002, eqs. (2), (4); reference §3b).

Every variant is a linear (Ornstein–Uhlenbeck) SDE on the clock **t = n·h** (round ``n`` of the chain sits at
time ``t = n·h``; the actual server step is ``s = h·η₀``; Section 6 of seed 002 takes ``h = η``, ``s = 1``)::

    dw = −A (w − c) dt + b dB(t),      reported as (A, c, b²).

With the one-round law of :func:`fedsde.symbolic.local_sgd.server_law` (``β``, ``c = C4``, ``σ_ε²``, ``b_p``):

``paper``
    eq. (4) and Thm 6.3 as printed, lifted to general ``(s, h)`` through eq. (2):
    ``A = sβ/h`` (at ``h = η``, ``s = 1`` this is the printed ``D = Σ_k p_k Σ_{j<E} (1 − ηU_k)^j U_k``),
    ``c = C4``, ``b² = s²η² b_p²/h`` with ``b_p = E + Σ_k p_k √Σ_k S_k`` (printed: ``η b_p²`` at ``h = η``).
    The drift is right; the diffusion is not (bare ``E``, missing ``η`` on ``S_k``, sign, ``p_k`` for ``p_k²``,
    perfectly correlated noises: reference §3b, erratum 2).
``corrected``
    ``A = sβ/h``, ``c = C4``, ``b² = s²σ_ε²/h`` with ``σ_ε² = η² Σ_k p_k² Γ_k``: the diffusion
    ``(sη/√h)(Σ_k p_k² Γ_k)^{1/2}`` of reference §3b's boxed SDE, which matches the first two conditional moments
    of one round to leading order in the step.
``matched``
    ``A = −ln(1 − sβ)/h``, ``c = C4``, ``b² = 2A·P`` with ``P = s²σ_ε²/(1 − (1 − sβ)²)`` the chain's stationary
    variance: the OU process whose transition over time ``h`` is exactly the round law (``e^{−Ah} = 1 − sβ``,
    ``P(1 − e^{−2Ah}) = s²σ_ε²``), so its law equals the chain's at every grid time ``t = n·h``.  Needs
    ``0 < 1 − sβ < 1``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

import sympy as sp

from fedsde._validate import choice
from fedsde.sde.coefficients import VARIANTS  # the variants' one home (their numeric coefficients live there too)
from fedsde.symbolic import symbols as sym
from fedsde.symbolic.local_sgd import server_law

CLOCK = (
    "t = n·h: round n of the chain sits at time t = n·h, one round advances time by h; the actual server "
    "step is s = h·η₀. Seed 002, Section 6: h = η and s = 1 (plain FedAvg; one round = time η, not Eη)."
)

SOURCES = {
    "paper": "seed 002, eq. (4) and Thm 6.3 as printed (lifted to general s, h through eq. (2))",
    "corrected": "seed 002, eq. (2) with the exact one-round variance; reference/seed-fedsde.md §3b (boxed SDE)",
    "matched": "moment-matched Ornstein–Uhlenbeck process; reference/seed-fedsde.md §3b (exact at grid times)",
}


@dataclass(frozen=True)
class SDECoefficients:
    """``dw = −A (w − c) dt + b dB(t)`` on the clock ``t = n·h``.

    Attributes
    ----------
    variant : str
    A : sympy.Expr
        Drift rate (per unit time ``t``).
    c : sympy.Expr
        Centre of the drift (the stationary mean).
    b2 : sympy.Expr
        Squared diffusion ``b²`` (per unit time).
    source : str
        Where the formula comes from.
    clock : str
        The time convention (:data:`CLOCK`).
    """

    variant: str
    A: sp.Expr
    c: sp.Expr
    b2: sp.Expr
    source: str
    clock: str = CLOCK

    @property
    def drift(self) -> sp.Expr:
        """``−A (w − c)``."""
        return -self.A * (sym.w - self.c)

    @property
    def diffusion(self) -> sp.Expr:
        """``b = √(b²)``."""
        return sp.sqrt(self.b2)

    def subs(self, mapping: dict) -> SDECoefficients:
        """The coefficients with ``mapping`` substituted (e.g. ``{E: 5}``)."""
        return replace(self, A=self.A.subs(mapping), c=self.c.subs(mapping), b2=self.b2.subs(mapping))

    def expanded(self) -> SDECoefficients:
        """The coefficients with the aggregates β, C4, σ_ε², b_p written as sums over clients ``k = 1..Q``."""
        return self.subs(server_law().aggregates())

    def section6(self) -> SDECoefficients:
        """The coefficients at Section 6's choice ``h = η``, ``s = 1``."""
        return replace(self.subs({sym.h: sym.eta, sym.s: 1}),
                       clock=CLOCK + " Here h = η, s = 1 substituted.")


@cache
def sde_coefficients(variant: str) -> SDECoefficients:
    """The variant's SDE in the aggregate symbols ``β, C4, σ_ε², b_p`` and ``s, h, η`` (see module docstring).

    Parameters
    ----------
    variant : {"paper", "corrected", "matched"}
    """
    choice("variant", variant, VARIANTS)
    if variant == "paper":
        return SDECoefficients("paper", sym.s * sym.beta / sym.h, sym.C4,
                               sym.s**2 * sym.eta**2 * sym.b_paper**2 / sym.h, SOURCES["paper"])
    if variant == "corrected":
        return SDECoefficients("corrected", sym.s * sym.beta / sym.h, sym.C4, sym.s**2 * sym.sigma2 / sym.h,
                               SOURCES["corrected"])
    rho = 1 - sym.s * sym.beta  # "matched"
    A = -sp.log(rho) / sym.h
    return SDECoefficients("matched", A, sym.C4, 2 * A * sym.s**2 * sym.sigma2 / (1 - rho**2), SOURCES["matched"])


@cache
def eq4_printed() -> tuple[sp.Expr, sp.Expr]:
    """Drift and diffusion of eq. (4) exactly as printed (``h = η``, ``s = 1``), sums unevaluated.

    ``dw₀ = −[Σ_k p_k Σ_{j<E} (1 − ηU_k)^j U_k (w₀ − a_k)] dt
    + √η [E + Σ_k Σ_{j<E} Σ_{i=1..j} p_k √Σ_k (1 − ηU_k)^{j−i} U_k] dB(t)``.
    """
    from fedsde.symbolic.local_sgd import to_indexed

    r = to_indexed(sym.r)
    Uk, ak, Sk, pk = sym.U_[sym.k], sym.a_[sym.k], sym.Sigma_[sym.k], sym.p_[sym.k]
    drift = -sp.Sum(pk * sp.Sum(r**sym.j * Uk * (sym.w - ak), (sym.j, 0, sym.E - 1)), (sym.k, 1, sym.Q))
    inner = sp.Sum(pk * sp.sqrt(Sk) * r ** (sym.j - sym.i) * Uk, (sym.i, 1, sym.j))
    triple = sp.Sum(sp.Sum(inner, (sym.j, 0, sym.E - 1)), (sym.k, 1, sym.Q))
    diffusion = sp.sqrt(sym.eta) * (sym.E + triple)
    return drift, diffusion


def euler_maruyama_step(coeffs: SDECoefficients) -> tuple[sp.Expr, sp.Expr]:
    """Mean and variance of one Euler–Maruyama step of length ``h`` from ``w``: ``w − A h (w − c)``, ``b² h``.

    For ``corrected`` this is the exact round law (``w − sβ(w − c)``, ``s²σ_ε²``): eq. (1) = EM of eq. (2).
    """
    return sym.w - coeffs.A * sym.h * (sym.w - coeffs.c), coeffs.b2 * sym.h
