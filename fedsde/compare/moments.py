"""Exact moments of the linear FedAvg SDEs at round times, and moment-by-moment comparison with the chain.

Clock: round ``n`` sits at ``t = n·h``.  The SDE's mean and covariance solve the moment ODEs
``m' = −A(m − c)``, ``P' = −AP − PAᵀ + bbᵀ`` (seed 002, A.11), integrated exactly over each round with one
matrix exponential (:meth:`fedsde.sde.LinearSDE.transition`); no Monte-Carlo.  The chain's moments come from
:func:`fedsde.exact.transient_moments`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedsde._validate import positive_float, positive_int, schedule
from fedsde.compare.distances import gaussian_w2
from fedsde.errors import FedsdeInputError
from fedsde.exact.moments import Moments
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.sde.coefficients import LinearSDE, quadratic_sde_coefficients


def sde_moments(
    problem: QuadraticProblem,
    eta: float | Sequence[float] | np.ndarray,
    local_steps: int | np.ndarray,
    rounds: int,
    server_lr: float | Sequence[float] | np.ndarray = 1.0,
    h: float | None = None,
    variant: str = "corrected",
    *,
    w0=None,
    cov0=None,
    record: Sequence[int] | np.ndarray | None = None,
) -> Moments:
    """Exact mean and covariance of a linear FedAvg SDE at the round times ``t = n·h``.

    Parameters
    ----------
    problem : QuadraticProblem
    eta : float or array, shape (rounds,)
        Client learning rate, constant or per round (constant on ``[n·h, (n+1)·h)``).
    local_steps : int or array of int, shape (Q,)
    rounds : int
        Rounds ``n >= 0``.
    server_lr : float or array, shape (rounds,)
        Actual server step ``s = h·η₀`` per round.
    h : float, optional
        Time step (default: ``eta`` when constant).
    variant : {"corrected", "paper", "matched"}
    w0, cov0 : optional
        Initial mean (d,) (default zero) and covariance (d, d) (default zero: a point start).
    record : sequence of int, optional
        Rounds (0..rounds) to keep; default all.

    Returns
    -------
    fedsde.exact.Moments
        ``rounds`` (T,), ``mean`` (T, d), ``cov`` (T, d, d) at ``t = rounds·h``.
    """
    rounds = positive_int("rounds", rounds, minimum=0)
    etas = schedule("eta", eta, max(rounds, 1))
    lrs = schedule("server_lr", server_lr, max(rounds, 1))
    if h is None:
        if np.ndim(eta) != 0:
            raise FedsdeInputError("h: required when eta is a per-round schedule")
        h = float(eta)
    h = positive_float("h", h)
    m, P = initial_law(problem.d, w0, cov0)
    keep = np.arange(rounds + 1) if record is None else np.unique(np.asarray(record, dtype=np.int64))
    if keep.size and (keep.min() < 0 or keep.max() > rounds):
        raise FedsdeInputError(f"record: rounds must lie in [0, {rounds}]")
    pos = {int(k): i for i, k in enumerate(keep)}
    means, covs = np.empty((keep.size, problem.d)), np.empty((keep.size, problem.d, problem.d))
    if 0 in pos:
        means[pos[0]], covs[pos[0]] = m, P
    cache: dict[tuple[float, float], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for n in range(rounds):
        key = (float(etas[n]), float(lrs[n]))
        entry = cache.get(key)
        if entry is None:
            lin = quadratic_sde_coefficients(problem, key[0], local_steps, key[1], h, variant)
            Phi, K = lin.transition(h)
            entry = cache[key] = (lin.c, Phi, K)
        c, Phi, K = entry
        m = c + Phi @ (m - c)
        P = Phi @ P @ Phi.T + K
        if n + 1 in pos:
            means[pos[n + 1]], covs[pos[n + 1]] = m, 0.5 * (P + P.T)
    return Moments(rounds=keep, mean=means, cov=covs)


def initial_law(d: int, w0=None, cov0=None) -> tuple[np.ndarray, np.ndarray]:
    """Initial mean (d,) and covariance (d, d): ``w0`` (default zero; a scalar is broadcast) and ``cov0``
    (default zero; a scalar means ``cov0·I``)."""
    m0 = np.zeros(d) if w0 is None else np.asarray(w0, dtype=np.float64).reshape(-1)
    if m0.shape == (1,) and d > 1:
        m0 = np.full(d, m0[0])
    if m0.shape != (d,) or not np.all(np.isfinite(m0)):
        raise FedsdeInputError(f"w0: shape {np.shape(w0)} must be ({d},) with finite entries")
    if cov0 is None:
        return m0, np.zeros((d, d))
    P0 = np.asarray(cov0, dtype=np.float64)
    if P0.ndim == 0 or P0.shape == (1,):
        P0 = float(P0.reshape(())) * np.eye(d)
    if P0.shape != (d, d) or not np.all(np.isfinite(P0)):
        raise FedsdeInputError(f"cov0: shape {np.shape(cov0)} must be ({d}, {d}) with finite entries")
    return m0, 0.5 * (P0 + P0.T)


def linear_sde_law(lin: LinearSDE, t: float, w0=None, cov0=None) -> tuple[np.ndarray, np.ndarray]:
    """Mean (d,) and covariance (d, d) of ``lin`` at time ``t`` from ``N(w0, cov0)`` (default: the origin)."""
    m0, P0 = initial_law(lin.d, w0, cov0)
    law = lin.moments(t, m0, P0)
    return law.mean, law.cov


@dataclass(frozen=True)
class MomentComparison:
    """Two laws compared at common rounds.

    Attributes
    ----------
    rounds : ndarray of int, shape (T,)
    times : ndarray, shape (T,)
        ``t = n·h``.
    mean_error : ndarray, shape (T,)
        ``‖m_a − m_b‖``.
    cov_error : ndarray, shape (T,)
        ``‖P_a − P_b‖_F``.
    cov_rel_error : ndarray, shape (T,)
        ``‖P_a − P_b‖_F / ‖P_a‖_F``; where ``P_a = 0`` it is 0 when ``P_b = 0`` too (two point laws, e.g. both
        at ``t = 0`` from a point start: the covariances agree) and NaN (``null`` in JSON) when only ``P_a = 0``.
    w2 : ndarray, shape (T,)
        Wasserstein-2 distance between the Gaussian laws with these moments.
    """

    rounds: np.ndarray
    times: np.ndarray
    mean_error: np.ndarray
    cov_error: np.ndarray
    cov_rel_error: np.ndarray
    w2: np.ndarray


def compare_moments(a: Moments, b: Moments, h: float) -> MomentComparison:
    """Compare two sets of moments (e.g. chain vs SDE) at the rounds they share (clock ``t = n·h``)."""
    common, ia, ib = np.intersect1d(a.rounds, b.rounds, return_indices=True)
    if common.size == 0:
        raise FedsdeInputError("compare_moments: the two sets of moments share no round")
    ma, mb, Pa, Pb = a.mean[ia], b.mean[ib], a.cov[ia], b.cov[ib]
    mean_err = np.linalg.norm(ma - mb, axis=-1)
    cov_err = np.linalg.norm(Pa - Pb, axis=(-2, -1))
    norm_a = np.linalg.norm(Pa, axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.where(norm_a > 0, cov_err / np.where(norm_a > 0, norm_a, 1.0), np.where(cov_err == 0, 0.0, np.nan))
    w2 = np.array([gaussian_w2(ma[i], Pa[i], mb[i], Pb[i]) for i in range(common.size)])
    return MomentComparison(common, common * float(h), mean_err, cov_err, rel, w2)
