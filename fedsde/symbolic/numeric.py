"""Lambdified (numpy / torch) callables of the symbolic formulas, and their evaluation on quadratic problems.

The sympy expressions of :mod:`fedsde.symbolic.local_sgd`, :mod:`fedsde.symbolic.sde` and
:mod:`fedsde.symbolic.moments` are the single source of truth; this module turns them into vectorised callables
(``sympy.lambdify``) and evaluates them:

* **one-client** callables act elementwise, so arrays of shape (Q,) evaluate every client and arrays of shape
  (Q, d) every coordinate of a **diagonal** d-dimensional problem (the coordinates decouple);
* the sums over clients (``β = Σ_k p_k β_k`` etc.) are weighted sums over the client axis;
* **full-matrix** problems go through :func:`fedsde.sde.coefficients.quadratic_sde_coefficients` (the one
  numeric home of the variants on matrices: :func:`fedsde.exact.round_law`'s ``B``, ``c``, ``Cov ε`` with the same
  variant formulas lifted to matrices, ``sβ/h → (s/h)B``, ``ln → logm``, ``b_p² → b_p b_pᵀ`` with
  ``b_p = E·I + Σ_k p_k Σ_k^{1/2} S_k`` symmetrised — an extrapolation of the scalar eq. (4)).  The tests check
  the two paths against each other on diagonal problems and on rotated diagonal problems.

Clock of every returned coefficient: ``t = n·h`` (round ``n`` at time ``n·h``); ``h`` defaults to ``η``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any, NamedTuple

import numpy as np
import scipy.linalg
import sympy as sp

from fedsde._validate import choice, positive_float, positive_int
from fedsde.errors import FedsdeInputError, NoStationaryLawError
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.symbolic import symbols as sym
from fedsde.symbolic.local_sgd import READINGS, client_law, contraction, gamma, paper_double_sum
from fedsde.symbolic.moments import ou_solution, thm63_printed
from fedsde.symbolic.sde import VARIANTS, sde_coefficients

BACKENDS = ("numpy", "torch")


def lambdify(args, expr, backend: str = "numpy"):
    """``sympy.lambdify`` for the numpy or torch backend (``Piecewise`` → ``select`` / ``where``)."""
    choice("backend", backend, BACKENDS)
    return sp.lambdify(args, expr, modules=backend)


class ClientFunctions(NamedTuple):
    """Per-client closed forms (elementwise; ``E`` must be an integer or an integer array).

    ``beta(eta, U, E)`` = 1 − (1 − ηU)^E; ``gamma(eta, U, Sigma, E)`` = Σ(1 − r^{2E})/(1 − r²);
    ``S(eta, U, E)`` = the paper's double sum; ``mean(eta, U, a, E, w)`` and ``var(eta, U, Sigma, E)`` = the
    corrected E-step law; ``var_printed[reading](eta, U, Sigma, E)`` = Thm 6.2 as printed.
    """

    beta: Any
    gamma: Any
    S: Any
    mean: Any
    var: Any
    var_printed: dict


@cache
def client_functions(backend: str = "numpy") -> ClientFunctions:
    """Lambdified per-client formulas (see :class:`ClientFunctions`)."""
    args3 = (sym.eta, sym.U, sym.E)
    args4 = (sym.eta, sym.U, sym.Sigma, sym.E)
    law = client_law("corrected")
    printed = {rd: lambdify(args4, client_law("paper", rd).variance, backend) for rd in READINGS}
    return ClientFunctions(
        beta=lambdify(args3, contraction(), backend),
        gamma=lambdify(args4, gamma(), backend),
        S=lambdify(args3, paper_double_sum(), backend),
        mean=lambdify((sym.eta, sym.U, sym.a, sym.E, sym.w), law.mean, backend),
        var=lambdify(args4, law.variance, backend),
        var_printed=printed,
    )


#: argument order of the variant callables
AGGREGATE_ARGS = (sym.beta, sym.C4, sym.sigma2, sym.b_paper, sym.eta, sym.s, sym.h)


class VariantFunctions(NamedTuple):
    """``coefficients(β, C4, σ_ε², b_p, η, s, h) -> (A, c, b²)`` and ``stationary_var(…)`` of one variant."""

    coefficients: Any
    stationary_var: Any


@cache
def variant_functions(variant: str, backend: str = "numpy") -> VariantFunctions:
    """Lambdified SDE coefficients and stationary variance of a variant (arguments :data:`AGGREGATE_ARGS`)."""
    from fedsde.symbolic.moments import variant_moments

    co = sde_coefficients(variant)
    return VariantFunctions(
        coefficients=lambdify(AGGREGATE_ARGS, (co.A, co.c, co.b2), backend),
        stationary_var=lambdify(AGGREGATE_ARGS, variant_moments(variant).stationary_var, backend),
    )


class MomentFunctions(NamedTuple):
    """``mean(t, A, c, m0)``, ``var(t, A, b2, v0)`` of the OU solution; ``paper_var(t, D, eta, b_p)`` printed."""

    mean: Any
    var: Any
    paper_var: Any


@cache
def moment_functions(backend: str = "numpy") -> MomentFunctions:
    """Lambdified closed-form moments (clock ``t = n·h``)."""
    sol = ou_solution()
    return MomentFunctions(
        mean=lambdify((sym.t, sym.A, sym.c, sym.m0), sol.mean, backend),
        var=lambdify((sym.t, sym.A, sym.b2, sym.v0), sol.var, backend),
        paper_var=lambdify((sym.t, sym.D, sym.eta, sym.b_paper), thm63_printed().var, backend),
    )


# ---------------------------------------------------------------------------------------------- on problems
def _diag_parts(problem: QuadraticProblem) -> tuple[np.ndarray, np.ndarray]:
    return np.einsum("qii->qi", problem.U), np.einsum("qii->qi", problem.Sigma)


def aggregates(problem: QuadraticProblem, eta: float, local_steps: int) -> dict[str, np.ndarray]:
    """``β, C4, σ_ε², b_p`` per coordinate of a diagonal problem (shape (d,) each), from the symbolic callables.

    ``β = Σ_k p_k β_k``, ``C4 = Σ_k p_k β_k a_k / β``, ``σ_ε² = η² Σ_k p_k² Γ_k``, ``b_p = E + Σ_k p_k √Σ_k S_k``.
    """
    if not problem.is_diagonal:
        raise FedsdeInputError("problem: aggregates() needs diagonal U_k and Σ_k (use sde_coefficients_numeric)")
    f = client_functions("numpy")
    U, Sig = _diag_parts(problem)
    E = int(local_steps)
    p = problem.p
    with np.errstate(all="ignore"):
        beta_k = np.asarray(f.beta(eta, U, E), dtype=np.float64)
        gam_k = np.asarray(f.gamma(eta, U, Sig, E), dtype=np.float64) * np.ones_like(U)
        S_k = np.asarray(f.S(eta, U, E), dtype=np.float64) * np.ones_like(U)
    beta = p @ beta_k
    with np.errstate(all="ignore"):
        c = (p @ (beta_k * problem.a)) / beta
    return {"beta": beta, "C4": c, "sigma2": eta**2 * (p**2 @ gam_k), "b_p": E + p @ (np.sqrt(Sig) * S_k)}


@dataclass(frozen=True)
class NumericSDE:
    """A variant's linear SDE ``dw = −A (w − c) dt + b dB(t)`` evaluated on a problem (clock ``t = n·h``).

    Attributes
    ----------
    A : ndarray, shape (d, d)
    c : ndarray, shape (d,)
    diffusion_cov : ndarray, shape (d, d)
        ``b bᵀ``.
    variant : str
    h, server_lr, eta : float
    local_steps : int
    path : str
        "symbolic-diagonal" (lambdified sympy callables per coordinate) or "exact-matrix" (fedsde.exact's
        ``B, c, Cov ε`` with the matrix lift of the formulas).
    """

    A: np.ndarray
    c: np.ndarray
    diffusion_cov: np.ndarray
    variant: str
    h: float
    server_lr: float
    eta: float
    local_steps: int
    path: str
    _stationary_var: np.ndarray | None = field(default=None, repr=False)

    def stationary(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Stationary mean ``c`` and covariance ``P`` (``A P + P Aᵀ = b bᵀ``), or ``None`` if ``A`` is not stable."""
        lam = np.linalg.eigvals(self.A)
        if not np.all(np.isfinite(lam)) or np.min(lam.real) <= 0:
            return None
        if self._stationary_var is not None:
            return self.c, np.diag(self._stationary_var)
        P = scipy.linalg.solve_continuous_lyapunov(self.A, self.diffusion_cov)
        return self.c, 0.5 * (P + P.T)

    def to_dict(self) -> dict:
        """``{"drift": {"A", "c"}, "diffusion_cov", "stationary": {"mean", "cov"} or None, …}``."""
        st = self.stationary()
        return {
            "variant": self.variant,
            "clock": "t = n*h",
            "h": self.h,
            "server_lr": self.server_lr,
            "eta": self.eta,
            "local_steps": self.local_steps,
            "path": self.path,
            "drift": {"A": self.A, "c": self.c},
            "diffusion_cov": self.diffusion_cov,
            "stationary": None if st is None else {"mean": st[0], "cov": st[1]},
        }


def sde_coefficients_numeric(
    problem: QuadraticProblem,
    eta: float,
    local_steps: int,
    server_lr: float = 1.0,
    h: float | None = None,
    variant: str = "corrected",
) -> NumericSDE:
    """Evaluate a variant's SDE coefficients on a quadratic problem (clock ``t = n·h``).

    Parameters
    ----------
    problem : QuadraticProblem
    eta : float
        Client learning rate ``η > 0``.
    local_steps : int
        ``E >= 1`` (same for every client).
    server_lr : float
        Actual server step ``s > 0`` (1 = plain FedAvg).
    h : float, optional
        Time step of the lift (round ``n`` at ``t = n·h``); default ``η`` (seed 002, Section 6).
    variant : {"paper", "corrected", "matched"}

    Returns
    -------
    NumericSDE
        Diagonal problems: the lambdified symbolic callables per coordinate ("symbolic-diagonal").
        Full matrices: fedsde.exact's round law with the matrix lift of the same formulas ("exact-matrix").

    Raises
    ------
    FedsdeInputError
        Bad arguments; ``variant="matched"`` when some eigenvalue of ``I − sB`` is ``<= 0`` (no OU process
        reproduces an oscillating chain).
    NoStationaryLawError
        ``variant="matched"`` when some eigenvalue of ``I − sB`` is ``>= 1`` (no stationary law to match).
    """
    eta = positive_float("eta", eta)
    E = positive_int("local_steps", local_steps)
    server_lr = positive_float("server_lr", server_lr)
    h = eta if h is None else positive_float("h", h)
    choice("variant", variant, VARIANTS)
    if problem.is_diagonal:
        return _diagonal(problem, eta, E, server_lr, h, variant)
    return _matrix(problem, eta, E, server_lr, h, variant)


def _matched_check(rho: np.ndarray, eta: float, E: int, s: float) -> None:
    rho = np.atleast_1d(rho)
    if np.any(rho <= 0) or np.any(rho >= 1):
        exc = NoStationaryLawError if np.all(rho > 0) else FedsdeInputError
        raise exc(
            f"variant='matched' (eta={eta}, local_steps={E}, server_lr={s}): eigenvalues of I - s*B are "
            f"{np.array2string(rho, precision=4)}; all must lie in (0, 1) for an OU process to match the chain"
        )


def _diagonal(problem, eta, E, s, h, variant) -> NumericSDE:
    ag = aggregates(problem, eta, E)
    if variant == "matched":
        _matched_check(1 - s * ag["beta"], eta, E, s)
    fn = variant_functions(variant, "numpy")
    args = (ag["beta"], ag["C4"], ag["sigma2"], ag["b_p"], eta, s, h)
    with np.errstate(all="ignore"):
        A, c, b2 = (np.asarray(x, dtype=np.float64) * np.ones(problem.d) for x in fn.coefficients(*args))
        st = np.asarray(fn.stationary_var(*args), dtype=np.float64) * np.ones(problem.d)
    return NumericSDE(np.diag(A), c, np.diag(b2), variant, h, s, eta, E, "symbolic-diagonal", st)


def _matrix(problem, eta, E, s, h, variant) -> NumericSDE:
    """Full matrices: the coefficients of :func:`fedsde.sde.coefficients.quadratic_sde_coefficients`, the one
    numeric home of the matrix lift (``sβ/h → (s/h)B``, ``ln → logm``, ``b_p² → b_p b_pᵀ``)."""
    from fedsde.sde.coefficients import quadratic_sde_coefficients

    sde = quadratic_sde_coefficients(problem, eta, E, s, h, variant)
    return NumericSDE(sde.A, sde.c, sde.diffusion_cov, variant, h, s, eta, E, "exact-matrix")


__all__ = [
    "AGGREGATE_ARGS",
    "BACKENDS",
    "ClientFunctions",
    "MomentFunctions",
    "NumericSDE",
    "VariantFunctions",
    "aggregates",
    "client_functions",
    "lambdify",
    "moment_functions",
    "sde_coefficients_numeric",
    "variant_functions",
]
