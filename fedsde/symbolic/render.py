"""Step-by-step derivations of the three SDE variants, as text, LaTeX or JSON (``fedsde derive``).

:func:`derivation` collects the steps from the other modules of :mod:`fedsde.symbolic` — E-step client law,
server round law, SDE coefficients on the clock ``t = n·h``, closed-form moments, ODE residuals, stationary
limits, leading order in η and the ``η → 0``, ``E → ∞`` limits — each as a labelled sympy expression.  With a
concrete ``local_steps`` the symbol ``E`` is replaced by that integer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import sympy as sp

from fedsde._validate import choice
from fedsde.symbolic import symbols as sym


def latex(expr: sp.Basic) -> str:
    """LaTeX of an expression with the project's symbol names (``\\eta``, ``\\Sigma_k``, ``C_4`` …)."""
    return sp.latex(expr, symbol_names=sym.LATEX_NAMES)


def text(expr: sp.Basic) -> str:
    """One-line plain text of an expression (``sympy.sstr``)."""
    return sp.sstr(expr)


@dataclass(frozen=True)
class Step:
    """One labelled step of a derivation: ``lhs = rhs`` (or just ``rhs``), with an optional note.

    ``lhs`` is a sympy expression or a ``(text, latex)`` pair of strings.
    """

    label: str
    rhs: sp.Basic
    lhs: sp.Basic | tuple[str, str] | None = None
    note: str = ""

    def as_text(self) -> str:
        if self.lhs is None:
            return text(self.rhs)
        left = self.lhs[0] if isinstance(self.lhs, tuple) else text(self.lhs)
        return f"{left} = {text(self.rhs)}"

    def as_latex(self) -> str:
        if self.lhs is None:
            return latex(self.rhs)
        left = self.lhs[1] if isinstance(self.lhs, tuple) else latex(self.lhs)
        return f"{left} = {latex(self.rhs)}"

    def subs(self, mapping: dict) -> Step:
        lhs = self.lhs.subs(mapping) if isinstance(self.lhs, sp.Basic) else self.lhs
        return Step(self.label, self.rhs.subs(mapping), lhs, self.note)


@dataclass(frozen=True)
class Derivation:
    """A variant's derivation: ordered steps plus the clock convention."""

    variant: str
    local_steps: int | None
    clock: str
    steps: tuple[Step, ...] = field(default_factory=tuple)

    def to_text(self) -> str:
        head = f"Derivation: variant={self.variant}, E={'symbolic' if self.local_steps is None else self.local_steps}"
        lines = [head, f"clock: {self.clock}", ""]
        for num, st in enumerate(self.steps, 1):
            lines.append(f"{num:2d}. {st.label}")
            lines.append(f"    {st.as_text()}")
            if st.note:
                lines.append(f"    ({st.note})")
        return "\n".join(lines)

    def to_latex(self) -> str:
        lines = [f"% fedsde derive --variant {self.variant}; clock: {self.clock}", r"\begin{enumerate}"]
        for st in self.steps:
            note = f" \\\\ \\emph{{{_tex_escape(st.note)}}}" if st.note else ""
            lines.append(f"  \\item {_tex_escape(st.label)}: \\[ {st.as_latex()} \\]{note}")
        lines.append(r"\end{enumerate}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {
            "variant": self.variant,
            "local_steps": "symbolic" if self.local_steps is None else self.local_steps,
            "clock": self.clock,
            "steps": [{"label": st.label, "text": st.as_text(), "latex": st.as_latex(), "note": st.note}
                      for st in self.steps],
        }


_TEX = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#",
        "$": r"\$", "^": r"\^{}", "~": r"\~{}"}


def _tex_escape(s: str) -> str:
    return "".join(_TEX.get(ch, ch) for ch in s)


@cache
def derivation(variant: str, local_steps: int | None = None) -> Derivation:
    """The derivation of ``variant`` ("paper", "corrected", "matched"); ``local_steps`` fixes ``E`` if given."""
    from fedsde.symbolic.local_sgd import (
        client_law,
        closed_form_weights,
        diagonal_client_law,
        gamma,
        generic,
        mean_sum,
        recursion,
        server_law,
    )
    from fedsde.symbolic.moments import (
        chain_moments,
        eta_series,
        large_E_limits,
        matched_grid_residuals,
        ode_residuals,
        stationary_ratio,
        thm63_printed,
        variant_moments,
    )
    from fedsde.symbolic.sde import CLOCK, VARIANTS, eq4_printed, sde_coefficients

    choice("variant", variant, VARIANTS)
    wE = ("w_E", "w_E")
    law_c = client_law("corrected")
    steps: list[Step] = [
        Step("local SGD step (sign convention w <- w - eta(grad F_k + xi), xi ~ N(0, Sigma_k))",
             recursion().rhs, recursion().lhs),
        Step("E steps unrolled (r = 1 - eta U_k)", closed_form_weights(), wE),
        Step("client mean, Thm 6.2's mean part (correct): geometric sum in closed form",
             generic(law_c.mean), ("E[w_E|w]", r"\mathbb{E}[w_E \mid w]"), note=f"printed form: {text(mean_sum())}"),
    ]
    if variant == "paper":
        law_p = client_law("paper")
        steps += [
            Step("client noise as printed in Thm 6.2 (N_1, N_2 ~ N(0, Sigma_k))", law_p.noise),
            Step("its variance, the two N(0, Sigma_k) read as one draw (S_k = double sum in closed form)",
                 sp.simplify(generic(law_p.variance)),
                 ("Var_printed[w_E|w]", r"\mathrm{Var}_{\mathrm{printed}}[w_E \mid w]"),
                 note="not the law of the algorithm: missing eta on the double sum, E noises treated as one draw"),
        ]
    steps += [
        Step("client noise, corrected (Thm 6.2's layout, the same xi's in both sums)", law_c.noise),
        Step("client variance (corrected)", law_c.variance_generic, ("Var[w_E|w]", r"\mathrm{Var}[w_E \mid w]"),
             note=f"eta^2 Gamma_k with Gamma_k = {text(generic(gamma()))}"),
    ]
    _, cov2, _ = diagonal_client_law(2)
    steps.append(Step("diagonal d-dim (shown for d = 2): client covariance, coordinates decouple",
                      sp.simplify(generic(cov2)), ("Cov[w_E|w]", r"\mathrm{Cov}[w_E \mid w]")))
    sl = server_law()
    steps += [
        Step("server round, mean: w + s sum_k p_k (E[w_E^k] - w) = w - s beta (w - C4)", sl.mean_update,
             ("E[w_{n+1}|w_n=w]", r"\mathbb{E}[w_{n+1} \mid w_n = w]")),
        Step("beta (= B of fedsde.exact; the paper's D = beta/eta)", generic(sl.beta), sym.beta),
        Step("C4 = c, fixed point of the round map = exact stationary mean", generic(sl.c), sym.C4),
        Step("one-round noise variance (independent clients: p_k^2)", generic(sl.sigma2), sym.sigma2),
    ]
    if variant == "paper":
        steps.append(Step("the bracket of eq. (4)", generic(sl.b_paper), sym.b_paper,
                          note="p_k (not p_k^2), bare E, no eta on S_k: reference §3b"))
    co = sde_coefficients(variant)
    A_, c_, b2_ = ("A", "A"), ("c", "c"), ("b^2", "b^2")
    steps += [
        Step("SDE dw = -A (w - c) dt + b dB(t) on the clock t = n*h: drift rate", co.A, A_, note=co.source),
        Step("centre", co.c, c_),
        Step("squared diffusion", co.b2, b2_),
    ]
    s6 = co.section6()
    steps += [
        Step("Section 6's choice h = eta, s = 1: drift", s6.drift, ("drift", r"\text{drift}")),
        Step("Section 6's choice h = eta, s = 1: squared diffusion", s6.b2, b2_),
    ]
    if variant == "paper":
        drift_p, diff_p = eq4_printed()
        steps += [
            Step("eq. (4) as printed: drift (equals the line above with beta, C4 expanded)", drift_p),
            Step("eq. (4) as printed: diffusion", diff_p),
        ]
    vm = variant_moments(variant)
    steps += [
        Step("mean ODE m' = -A (m - c), m(0) = w0(0); solution (dsolve, verified by substitution)", vm.mean,
             ("m(t)", "m(t)")),
        Step("variance ODE v' = -2A v + b^2, v(0) = v0(0); solution", vm.var, ("v(t)", "v(t)")),
    ]
    if variant == "paper":
        th, res = thm63_printed(), ode_residuals()
        steps += [
            Step("Thm 6.3 as printed: m0(t) (D = beta/eta, K = D*C4)", th.mean, ("m_0(t)", "m_0(t)")),
            Step("ODE residual of the printed m0: m0' + D m0 - K", res["paper_mean"]),
            Step("ODE residual of C4: D*C4 - K", res["paper_C4"]),
            Step("Thm 6.3 as printed: v0(t)", th.var, ("v_0(t)", "v_0(t)")),
            Step("ODE residual of the printed v0: v0' + 2D v0 - eta b_p^2 (not zero: erratum)", res["paper_var"]),
            Step("solution of the same ODE (e^{-2Dt}, not e^{-Dt})", th.var_corrected, ("v_0(t)", "v_0(t)")),
        ]
    if variant == "corrected":
        steps.append(Step("ODE residual of v(t) (v(0) = 0): v' + 2A v - b^2", ode_residuals()["corrected_var"]))
    steps += [
        Step("stationary mean (t -> oo)", vm.stationary_mean, ("m(oo)", r"m(\infty)")),
        Step("stationary variance (t -> oo)", vm.stationary_var, ("v(oo)", r"v(\infty)")),
        Step("exact stationary variance of the discrete chain (discrete Lyapunov)", chain_moments().stationary_var,
             ("v_chain(oo)", r"v_{\mathrm{chain}}(\infty)")),
        Step("ratio of the SDE's stationary variance to the chain's", stationary_ratio(variant)),
    ]
    if variant == "matched":
        dm, dv = matched_grid_residuals()
        steps += [Step("m(n h) - m_n (chain), by substitution", dm), Step("v(n h) - v_n (chain)", dv)]
    ser = eta_series()
    steps += [
        Step("leading order in eta of the stationary variance", ser.stationary_var[variant], ("v(oo)", r"v(\infty)")),
        Step("leading order in eta of the chain's stationary variance", ser.stationary_var["chain"]),
        Step("eta -> 0: C4 tends to w*", ser.C4_limit, ("C4(eta->0)", r"C_4(\eta \to 0)")),
    ]
    big = large_E_limits()
    steps.append(Step("E -> oo (0 < eta U_k < 2, sum p_k = 1): C4", big.C4, ("C4(E->oo)", r"C_4(E \to \infty)")))
    if variant == "paper":
        steps.append(Step("E -> oo: the printed stationary variance / E^2 (grows like E^2)",
                          big.paper_E2_coefficient))
    else:
        steps.append(Step("E -> oo: stationary variance", big.stationary_var[variant], ("v(oo)", r"v(\infty)")))
    steps.append(Step("E -> oo: the chain's stationary variance", big.stationary_var["chain"]))
    out = Derivation(variant, None, CLOCK, tuple(steps))
    if local_steps is None:
        return out
    val = sp.Integer(int(local_steps))
    keep_E = {"E -> oo"}  # limits in E keep the symbol
    sub = tuple(st if any(st.label.startswith(kw) for kw in keep_E) else st.subs({sym.E: val}) for st in out.steps)
    return Derivation(variant, int(local_steps), CLOCK, sub)


__all__ = ["Derivation", "Step", "derivation", "latex", "text"]
