"""Discrete chain vs SDE vs exact laws: moments over time, distances between laws, weak error and its order.

:func:`quadratic_sde_study` puts them together on quadratic clients and :func:`least_squares_sde_study` on
least-squares regression clients, exactly (what ``fedsde compare`` reports); :func:`order_refinement` measures the
order of the first- and second-order SDEs as ``η → 0`` (``fedsde compare --order``; on data problems by coupled
Monte Carlo, :mod:`fedsde.compare.order2_mc`).
"""

from fedsde.compare.distances import KSResult, gaussian_w2, ks_per_coordinate
from fedsde.compare.least_squares import LeastSquaresSDEStudy, least_squares_sde_study
from fedsde.compare.moments import MomentComparison, compare_moments, initial_law, linear_sde_law, sde_moments
from fedsde.compare.order2 import OrderRefinement, order_refinement
from fedsde.compare.study import QuadraticSDEStudy, quadratic_sde_study, refinement_grid
from fedsde.compare.weak_error import (
    NOISE_SCALINGS,
    PHIS,
    MCDifference,
    WeakErrorCurve,
    expected_phi,
    fit_loglog_slope,
    local_loglog_slopes,
    mc_difference,
    phi_function,
    weak_error_exact,
    weak_error_mc_vs_step,
    weak_error_vs_step,
)

__all__ = [
    "NOISE_SCALINGS",
    "PHIS",
    "KSResult",
    "LeastSquaresSDEStudy",
    "MCDifference",
    "MomentComparison",
    "OrderRefinement",
    "QuadraticSDEStudy",
    "WeakErrorCurve",
    "compare_moments",
    "expected_phi",
    "fit_loglog_slope",
    "gaussian_w2",
    "initial_law",
    "ks_per_coordinate",
    "least_squares_sde_study",
    "linear_sde_law",
    "local_loglog_slopes",
    "mc_difference",
    "order_refinement",
    "phi_function",
    "quadratic_sde_study",
    "refinement_grid",
    "sde_moments",
    "weak_error_exact",
    "weak_error_mc_vs_step",
    "weak_error_vs_step",
]
