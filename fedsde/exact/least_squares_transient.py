"""Exact mean and covariance of minibatch FedAvg on least-squares clients after any number of rounds.

The round law is :class:`fedsde.exact.least_squares.LeastSquaresRoundLaw` (its module docstring derives it); here
it is iterated.  Round by round, each round matrix-free in ``O(N d²)`` per local step; with constant rates and many
rounds, without applying every round (:mod:`fedsde.exact._least_squares_solve`): the affine recursion of
``(P, δδᵀ, δ, 1)`` raised to the power by repeated squaring where ``d`` is small, else the rounds of the burn-in
only, until a proven bound puts the covariance within rounding of the stationary one (the mean in closed form).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedsde._threads import small_products
from fedsde._tolerances import STATIONARY_MARGIN
from fedsde._validate import choice, record_rounds
from fedsde.errors import NoStationaryLawError
from fedsde.exact.least_squares import (
    DENSE_MAX_D,
    METHODS,
    LeastSquaresRoundLaw,
    LeastSquaresStationaryLaw,
    _check_problem,
    _initial,
    base_weights,
    check_rows_memory,
    round_law_of,
    stationary_of,
)
from fedsde.exact.moments import Moments
from fedsde.params import FULL_PARTICIPATION, ClientSampling, Schedule, takes_values

#: with more rounds than this (and constant rates) the transient is not computed round by round
DIRECT_ROUNDS = 64
#: at most this many recorded rounds for the shortcut of the transient
MAX_JUMPS = 8


@small_products
@takes_values(positional=("eta", "local_steps", "rounds", "server_lr"), types={"clients": ClientSampling},
              schedule=("eta", "local_steps", "rounds", "server_lr"), clients=("participation", "weighting"))
def least_squares_transient_moments(
    problem,
    schedule: Schedule,
    *,
    w0=None,
    cov0=None,
    clients: ClientSampling | None = None,
    weights: np.ndarray | None = None,
    record: Sequence[int] | np.ndarray | None = None,
    method: str = "auto",
    stationary: LeastSquaresStationaryLaw | None = None,
) -> Moments:
    """Exact mean and covariance of the server weights after every round (mirrors
    :func:`fedsde.exact.transient_moments`).

    With constant ``eta`` and ``server_lr``, many rounds and few recorded ones, the rounds are not all applied
    (:mod:`fedsde.exact._least_squares_solve`): for ``d <= DENSE_MAX_D`` (or ``method="dense"``) the affine
    recursion of ``(P, δδᵀ, δ, 1)`` is raised to the power by repeated squaring (``O(log n)`` products); otherwise
    rounds are applied one by one until the proven bound on the distance to the stationary law falls below
    ``TAIL_RTOL·‖P*‖_F``, and the mean is ``m* + Aⁿ(m₀ − m*)`` in closed form.  So ``rounds = 10⁸`` costs
    ``O(log n)`` products or the rounds of the transient's burn-in, not ``10⁸`` rounds.

    Parameters
    ----------
    problem : RegressionProblem
    schedule : Schedule
        :class:`~fedsde.params.Schedule` (``eta``, ``local_steps``, ``rounds``, ``server_lr``), or those four as
        arguments (positional, as in earlier releases, or keywords: :func:`fedsde.params.takes_values`):
    eta, server_lr : float or array, shape (rounds,)
        Constant or per-round client rate and server step.
    local_steps : int or array of int, shape (Q,)
    rounds : int
    w0 : array, shape (d,), optional
        Start (default: the problem's ``initial_weights()``); with ``cov0`` the start law has that covariance.
    clients, participation, weighting, weights
        See :func:`least_squares_round_law`.
    record : sequence of int, optional
        Rounds (0..rounds) to keep; default all.
    method : {"auto", "dense", "matrix-free"}
        Force the dense squaring or the matrix-free rounds (``auto``: dense where ``d <= DENSE_MAX_D``).
    stationary : LeastSquaresStationaryLaw, optional
        The stationary law of the same settings, if already computed (the matrix-free tail uses it).

    Returns
    -------
    Moments
        ``rounds`` (T,), ``mean`` (T, d), ``cov`` (T, d, d).
    """
    _check_problem(problem)
    choice("method", method, METHODS)
    m, P = _initial(problem.d, problem.initial_weights() if w0 is None else w0, cov0)
    keep = record_rounds("record", record, schedule.rounds)
    clients = FULL_PARTICIPATION if clients is None else clients
    return _moments(problem, schedule, m, P, keep, clients=clients, omega=base_weights(problem, clients, weights),
                    method=method, stationary=stationary)


def least_squares_schedule_moments(problem, schedule: Schedule, start: np.ndarray, keep: np.ndarray) -> Moments:
    """:func:`least_squares_transient_moments` of the chain started at the point ``start`` (d,) under ``schedule``,
    every client taking part, at the rounds ``keep`` (sorted int64 in ``0..rounds``): each checked where it was
    built (:class:`~fedsde.params.Schedule`, :func:`fedsde._validate.start_point`,
    :func:`fedsde._validate.record_rounds`), none again (FedAvg's exact side of the validity test,
    :func:`fedsde.validity.exact_fedavg.exact_fedavg_paths`)."""
    _check_problem(problem)
    d = problem.d
    return _moments(problem, schedule, start, np.zeros((d, d)), keep, clients=FULL_PARTICIPATION,
                    omega=base_weights(problem, FULL_PARTICIPATION, None), method="auto", stationary=None)


def _moments(problem, schedule: Schedule, m, P, keep, *, clients: ClientSampling, omega, method: str,
             stationary) -> Moments:
    """The moments from ``(m, P)`` at the rounds ``keep``, every input checked (module docstring)."""
    check_rows_memory(problem)
    steps = schedule.steps_for(problem.Q)
    etas, lrs = (_rates(schedule, k) for k in ("eta", "server_lr"))
    kw = {"clients": clients, "omega": omega}
    constant = all(a.strides == (0,) or bool(np.all(a == a[0])) for a in (etas, lrs))
    if constant and schedule.rounds > DIRECT_ROUNDS and keep.size <= MAX_JUMPS:
        law = round_law_of(problem, float(etas[0]), steps, float(lrs[0]), **kw)
        fast = _jump(problem, law, m, P, keep, method, stationary, kw)
        if fast is not None:
            return fast
    return _iterate(problem, etas, lrs, steps, m, P, keep, kw)


def _rates(schedule: Schedule, name: str) -> np.ndarray:
    """The checked rate ``name`` per round (a constant as a broadcast view), or its first value when no round
    runs."""
    value = getattr(schedule, name)
    if callable(value) or (schedule.rounds and np.ndim(value)):
        return schedule.per_round(name)
    if not schedule.rounds:
        return np.array([float(np.ravel(value)[0])])
    return np.broadcast_to(float(value), (schedule.rounds,))


def _iterate(problem, etas, lrs, local_steps, m, P, keep, kw) -> Moments:
    """The rounds applied one by one (matrix-free)."""
    rounds = etas.size
    at = {int(k): i for i, k in enumerate(keep)}
    means, covs = np.empty((keep.size, problem.d)), np.empty((keep.size, problem.d, problem.d))
    laws: dict[tuple[float, float], LeastSquaresRoundLaw] = {}
    if 0 in at:
        means[at[0]], covs[at[0]] = m, P
    for n in range(rounds):
        key = (float(etas[n]), float(lrs[n]))
        if key not in laws:
            laws[key] = round_law_of(problem, key[0], local_steps, key[1], **kw)
        m, P = laws[key].step(m, P)
        if n + 1 in at:
            means[at[n + 1]], covs[at[n + 1]] = m, P
    return Moments(rounds=keep, mean=means, cov=covs)


def _jump(problem, law: LeastSquaresRoundLaw, m0, P0, keep, method, stationary, kw) -> Moments | None:
    """Moments at the recorded rounds without applying every round (``fedsde.exact._least_squares_solve``): the
    dense affine recursion by repeated squaring where ``d`` is small, else the rounds one by one until the bound on
    the distance to the stationary law is below rounding.  ``None`` where neither applies (no fixed point, no
    stationary law, or too few rounds for the bound to help)."""
    from fedsde.exact._least_squares_solve import affine_power, tail_moments

    d = problem.d
    A = law.mean_map[0]
    try:
        mstar = law.fixed_point()
    except np.linalg.LinAlgError:
        return None
    if not np.all(np.isfinite(mstar)):
        return None
    means, covs = np.empty((keep.size, d)), np.empty((keep.size, d, d))
    dense = method == "dense" or (method == "auto" and d <= DENSE_MAX_D)
    if dense:
        centred = round_law_of(problem, law.eta, law.local_steps, law.server_lr, shift=mstar, **kw)
        Z = _affine_matrix(centred)
        z = np.concatenate([P0.reshape(-1), np.outer(m0 - mstar, m0 - mstar).reshape(-1), m0 - mstar, [1.0]])
        prev = 0
        for i, r in enumerate(keep):
            z = affine_power(Z, int(r) - prev, z)
            prev = int(r)
            Pn = z[:d * d].reshape(d, d)
            means[i], covs[i] = mstar + z[2 * d * d:2 * d * d + d], 0.5 * (Pn + Pn.T)
        return Moments(rounds=keep, mean=means, cov=covs)
    rho_A = law.spectral_radius
    if rho_A >= 1.0 - STATIONARY_MARGIN:
        return None
    # the bound cannot fall below rounding in fewer than about log(TAIL_RTOL)/log(ρ_A²) rounds (ρ(T) >= ρ_A²)
    if rho_A > 0 and int(keep[-1]) < 30.0 / (2.0 * -np.log(rho_A)):
        return None
    if stationary is None:
        try:
            stationary = stationary_of(problem, law, "matrix-free")
        except NoStationaryLawError:
            return None
    _, K = law.step(mstar, np.zeros((d, d)))
    means, covs = tail_moments(law.step, A, m0, P0, keep, mstar, (stationary.cov, stationary.spectral_radius, K))
    return Moments(rounds=keep, mean=means, cov=covs)


def _affine_matrix(law: LeastSquaresRoundLaw) -> np.ndarray:
    """The round as one linear map of ``z = (vec P, vec δδᵀ, δ, 1)`` (``δ = m − shift``), shape (2d²+d+1)²:
    ``P' = A P Aᵀ + K vec X̂``, ``D' = A D Aᵀ``, ``δ' = A δ``, with ``X̂ = [[P + D, δ], [δᵀ, 1]]`` (the shift
    is the fixed point, so the mean map has no offset there)."""
    d = law.d
    dd = d * d
    K = law.noise_operator()
    L = law.L
    A = np.eye(d) + L[:d, :d]
    AA = np.kron(A, A)
    aug = np.arange(dd).reshape(d, d)
    rows = ((aug // d) * (d + 1) + aug % d).reshape(-1)
    Kdd = K[:, rows]
    Kdelta = K[:, np.arange(d) * (d + 1) + d] + K[:, d * (d + 1) + np.arange(d)]
    n = 2 * dd + d + 1
    Z = np.zeros((n, n))
    Z[:dd, :dd] = AA + Kdd
    Z[:dd, dd:2 * dd] = Kdd
    Z[:dd, 2 * dd:2 * dd + d] = Kdelta
    Z[:dd, -1] = K[:, -1]
    Z[dd:2 * dd, dd:2 * dd] = AA
    Z[2 * dd:2 * dd + d, 2 * dd:2 * dd + d] = A
    Z[-1, -1] = 1.0
    return Z
