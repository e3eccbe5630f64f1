"""The constant-noise surrogate of a least-squares problem, and how far its stationary law is from the truth.

Seed 002's quadratic model (Assumption 6.1 with Assumption 4.4, constant gradient noise) fitted to the same data:
``U_k = Ā_k + λI`` (the client Hessian), ``a_k = U_k⁻¹ c̄_k`` (the client's own solution) and ``Σ_k`` the minibatch
gradient covariance at the global optimum ``w*`` for the problem's sampling scheme and batch size
(:meth:`fedsde.problems.RegressionProblem.minibatch_covariance`).  Its gradients and mean recursion equal the
least-squares ones exactly; only the noise differs (constant instead of quadratic in ``w``), so every quadratic
command applies to it and :func:`surrogate_gap` measures what the constant-noise assumption costs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedsde._tolerances import RANK_TOL
from fedsde.exact.least_squares import LeastSquaresStationaryLaw, _check_problem, least_squares_stationary_law
from fedsde.exact.moments import StationaryLaw, stationary_law
from fedsde.problems.quadratic.problem import QuadraticProblem

#: the exact stationary law counts as a point when ``√tr P <= POINT_LAW_RTOL · max(1, ‖m‖)`` (rounding level)
POINT_LAW_RTOL = 1e-12


def constant_noise_surrogate(problem, *, at=None) -> QuadraticProblem:
    """The quadratic problem with ``U_k``, ``a_k`` and ``Σ_k = Σ_k(w*)`` of ``problem`` (module docstring).

    Parameters
    ----------
    problem : RegressionProblem
        With a ``batch_size`` and ``sampling``.
    at : array, shape (d,), optional
        Where to evaluate the minibatch covariance (default the global optimum ``w*``).

    Returns
    -------
    QuadraticProblem
        Same ``p``; ``U`` (Q, d, d), ``a`` (Q, d), ``Sigma`` (Q, d, d).
    """
    _check_problem(problem)
    w = problem.optimum if at is None else np.asarray(at, dtype=np.float64).reshape(problem.d)
    name = f"{problem.name} (constant-noise surrogate)" if problem.name else "constant-noise surrogate"
    return QuadraticProblem.from_arrays(problem.client_hessian(), problem.client_optima,
                                        problem.minibatch_covariance(w), problem.p, name=name)


@dataclass(frozen=True)
class SurrogateGap:
    """Stationary laws of the least-squares chain and of its constant-noise surrogate, and their distance.

    Attributes
    ----------
    exact : LeastSquaresStationaryLaw
    surrogate : StationaryLaw
    mean_error : float
        ``‖m_sur − m_exact‖ / √tr P_exact``: the mean's error in units of the exact stationary spread (the two means
        agree up to rounding: the mean recursions are the same).
    cov_rel_error : float
        ``‖P_sur − P_exact‖_F / ‖P_exact‖_F``.
    variance_ratio : float
        ``tr P_sur / tr P_exact`` (below 1: the surrogate understates the variance).
    worst_direction_ratio : tuple of float
        Smallest and largest eigenvalue of ``P_exact^{-1/2} P_sur P_exact^{-1/2}`` (the variance ratio along the
        directions where the two disagree most).
    note : str or None
        Set when the exact law is a point (zero covariance, e.g. ``b = n_k``): the four ratios above are then
        ``0/0`` and ``None``.
    """

    exact: LeastSquaresStationaryLaw
    surrogate: StationaryLaw
    mean_error: float | None
    cov_rel_error: float | None
    variance_ratio: float | None
    worst_direction_ratio: tuple[float, float] | None
    note: str | None = None

    def summary(self) -> dict:
        """The numbers, as plain floats and lists (for records)."""
        return {"mean_error": self.mean_error, "cov_rel_error": self.cov_rel_error,
                "variance_ratio": self.variance_ratio,
                "worst_direction_ratio": None if self.worst_direction_ratio is None else list(
                    self.worst_direction_ratio), "note": self.note,
                "exact_mean": self.exact.mean.tolist(), "exact_cov": self.exact.cov.tolist(),
                "surrogate_mean": self.surrogate.mean.tolist(), "surrogate_cov": self.surrogate.cov.tolist()}


def surrogate_gap(
    problem,
    eta: float,
    local_steps: int | Sequence[int] | np.ndarray,
    server_lr: float = 1.0,
    *,
    participation: int | None = None,
    weights: np.ndarray | None = None,
    exact: LeastSquaresStationaryLaw | None = None,
) -> SurrogateGap:
    """Compare the exact stationary law of minibatch FedAvg on ``problem`` with the constant-noise surrogate's
    (:func:`fedsde.exact.stationary_law` of :func:`constant_noise_surrogate`).

    ``participation`` (uniform ``m``-subsets, unbiased weights, as the quadratic law has them) and ``weights``
    (linear server rules) apply to both; ``exact`` is the exact law of the same settings if already computed.
    Raises ``NoStationaryLawError`` when either chain has no stationary law.
    """
    if exact is None:
        exact = least_squares_stationary_law(problem, eta, local_steps, server_lr, participation=participation,
                                             weighting="unbiased", weights=weights)
    sur = stationary_law(constant_noise_surrogate(problem), eta, local_steps, server_lr,
                         participation=participation, weights=weights)
    Pe, Ps = exact.cov, sur.cov
    dm = float(np.linalg.norm(sur.mean - exact.mean))
    trace, norm = float(np.trace(Pe)), float(np.linalg.norm(Pe))
    # the exact law is a point when its spread is at the rounding level of the means (e.g. noise-free minibatches,
    # b = n_k): every ratio to it is 0/0, reported as None with a note
    scale = max(float(np.linalg.norm(exact.mean)), float(np.linalg.norm(sur.mean)), 1.0)
    if np.sqrt(max(trace, 0.0)) <= POINT_LAW_RTOL * scale:
        note = ("the exact stationary covariance is zero (a point law: no minibatch noise reaches the server), so "
                "mean_error, cov_rel_error, variance_ratio and worst_direction_ratio are 0/0 and reported as None; "
                f"the means differ by {dm:.3g} and the surrogate's covariance has norm {np.linalg.norm(Ps):.3g}")
        return SurrogateGap(exact=exact, surrogate=sur, mean_error=None, cov_rel_error=None, variance_ratio=None,
                            worst_direction_ratio=None, note=note)
    lam, V = np.linalg.eigh(Pe)
    keep = lam > RANK_TOL * max(lam.max(), np.finfo(float).tiny)  # the numerical rank of Pe
    root = V[:, keep] / np.sqrt(lam[keep])
    rel = np.linalg.eigvalsh(root.T @ Ps @ root)
    return SurrogateGap(
        exact=exact, surrogate=sur, mean_error=dm / np.sqrt(trace), cov_rel_error=float(np.linalg.norm(Ps - Pe) / norm),
        variance_ratio=float(np.trace(Ps) / trace), worst_direction_ratio=(float(rel.min()), float(rel.max())),
    )
