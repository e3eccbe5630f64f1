"""Closed-form moments of the three SDE variants, the discrete chain, and Thm 6.3 as printed (seed 002).

For ``dw = −A(w − c) dt + b dB`` the moments solve (seed 002, A.11, with ``−A`` for the paper's ``A(t)``)

    m' = −A (m − c),  m(0) = m₀;        v' = −2A v + b²,  v(0) = v₀,

solved here with ``sympy.dsolve`` and checked by substitution:

    m(t) = c + (m₀ − c) e^{−At},        v(t) = v₀ e^{−2At} + b²/(2A) (1 − e^{−2At}).

Thm 6.3 as printed has ``v₀(t) = η b_p²/(2D) (1 − e^{−Dt})``: its ODE residual is ``−η b_p² e^{−Dt}/2 ≠ 0``
(erratum 3; reference §3c).  The discrete chain (rounds ``n``, exact) has ``m_n = c + (1 − sβ)^n (m₀ − c)`` and
``v_n = ρ^{2n} v₀ + s²σ_ε² (1 − ρ^{2n})/(1 − ρ²)``, ``ρ = 1 − sβ``.

Series in η and limits act on the ``Sum``-over-clients forms: a sum is linear, so the series of each summand is
taken and ``k``-independent factors are pulled out (:func:`split_sums`); the ``E → ∞`` limits replace
``(1 − ηU_k)^E`` by 0, valid under ``0 < ηU_k < 2`` (every local SGD contracts).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import sympy as sp

from fedsde._validate import choice
from fedsde.symbolic import symbols as sym
from fedsde.symbolic.local_sgd import contraction, gamma, generic, paper_double_sum, server_law, to_indexed
from fedsde.symbolic.sde import VARIANTS, sde_coefficients


# ---------------------------------------------------------------------------------------------- OU solution
@dataclass(frozen=True)
class OUSolution:
    """Moments of ``dw = −A(w − c)dt + b dB`` with ``w(0) ~ (m₀, v₀)`` (``t`` on the SDE's clock).

    ``stationary_mean`` and ``stationary_var`` are the ``t → ∞`` limits for ``A > 0``: ``c`` and ``b²/(2A)``.
    """

    mean: sp.Expr
    var: sp.Expr
    mean_ode: sp.Eq
    var_ode: sp.Eq
    mean_residual: sp.Expr
    var_residual: sp.Expr
    stationary_mean: sp.Expr
    stationary_var: sp.Expr


@cache
def ou_solution() -> OUSolution:
    """Solve the moment ODEs with ``dsolve`` and verify the solution by substitution (residuals simplify to 0)."""
    mf, vf = sp.Function("m"), sp.Function("v")
    mean_ode = sp.Eq(mf(sym.t).diff(sym.t), -sym.A * (mf(sym.t) - sym.c))
    var_ode = sp.Eq(vf(sym.t).diff(sym.t), -2 * sym.A * vf(sym.t) + sym.b2)
    mean = sp.dsolve(mean_ode, mf(sym.t), ics={mf(0): sym.m0}).rhs
    var = sp.dsolve(var_ode, vf(sym.t), ics={vf(0): sym.v0}).rhs
    mean = sp.collect(sp.expand(mean), sp.exp(-sym.A * sym.t))
    var = sp.collect(sp.expand(var), sp.exp(-2 * sym.A * sym.t))
    mres = sp.simplify(ode_residual(mean, "mean"))
    vres = sp.simplify(ode_residual(var, "var"))
    if mres != 0 or vres != 0 or sp.simplify(mean.subs(sym.t, 0) - sym.m0) != 0 or sp.simplify(
            var.subs(sym.t, 0) - sym.v0) != 0:
        raise ArithmeticError("dsolve's OU moments failed verification by substitution")
    st_mean = sp.limit(mean, sym.t, sp.oo)  # sym.A is a positive symbol
    st_var = sp.limit(var, sym.t, sp.oo)
    return OUSolution(mean, var, mean_ode, var_ode, mres, vres, st_mean, st_var)


def ode_residual(expr: sp.Expr, kind: str, A: sp.Expr = sym.A, c: sp.Expr = sym.c, b2: sp.Expr = sym.b2) -> sp.Expr:
    """Residual of a candidate moment in its ODE: ``m' + A(m − c)`` or ``v' + 2Av − b²``."""
    if choice("kind", kind, ("mean", "var")) == "mean":
        return sp.diff(expr, sym.t) + A * (expr - c)
    return sp.diff(expr, sym.t) + 2 * A * expr - b2


# ---------------------------------------------------------------------------------------------- per variant
@dataclass(frozen=True)
class VariantMoments:
    """``m(t)``, ``v(t)`` (clock ``t = n·h``) and the stationary law of one SDE variant, in aggregate symbols."""

    variant: str
    mean: sp.Expr
    var: sp.Expr
    stationary_mean: sp.Expr
    stationary_var: sp.Expr


@cache
def variant_moments(variant: str) -> VariantMoments:
    """Substitute the variant's ``(A, c, b²)`` into :func:`ou_solution`; stationary law by ``t → ∞``."""
    co = sde_coefficients(variant)
    sol = ou_solution()
    sub = {sym.A: co.A, sym.c: co.c, sym.b2: co.b2}
    # t → ∞ needs A > 0 (matched: 0 < 1 − sβ < 1); the limits were taken in ou_solution with A positive
    st_mean, st_var = sol.stationary_mean.subs(sub), sol.stationary_var.subs(sub)
    return VariantMoments(variant, sol.mean.subs(sub), sol.var.subs(sub), sp.simplify(st_mean),
                          sp.simplify(st_var))


@dataclass(frozen=True)
class PrintedThm63:
    """Thm 6.3 as printed, in the paper's ``D``, ``K`` (= D·C4) and ``b_p``; ``t`` on the clock ``t = n·η``."""

    mean: sp.Expr
    C4: sp.Expr
    var: sp.Expr
    var_corrected: sp.Expr


@cache
def thm63_printed() -> PrintedThm63:
    """``m₀(t) = C4 + (w₀(0) − C4)e^{−Dt}``, ``C4 = K/D``, ``v₀(t) = −η b_p² (e^{−Dt} − 1)/(2D)`` as printed.

    ``var_corrected`` is the solution of the same SDE's variance ODE: ``η b_p² (1 − e^{−2Dt})/(2D)``.
    """
    C4 = sym.K / sym.D
    mean = C4 + (sym.m0 - C4) * sp.exp(-sym.D * sym.t)
    var = -sym.eta * sym.b_paper**2 / (2 * sym.D) * (sp.exp(-sym.D * sym.t) - 1)
    var_c = sym.eta * sym.b_paper**2 / (2 * sym.D) * (1 - sp.exp(-2 * sym.D * sym.t))
    return PrintedThm63(mean, C4, var, var_c)


@cache
def ode_residuals() -> dict[str, sp.Expr]:
    """ODE residuals of the printed Thm 6.3 and of the corrected variance (reference §3c).

    Keys: ``paper_mean`` (``m₀' + D m₀ − K``: 0), ``paper_C4`` (``D·C4 − K``: 0, the fixed point),
    ``paper_var`` (``v₀' + 2D v₀ − η b_p²``: ``−η b_p² e^{−Dt}/2``, not 0), ``paper_var_generic`` (the same with
    ``b² = η b_p²``: ``−b² e^{−Dt}/2``), ``corrected_var`` (``v' + 2A v − b²`` for the corrected SDE's
    ``v(t)`` with ``v(0) = 0``: 0), ``paper_var_initial`` (``v₀(0)``: 0), ``paper_mean_initial``
    (``m₀(0) − w₀(0)``: 0).
    """
    th = thm63_printed()
    b2p = sym.eta * sym.b_paper**2
    out = {
        "paper_mean": sp.simplify(ode_residual(th.mean, "mean", A=sym.D, c=sym.K / sym.D)),
        "paper_C4": sp.simplify(sym.D * th.C4 - sym.K),
        "paper_var": sp.simplify(ode_residual(th.var, "var", A=sym.D, b2=b2p)),
        "paper_var_initial": sp.simplify(th.var.subs(sym.t, 0)),
        "paper_mean_initial": sp.simplify(th.mean.subs(sym.t, 0) - sym.m0),
    }
    generic_b2 = sp.simplify(ode_residual(th.var.subs(b2p, sym.b2).subs(sym.b_paper**2, sym.b2 / sym.eta), "var",
                                          A=sym.D, b2=sym.b2))
    out["paper_var_generic"] = generic_b2
    co = sde_coefficients("corrected")
    v = variant_moments("corrected").var.subs(sym.v0, 0)
    out["corrected_var"] = sp.simplify(ode_residual(v, "var", A=co.A, b2=co.b2))
    return out


# ---------------------------------------------------------------------------------------------- the chain
@dataclass(frozen=True)
class ChainMoments:
    """Exact moments of the discrete chain after ``n`` rounds (aggregate symbols), and its stationary law."""

    mean: sp.Expr
    var: sp.Expr
    stationary_mean: sp.Expr
    stationary_var: sp.Expr
    mean_residual: sp.Expr
    var_residual: sp.Expr


@cache
def chain_moments() -> ChainMoments:
    """``m_n``, ``v_n`` of ``w_{n+1} = w_n − sβ(w_n − c) + sε``, verified against the one-round recursion."""
    rho = 1 - sym.s * sym.beta
    mean = sym.C4 + rho**sym.n * (sym.m0 - sym.C4)
    var = rho ** (2 * sym.n) * sym.v0 + sym.s**2 * sym.sigma2 * (1 - rho ** (2 * sym.n)) / (1 - rho**2)
    mres = sp.simplify(mean.subs(sym.n, sym.n + 1) - (mean - sym.s * sym.beta * (mean - sym.C4)))
    vres = sp.simplify(var.subs(sym.n, sym.n + 1) - (rho**2 * var + sym.s**2 * sym.sigma2))
    st_var = sp.factor(sp.simplify(sym.s**2 * sym.sigma2 / (1 - rho**2)))
    return ChainMoments(mean, var, sym.C4, st_var, mres, vres)


@cache
def stationary_ratio(variant: str) -> sp.Expr:
    """Stationary variance of the SDE variant divided by the chain's: corrected ``1 − sβ/2``, matched 1."""
    return sp.factor(sp.simplify(variant_moments(variant).stationary_var / chain_moments().stationary_var))


@cache
def matched_grid_residuals() -> tuple[sp.Expr, sp.Expr]:
    """``m(nh) − m_n`` and ``v(nh) − v_n`` for the matched variant (both simplify to 0).

    Written with ``ρ = 1 − sβ ∈ (0, 1)`` (a positive symbol) so that ``e^{−A·nh} = e^{n ln ρ} = ρ^n``.
    """
    rho = sp.Symbol("rho", positive=True)
    on_grid = {sym.t: sym.n * sym.h}
    to_rho = {sym.beta: (1 - rho) / sym.s}
    vm, ch = variant_moments("matched"), chain_moments()
    dm = sp.simplify(sp.powsimp(vm.mean.subs(on_grid).subs(to_rho) - ch.mean.subs(to_rho), force=True))
    dv = sp.simplify(sp.powsimp(vm.var.subs(on_grid).subs(to_rho) - ch.var.subs(to_rho), force=True))
    return dm, dv


def simplify_summands(expr: sp.Expr) -> sp.Expr:
    """Factor the summand of every ``Sum`` (display only; the value is unchanged)."""
    return expr.replace(lambda e: isinstance(e, sp.Sum),
                        lambda e: sp.Sum(sp.factor(sp.simplify(e.function)), *e.limits))


# ---------------------------------------------------------------------------------------------- sums, series
def split_sums(expr: sp.Expr) -> sp.Expr:
    """Rewrite every ``Sum`` over ``k`` as a combination of sums whose summands depend on ``k`` only.

    ``Σ_k (x·f_k + y·g_k) → x Σ_k f_k + y Σ_k g_k`` for ``x, y`` free of ``k`` (summands expanded first).
    """

    def _split(su: sp.Sum) -> sp.Expr:
        body, limits = su.function, su.limits
        out = 0
        for term in sp.Add.make_args(sp.expand(body)):
            dep = [f for f in sp.Mul.make_args(term) if f.has(sym.k)]
            ind = [f for f in sp.Mul.make_args(term) if not f.has(sym.k)]
            out += sp.Mul(*ind) * sp.Sum(sp.Mul(*dep), *limits)
        return out

    return expr.replace(lambda e: isinstance(e, sp.Sum) and e.limits[0][0] == sym.k, _split)


def client_series(summand: sp.Expr, order: int) -> sp.Expr:
    """Series in η of a one-client summand up to ``O(η^order)`` (generic branches), with ``E`` symbolic.

    By construction: every ``(1 − ηU_k)^{cE}`` is replaced by its binomial expansion
    ``Σ_{j<=order+2} C(cE, j)(−ηU_k)^j`` (exact up to ``O(η^{order+3})`` for integer ``E``; the closed forms divide
    by ``η`` at most twice), which makes the summand rational in η; then ``sympy.series``.
    """
    top = int(order) + 3

    def binom(e: sp.Pow) -> sp.Expr:
        return sum(sp.expand_func(sp.binomial(e.exp, jj)) * (-sym.eta * sym.U) ** jj for jj in range(top))

    g = generic(summand).replace(lambda e: isinstance(e, sp.Pow) and e.base == sym.r and e.exp.has(sym.E), binom)
    g = sp.cancel(sp.together(g))
    return sp.expand(sp.series(g, sym.eta, 0, order).removeO())


def leading_term(expr: sp.Expr) -> sp.Expr:
    """Leading term in η of an expression whose ``Sum`` objects are free of η (they are treated as symbols)."""
    sums = {su: sp.Dummy() for su in expr.atoms(sp.Sum)}
    back = {v: key for key, v in sums.items()}
    return sp.factor(expr.xreplace(sums).as_leading_term(sym.eta)).xreplace(back)


@dataclass(frozen=True)
class SeriesInEta:
    """Leading orders in η (``E``, ``Q`` symbolic) of the round-law aggregates and the stationary variances."""

    beta: sp.Expr
    sigma2: sp.Expr
    b_paper: sp.Expr
    C4_limit: sp.Expr
    stationary_var: dict[str, sp.Expr]


@cache
def eta_series() -> SeriesInEta:
    """Leading-order terms in η, from the per-client series summed over clients.

    * ``β = ηE Σ p_k U_k + O(η²)``, ``σ_ε² = η²E Σ p_k² Σ_k + O(η³)``,
      ``b_p = E + E(E−1)/2 Σ p_k √Σ_k U_k + O(η)``;
    * ``C4 → Σ p_k U_k a_k / Σ p_k U_k = w*`` as ``η → 0`` (the paper's claim 1: true);
    * stationary variances (``s`` symbolic): chain, corrected and matched ``sη Σ p_k² Σ_k /(2 Σ p_k U_k)``,
      independent of ``E``; the paper's ``sη (E + E(E−1)/2 Σ p_k √Σ_k U_k)²/(2E Σ p_k U_k)``, which grows like
      ``E³`` — all vanish as ``η → 0`` (claim 1's zero variance: true).
    """
    beta_k = client_series(contraction(), 2)
    gam_k = client_series(gamma(), 1)
    S_k = client_series(paper_double_sum(), 1)

    def agg(term: sp.Expr) -> sp.Expr:
        return split_sums(sp.Sum(to_indexed(term), (sym.k, 1, sym.Q)))

    beta = agg(sym.p * beta_k)
    Ba = agg(sym.p * client_series(contraction() * sym.a, 2))
    sigma2 = sym.eta**2 * agg(sym.p**2 * gam_k)
    b_p = sym.E + agg(sym.p * sp.sqrt(sym.Sigma) * S_k)

    rho = 1 - sym.s * beta
    stat = {
        "chain": leading_term(sym.s**2 * sigma2 / (1 - rho**2)),
        "corrected": leading_term(sym.s * sigma2 / (2 * beta)),
        "paper": leading_term(sym.s * sym.eta**2 * b_p**2 / (2 * beta)),
    }
    stat["matched"] = stat["chain"]
    C4_lim = leading_term(Ba / beta)
    return SeriesInEta(leading_term(beta), leading_term(sigma2), leading_term(b_p), C4_lim, stat)


@dataclass(frozen=True)
class LargeELimits:
    """``E → ∞`` (under ``0 < ηU_k < 2``): stationary mean and variances; the paper's grows like ``E²``."""

    C4: sp.Expr
    stationary_var: dict[str, sp.Expr]
    paper_E2_coefficient: sp.Expr


@cache
def large_E_limits() -> LargeELimits:
    """Replace ``(1 − ηU_k)^E`` and ``(1 − ηU_k)^{2E}`` by 0 and simplify (reference §3c, "large E").

    With ``Σ_k p_k = 1``:

    * ``C4 → Σ p_k a_k`` (the p-weighted mean of the client optima, not ``w*``);
    * chain (``s`` symbolic): ``s σ²∞ /(2 − s)`` with ``σ²∞ = η Σ p_k² Σ_k /(U_k (2 − ηU_k))`` — finite, and at
      ``s = 1`` equal to ``η Σ p_k² Σ_k /(U_k(2 − ηU_k))``;
    * corrected: ``s σ²∞ / 2``; matched = chain;
    * paper: ``~ E² · s (η + Σ p_k √Σ_k)² / 2`` (its own formula grows as ``E²``).
    """
    law = server_law()

    def drop(expr: sp.Expr) -> sp.Expr:
        g = generic(expr)
        rk = to_indexed(sym.r)
        g = g.replace(lambda e: isinstance(e, sp.Pow) and e.base == rk and e.exp.has(sym.E), lambda e: sp.Integer(0))
        return split_sums(g)

    beta, Ba, sigma2, b_p = drop(law.beta), drop(law.Ba), drop(law.sigma2), drop(law.b_paper)
    one = {sp.Sum(sym.p_[sym.k], (sym.k, 1, sym.Q)): sp.Integer(1)}  # Σ_k p_k = 1
    beta, Ba, sigma2, b_p = (simplify_summands(x).xreplace(one) for x in (beta, Ba, sigma2, b_p))
    rho = 1 - sym.s * beta
    chain = sp.factor(sp.simplify(sym.s**2 * sigma2 / (1 - rho**2)))
    corrected = sp.factor(sp.simplify(sym.s * sigma2 / (2 * beta)))
    # b_p is linear in E once r^E → 0, so the printed variance is a quadratic polynomial in E over 2β
    coef = sp.factor(sp.expand(split_sums(sp.expand(sym.s * sym.eta**2 * b_p**2))).coeff(sym.E, 2) / (2 * beta))
    return LargeELimits(sp.simplify(Ba / beta), {"chain": chain, "corrected": corrected, "matched": chain,
                                                  "paper": sp.oo}, coef)


__all__ = [
    "VARIANTS",
    "ChainMoments",
    "LargeELimits",
    "OUSolution",
    "PrintedThm63",
    "SeriesInEta",
    "VariantMoments",
    "aggregate_scaling",
    "chain_moments",
    "eta_series",
    "large_E_limits",
    "leading_term",
    "matched_grid_residuals",
    "ode_residual",
    "ode_residuals",
    "ou_solution",
    "rescaling_ratios",
    "simplify_summands",
    "split_sums",
    "stationary_ratio",
    "thm63_printed",
    "variant_moments",
]


# ---------------------------------------------------------------------------------------------- units
def _rescale_map() -> dict:
    return {sym.eta: sym.lam**2 * sym.eta, sym.U_[sym.k]: sym.U_[sym.k] / sym.lam**2,
            sym.Sigma_[sym.k]: sym.Sigma_[sym.k] / sym.lam**2, sym.a_[sym.k]: sym.lam * sym.a_[sym.k]}


@cache
def aggregate_scaling() -> dict[sp.Symbol, sp.Expr]:
    """How the aggregates transform under the change of units ``w → λw`` (see :func:`rescaling_ratios`).

    ``β → β``, ``C4 → λ C4``, ``σ_ε² → λ² σ_ε²``, but ``b_p → E + (b_p − E)/λ³``: each is checked on the
    ``Sum`` forms (the difference cancels to 0), else ``ArithmeticError``.
    """
    law = server_law()
    rmap = _rescale_map()
    claimed = {sym.beta: sym.beta, sym.C4: sym.lam * sym.C4, sym.sigma2: sym.lam**2 * sym.sigma2,
               sym.b_paper: sym.E + (sym.b_paper - sym.E) / sym.lam**3}
    agg = law.aggregates()
    for symbol, target in claimed.items():
        lhs = split_sums(generic(agg[symbol].xreplace(rmap)))
        rhs = split_sums(generic(target.subs(agg)))
        if sp.cancel(lhs - rhs) != 0:
            raise ArithmeticError(f"rescaling of {symbol} is not {target}")
    return claimed


@cache
def rescaling_ratios() -> dict[str, sp.Expr]:
    """Ratio ``X(λ)/X(1)`` under the change of units ``w → λw`` (reference §3b, ``fedsde_s5``).

    ``a → λa``, ``U → U/λ²``, ``Σ → Σ/λ²``, ``η → λ²η`` (``r = 1 − ηU`` and ``s`` unchanged): the iterates scale by
    exactly ``λ``, so every variance must scale by ``λ²``.  Keys: ``stationary_<variant>``, ``stationary_chain``,
    ``round_<variant>`` (one-round variance ``b²·h``), ``C4`` (must scale by ``λ``).  The corrected, matched and
    chain ratios are ``λ²``; the paper's are ``λ⁴ (E + (b_p − E)/λ³)² / b_p²`` (eq. (4) is dimensionally
    inconsistent: bare ``E``, missing ``η``).
    """
    scale = aggregate_scaling()
    quantities = {f"stationary_{v}": variant_moments(v).stationary_var for v in VARIANTS}
    quantities["stationary_chain"] = chain_moments().stationary_var
    for v in VARIANTS:
        quantities[f"round_{v}"] = sde_coefficients(v).b2 * sym.h
    quantities["C4"] = sym.C4
    sub = dict(scale)
    sub[sym.eta] = sym.lam**2 * sym.eta
    return {key: sp.factor(sp.simplify(q.subs(sub, simultaneous=True) / q)) for key, q in quantities.items()}
