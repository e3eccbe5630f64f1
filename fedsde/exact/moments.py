"""Transient and stationary moments of the FedAvg chain on quadratic clients (no sampling).

Clock: rounds ``n = 0, 1, …``.  In seed 002's continuous-time notation round ``n`` sits at ``t = n·h`` and
the server step is ``s = h·η₀``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from fedsde._tolerances import POWER_ITERATION_RTOL, PSD_TOL, STATIONARY_MARGIN, SYM_TOL
from fedsde._validate import constant_or_schedule, positive_int, record_rounds, start_point
from fedsde.errors import FedsdeInputError, NoStationaryLawError
from fedsde.exact.round_law import RoundLaw, _steps_repr, round_law
from fedsde.params import Schedule, derive, unpack
from fedsde.problems.quadratic.problem import QuadraticProblem


@dataclass(frozen=True)
class Moments:
    """Mean and covariance of the server weights at recorded rounds.

    Attributes
    ----------
    rounds : ndarray of int, shape (T,)
    mean : ndarray, shape (T, d)
    cov : ndarray, shape (T, d, d)
    """

    rounds: np.ndarray
    mean: np.ndarray
    cov: np.ndarray

    @property
    def final_mean(self) -> np.ndarray:
        return self.mean[-1]

    @property
    def final_cov(self) -> np.ndarray:
        return self.cov[-1]


@dataclass(frozen=True)
class StationaryLaw:
    """Stationary mean and covariance of the chain, with the law of one round that produced them."""

    mean: np.ndarray
    cov: np.ndarray
    law: RoundLaw


def _initial(problem: QuadraticProblem, w0, cov0) -> tuple[np.ndarray, np.ndarray]:
    d = problem.d
    m0 = start_point(w0, d)
    if cov0 is None:
        P0 = np.zeros((d, d))
    else:
        P0 = np.asarray(cov0, dtype=np.float64)
        if P0.ndim == 0 or P0.shape == (1,):
            P0 = float(P0.reshape(())) * np.eye(d)
        if P0.shape != (d, d) or not np.all(np.isfinite(P0)):
            raise FedsdeInputError(f"cov0: shape {np.shape(cov0)} must be ({d}, {d}) with finite entries")
        if np.abs(P0 - P0.T).max() > SYM_TOL * max(1.0, np.abs(P0).max()) or np.linalg.eigvalsh(P0)[0] < -PSD_TOL:
            raise FedsdeInputError("cov0: must be symmetric positive semi-definite")
    return m0, P0


def transient_moments(
    problem: QuadraticProblem,
    eta: float | Sequence[float] | np.ndarray | Schedule,
    local_steps: int | np.ndarray | None = None,
    rounds: int | None = None,
    server_lr: float | Sequence[float] | np.ndarray = 1.0,
    *,
    w0=None,
    cov0=None,
    participation: int | None = None,
    weights: np.ndarray | None = None,
    record: Sequence[int] | np.ndarray | None = None,
) -> Moments:
    """Exact mean and covariance of the server weights after each round.

    Parameters
    ----------
    problem : QuadraticProblem
    eta : float or array, shape (rounds,), or Schedule
        Client learning rate, constant or one value per round (round ``n`` uses ``eta[n]``); or a
        :class:`~fedsde.params.Schedule` whose ``eta``, ``local_steps``, ``rounds`` (unless given) and
        ``server_lr`` are used, checked where it was built.
    local_steps : int or array of int, shape (Q,)
        ``E`` or per-client ``τ_k`` (fixed across rounds).
    rounds : int
        Number of rounds ``n >= 0`` to run.
    server_lr : float or array, shape (rounds,)
        Actual server step ``s`` per round.
    w0 : array, shape (d,), optional
        Initial mean (default zero).  With ``cov0`` the start is ``N(w0, cov0)``; without it, the point ``w0``.
    participation : int, optional
        Clients sampled per round (uniform without replacement, unbiased weights).
    weights : array, shape (Q,), optional
        Aggregation weights replacing ``p_k`` (see :func:`fedsde.exact.round_law`).
    record : sequence of int, optional
        Rounds (0..rounds) at which to keep the moments; default all.

    Returns
    -------
    Moments
        ``rounds``, ``mean`` (T, d), ``cov`` (T, d, d) at the recorded rounds.
    """
    sched, eta, local_steps, server_lr = unpack(eta, local_steps, server_lr)
    if sched is not None and rounds in (None, sched.rounds):  # checked where the Schedule was built
        rounds = sched.rounds
        etas, lrs = _rates(sched)
    else:
        sched = None
        rounds = positive_int("rounds", rounds, minimum=0)
        etas = constant_or_schedule("eta", eta, rounds) if rounds else np.zeros(0)
        lrs = constant_or_schedule("server_lr", server_lr, rounds) if rounds else np.zeros(0)

    if rounds == 0 and sched is None:
        # validate scalar inputs even when nothing is run
        round_law(problem, float(np.ravel(eta)[0]), local_steps, float(np.ravel(server_lr)[0]),
                  participation=participation, weights=weights, warn=False)
    m, P = _initial(problem, w0, cov0)
    keep = record_rounds("record", record, rounds)
    return _moments(problem, sched, etas, lrs, local_steps, m, P, keep, participation=participation, weights=weights)


def schedule_moments(problem: QuadraticProblem, schedule: Schedule, start: np.ndarray, keep: np.ndarray) -> Moments:
    """:func:`transient_moments` of the chain started at the point ``start`` (d,) under ``schedule``, at the rounds
    ``keep`` (sorted int64 in ``0..rounds``): each checked where it was built (:class:`~fedsde.params.Schedule`,
    :func:`fedsde._validate.start_point`, :func:`fedsde._validate.record_rounds`), none again (FedAvg's exact side
    of the validity test, :func:`fedsde.validity.exact_fedavg.exact_fedavg_paths`)."""
    etas, lrs = _rates(schedule)
    d = problem.d
    return _moments(problem, schedule, etas, lrs, schedule.local_steps, start, np.zeros((d, d)), keep,
                    participation=None, weights=None)


def _rates(sched: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """The client rates and server steps of a checked schedule per round (a constant as a broadcast view)."""
    return tuple(np.broadcast_to(float(getattr(sched, k)), (sched.rounds,)) if np.ndim(getattr(sched, k)) == 0
                 else sched.per_round(k) for k in ("eta", "server_lr"))


def _moments(problem, sched: Schedule | None, etas, lrs, local_steps, m, P, keep, *, participation,
             weights) -> Moments:
    """The recursion of :func:`transient_moments` from the moments ``(m, P)`` over ``len(etas)`` rounds, every input
    checked (a ``sched`` derived per rate pair is not checked again)."""
    rounds = etas.shape[0]

    def at(e: float, s: float):  # round_law's rates: a Schedule derived from a checked one is not checked again
        return e if sched is None else derive(sched, eta=e, server_lr=s)

    if rounds > 64 and keep.size <= 8 and all(a.strides == (0,) or bool(np.all(a == a[0])) for a in (etas, lrs)):
        if participation is None or participation == problem.Q:
            law = round_law(problem, at(float(etas[0]), float(lrs[0])), local_steps, float(lrs[0]), weights=weights)
            return _power_moments(law, m, P, keep)
        fast = _tail_moments(problem, at(float(etas[0]), float(lrs[0])), local_steps, float(lrs[0]),
                             participation=participation, weights=weights, m=m, P=P, keep=keep)
        if fast is not None:
            return fast
    keep_set = {int(k): i for i, k in enumerate(keep)}
    means = np.empty((keep.size, problem.d))
    covs = np.empty((keep.size, problem.d, problem.d))
    laws: dict[tuple[float, float], RoundLaw] = {}
    if 0 in keep_set:
        means[keep_set[0]], covs[keep_set[0]] = m, P
    for n in range(rounds):
        key = (float(etas[n]), float(lrs[n]))
        law = laws.get(key)
        if law is None:
            law = laws[key] = round_law(problem, at(*key), local_steps, key[1], participation=participation,
                                        weights=weights, warn=len(laws) == 0)
        m, P = law.step(m, P)
        if n + 1 in keep_set:
            means[keep_set[n + 1]], covs[keep_set[n + 1]] = m, P
    return Moments(rounds=keep, mean=means, cov=covs)


def _tail_moments(problem, eta, local_steps, server_lr, *, participation, weights, m, P, keep) -> Moments | None:
    """Partial participation, many rounds: the rounds of the burn-in only, then the stationary law within rounding
    (:func:`fedsde.exact._least_squares_solve.tail_moments`; the round's second-moment map is self-adjoint and
    positive, as there).  ``None`` where the chain has no stationary law."""
    from fedsde.exact._least_squares_solve import perron_root, tail_moments

    law = round_law(problem, eta, local_steps, server_lr, participation=participation, weights=weights)
    try:
        st = stationary_law(problem, eta, local_steps, server_lr, participation=participation, weights=weights)
    except NoStationaryLawError:
        return None
    d = problem.d
    rho_T = perron_root(law.second_moment_map, d, st.cov) if d > 2 else _spectral_radius(law.second_moment_operator())
    _, K = law.step(st.mean, np.zeros((d, d)))
    means, covs = tail_moments(law.step, law.transition, m, P, keep, st.mean, (st.cov, rho_T, K))
    return Moments(rounds=keep, mean=means, cov=covs)


def _power_moments(law: RoundLaw, m: np.ndarray, P: np.ndarray, keep: np.ndarray) -> Moments:
    """Moments at the recorded rounds under full participation, where a round is the affine map
    ``(m, P) ↦ (A m + b, A P Aᵀ + S)``: its ``n``-th power by repeated squaring of the triple ``(A, b, S)``
    (``(A₁, b₁, S₁)∘(A₂, b₂, S₂) = (A₁A₂, A₁b₂ + b₁, A₁S₂A₁ᵀ + S₁)``), so ``O(log n)`` products for any ``n``."""
    A = law.transition
    one = (A, law.server_lr * law.Ba, law.server_noise_cov)
    means, covs = np.empty((keep.size, m.size)), np.empty((keep.size, m.size, m.size))
    prev = 0
    for i, r in enumerate(keep):
        n, base = int(r) - prev, one
        prev = int(r)
        while n:
            if n & 1:
                m, P = base[0] @ m + base[1], base[0] @ P @ base[0].T + base[2]
            n >>= 1
            if n:
                Ab, bb, Sb = base
                base = (Ab @ Ab, Ab @ bb + bb, Ab @ Sb @ Ab.T + Sb)
        means[i], covs[i] = m, 0.5 * (P + P.T)
    return Moments(rounds=keep, mean=means, cov=covs)


def stationary_law(
    problem: QuadraticProblem,
    eta: float,
    local_steps: int | np.ndarray,
    server_lr: float = 1.0,
    *,
    participation: int | None = None,
    weights: np.ndarray | None = None,
) -> StationaryLaw:
    """Stationary mean and covariance of the FedAvg chain.

    Full participation: mean ``c`` and the solution ``X`` of the discrete Lyapunov equation
    ``X = (I − sB) X (I − sB)ᵀ + s² η² Σ_k p_k² Γ_k`` (``scipy.linalg.solve_discrete_lyapunov``).
    ``weights`` replaces ``p_k`` as in :func:`fedsde.exact.round_law`.
    Partial participation: mean ``c`` and the fixed point of :meth:`RoundLaw.step`'s covariance recursion,
    a linear system in ``vec(X)`` (size d²).

    Raises
    ------
    NoStationaryLawError
        If the spectral radius of ``I − sB`` (or of the second-moment operator under partial participation)
        is ``>= 1``.
    """
    law = round_law(problem, eta, local_steps, server_lr, participation=participation, weights=weights)
    rho = law.spectral_radius
    if rho >= 1.0 - STATIONARY_MARGIN:
        raise NoStationaryLawError(
            f"eta={law.eta}, local_steps={_steps_repr(law.local_steps)}, server_lr={law.server_lr}: "
            f"spectral radius of I - s*B is {rho:.6g} >= 1, so the chain has no stationary law"
        )
    mean = law.c
    d = problem.d
    if law.participation is None or law.participation == problem.Q:
        X = scipy.linalg.solve_discrete_lyapunov(law.transition, law.server_noise_cov)
    elif d > MATRIX_FREE_D:
        X = _matrix_free_stationary(law, mean)
    else:
        T = law.second_moment_operator()
        rho2 = _spectral_radius(T)
        if rho2 >= 1.0 - STATIONARY_MARGIN:
            raise NoStationaryLawError(
                f"participation={law.participation}, eta={law.eta}, server_lr={law.server_lr}: the second-moment "
                f"operator has spectral radius {rho2:.6g} >= 1 (client sampling makes the variance diverge)"
            )
        # constant part of the recursion, evaluated at the stationary mean
        _, K = law.step(mean, np.zeros((d, d)))
        vecX = np.linalg.solve(np.eye(d * d) - T, K.reshape(-1))
        X = vecX.reshape(d, d)
    return StationaryLaw(mean=mean, cov=0.5 * (X + X.T), law=law)


#: above this dimension the partial-participation stationary law is solved matrix-free (no d² × d² matrix)
MATRIX_FREE_D = 30


def _matrix_free_stationary(law: RoundLaw, mean: np.ndarray) -> np.ndarray:
    """``X = T(X) + K`` by preconditioned CG (``T`` is self-adjoint and positive: ``A`` and every ``G_k`` are
    symmetric and the indicators' covariance is PSD; :mod:`fedsde.exact._least_squares_solve`), with ``ρ(T)`` by
    Lanczos for the existence check."""
    from fedsde.exact._least_squares_solve import perron_root, stationary_covariance

    d = mean.size
    _, K = law.step(mean, np.zeros((d, d)))
    X, _, res = stationary_covariance(law.second_moment_map, K, law.transition)
    ok = np.isfinite(res) and res < 1e-9 and np.all(np.isfinite(X))
    rho2 = perron_root(law.second_moment_map, d, X if ok else None)
    if rho2 >= 1.0 - STATIONARY_MARGIN or not ok:
        raise NoStationaryLawError(
            f"participation={law.participation}, eta={law.eta}, server_lr={law.server_lr}: the second-moment "
            f"operator has spectral radius {rho2:.6g} >= 1 (client sampling makes the variance diverge)"
            if rho2 >= 1.0 - STATIONARY_MARGIN else f"the stationary covariance solve did not converge (relative "
            f"residual {res:.3g}; spectral radius of the second-moment operator {rho2:.6g})")
    return X


def _spectral_radius(T: np.ndarray) -> float:
    if T.shape[0] <= 900:
        return float(np.max(np.abs(np.linalg.eigvals(T))))
    # power iteration on the (positive) operator; enough for a stability check
    v = np.random.default_rng(0).standard_normal(T.shape[0])
    lam = 0.0
    for _ in range(500):
        w = T @ v
        lam_new = np.linalg.norm(w) / np.linalg.norm(v)
        v = w / np.linalg.norm(w)
        if abs(lam_new - lam) < POWER_ITERATION_RTOL * max(1.0, lam_new):
            break
        lam = lam_new
    return float(lam_new)
