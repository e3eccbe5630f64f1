"""E steps of local SGD on a quadratic client, with E a symbolic positive integer (seed 002, Thm 6.2).

Client ``k`` minimises ``F_k(w) = ½U_k(w − a_k)²`` (scalar, or one coordinate of a diagonal problem) with the
local step ``w_{i+1} = w_i − η(U_k(w_i − a_k) + ξ_i)``, ``ξ_i ~ N(0, Σ_k)`` i.i.d.  With ``r = 1 − ηU_k``,
unrolling gives (reference/seed-fedsde.md §3a, erratum 1)

    w_E = a_k + r^E (w − a_k) − η Σ_{m<E} r^{E−1−m} ξ_m,

so that, geometric sums in closed form,

    E[w_E | w] = w − η Σ_{j<E} r^j U_k (w − a_k) = w − (1 − r^E)(w − a_k)        (Thm 6.2's mean part: correct)
    Var[w_E | w] = η² Σ_k Σ_{m<E} r^{2m} = η² Σ_k (1 − r^{2E}) / (1 − r²)        (corrected noise)

Thm 6.2 as printed instead has the noise ``−η Σ_{j<E} Σ_{i=1..j} r^{j−i} U_k N(0, Σ_k) + Eη N(0, Σ_k)``; it is
not a law of the algorithm (missing η on the double sum, E noises treated as one draw, both terms built from the
same noises).  Its "variance" depends on how the two ``N(0, Σ_k)`` are read; :func:`client_law` gives the three
readings of reference §3a ("same_draw", "independent", "eq4").

Every geometric sum is evaluated by :func:`geometric_sum`, which keeps the ``x = 1`` branch as a ``Piecewise``
(needed numerically for ``U_k = 0`` or ``ηU_k = 2``); :func:`generic` drops it for display.

The functions of a number of local steps take it as ``local_steps`` (old name, accepted for one release: ``steps``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import sympy as sp

from fedsde._compat import renamed
from fedsde._validate import choice
from fedsde.symbolic import symbols as sym

READINGS = ("same_draw", "independent", "eq4")


def geometric_sum(x: sp.Expr, count: sp.Expr) -> sp.Expr:
    """``Σ_{m=0}^{count−1} x^m`` in closed form: ``Piecewise((count, x = 1), ((1 − x^count)/(1 − x), True))``.

    This is what ``sympy.Sum(x**m, (m, 0, count − 1)).doit()`` returns for ``x`` of unknown magnitude; building
    it directly keeps the ``x = 1`` branch even where sympy could decide it (tests check the two agree).
    """
    return sp.Piecewise((count, sp.Eq(x, 1)), ((1 - x**count) / (1 - x), True))


def generic(expr: sp.Expr) -> sp.Expr:
    """``expr`` with every ``Piecewise`` replaced by its last (generic) branch, for display."""
    return expr.replace(lambda e: isinstance(e, sp.Piecewise), lambda e: e.args[-1].expr)


# ---------------------------------------------------------------------------------------------- pieces
def recursion() -> sp.Eq:
    """One local step ``w_{i+1} = w_i − η(U_k(w_i − a_k) + ξ_i)`` (the project's sign convention)."""
    wi = sp.IndexedBase("w")
    return sp.Eq(wi[sym.i + 1], wi[sym.i] - sym.eta * (sym.U * (wi[sym.i] - sym.a) + sym.xi[sym.i]))


@renamed(steps="local_steps")
def unrolled(local_steps: int) -> sp.Expr:
    """``w_E`` for a concrete ``E = local_steps``, by iterating the recursion from ``w_0 = w`` (no closed form used)."""
    wk = sym.w
    for idx in range(int(local_steps)):
        wk = wk - sym.eta * (sym.U * (wk - sym.a) + sym.xi[idx])
    return sp.expand(wk)


@renamed(steps="local_steps")
def closed_form_weights(local_steps: sp.Expr = sym.E) -> sp.Expr:
    """``w_E = a_k + r^E (w − a_k) − η Σ_{m<E} r^{E−1−m} ξ_m`` (the noise sum is left unevaluated)."""
    noise = sp.Sum(sym.r ** (local_steps - 1 - sym.m) * sym.xi[sym.m], (sym.m, 0, local_steps - 1))
    return sym.a + sym.r**local_steps * (sym.w - sym.a) - sym.eta * noise


@renamed(steps="local_steps")
def paper_layout_noise(local_steps: sp.Expr = sym.E) -> sp.Expr:
    """The correct noise in Thm 6.2's own layout: ``η² U_k Σ_{j<E} Σ_{i=1..j} r^{j−i} ξ_{i−1} − η Σ_{j<E} ξ_j``.

    Reference §3a / erratum 1: the printed double sum misses one factor ``η`` and uses fresh ``N(0, Σ_k)`` draws
    where the same ``ξ``'s as in the second sum belong.
    """
    inner = sp.Sum(sym.r ** (sym.j - sym.i) * sym.xi[sym.i - 1], (sym.i, 1, sym.j))
    noise = sp.Sum(sym.xi[sym.j], (sym.j, 0, local_steps - 1))
    return sym.eta**2 * sym.U * sp.Sum(inner, (sym.j, 0, local_steps - 1)) - sym.eta * noise


@renamed(steps="local_steps")
def mean_sum(local_steps: sp.Expr = sym.E) -> sp.Expr:
    """Thm 6.2's mean part as printed, sums unevaluated: ``w − η Σ_{j<E} r^j U_k (w − a_k)``."""
    return sym.w - sym.eta * sp.Sum(sym.r**sym.j * sym.U * (sym.w - sym.a), (sym.j, 0, local_steps - 1))


@renamed(steps="local_steps")
def contraction(local_steps: sp.Expr = sym.E) -> sp.Expr:
    """``β_k = η Σ_{j<E} r^j U_k = 1 − r^E``: the fraction of ``w − a_k`` removed by E local steps.

    The closed form telescopes (``ηU_k = 1 − r``), so it needs no ``r = 1`` branch.
    """
    return 1 - sym.r**local_steps


@renamed(steps="local_steps")
def gamma(local_steps: sp.Expr = sym.E) -> sp.Expr:
    """``Γ_k = Σ_k Σ_{m<E} r^{2m} = Σ_k (1 − r^{2E})/(1 − r²)``; the client displacement has variance ``η² Γ_k``."""
    return sym.Sigma * geometric_sum(sym.r**2, local_steps)


@renamed(steps="local_steps")
def paper_double_sum(local_steps: sp.Expr = sym.E) -> sp.Expr:
    """The paper's ``S_k = Σ_{j<E} Σ_{i=1..j} r^{j−i} U_k = (E − Σ_{j<E} r^j)/η`` (Thm 6.2, eq. (4)).

    Closed form by construction: the inner sum is ``U_k (1 − r^j)/(1 − r) = (1 − r^j)/η``; summing over ``j``
    gives ``(E − Σ_{j<E} r^j)/η``, which is 0 at ``U_k = 0`` through the ``Piecewise`` of the geometric sum.
    """
    return (local_steps - geometric_sum(sym.r, local_steps)) / sym.eta


# ---------------------------------------------------------------------------------------------- the law
@dataclass(frozen=True)
class ClientLaw:
    """Mean and variance of one client's weights after E local steps from the server weights ``w``.

    Attributes
    ----------
    variant : str
        "corrected" (the law of the algorithm) or "paper" (Thm 6.2 as printed).
    reading : str or None
        For "paper": how the printed noise is read as a variance (see :data:`READINGS`).
    mean : sympy.Expr
        ``E[w_E | w]`` in closed form (identical for both variants).
    variance : sympy.Expr
        ``Var[w_E | w]`` in closed form (with ``Piecewise`` geometric sums).
    mean_sum : sympy.Expr
        The mean as printed, sums unevaluated.
    noise : sympy.Expr
        The noise term: the printed one (with ``N1 = N2 = N(0, Σ_k)`` as symbols) or the correct one in the
        paper's layout, sums unevaluated.
    """

    variant: str
    reading: str | None
    mean: sp.Expr
    variance: sp.Expr
    mean_sum: sp.Expr
    noise: sp.Expr

    @property
    def variance_generic(self) -> sp.Expr:
        """The variance without the ``x = 1`` branches (valid for ``U_k > 0`` and ``ηU_k ≠ 2``)."""
        return sp.simplify(generic(self.variance))


@cache
def client_law(variant: str = "corrected", reading: str = "same_draw") -> ClientLaw:
    """The E-step law of one client (E symbolic); ``variant="paper"`` is Thm 6.2 as printed.

    Parameters
    ----------
    variant : {"corrected", "paper"}
    reading : {"same_draw", "independent", "eq4"}
        Only for ``variant="paper"``.  "same_draw": both printed ``N(0, Σ_k)`` are one draw, variance
        ``η²Σ_k(E − S_k)²``; "independent": two independent draws, ``η²Σ_k(E² + S_k²)``; "eq4": what eq. (4)
        implies per round for one client (``h = η``), ``η²(E + √Σ_k S_k)²``.  ``S_k`` = :func:`paper_double_sum`.
    """
    choice("variant", variant, ("corrected", "paper"))
    mean = sp.expand(sym.w - contraction() * (sym.w - sym.a))
    if variant == "corrected":
        var = sym.eta**2 * gamma()
        noise = paper_layout_noise()
        return ClientLaw("corrected", None, mean, var, mean_sum(), noise)
    choice("reading", reading, READINGS)
    N1, N2 = sp.symbols("N_1 N_2")
    dbl = sp.Sum(sp.Sum(sym.r ** (sym.j - sym.i) * sym.U, (sym.i, 1, sym.j)), (sym.j, 0, sym.E - 1))
    noise = -sym.eta * dbl * N1 + sym.E * sym.eta * N2
    Sk = paper_double_sum()
    if reading == "same_draw":
        var = sym.eta**2 * sym.Sigma * (sym.E - Sk) ** 2
    elif reading == "independent":
        var = sym.eta**2 * sym.Sigma * (sym.E**2 + Sk**2)
    else:  # "eq4"
        var = sym.eta**2 * (sym.E + sp.sqrt(sym.Sigma) * Sk) ** 2
    return ClientLaw("paper", reading, mean, var, mean_sum(), noise)


def expand_sums(expr: sp.Expr) -> sp.Expr:
    """Write out every ``Sum`` whose limits are (or become, from the outside in) concrete integers.

    ``Sum(f, (i, 1, j), (j, 0, 2))`` → ``Σ_{j=0..2} Σ_{i=1..j} f`` with empty inner sums equal to 0.
    """

    def _peel(su: sp.Sum) -> sp.Expr:
        var, lo, hi = su.limits[-1]
        if not (lo.is_Integer and hi.is_Integer):
            return su
        inner = su.function if len(su.limits) == 1 else sp.Sum(su.function, *su.limits[:-1])
        return sp.Add(*[expand_sums(inner.subs(var, val)) for val in range(int(lo), int(hi) + 1)])

    return expr.replace(lambda e: isinstance(e, sp.Sum), _peel)


@renamed(steps="local_steps")
def noise_variance_from_unrolled(local_steps: int) -> sp.Expr:
    """``Var[w_E | w]`` for a concrete E from the unrolled recursion: ``Σ_m (∂w_E/∂ξ_m)² Σ_k`` (independent ξ)."""
    wE = unrolled(local_steps)
    return sp.expand(sum(sp.diff(wE, sym.xi[idx]) ** 2 for idx in range(int(local_steps))) * sym.Sigma)


@renamed(steps="local_steps")
def mean_from_unrolled(local_steps: int) -> sp.Expr:
    """``E[w_E | w]`` for a concrete E from the unrolled recursion (all ξ set to 0)."""
    wE = unrolled(local_steps)
    return sp.expand(wE.subs({sym.xi[idx]: 0 for idx in range(int(local_steps))}))


# ---------------------------------------------------------------------------------------------- diagonal d-dim
@cache
def diagonal_client_law(d: int) -> tuple[sp.Matrix, sp.Matrix, tuple[sp.Symbol, ...]]:
    """E-step law of one client with diagonal ``U_k = diag(U_k1..U_kd)``, ``Σ_k = diag(Σ_k1..Σ_kd)``.

    Built with matrices: ``E[w_E] = w − (I − R^E)(w − a_k)`` and
    ``Cov[w_E] = η² Σ_{m<E} R^m Σ_k R^m`` with ``R = I − ηU_k``; for diagonal ``R`` the matrix geometric sum is
    entrywise, so the covariance is ``diag(η² Σ_ki (1 − r_i^{2E})/(1 − r_i²))`` — the scalar law per coordinate.

    Returns
    -------
    mean : Matrix, shape (d, 1)
    cov : Matrix, shape (d, d)
    symbols : tuple
        ``(w_1..w_d, a_1..a_d, U_1..U_d, Σ_1..Σ_d)`` used.
    """
    d = int(d)
    wv = sp.Matrix(sp.symbols(f"w_1:{d + 1}", real=True))
    av = sp.Matrix(sp.symbols(f"a_k1:{d + 1}", real=True))
    Us = sp.symbols(f"U_k1:{d + 1}", nonnegative=True)
    Ss = sp.symbols(f"Sigma_k1:{d + 1}", nonnegative=True)
    R = sp.diag(*[1 - sym.eta * u for u in Us])
    RE = sp.diag(*[R[q, q] ** sym.E for q in range(d)])  # R^E of a diagonal matrix, E symbolic
    mean = wv - (sp.eye(d) - RE) * (wv - av)
    Sig = sp.diag(*Ss)
    # Σ_{m<E} R^m Σ R^m: entry (q, q') is Σ_qq' Σ_m (r_q r_q')^m; Σ is diagonal so only q = q' survives
    G = sp.Matrix(d, d, lambda q, qq: Sig[q, qq] * geometric_sum(R[q, q] * R[qq, qq], sym.E) if q == qq else 0)
    cov = sym.eta**2 * G
    return mean, cov, (*wv, *av, *Us, *Ss)


# ---------------------------------------------------------------------------------------------- server update
def to_indexed(expr: sp.Expr) -> sp.Expr:
    """Replace the one-client symbols ``U_k, a_k, Σ_k, p_k`` by ``U[k], a[k], Σ[k], p[k]`` (client ``k`` of ``Q``)."""
    return expr.xreplace(sym.TO_INDEXED)


def client_sum(summand: sp.Expr) -> sp.Expr:
    """``Σ_{k=1}^{Q} summand`` with the one-client symbols indexed by ``k``."""
    return sp.Sum(to_indexed(summand), (sym.k, 1, sym.Q))


def explicit_clients(expr: sp.Expr, clients: int) -> tuple[sp.Expr, dict[str, tuple[sp.Symbol, ...]]]:
    """``expr`` with ``Q = clients`` and every ``Sum`` over ``k`` written out with plain symbols ``U_1, …``.

    Returns
    -------
    expr : sympy.Expr
    symbols : dict
        ``{"U": (U_1, …), "a": …, "Sigma": …, "p": …}``.
    """
    q = int(clients)
    names = {"U": (sym.U_, True), "a": (sym.a_, False), "Sigma": (sym.Sigma_, True), "p": (sym.p_, True)}
    syms: dict[str, tuple[sp.Symbol, ...]] = {}
    repl = {}
    for key, (base, nonneg) in names.items():
        kw = {"real": True} if not nonneg else ({"positive": True} if key == "p" else {"nonnegative": True})
        syms[key] = tuple(sp.Symbol(f"{key}_{idx}", **kw) for idx in range(1, q + 1))
        repl.update({base[idx]: syms[key][idx - 1] for idx in range(1, q + 1)})
    out = expand_sums(expr.subs(sym.Q, q)).xreplace(repl)
    return out, syms


@dataclass(frozen=True)
class ServerLaw:
    """The law of one FedAvg round on Q scalar (or one coordinate of diagonal) quadratic clients.

    ``w_{n+1} = w_n + s Σ_k p_k (w_k^{(E)} − w_n) = w_n − s β (w_n − c) + s ε`` with (reference §3b)

    * ``β = Σ_k p_k (1 − r_k^E)`` (= the matrix ``B`` of fedsde.exact; the paper's ``D = β/η``),
    * ``c = Σ_k p_k (1 − r_k^E) a_k / β`` (= the paper's ``C4``, the exact stationary mean),
    * ``Var ε = σ_ε² = η² Σ_k p_k² Γ_k`` (clients independent, so weights enter squared),
    * the paper's bracket ``b_p = E + Σ_k p_k √Σ_k S_k`` (eq. (4)), which claims a per-round variance
      ``s² η² b_p²`` instead of ``s² σ_ε²``.

    All attributes are sympy expressions with ``Sum`` over ``k = 1..Q``.
    """

    beta: sp.Expr
    Ba: sp.Expr
    c: sp.Expr
    sigma2: sp.Expr
    b_paper: sp.Expr
    D: sp.Expr
    K: sp.Expr
    mean_update: sp.Expr
    variance_update: sp.Expr
    variance_update_paper: sp.Expr

    def aggregates(self) -> dict[sp.Symbol, sp.Expr]:
        """Map from the aggregate symbols (β, C4, σ_ε², b_p, D, K) to their ``Sum`` expressions."""
        return {sym.beta: self.beta, sym.C4: self.c, sym.sigma2: self.sigma2, sym.b_paper: self.b_paper,
                sym.D: self.D, sym.K: self.K}


@cache
def server_law() -> ServerLaw:
    """The one-round law of the server weights (E, Q symbolic); see :class:`ServerLaw`."""
    beta_k = contraction()
    beta = client_sum(sym.p * beta_k)
    Ba = client_sum(sym.p * beta_k * sym.a)
    sigma2 = sym.eta**2 * client_sum(sym.p**2 * gamma())
    b_p = sym.E + client_sum(sym.p * sp.sqrt(sym.Sigma) * paper_double_sum())
    D = client_sum(sym.p * sp.Sum(sym.r**sym.j * sym.U, (sym.j, 0, sym.E - 1)))
    K = client_sum(sym.p * sp.Sum(sym.r**sym.j * sym.U * sym.a, (sym.j, 0, sym.E - 1)))
    mean_update = sym.w - sym.s * client_sum(sym.p * beta_k * (sym.w - sym.a))
    return ServerLaw(
        beta=beta, Ba=Ba, c=Ba / beta, sigma2=sigma2, b_paper=b_p, D=D, K=K,
        mean_update=mean_update,
        variance_update=sym.s**2 * sigma2,
        variance_update_paper=sym.s**2 * sym.eta**2 * b_p**2,
    )


@cache
def diagonal_server_law(d: int) -> tuple[sp.Matrix, sp.Matrix, dict[str, sp.IndexedBase]]:
    """One FedAvg round on Q clients with diagonal ``U_k``, ``Σ_k`` in dimension ``d`` (E, Q symbolic).

    The coordinates decouple, so coordinate ``q`` follows :func:`server_law` with ``U[k] → U[k, q]``,
    ``a[k] → a[k, q]``, ``Σ[k] → Σ[k, q]``, ``w → w_q``.

    Returns
    -------
    mean_update : Matrix, shape (d, 1)
        ``E[w_{n+1} | w_n = w]``.
    cov_update : Matrix, shape (d, d)
        ``Cov[w_{n+1} | w_n = w]`` (diagonal).
    bases : dict
        The ``IndexedBase`` objects ``{"U", "a", "Sigma", "w"}`` used (``p[k]`` as in :func:`server_law`).
    """
    d = int(d)
    U2 = sp.IndexedBase("U", nonnegative=True)
    a2 = sp.IndexedBase("a", real=True)
    S2 = sp.IndexedBase("Sigma", nonnegative=True)
    wv = sp.IndexedBase("w", real=True)
    law = server_law()
    means, variances = [], []
    for q in range(1, d + 1):
        sub = {sym.U_[sym.k]: U2[sym.k, q], sym.a_[sym.k]: a2[sym.k, q], sym.Sigma_[sym.k]: S2[sym.k, q], sym.w: wv[q]}
        means.append(law.mean_update.xreplace(sub))
        variances.append(law.variance_update.xreplace(sub))
    return sp.Matrix(means), sp.diag(*variances), {"U": U2, "a": a2, "Sigma": S2, "w": wv}
