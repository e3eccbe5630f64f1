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
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import sympy as sp

from fedsde._validate import choice
from fedsde.symbolic import symbols as S

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
    return sp.Eq(wi[S.i + 1], wi[S.i] - S.eta * (S.U * (wi[S.i] - S.a) + S.xi[S.i]))


def unrolled(steps: int) -> sp.Expr:
    """``w_E`` for a concrete ``E = steps``, by iterating the recursion from ``w_0 = w`` (no closed form used)."""
    wk = S.w
    for idx in range(int(steps)):
        wk = wk - S.eta * (S.U * (wk - S.a) + S.xi[idx])
    return sp.expand(wk)


def closed_form_weights(steps: sp.Expr = S.E) -> sp.Expr:
    """``w_E = a_k + r^E (w − a_k) − η Σ_{m<E} r^{E−1−m} ξ_m`` (the noise sum is left unevaluated)."""
    noise = sp.Sum(S.r ** (steps - 1 - S.m) * S.xi[S.m], (S.m, 0, steps - 1))
    return S.a + S.r**steps * (S.w - S.a) - S.eta * noise


def paper_layout_noise(steps: sp.Expr = S.E) -> sp.Expr:
    """The correct noise in Thm 6.2's own layout: ``η² U_k Σ_{j<E} Σ_{i=1..j} r^{j−i} ξ_{i−1} − η Σ_{j<E} ξ_j``.

    Reference §3a / erratum 1: the printed double sum misses one factor ``η`` and uses fresh ``N(0, Σ_k)`` draws
    where the same ``ξ``'s as in the second sum belong.
    """
    inner = sp.Sum(S.r ** (S.j - S.i) * S.xi[S.i - 1], (S.i, 1, S.j))
    return S.eta**2 * S.U * sp.Sum(inner, (S.j, 0, steps - 1)) - S.eta * sp.Sum(S.xi[S.j], (S.j, 0, steps - 1))


def mean_sum(steps: sp.Expr = S.E) -> sp.Expr:
    """Thm 6.2's mean part as printed, sums unevaluated: ``w − η Σ_{j<E} r^j U_k (w − a_k)``."""
    return S.w - S.eta * sp.Sum(S.r**S.j * S.U * (S.w - S.a), (S.j, 0, steps - 1))


def contraction(steps: sp.Expr = S.E) -> sp.Expr:
    """``β_k = η Σ_{j<E} r^j U_k = 1 − r^E``: the fraction of ``w − a_k`` removed by E local steps.

    The closed form telescopes (``ηU_k = 1 − r``), so it needs no ``r = 1`` branch.
    """
    return 1 - S.r**steps


def gamma(steps: sp.Expr = S.E) -> sp.Expr:
    """``Γ_k = Σ_k Σ_{m<E} r^{2m} = Σ_k (1 − r^{2E})/(1 − r²)``; the client displacement has variance ``η² Γ_k``."""
    return S.Sigma * geometric_sum(S.r**2, steps)


def paper_double_sum(steps: sp.Expr = S.E) -> sp.Expr:
    """The paper's ``S_k = Σ_{j<E} Σ_{i=1..j} r^{j−i} U_k = (E − Σ_{j<E} r^j)/η`` (Thm 6.2, eq. (4)).

    Closed form by construction: the inner sum is ``U_k (1 − r^j)/(1 − r) = (1 − r^j)/η``; summing over ``j``
    gives ``(E − Σ_{j<E} r^j)/η``, which is 0 at ``U_k = 0`` through the ``Piecewise`` of the geometric sum.
    """
    return (steps - geometric_sum(S.r, steps)) / S.eta


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
    mean = sp.expand(S.w - contraction() * (S.w - S.a))
    if variant == "corrected":
        var = S.eta**2 * gamma()
        noise = paper_layout_noise()
        return ClientLaw("corrected", None, mean, var, mean_sum(), noise)
    choice("reading", reading, READINGS)
    N1, N2 = sp.symbols("N_1 N_2")
    dbl = sp.Sum(sp.Sum(S.r ** (S.j - S.i) * S.U, (S.i, 1, S.j)), (S.j, 0, S.E - 1))
    noise = -S.eta * dbl * N1 + S.E * S.eta * N2
    Sk = paper_double_sum()
    if reading == "same_draw":
        var = S.eta**2 * S.Sigma * (S.E - Sk) ** 2
    elif reading == "independent":
        var = S.eta**2 * S.Sigma * (S.E**2 + Sk**2)
    else:  # "eq4"
        var = S.eta**2 * (S.E + sp.sqrt(S.Sigma) * Sk) ** 2
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


def noise_variance_from_unrolled(steps: int) -> sp.Expr:
    """``Var[w_E | w]`` for a concrete E from the unrolled recursion: ``Σ_m (∂w_E/∂ξ_m)² Σ_k`` (independent ξ)."""
    wE = unrolled(steps)
    return sp.expand(sum(sp.diff(wE, S.xi[idx]) ** 2 for idx in range(int(steps))) * S.Sigma)


def mean_from_unrolled(steps: int) -> sp.Expr:
    """``E[w_E | w]`` for a concrete E from the unrolled recursion (all ξ set to 0)."""
    wE = unrolled(steps)
    return sp.expand(wE.subs({S.xi[idx]: 0 for idx in range(int(steps))}))


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
    R = sp.diag(*[1 - S.eta * u for u in Us])
    RE = sp.diag(*[R[q, q] ** S.E for q in range(d)])  # R^E of a diagonal matrix, E symbolic
    mean = wv - (sp.eye(d) - RE) * (wv - av)
    Sig = sp.diag(*Ss)
    # Σ_{m<E} R^m Σ R^m: entry (q, q') is Σ_qq' Σ_m (r_q r_q')^m; Σ is diagonal so only q = q' survives
    G = sp.Matrix(d, d, lambda q, qq: Sig[q, qq] * geometric_sum(R[q, q] * R[qq, qq], S.E) if q == qq else 0)
    cov = S.eta**2 * G
    return mean, cov, (*wv, *av, *Us, *Ss)


# ---------------------------------------------------------------------------------------------- server update
def to_indexed(expr: sp.Expr) -> sp.Expr:
    """Replace the one-client symbols ``U_k, a_k, Σ_k, p_k`` by ``U[k], a[k], Σ[k], p[k]`` (client ``k`` of ``Q``)."""
    return expr.xreplace(S.TO_INDEXED)


def client_sum(summand: sp.Expr) -> sp.Expr:
    """``Σ_{k=1}^{Q} summand`` with the one-client symbols indexed by ``k``."""
    return sp.Sum(to_indexed(summand), (S.k, 1, S.Q))


def explicit_clients(expr: sp.Expr, clients: int) -> tuple[sp.Expr, dict[str, tuple[sp.Symbol, ...]]]:
    """``expr`` with ``Q = clients`` and every ``Sum`` over ``k`` written out with plain symbols ``U_1, …``.

    Returns
    -------
    expr : sympy.Expr
    symbols : dict
        ``{"U": (U_1, …), "a": …, "Sigma": …, "p": …}``.
    """
    q = int(clients)
    names = {"U": (S.U_, True), "a": (S.a_, False), "Sigma": (S.Sigma_, True), "p": (S.p_, True)}
    syms: dict[str, tuple[sp.Symbol, ...]] = {}
    repl = {}
    for key, (base, nonneg) in names.items():
        kw = {"real": True} if not nonneg else ({"positive": True} if key == "p" else {"nonnegative": True})
        syms[key] = tuple(sp.Symbol(f"{key}_{idx}", **kw) for idx in range(1, q + 1))
        repl.update({base[idx]: syms[key][idx - 1] for idx in range(1, q + 1)})
    out = expand_sums(expr.subs(S.Q, q)).xreplace(repl)
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
        return {S.beta: self.beta, S.C4: self.c, S.sigma2: self.sigma2, S.b_paper: self.b_paper,
                S.D: self.D, S.K: self.K}


@cache
def server_law() -> ServerLaw:
    """The one-round law of the server weights (E, Q symbolic); see :class:`ServerLaw`."""
    beta_k = contraction()
    beta = client_sum(S.p * beta_k)
    Ba = client_sum(S.p * beta_k * S.a)
    sigma2 = S.eta**2 * client_sum(S.p**2 * gamma())
    b_p = S.E + client_sum(S.p * sp.sqrt(S.Sigma) * paper_double_sum())
    D = client_sum(S.p * sp.Sum(S.r**S.j * S.U, (S.j, 0, S.E - 1)))
    K = client_sum(S.p * sp.Sum(S.r**S.j * S.U * S.a, (S.j, 0, S.E - 1)))
    mean_update = S.w - S.s * client_sum(S.p * beta_k * (S.w - S.a))
    return ServerLaw(
        beta=beta, Ba=Ba, c=Ba / beta, sigma2=sigma2, b_paper=b_p, D=D, K=K,
        mean_update=mean_update,
        variance_update=S.s**2 * sigma2,
        variance_update_paper=S.s**2 * S.eta**2 * b_p**2,
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
        sub = {S.U_[S.k]: U2[S.k, q], S.a_[S.k]: a2[S.k, q], S.Sigma_[S.k]: S2[S.k, q], S.w: wv[q]}
        means.append(law.mean_update.xreplace(sub))
        variances.append(law.variance_update.xreplace(sub))
    return sp.Matrix(means), sp.diag(*variances), {"U": U2, "a": a2, "Sigma": S2, "w": wv}
