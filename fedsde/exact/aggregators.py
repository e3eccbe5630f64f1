"""Exact laws of server rules that are linear in the client displacements (quadratic clients, no sampling).

When the clients run plain local SGD and the server step is ``w_{n+1} = w_n + s Σ_k ω_k Δ_k`` with weights
``ω_k`` fixed by the round, the one-round law is :func:`fedsde.exact.round_law` with ``weights=ω`` (``ω_k``
replaces ``p_k`` in ``B``, ``c`` and ``Cov ε``).  The weights of each rule:

* FedAvg (any per-client ``τ_k``): ``ω_k = p_k`` — its fixed point is biased towards clients with more steps
  (seed 003 §III, Lemma 1);
* FedNova (seed 003, eq. (20)), vanilla SGD: ``ω_k = p_k τ_eff / τ_k`` with ``τ_eff = Σ_j p_j τ_j`` (or a fixed
  ``τ_eff``); its fixed point is ``(Σ_k p_k M_k/τ_k)⁻¹ Σ_k p_k M_k a_k/τ_k`` (reference/seed-fednova.md §2.3);
* FedDisco (seed 004, eq. (3)) over FedAvg: ``ω = p^Disco``; over FedNova: ``ω_k = p^D_k τ_eff^D/τ_k``,
  ``τ_eff^D = Σ_j p^D_j τ_j``.

No exact law is offered (a clear :class:`NoExactLawError`) for rules with server state (FedAvgM, FedAdam, FedYogi,
FedAdagrad, SCAFFOLD, FedAWARE, FedNova with server momentum), for local solvers other than plain SGD (FedProx,
local momentum: their local map differs), or for data-dependent weights under client sampling (FedNova/FedDisco
with ``participation``).
"""

from __future__ import annotations

import numpy as np

from fedsde._validate import client_steps
from fedsde.aggregators import get_aggregator
from fedsde.errors import FedsdeInputError
from fedsde.exact.moments import StationaryLaw, stationary_law, transient_moments
from fedsde.exact.round_law import RoundLaw, round_law
from fedsde.problems.quadratic import QuadraticProblem


class NoExactLawError(FedsdeInputError):
    """The server rule has no exact one-round law of the form ``round_law(..., weights=ω)``."""


def _resolve(aggregator):
    return get_aggregator(aggregator)


def aggregator_round_weights(
    problem: QuadraticProblem,
    aggregator,
    local_steps: int | np.ndarray,
    *,
    participation: int | None = None,
) -> np.ndarray:
    """The weights ``ω`` that make ``aggregator`` the linear rule ``w + s Σ_k ω_k Δ_k`` (module docstring).

    Parameters
    ----------
    problem : QuadraticProblem
    aggregator : str or Aggregator
        Registry name or instance (e.g. ``FedNova(tau_eff=5.0)``, ``FedDisco("fednova", label_distributions=…)``).
    local_steps : int or array of int, shape (Q,)
        Fixed ``τ_k``.
    participation : int, optional
        Clients sampled per round (only FedAvg has an exact law then).

    Returns
    -------
    ndarray, shape (Q,)

    Raises
    ------
    NoExactLawError
        Where the rule is not linear with fixed weights (see the module docstring).
    """
    agg = _resolve(aggregator)
    tau = client_steps("local_steps", local_steps, problem.Q).astype(np.float64)
    p = problem.p
    name = agg.name
    if agg.stateful:
        raise NoExactLawError(
            f"aggregator={name!r}: keeps server state across rounds, so the chain of the weights alone has no "
            "one-round law (exact laws exist for fedavg, fednova and feddisco)"
        )
    if not agg.local_solver.plain:
        raise NoExactLawError(
            f"aggregator={name!r}: its clients run {agg.local_solver.name} local steps; the exact laws assume plain "
            "local SGD"
        )
    if name == "fedavg":
        return p.copy()
    if participation is not None and participation < problem.Q:
        raise NoExactLawError(
            f"aggregator={name!r}, participation={participation}: the weights depend on which clients are sampled, "
            "so there is no exact law under client sampling"
        )
    if name == "fednova":
        return _nova_weights(agg, p, tau)
    if name == "feddisco":
        agg.bind(problem)
        pd = agg.static_weights()
        base = agg.base_rule
        if base.name == "fedavg":
            return pd
        if base.name == "fednova":
            return _nova_weights(base, pd, tau)
        raise NoExactLawError(f"aggregator='feddisco' over {base.name!r}: no exact law (base rule not linear)")
    raise NoExactLawError(f"aggregator={name!r}: no exact law (exact laws exist for fedavg, fednova, feddisco)")


def _nova_weights(agg, p: np.ndarray, tau: np.ndarray) -> np.ndarray:
    te = agg.tau_eff
    if te in ("solver", "steps", "full"):
        te = float(p @ tau)  # ‖a_k‖₁ = τ_k for plain SGD
    return p * float(te) / tau


def aggregator_round_law(
    problem: QuadraticProblem,
    aggregator,
    eta: float,
    local_steps: int | np.ndarray,
    server_lr: float = 1.0,
    *,
    participation: int | None = None,
) -> RoundLaw:
    """Exact one-round law of ``aggregator`` (``round_law`` with :func:`aggregator_round_weights`)."""
    omega = aggregator_round_weights(problem, aggregator, local_steps, participation=participation)
    return round_law(problem, eta, local_steps, server_lr, participation=participation, weights=omega)


def aggregator_stationary_law(
    problem: QuadraticProblem,
    aggregator,
    eta: float,
    local_steps: int | np.ndarray,
    server_lr: float = 1.0,
    *,
    participation: int | None = None,
) -> StationaryLaw:
    """Stationary law of ``aggregator``'s chain (raises ``NoStationaryLawError`` if it has none)."""
    omega = aggregator_round_weights(problem, aggregator, local_steps, participation=participation)
    return stationary_law(problem, eta, local_steps, server_lr, participation=participation, weights=omega)


def aggregator_transient_moments(problem: QuadraticProblem, aggregator, eta, local_steps, rounds: int,
                                 server_lr=1.0, **kwargs):
    """Transient moments of ``aggregator``'s chain (keywords as :func:`fedsde.exact.transient_moments`)."""
    omega = aggregator_round_weights(problem, aggregator, local_steps,
                                     participation=kwargs.get("participation"))
    return transient_moments(problem, eta, local_steps, rounds, server_lr, weights=omega, **kwargs)


def surrogate_optimum(problem: QuadraticProblem, weights: np.ndarray) -> np.ndarray:
    """``argmin Σ_k ω_k F_k = (Σ ω_k U_k)⁻¹ Σ ω_k U_k a_k``, shape (d,) (seed 003, Theorem 1's surrogate).

    With ``ω_k ∝ p_k τ_k`` this is FedAvg's limit as ``η → 0`` (seed 003, eq. (5)).
    """
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if w.shape != (problem.Q,) or np.any(w < 0) or w.sum() <= 0:
        raise FedsdeInputError(f"weights: shape {w.shape} must be ({problem.Q},), >= 0, not all zero")
    H = np.einsum("q,qij->ij", w, problem.U)
    return np.linalg.solve(H, np.einsum("q,qij,qj->i", w, problem.U, problem.a))
