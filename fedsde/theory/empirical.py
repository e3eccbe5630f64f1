"""Empirical left-hand sides of seed 002's bounds, from the exact chain (quadratics) or the simulator.

The theorems bound ``E_{t̃,G} X(w₀(t̃))`` where ``t̃ ∈ [0, t]`` has density ``ω(t̃)/∫₀ᵗ ω`` (``ω = η`` for
Thms 4.5/4.9, ``ω = η₀`` for Cor. 4.7 corrected, uniform for Cor. 4.7 as printed).  Along the discrete chain
(clock ``t_n = n·h``) the estimate at horizon ``t = N·h`` is (reference/seed-fedsde.md §5)

    Σ_{n<N} ω(t_n) X(w_n) / Σ_{n<N} ω(t_n),

averaged over replicates; the standard error comes from the spread of the per-replicate averages (they are
independent).  For quadratic clients the chain's mean and covariance are exact, so ``E‖∇F(w_n)‖²`` and
``E F(w_n) − F*`` are exact and the standard error is zero.

The local steps ``E`` of a round are the keyword ``local_steps`` (old name, accepted for one release: ``E``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fedsde._compat import renamed
from fedsde._validate import positive_float, positive_int
from fedsde.errors import FedsdeInputError
from fedsde.exact import transient_moments
from fedsde.params import Replication, takes_values
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.theory.schedules import PowerSchedule


@dataclass(frozen=True)
class ChainPath:
    """Per-round values along the chain.

    Attributes
    ----------
    t : ndarray, shape (T,)
        Continuous time ``t_n = n·h`` of each recorded round (``n = 0 … T−1``).
    grad_sq : ndarray, shape (T, R)
        ``‖∇F(w_n)‖²`` per replicate (``R = 1`` with its exact expectation for the exact chain).
    gap : ndarray, shape (T, R)
        ``F(w_n) − F*``.
    eta : ndarray, shape (T,)
        Client learning rate used in round ``n``.
    eta0 : ndarray, shape (T,)
        Server learning rate per unit time in round ``n`` (actual server step ``h·η₀``).
    exact : bool
        True when the values are exact expectations (no Monte-Carlo error).
    points : ndarray, shape (T, R, d), optional
        The simulated server weights (``None`` for the exact chain).
    """

    t: np.ndarray
    grad_sq: np.ndarray
    gap: np.ndarray
    eta: np.ndarray
    eta0: np.ndarray
    exact: bool
    points: np.ndarray | None = None

    @property
    def h(self) -> float:
        return float(self.t[1] - self.t[0]) if self.t.size > 1 else float("nan")


def random_time_average(values: np.ndarray, weights: np.ndarray, horizons, *, exact: bool = False):
    """``Σ_{n<N} ω_n X_n / Σ_{n<N} ω_n`` at each horizon ``N``, averaged over replicates, with standard errors.

    Parameters
    ----------
    values : ndarray, shape (T, R)
    weights : ndarray, shape (T,)
        ``ω_n >= 0``.
    horizons : array of int, shape (H,)
        Numbers of rounds ``N`` (1 <= N <= T).
    exact : bool
        Values are exact expectations: standard error 0.

    Returns
    -------
    mean, stderr : ndarray, shape (H,)
    """
    X = np.asarray(values, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if w.shape[0] != X.shape[0] or np.any(w < 0):
        raise FedsdeInputError("weights: need one non-negative weight per round")
    N = np.asarray(horizons, dtype=np.int64).reshape(-1)
    if N.size and (N.min() < 1 or N.max() > X.shape[0]):
        raise FedsdeInputError(f"horizons: must lie in [1, {X.shape[0]}]")
    cw = np.cumsum(w)
    cx = np.cumsum(w[:, None] * X, axis=0)
    per_rep = cx[N - 1] / cw[N - 1, None]  # (H, R)
    R = per_rep.shape[1]
    mean = per_rep.mean(axis=1)
    se = np.zeros_like(mean) if (exact or R < 2) else per_rep.std(axis=1, ddof=1) / np.sqrt(R)
    return mean, se


def _schedules(schedule: PowerSchedule, server_schedule: PowerSchedule | None, h: float, rounds: int):
    tn = np.arange(rounds) * h
    eta = schedule.eta(tn)
    eta0 = server_schedule.eta(tn) if server_schedule is not None else np.ones(rounds)
    return tn, eta, eta0


@renamed(E="local_steps")
def quadratic_exact_path(
    problem: QuadraticProblem,
    schedule: PowerSchedule,
    *,
    local_steps: int,
    h: float,
    rounds: int,
    w0=None,
    server_schedule: PowerSchedule | None = None,
) -> ChainPath:
    """Exact ``E‖∇F(w_n)‖²`` and ``E F(w_n) − F*`` for rounds ``n = 0 … rounds−1`` (FedAvg, quadratic clients).

    Round ``n`` uses client lr ``η(t_n)`` and server step ``h·η₀(t_n)`` (``η₀ ≡ 1`` by default).  With
    ``w_n ~ (m_n, P_n)``: ``E‖∇F‖² = (m_n − w*)ᵀH²(m_n − w*) + Tr(H P_n H)`` and
    ``E F − F* = ½ (m_n − w*)ᵀH(m_n − w*) + ½ Tr(H P_n)``.
    """
    rounds = positive_int("rounds", rounds)
    h = positive_float("h", h)
    tn, eta, eta0 = _schedules(schedule, server_schedule, h, rounds)
    mom = transient_moments(problem, eta[:-1] if rounds > 1 else eta, int(local_steps), max(rounds - 1, 1),
                            h * (eta0[:-1] if rounds > 1 else eta0), w0=w0)
    m = mom.mean[:rounds] - problem.optimum
    P = mom.cov[:rounds]
    H = problem.hessian
    H2 = H @ H
    grad = np.einsum("ti,ij,tj->t", m, H2, m) + np.einsum("ij,tji->t", H2, P)
    gap = 0.5 * np.einsum("ti,ij,tj->t", m, H, m) + 0.5 * np.einsum("ij,tji->t", H, P)
    return ChainPath(tn, grad[:, None], gap[:, None], eta, eta0, True)


@renamed(E="local_steps")
@takes_values(replication=("replicates", "seed"))
def simulated_path(
    problem,
    schedule: PowerSchedule,
    replication: Replication,
    *,
    local_steps: int,
    h: float,
    rounds: int,
    w0=None,
    server_schedule: PowerSchedule | None = None,
    grad: Callable | None = None,
    loss: Callable | None = None,
    min_loss: float | None = None,
    **simulate_kwargs,
) -> ChainPath:
    """Monte-Carlo ``‖∇F(w_n)‖²`` and ``F(w_n) − F*`` per replicate from :func:`fedsde.sim.simulate`.

    ``grad``/``loss`` (``w (..., d) -> (..., d)`` / ``(...)``) default to the problem's own ``grad``/``loss``;
    ``min_loss`` defaults to ``problem.min_loss``.  Extra keyword arguments go to ``simulate`` (e.g.
    ``oracle_factory``).  ``replication``: a :class:`~fedsde.params.Replication` (``replicates``, ``seed``), or
    those keywords (:func:`fedsde.params.takes_values`).
    """
    from fedsde.sim import simulate

    rounds = positive_int("rounds", rounds)
    h = positive_float("h", h)
    tn, eta, eta0 = _schedules(schedule, server_schedule, h, rounds)
    res = simulate(problem, eta=eta, local_steps=int(local_steps), rounds=rounds, replicates=replication.replicates,
                   seed=replication.need_seed(), server_lr=h * eta0, w0=w0, record=np.arange(rounds),
                   **simulate_kwargs)
    W = res.weights  # (T, R, d)
    grad = grad or problem.grad
    loss = loss or problem.loss
    fstar = problem.min_loss if min_loss is None else float(min_loss)
    g = np.asarray(grad(W))
    gap = np.asarray(loss(W)) - fstar
    return ChainPath(tn, np.sum(g**2, axis=-1), gap, eta, eta0, False, W)


@renamed(E="local_steps")
def drift_measurements(
    problem,
    *,
    eta: float,
    local_steps: int,
    rounds: int,
    replicates: int,
    seed: int,
    w0=None,
    record_rounds=None,
    **simulate_kwargs,
) -> tuple[np.ndarray, np.ndarray]:
    """Measured client drift ``E‖w₀ − w^k(t, i)‖`` per local step ``i`` and client (Lemma A.1).

    Runs FedAvg with constant client lr ``eta`` and records ``‖w_k^{(i)} − w_n‖`` at the rounds
    ``record_rounds`` (default: every round); averages over those rounds and the replicates.

    Returns
    -------
    mean, stderr : ndarray, shape (E, Q)
        Row ``i−1`` is local step ``i``.
    """
    from fedsde.sim import simulate

    rec = np.arange(rounds) if record_rounds is None else np.asarray(record_rounds)
    res = simulate(problem, eta=eta, local_steps=int(local_steps), rounds=rounds, replicates=replicates, seed=seed,
                   w0=w0, record=[rounds], record_drift=rec, **simulate_kwargs)
    D = res.drift  # (T_d, E_max, R, Q)
    per_rep = D.mean(axis=0)  # (E_max, R, Q): average over recorded rounds, independent across replicates
    R = per_rep.shape[1]
    return per_rep.mean(axis=1), per_rep.std(axis=1, ddof=1) / np.sqrt(R)
