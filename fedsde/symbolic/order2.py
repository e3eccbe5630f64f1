"""The order-2 weak approximation of FedAvg (a stochastic modified equation), derived from the one-round map.

Setting (theory/derivations_order2.md).  Client ``k`` runs ``E`` local steps ``x ← x − η(∇f_k(x) + σ_k(x) z)``,
``z ~ N(0, I)`` i.i.d., ``σ_kσ_kᵀ = Σ_k`` (the noise may depend on ``x``), from the server weights ``w``; the server
moves by ``Δ = s Σ_k p_k (x_k^{(E)} − w)`` with the clients independent given ``w``.  Clock ``t = n·h``: round ``n``
sits at ``t = n·h``; the order counts powers of ``η`` at fixed ``s`` and fixed ``h/η`` (seed 002, Section 6: ``h = η``
and ``s = 1``).  The derivation, one coordinate at a time (every coefficient below is a scalar jet at ``w``):

1. **One client, unrolled** (:func:`local_expansion`): the recursion is iterated ``E`` times with the gradient and the
   noise scale Taylor-expanded about ``w`` (jets ``g = f_k'``, ``H = f_k''``, ``T = f_k'''``, ``σ, σ', σ''``),
   truncated at ``η²``, and averaged over the normals exactly.  The coefficient of ``η^m`` is a polynomial of degree
   ``<= m`` in ``E`` (nested sums over at most ``m`` step indices), so :func:`client_moments` interpolates it from
   ``E = 1..4`` and checks the closed form on ``E = 5``::

       E[x^{(E)} − w]   = −ηE g + η² E(E−1)/2 · H g + O(η³),
       Var[x^{(E)} − w] = η² E Σ − η³ E(E−1)/2 · (2HΣ + gΣ') + O(η⁴).

2. **The round**: ``E Δ = s Σ_k p_k (…)``, ``Var Δ = s² Σ_k p_k² (…)``, in the aggregates ``ḡ = Σ p_k g_k = F'``,
   ``H̄ = Σ p_k H_k = F''``, ``χ = Σ p_k H_k g_k``, ``Σ̄ = Σ p_k² Σ_k``, ``ψ = Σ p_k² (2H_kΣ_k + g_kΣ_k')``
   (:data:`AGGREGATES`; ``Σ̄' = Σ p_k² Σ_k'``).
3. **The SDE's step** (:func:`sde_step_moments`): for ``dX = b dt + D^{1/2} dB`` the moments of ``X_h − x`` from the
   generator series ``E φ(X_h) = Σ_m h^m Lᵐφ(x)/m!``, ``Lφ = bφ' + ½Dφ''``, with the ansatz ``b = (sη/h)β₀ +
   (η²/h)β₁``, ``D = (η²/h)δ₀ + (η³/h)δ₁`` and ``(η, h) → (εη, εh)``.
4. **Matching** (:func:`order2_sde`): the mean to ``O(ε²)`` and the variance to ``O(ε³)`` (so the one-step errors are
   ``O(η³)`` and ``O(η⁴)``) solve to

       b = −(sη/h) E ḡ + (1/h)[s η² E(E−1)/2 · χ − s²η² E²/2 · H̄ ḡ],
       D = (s²η²/h)[E Σ̄ − η E(E−1)/2 · ψ + sη E²/2 · (2H̄Σ̄ + ḡ Σ̄')].

   The drift alone (with ``D = (s²η²/h)EΣ̄``) already gives weak order 2 (Milstein's theorem); the ``η`` term of
   ``D`` makes the covariance, itself ``O(η)``, one order more accurate.

In ``d`` dimensions (checked on a two-dimensional unrolling by :func:`check_matrix_client_moments` and, for
quadratic clients, against the exact round law in :mod:`fedsde.sde.order2`): ``H g → H_k ∇f_k``,
``2HΣ + gΣ' → H_kΣ_k + Σ_kH_k + (∇f_k·∇)Σ_k``, ``H̄ḡ → ∇²F ∇F``, ``2H̄Σ̄ + ḡΣ̄' → ∇²F Σ̄ + Σ̄ ∇²F + (∇F·∇)Σ̄``.
The drift is ``−(sη/h)E ∇F̃`` with the modified loss (:func:`modified_loss`)

    F̃ = F + (sηE/4)‖∇F‖² − (η(E−1)/4) Σ_k p_k ‖∇f_k‖²
      = F + (η/4)(sE − E + 1)‖∇F‖² − (η(E−1)/4) Σ_k p_k ‖∇f_k − ∇F‖²,

which with ``E = 1``, one client and ``s = 1`` is Li, Tai & E's ``f + (η/4)‖∇f‖²`` (JMLR 2019, Thm 3; their diffusion
``ηΣ`` is the leading term of ``D`` at ``h = η``).  The local step of SCAFFOLD with control variates exact at the
round's start, ``x ← x − η(∇f_k(x) − ∇f_k(w) + ∇F(w))`` (``local_step="control_variate"``), gives
``F + (η/4)(sE − E + 1)‖∇F‖²``: no dispersion term (Lim, Kim & Moon, AAAI 2025, reach the same conclusion by
backward error analysis of the deterministic map).

Nothing runs at import; every derivation is cached.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import sympy as sp

from fedsde._validate import choice
from fedsde.symbolic import symbols as sym

#: local steps of the derivation: plain SGD, or SCAFFOLD's step with exact control variates
LOCAL_STEPS = ("plain", "control_variate")

# jets of one client at w (one coordinate): f_k', f_k'', f_k''' and the noise scale σ_k = √Σ_k and its derivatives
g, H, T = sp.symbols("g_k H_k T_k", real=True)
sig, dsig, d2sig = sp.symbols("sigma_k dsigma_k d2sigma_k", real=True)
S, dS = sp.symbols("Sigma_k dSigma_k", real=True)  #: Σ_k = σ², Σ_k' = 2σσ'
gbar = sp.Symbol("gbar", real=True)  #: ∇F(w) = Σ_k p_k g_k (the control variate's target)

# the round's aggregates (one coordinate)
Fg, FH, chi, Sb, dSb, psi = sp.symbols("F' F'' chi Sigmabar dSigmabar psi", real=True)
#: aggregate symbol → its definition as a sum over clients (one-client symbols, summed with weights p_k or p_k²)
AGGREGATES = {Fg: "Σ_k p_k g_k", FH: "Σ_k p_k H_k", chi: "Σ_k p_k H_k g_k", Sb: "Σ_k p_k² Σ_k",
              dSb: "Σ_k p_k² Σ_k'", psi: "Σ_k p_k² (2 H_k Σ_k + g_k Σ_k')"}

eps = sp.Symbol("epsilon", positive=True)  #: the bookkeeping parameter (η, h) → (εη, εh)


def _truncate(expr: sp.Expr, order: int) -> sp.Expr:
    """``expr`` as a polynomial in ``η`` with the powers above ``order`` dropped."""
    expr = sp.expand(expr)
    return sp.Add(*[expr.coeff(sym.eta, k) * sym.eta**k for k in range(order + 1)])


def _expect(expr: sp.Expr, normals) -> sp.Expr:
    """``E expr`` over independent standard normals ``normals`` (``E z^{2j} = (2j − 1)!!``, odd moments 0)."""
    if not normals:
        return expr
    poly = sp.Poly(sp.expand(expr), *normals)
    out = sp.Integer(0)
    for powers, coeff in poly.terms():
        if any(p % 2 for p in powers):
            continue
        out += coeff * sp.prod([sp.factorial2(p - 1) if p else 1 for p in powers])
    return sp.expand(out)


def _sigma_to_cov(expr: sp.Expr) -> sp.Expr:
    """Noise-scale jets to covariance jets: ``σ² = Σ``, ``σσ' = Σ'/2`` (``σ''`` must have dropped out)."""
    out = sp.expand(expr.subs(dsig, dS / (2 * sig)).subs(sig, sp.sqrt(S)))
    if out.has(d2sig):
        raise ArithmeticError("the truncated variance depends on σ'': the expansion order is inconsistent")
    return out


@cache
def local_expansion(local_steps: int, local_step: str = "plain") -> tuple[sp.Expr, sp.Expr]:
    """Mean to ``O(η²)`` and variance to ``O(η³)`` of ``x^{(E)} − w`` after ``E = local_steps`` steps, by unrolling.

    The step is iterated with ``δ = x − w`` a polynomial in ``η`` (powers above ``η²`` dropped, enough for the mean
    to ``η²`` and, since ``δ = O(η)``, for ``δ²`` to ``η³``); the gradient is ``g + Hδ + Tδ²/2`` and the noise scale
    ``σ + σ'δ + σ''δ²/2``.  ``local_step="control_variate"`` replaces the gradient by ``∇f_k(x) − ∇f_k(w) + ∇F(w)``,
    i.e. ``g → gbar`` at ``δ = 0``.  Returns expressions in ``η`` and the jets (variance in ``Σ``, ``Σ'``).
    """
    choice("local_step", local_step, LOCAL_STEPS)
    E = int(local_steps)
    z = sp.symbols(f"z0:{E}", real=True)
    g0 = g if local_step == "plain" else gbar
    delta = sp.Integer(0)
    for i in range(E):
        sq = _truncate(delta**2, 1)  # δ² = O(η²) enters δ multiplied by η: beyond the kept order (zero here)
        grad = g0 + H * delta + T * sq / 2
        scale = sig + dsig * delta + d2sig * sq / 2
        delta = _truncate(delta - sym.eta * (grad + scale * z[i]), 2)
    mean = _expect(delta, z)
    second = _expect(_truncate(delta**2, 3), z)
    var = _sigma_to_cov(_truncate(second - mean**2, 3))
    return mean, var


def _interpolate_in_E(values: dict[int, sp.Expr], check: dict[int, sp.Expr]) -> sp.Expr:
    """The polynomial in ``E`` through ``values`` (E → expression), checked against ``check``."""
    poly = sp.expand(sp.interpolate([(e, v) for e, v in sorted(values.items())], sym.E))
    for e, v in check.items():
        if sp.expand(poly.subs(sym.E, e) - v) != 0:
            raise ArithmeticError(f"the closed form in E does not reproduce the unrolled expansion at E = {e}")
    return sp.factor(poly)


@dataclass(frozen=True)
class ClientMoments:
    """``E[x^{(E)} − w] = η m₁ + η² m₂ + O(η³)`` and ``Var[x^{(E)} − w] = η² v₂ + η³ v₃ + O(η⁴)``, ``E`` symbolic."""

    m1: sp.Expr
    m2: sp.Expr
    v2: sp.Expr
    v3: sp.Expr

    @property
    def mean(self) -> sp.Expr:
        return sym.eta * self.m1 + sym.eta**2 * self.m2

    @property
    def var(self) -> sp.Expr:
        return sym.eta**2 * self.v2 + sym.eta**3 * self.v3


@cache
def client_moments(local_step: str = "plain") -> ClientMoments:
    """The closed forms in ``E`` of :func:`local_expansion` (interpolated on ``E = 1..4``, checked on ``E = 5``)."""
    fit, check = range(1, 5), (5,)
    parts = {E: local_expansion(E, local_step) for E in (*fit, *check)}

    def coeff(which: int, power: int) -> sp.Expr:
        vals = {E: sp.expand(parts[E][which]).coeff(sym.eta, power) for E in parts}
        return _interpolate_in_E({E: vals[E] for E in fit}, {E: vals[E] for E in check})

    return ClientMoments(m1=coeff(0, 1), m2=coeff(0, 2), v2=coeff(1, 2), v3=coeff(1, 3))


@dataclass(frozen=True)
class RoundMoments:
    """``E Δ = s(η M₁ + η² M₂)``, ``Var Δ = s²(η² V₂ + η³ V₃)`` in the aggregates :data:`AGGREGATES`."""

    M1: sp.Expr
    M2: sp.Expr
    V2: sp.Expr
    V3: sp.Expr


def _multiple(expr: sp.Expr, basis: sp.Expr, of: sp.Symbol) -> sp.Expr:
    """``c`` with ``expr = c·basis`` (``c`` free of the jets), read off the coefficient of ``of`` and checked."""
    expr = sp.expand(expr)
    c = sp.factor(expr.coeff(of) / sp.expand(basis).coeff(of))
    if sp.expand(expr - c * basis) != 0:
        raise ArithmeticError(f"{expr} is not a multiple of {basis}")
    return c


@cache
def round_moments() -> RoundMoments:
    """The server step's moments: the client forms are multiples of ``g``, ``Hg``, ``Σ`` and ``2HΣ + gΣ'`` (checked),
    so the weighted sums over clients are the aggregates (weights ``p_k`` for the mean, ``p_k²`` for the variance)."""
    cm = client_moments("plain")
    return RoundMoments(M1=_multiple(cm.m1, g, g) * Fg, M2=_multiple(cm.m2, H * g, H) * chi,
                        V2=_multiple(cm.v2, S, S) * Sb, V3=_multiple(cm.v3, 2 * H * S + g * dS, dS) * psi)


#: the jets of the state functions beyond those the matching may use (they must drop out of the kept orders)
_HIGHER = sp.symbols("G2 G3 V2 beta1p delta1p", real=True)


def sde_step_moments() -> tuple[sp.Expr, sp.Expr, dict]:
    """Mean and variance of ``X_h − x`` for ``dX = b dt + D^{1/2} dB`` in powers of ``ε`` (:func:`order2_sde`'s
    ansatz), to ``ε²`` and ``ε³``.  ``b`` and ``D`` are Taylor polynomials about ``x`` of degree 3 in ``y − x`` (the
    generator applied three times needs no more), with ``∇F → F'``, ``F''`` and ``Σ̄ → Σ̄, Σ̄'`` as the first jets.
    Returns ``(mean, var, unknowns)`` with ``unknowns = {"beta1", "delta1"}`` (values at ``x``)."""
    u = sp.Symbol("u", real=True)  # y − x
    G2, G3, V2, beta1p, delta1p = _HIGHER
    beta1, delta1 = sp.symbols("beta_1 delta_1", real=True)
    G = Fg + FH * u + G2 * u**2 / 2 + G3 * u**3 / 6
    V = Sb + dSb * u + V2 * u**2 / 2
    r = sp.Symbol("r", positive=True)  # η/h: keeps every coefficient a polynomial while expanding
    e_h = eps * sym.h
    b = sym.s * r * (-sym.E * G) + eps * r**2 * sym.h * (beta1 + beta1p * u)
    D = eps * r**2 * sym.h * sym.s**2 * sym.E * V + eps**2 * r**3 * sym.h**2 * (delta1 + delta1p * u)

    gens = (u, eps)  # polynomials in (y − x, ε) over the ring of the other symbols: fast exact arithmetic
    bp, Dp = sp.Poly(b, *gens), sp.Poly(D, *gens)

    def upto(p: sp.Poly, order: int) -> sp.Poly:
        return sp.Poly.from_dict({m: c for m, c in p.as_dict().items() if m[1] <= order}, *gens, domain=p.domain)

    def moment(f: sp.Expr) -> sp.Poly:
        total, cur = sp.Poly(0, *gens, domain=bp.domain), sp.Poly(f, *gens, domain=bp.domain)
        for m in range(1, 4):  # h^m Lᵐ f / m!, with Lᵐ f kept to the order ε^(3 − m) that can reach ε³
            cur = upto(bp * cur.diff(u) + Dp * cur.diff(u).diff(u) / 2, 3 - m)
            total += upto(cur.subs(u, 0).as_poly(*gens) * sp.Poly(e_h**m / sp.factorial(m), *gens), 3)
        return total

    mean = moment(u)
    back = {r: sym.eta / sym.h}
    mean_s = upto(mean, 2).as_expr().subs(back)
    var_s = upto(moment(u**2) - mean * mean, 3).as_expr().subs(back)
    if (mean_s + var_s).free_symbols & set(_HIGHER):
        raise ArithmeticError("higher jets reach the kept orders: the ansatz is inconsistent")
    return mean_s, var_s, {"beta1": beta1, "delta1": delta1}


@dataclass(frozen=True)
class Order2SDE:
    """``dw = b dt + D^{1/2} dB`` on the clock ``t = n·h`` (one coordinate, aggregates of :data:`AGGREGATES`).

    Attributes
    ----------
    drift, diffusion : sympy.Expr
        ``b`` and ``D`` (per unit of time).
    drift_order1, diffusion_order1 : sympy.Expr
        Their leading terms: the first-order SDE (seed 002, eq. (2) to leading order).
    residual_mean, residual_var : sympy.Expr
        The one-step mismatch with the round to ``O(ε²)`` and ``O(ε³)``: zero by construction.
    """

    drift: sp.Expr
    diffusion: sp.Expr
    drift_order1: sp.Expr
    diffusion_order1: sp.Expr
    residual_mean: sp.Expr
    residual_var: sp.Expr


@cache
def order2_sde() -> Order2SDE:
    """Match the SDE's step to the round's moments (module docstring, step 4) and solve for ``β₁``, ``δ₁``."""
    rm = round_moments()
    mean_s, var_s, unk = sde_step_moments()
    e_eta = eps * sym.eta
    chain_mean = sym.s * (e_eta * rm.M1 + e_eta**2 * rm.M2)
    chain_var = sym.s**2 * (e_eta**2 * rm.V2 + e_eta**3 * rm.V3)
    eqs = [sp.expand(mean_s - chain_mean), sp.expand(var_s - chain_var)]
    sol = sp.solve([eqs[0].coeff(eps, 2), eqs[1].coeff(eps, 3)], [unk["beta1"], unk["delta1"]], dict=True)
    if len(sol) != 1:
        raise ArithmeticError("the order-2 matching has no unique solution")
    sol = sol[0]
    res_m = sp.simplify(eqs[0].subs(sol))
    res_v = sp.simplify(eqs[1].subs(sol))
    if res_m != 0 or res_v != 0:
        raise ArithmeticError(f"the order-2 SDE does not match the round: residuals {res_m}, {res_v}")
    b1 = (sym.s * sym.eta / sym.h) * (-sym.E * Fg)
    d1 = (sym.eta**2 / sym.h) * sym.s**2 * sym.E * Sb
    b = b1 + (sym.eta**2 / sym.h) * sp.factor(sol[unk["beta1"]])
    D = d1 + (sym.eta**3 / sym.h) * sp.factor(sol[unk["delta1"]])
    return Order2SDE(drift=b, diffusion=D, drift_order1=b1, diffusion_order1=d1, residual_mean=res_m,
                     residual_var=res_v)


@dataclass(frozen=True)
class ModifiedLoss:
    """``b = −(sη/h) E ∇F̃`` with ``F̃ = F + η·correction`` (d dimensions; ``local_step`` as :func:`local_expansion`).

    Attributes
    ----------
    correction : sympy.Expr
        ``(F̃ − F)/η`` in the symbols ``‖∇F‖²`` (``grad2``) and ``Σ_k p_k ‖∇f_k‖²`` (``client_grad2``).
    dispersion_form : sympy.Expr
        The same with ``Σ_k p_k ‖∇f_k‖² = ‖∇F‖² + Σ_k p_k ‖∇f_k − ∇F‖²`` (``dispersion``).
    """

    local_step: str
    correction: sp.Expr
    dispersion_form: sp.Expr


grad2, client_grad2, dispersion = sp.symbols("|grad_F|^2 sum_p|grad_f_k|^2 dispersion", nonnegative=True)


@cache
def modified_loss(local_step: str = "plain") -> ModifiedLoss:
    """The modified loss of the order-2 drift.  Its gradient identities (``∇½‖∇f_k‖² = ∇²f_k ∇f_k``) are checked in
    two dimensions on generic functions by :func:`check_modified_loss`; here the coefficients are read off the
    one-coordinate drift: ``β₁ = c_χ χ + c_F H̄ ḡ`` ⇒ ``F̃ = F − (η/(sE))(c_χ/2 Σp‖∇f_k‖² + c_F/2 ‖∇F‖²)``."""
    choice("local_step", local_step, LOCAL_STEPS)
    cm = client_moments(local_step)
    if local_step == "plain":
        beta1 = sp.expand(order2_sde().drift * sym.h / sym.eta**2 + sym.s * sym.E * Fg / sym.eta)
    else:  # control variates: the client drift H_k·ḡ aggregates to H̄ ḡ; the matching's H̄ḡ term is unchanged
        m2 = sp.expand(cm.m2).coeff(H)  # E(E−1)/2 · ḡ
        beta1 = sp.expand(sym.s * m2.subs(gbar, 1) * FH * Fg - sym.s**2 * sym.E**2 * FH * Fg / 2)
    c_chi, c_F = beta1.coeff(chi), beta1.coeff(FH * Fg)
    corr = sp.factor(-(c_chi / 2 * client_grad2 + c_F / 2 * grad2) / (sym.s * sym.E))
    disp = sp.collect(sp.expand(corr.subs(client_grad2, grad2 + dispersion)), [grad2, dispersion], sp.factor)
    return ModifiedLoss(local_step, sp.expand(corr), disp)


def lte_reduction() -> tuple[sp.Expr, sp.Expr]:
    """Drift and diffusion with ``E = 1``, one client (``p = 1``: ``χ = H̄ḡ``, ``Σ̄ = Σ``), ``s = 1``, ``h = η``:
    Li, Tai & E's order-2 SME ``b = −(f' + (η/2) f''f')``, diffusion ``η Σ`` to leading order."""
    sde = order2_sde()
    sub = {sym.E: 1, sym.s: 1, sym.h: sym.eta, chi: FH * Fg}
    return sp.expand(sde.drift.subs(sub)), sp.expand(sde.diffusion.subs(sub))
