"""Named tolerances (internal): one home for every threshold that decides a numerical question.

Each constant is named by what it decides and documents the rule it enters: absolute or relative, and relative
to what.  A number that is a model parameter (a default learning rate, a ridge coefficient) or has a meaning of
its own (a figure's axis limit, the step size of an experiment) is not a tolerance and stays where it is used.

Groups: floating point (:data:`EPS`, :data:`DIVISION_FLOOR`); matrices (symmetric, positive semi-definite,
singular, numerical rank); linear chains (contracting, stationary, power iteration, burn-in); integers and time
grids; solvers (min-norm weights, SLSQP, quadrature, Lanczos, L-BFGS and Newton for an optimum); statistics
(:data:`Z95`, a path that does not move); and the margins of the seeds' claims (:func:`label` writes a tolerance
the way the claims' margin descriptions print it, ``1e-9``).
"""

from __future__ import annotations

import sys

# ---------------------------------------------------------------------------------------------------------- floats
#: float64 machine epsilon, ``2**-52 ≈ 2.22e-16``.
EPS = sys.float_info.epsilon

#: Smallest denominator used where a denominator may be zero and the quotient is then discarded (masked by a
#: ``where``) or is ``0/0 → 0``; far below any meaningful value, far above float64's smallest normal number.
DIVISION_FLOOR = 1e-300

# -------------------------------------------------------------------------------------------------------- matrices
#: A matrix counts as symmetric when ``max|M − Mᵀ| <= SYM_TOL · max(1, max|M|)`` (it is then symmetrised).
SYM_TOL = 1e-10

#: A symmetric matrix counts as positive semi-definite when ``λ_min(M) >= −PSD_TOL · max(1, max|M|)`` (inputs:
#: Hessians, noise covariances); where no scale is at hand (a start covariance) the bound is ``−PSD_TOL``.
PSD_TOL = 1e-10

#: A symmetric matrix that must be positive definite counts as singular when
#: ``λ_min(M) <= SINGULAR_TOL · max(1, scale)`` (e.g. the weighted Hessian ``Σ p_k U_k``: no unique optimum).
SINGULAR_TOL = 1e-12

#: Eigenvalues of a sample covariance ``<= RANK_TOL · max(1, λ_max)`` count as zero (numerical rank).
RANK_TOL = 1e-14

# ---------------------------------------------------------------------------------------------------------- chains
#: A linear chain has a stationary law only when its spectral radius is ``< 1 − STATIONARY_MARGIN``; a linear
#: SDE only when every eigenvalue of its (second-moment) generator ``A`` has real part
#: ``< −STATIONARY_MARGIN · max(1, max|A|)``.
STATIONARY_MARGIN = 1e-12

#: A server recursion is reported as diverging when its spectral radius is ``> 1 + DIVERGENCE_SLACK``: a radius
#: of 1 up to rounding (a neutral direction, e.g. momentum at the edge) is not a divergence.
DIVERGENCE_SLACK = 1e-9

#: Power iteration stops when two successive estimates differ by less than ``POWER_ITERATION_RTOL · max(1, λ)``.
POWER_ITERATION_RTOL = 1e-10

#: The transient of a chain, decaying like ``ρⁿ`` (``ρ`` its spectral radius), is over once ``ρⁿ < BURN_IN_TOL``
#: (relative to its start): the chain then counts as stationary.
BURN_IN_TOL = 1e-6

# ------------------------------------------------------------------------------------------- integers, time grids
#: A float ``x`` counts as the integer ``k`` when ``|x − k| <= INT_TOL · max(1, |x|)`` (scaling factors, step
#: counts); also the offset added before ``floor(t/h)`` so that a time ``n·h`` computed in floating point lands
#: in round ``n``, and the relative tolerance at which two times computed in different ways are the same time.
INT_TOL = 1e-9

#: A time counts as a point of a fixed step grid when it is within ``GRID_TOL`` steps of it.
GRID_TOL = 1e-6

# --------------------------------------------------------------------------------------------------------- solvers
#: Frank–Wolfe for min-norm simplex weights stops when its duality gap ``λᵀMλ − min_k (Mλ)_k`` is
#: ``<= MIN_NORM_GAP · max_k M_kk``.
MIN_NORM_GAP = 1e-8

#: The active-set polish of the min-norm weights adds a vertex when it lowers ``λᵀMλ`` by more than
#: ``ACTIVE_SET_RTOL · max_k M_kk`` (smaller gains are rounding).
ACTIVE_SET_RTOL = 1e-13

#: ``ftol`` of SLSQP on the simplex (weights that minimise a bound or an objective, to rounding).
SLSQP_FTOL = 1e-15

#: ``ftol`` of SLSQP in a multi-start maximisation over the simplex, where the best of several starts is kept.
SLSQP_FTOL_MULTISTART = 1e-14

#: Relative accuracy ``epsrel`` of adaptive quadrature (``scipy.integrate.quad``) of a schedule.
QUAD_RTOL = 1e-11

#: Relative accuracy ``tol`` of a Lanczos eigenvalue (``scipy.sparse.linalg.eigsh``).
LANCZOS_RTOL = 1e-8

#: ``gtol`` of L-BFGS-B (largest entry of the projected gradient) when it solves for an optimum to rounding
#: (the optimum of a data problem, then polished by Newton steps and checked against :data:`OPTIMUM_GTOL`).
LBFGS_GTOL = 1e-12

#: ``ftol`` of L-BFGS-B (relative reduction of the objective per iteration) wherever it solves for an optimum.
LBFGS_FTOL = 1e-15

#: Newton steps that polish an optimum stop once ``‖∇F(w)‖₂ < NEWTON_GTOL``.
NEWTON_GTOL = 1e-13

#: The optimum of a convex (strongly convex with the ridge) problem is accepted when ``‖∇F(w*)‖₂ <= OPTIMUM_GTOL``;
#: a larger gradient means that no minimiser was found (e.g. no ridge on separable data).
OPTIMUM_GTOL = 1e-8

#: As :data:`OPTIMUM_GTOL` for a minimiser that no Newton step polishes: a non-convex model's local minimiser
#: (accepted at ``‖∇F‖₂ <= LOCAL_OPTIMUM_GTOL``), or an approximate optimum where only the curvature matters
#: (L-BFGS-B's ``gtol``).
LOCAL_OPTIMUM_GTOL = 1e-6

#: A weight ``<= ZERO_WEIGHT`` counts as zero (clients dropped by a min-norm solution).
ZERO_WEIGHT = 1e-12

# ------------------------------------------------------------------------------------------------------ statistics
#: The normal 97.5 % quantile, ``scipy.stats.norm.ppf(0.975)``: half-width of a 95 % interval in standard errors.
Z95 = 1.959963984540054

#: A path whose range ``max − min`` is at most ``RANGE_FLOOR · max|path|`` does not move (its range is
#: floating-point noise): a quantity relative to its movement is undefined.
RANGE_FLOOR = 1e-9

# -------------------------------------------------------------------------------------------- claims' inequalities
#: An inequality that may hold with equality is checked as ``lhs <= rhs · (1 + ROUNDING_SLACK) (+ ROUNDING_ATOL)``
#: (and a margin that is zero at equality gets ``+ ROUNDING_SLACK``): equality up to rounding holds.  Also the
#: size below which a difference without noise, relative to ``max(1, scale)``, is rounding (and two times near 0
#: are the same time).
ROUNDING_SLACK = 1e-12

#: The absolute part of the rounding slack, for inequalities whose two sides may both be zero.
ROUNDING_ATOL = 1e-15

#: Slack for a quantity from an iterative solver that is exact up to its stopping rule (min-norm weights).
SOLVER_SLACK = 1e-9

#: A closed form agrees with an exact computation (the chain's exact law, an exact fixed point) when their
#: relative deviation is below this: rounding only.  A claim's margin is ``log10(EXACT_AGREEMENT / deviation)``.
EXACT_AGREEMENT = 1e-9

#: As :data:`EXACT_AGREEMENT`, for well-conditioned closed forms (fixed points of a contraction, exact laws).
EXACT_AGREEMENT_STRICT = 1e-10

#: A numerical answer (an SLSQP minimiser, a limit reached at a finite parameter, an ODE residual) agrees with a
#: closed form when their deviation is below this.  Margin ``log10(NUMERICAL_AGREEMENT / deviation)``.
NUMERICAL_AGREEMENT = 1e-6


def label(tol: float) -> str:
    """``tol`` as the claims' margin descriptions print it: ``1e-9`` (no zero padding in the exponent), ``2.5e-3``."""
    mantissa, exponent = f"{tol:e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"
