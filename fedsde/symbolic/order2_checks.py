"""Checks of the order-2 SDE (:mod:`fedsde.symbolic.order2`) beyond one coordinate, and its quadratic instances.

* :func:`matrix_client_moments` — one client's ``E`` local steps unrolled in two dimensions with matrix jets (the
  gradient ``g + Hδ``, the noise factor ``σ₀ + Σ_a δ_a σ_a``): the mean to ``O(η²)`` and the covariance to ``O(η³)``
  against the matrix forms ``−ηEg + η²E(E−1)/2·Hg`` and ``η²EΣ − η³E(E−1)/2·(HΣ + ΣH + (g·∇)Σ)`` (the orderings the
  one-coordinate derivation cannot see).
* :func:`modified_loss_residual` — the order-2 drift of two clients with generic losses ``f_k(w₁, w₂)`` minus
  ``−(sη/h)E ∇F̃`` (:func:`fedsde.symbolic.order2.modified_loss`), by sympy differentiation: zero.
* :func:`quadratic_coefficients` — the linear SDEs of quadratic clients ``f_k = ½U_k(w − a_k)²`` (one coordinate of a
  diagonal problem): the truncated series (``"series"``: the general drift and diffusion with ``g_k = U_k(w − a_k)``,
  ``H_k = U_k``, ``Σ_k' = 0``) and the form on the exact round law (``"round-law"``: ``A = (sβ + (sβ)²/2)/h``,
  ``D = (s²σ_ε²/h)(1 + sβ)``, the second-order truncations of ``−ln(1 − sβ)/h`` and of the variance that makes an OU
  step of length ``h`` reproduce the round's ``s²σ_ε²``), as ``(A, c, D)``.
"""

from __future__ import annotations

from functools import cache

import sympy as sp

from fedsde._validate import choice
from fedsde.symbolic import order2 as O
from fedsde.symbolic import symbols as sym

#: the order-2 forms on quadratic clients (as :data:`fedsde.sde.order2.ORDER2_FORMS`)
FORMS = ("round-law", "centred", "series")


def _truncate_matrix(M: sp.Matrix, order: int) -> sp.Matrix:
    return M.applyfunc(lambda e: O._truncate(e, order))


def matrix_client_moments(local_steps: int, local_step: str = "plain") -> tuple[sp.Matrix, sp.Matrix]:
    """Residuals (mean, covariance) of the two-dimensional unrolled client moments against the matrix forms: both
    zero matrices when the forms hold (``local_step="control_variate"``: ``g → ∇F`` in the gradient at ``δ = 0``)."""
    choice("local_step", local_step, O.LOCAL_STEPS)
    E = int(local_steps)
    gv = sp.Matrix(sp.symbols("g1 g2", real=True))
    gb = sp.Matrix(sp.symbols("gb1 gb2", real=True))
    h11, h12, h22 = sp.symbols("H11 H12 H22", real=True)
    Hm = sp.Matrix([[h11, h12], [h12, h22]])
    s0 = sp.Matrix(2, 2, sp.symbols("s0_11 s0_12 s0_21 s0_22", real=True))
    sa = [sp.Matrix(2, 2, sp.symbols(f"s{a}_11 s{a}_12 s{a}_21 s{a}_22", real=True)) for a in (1, 2)]
    z = [sp.Matrix(sp.symbols(f"z{i}_1 z{i}_2", real=True)) for i in range(E)]
    g0 = gv if local_step == "plain" else gb
    delta = sp.zeros(2, 1)
    for i in range(E):
        scale = s0 + delta[0] * sa[0] + delta[1] * sa[1]
        delta = _truncate_matrix(delta - sym.eta * (g0 + Hm * delta + scale * z[i]), 2)
    normals = [c for zi in z for c in zi]
    mean = delta.applyfunc(lambda e: O._expect(e, normals))
    second = (delta * delta.T).applyfunc(lambda e: O._expect(O._truncate(e, 3), normals))
    cov = _truncate_matrix(second - mean * mean.T, 3)
    Sig = s0 * s0.T
    dSig = [sa[a] * s0.T + s0 * sa[a].T for a in (0, 1)]
    along = g0[0] * dSig[0] + g0[1] * dSig[1]
    k2 = sp.Rational(E * (E - 1), 2)
    mean_form = -sym.eta * E * g0 + sym.eta**2 * k2 * Hm * g0
    cov_form = sym.eta**2 * E * Sig - sym.eta**3 * k2 * (Hm * Sig + Sig * Hm + along)
    return (mean - mean_form).applyfunc(sp.expand), (cov - cov_form).applyfunc(sp.expand)


def modified_loss_residual(local_step: str = "plain") -> sp.Matrix:
    """``b − (−(sη/h)E∇F̃)`` for two clients with generic losses ``f_1, f_2`` of ``(w₁, w₂)``, weights ``p, 1 − p``:
    the drift from the matrix form (``χ = Σ p_k ∇²f_k ∇f_k``, ``∇²F ∇F``; control variates: ``∇²F ∇F`` in place of
    ``χ``), the modified loss from :func:`fedsde.symbolic.order2.modified_loss`.  Zero when the drift is a gradient."""
    choice("local_step", local_step, O.LOCAL_STEPS)
    w = sp.symbols("w1 w2", real=True)
    p = sp.Symbol("p", positive=True)
    fs = [sp.Function(f"f{k}")(*w) for k in (1, 2)]
    ps = (p, 1 - p)
    grad = [sp.Matrix([sp.diff(f, x) for x in w]) for f in fs]
    hess = [sp.hessian(f, w) for f in fs]
    F = ps[0] * fs[0] + ps[1] * fs[1]
    gF = ps[0] * grad[0] + ps[1] * grad[1]
    HF = ps[0] * hess[0] + ps[1] * hess[1]
    chi = ps[0] * hess[0] * grad[0] + ps[1] * hess[1] * grad[1] if local_step == "plain" else HF * gF
    b = -(sym.s * sym.eta * sym.E / sym.h) * (gF + (sym.eta / 2) * (sym.s * sym.E * HF * gF - (sym.E - 1) * chi))
    ml = O.modified_loss(local_step)
    norms = {O.grad2: (gF.T * gF)[0], O.client_grad2: sum(pk * (gk.T * gk)[0] for pk, gk in zip(ps, grad,
                                                                                                   strict=True))}
    Ft = F + sym.eta * ml.correction.subs(norms)
    target = -(sym.s * sym.eta * sym.E / sym.h) * sp.Matrix([sp.diff(Ft, x) for x in w])
    return (b - target).applyfunc(sp.simplify)


# ---------------------------------------------------------------------------------------------- quadratic clients
#: aggregates of quadratic clients per coordinate: Σp_kU_k, Σp_kU_k², Σp_kU_ka_k, Σp_kU_k²a_k, Σp_k²Σ_k, Σp_k²U_kΣ_k
u1, u2, u1a, u2a, sb, us = sp.symbols("u1 u2 u1a u2a sb us", real=True)
QUADRATIC_AGGREGATES = (u1, u2, u1a, u2a, sb, us)


@cache
def quadratic_coefficients(form: str) -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """``(A, c, D)`` of ``dw = −A(w − c) dt + D^{1/2} dB`` for one coordinate of quadratic clients (module docstring).

    ``"series"``: in :data:`QUADRATIC_AGGREGATES` and ``η, s, h, E``.  ``"round-law"``: in ``β``, ``C4``,
    ``σ_ε²`` (:mod:`fedsde.symbolic.symbols`) and ``s, h``.  ``"centred"``: the series' ``A`` and ``D`` with
    ``c = C4``.
    """
    choice("form", form, FORMS)
    if form == "centred":
        A, _, D = quadratic_coefficients("series")
        return A, sym.C4, D
    if form == "round-law":
        x = sp.Symbol("x", positive=True)
        log_series = sp.series(-sp.log(1 - x), x, 0, 3).removeO()  # x + x²/2
        A = log_series.subs(x, sym.s * sym.beta) / sym.h
        return sp.expand(A), sym.C4, sym.s**2 * sym.sigma2 * (1 + sym.s * sym.beta) / sym.h
    sde = O.order2_sde()
    w = sym.w
    sub = {O.Fg: u1 * w - u1a, O.FH: u1, O.chi: u2 * w - u2a, O.Sb: sb, O.dSb: 0, O.psi: 2 * us}
    b = sp.expand(sde.drift.subs(sub))
    A = sp.factor(-sp.diff(b, w))
    c = sp.factor(b.subs(w, 0) / A)
    return A, c, sp.factor(sde.diffusion.subs(sub))


def round_law_matches_chain() -> tuple[sp.Expr, sp.Expr]:
    """The one-round mismatch of the ``"round-law"`` form with the chain, as series in ``x = sβ``:
    ``e^{−Ah} − (1 − sβ) = O(x³)`` and ``D(1 − e^{−2Ah})/(2A) − s²σ_ε² = O(x²)·s²σ_ε²``; returns both leading terms."""
    A, _, D = quadratic_coefficients("round-law")
    x = sp.Symbol("x", positive=True)
    sub = {sym.beta: x / sym.s}
    mean_gap = sp.series(sp.exp(-(A * sym.h).subs(sub)) - (1 - x), x, 0, 4).removeO()
    var = (D * (1 - sp.exp(-2 * A * sym.h)) / (2 * A)).subs(sub)
    var_gap = sp.series(var / (sym.s**2 * sym.sigma2) - 1, x, 0, 3).removeO()
    return sp.expand(mean_gap), sp.expand(var_gap)


def diagonal_order2(problem, eta: float, local_steps: int, server_lr: float, h: float, form: str):
    """``(A, c, D)`` per coordinate, each shape (d,), of a **diagonal** quadratic problem, from the lambdified forms
    of :func:`quadratic_coefficients` (the symbolic path the tests hold against :mod:`fedsde.sde.order2`)."""
    import numpy as np

    from fedsde.symbolic.numeric import aggregates, lambdify

    choice("form", form, FORMS)
    U, Sig = np.einsum("qii->qi", problem.U), np.einsum("qii->qi", problem.Sigma)
    p, a = problem.p, problem.a
    agg = aggregates(problem, eta, local_steps)
    vals = {u1: p @ U, u2: p @ U**2, u1a: p @ (U * a), u2a: p @ (U**2 * a), sb: (p * p) @ Sig,
            us: (p * p) @ (U * Sig), sym.beta: agg["beta"], sym.C4: agg["C4"], sym.sigma2: agg["sigma2"],
            sym.eta: eta, sym.s: server_lr, sym.h: h, sym.E: int(local_steps)}
    args = tuple(vals)
    fn = lambdify(args, quadratic_coefficients(form), "numpy")
    return tuple(np.asarray(x, dtype=np.float64) * np.ones(problem.d) for x in fn(*vals.values()))
