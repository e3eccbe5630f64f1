"""Exact laws of server rules that are linear in the client displacements (quadratic clients, no sampling).

When the clients run plain local SGD and the server step is ``w_{n+1} = w_n + s Σ_k ω_k Δ_k`` with weights
``ω_k`` fixed by the round, the one-round law is :func:`fedsde.exact.round_law` with ``weights=ω`` (``ω_k``
replaces ``p_k`` in ``B``, ``c`` and ``Cov ε``).  Each rule declares its weights
(:meth:`fedsde.aggregators.Aggregator.exact_weights`, with the formula and its source in the rule's docstring):
FedAvg ``ω = p``, FedNova ``ω_k = p_k τ_eff/τ_k`` (seed 003, eq. (20)), FedDisco its base rule's with the Disco
weights in place of ``p`` (seed 004, eq. (3)); a new linear rule only implements ``linear_weights``.

No exact law is offered (a clear :class:`NoExactLawError`) for rules with server state (FedAvgM, FedAdam, FedYogi,
FedAdagrad, SCAFFOLD, FedAWARE, FedNova with server momentum), for local solvers other than plain SGD (FedProx,
local momentum: their local map differs), or for data-dependent weights under client sampling (FedNova/FedDisco
with ``participation``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fedsde._validate import client_weights
from fedsde.errors import NoExactLawError
from fedsde.exact.moments import StationaryLaw, stationary_law, transient_moments
from fedsde.exact.round_law import RoundLaw, round_law
from fedsde.problems.quadratic.problem import QuadraticProblem

if TYPE_CHECKING:
    from fedsde.aggregators import Aggregator

__all__ = [
    "NoExactLawError",
    "aggregator_round_law",
    "aggregator_round_weights",
    "aggregator_stationary_law",
    "aggregator_transient_moments",
    "surrogate_optimum",
]


def aggregator_round_weights(
    problem: QuadraticProblem,
    aggregator: str | Aggregator,
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
    from fedsde.aggregators import get_aggregator  # the rules' classes import torch: only when a rule is named

    return get_aggregator(aggregator).exact_weights(problem, local_steps, participation=participation)


def aggregator_round_law(
    problem: QuadraticProblem,
    aggregator: str | Aggregator,
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
    aggregator: str | Aggregator,
    eta: float,
    local_steps: int | np.ndarray,
    server_lr: float = 1.0,
    *,
    participation: int | None = None,
) -> StationaryLaw:
    """Stationary law of ``aggregator``'s chain (raises ``NoStationaryLawError`` if it has none)."""
    omega = aggregator_round_weights(problem, aggregator, local_steps, participation=participation)
    return stationary_law(problem, eta, local_steps, server_lr, participation=participation, weights=omega)


def aggregator_transient_moments(problem: QuadraticProblem, aggregator: str | Aggregator, eta, local_steps, rounds: int,
                                 server_lr=1.0, **kwargs):
    """Transient moments of ``aggregator``'s chain (keywords as :func:`fedsde.exact.transient_moments`)."""
    omega = aggregator_round_weights(problem, aggregator, local_steps,
                                     participation=kwargs.get("participation"))
    return transient_moments(problem, eta, local_steps, rounds, server_lr, weights=omega, **kwargs)


def surrogate_optimum(problem: QuadraticProblem, weights: np.ndarray) -> np.ndarray:
    """``argmin Σ_k ω_k F_k = (Σ ω_k U_k)⁻¹ Σ ω_k U_k a_k``, shape (d,) (seed 003, Theorem 1's surrogate).

    With ``ω_k ∝ p_k τ_k`` this is FedAvg's limit as ``η → 0`` (seed 003, eq. (5)).
    """
    w = client_weights("weights", weights, problem.Q, normalise=False, noun="")
    H = np.einsum("q,qij->ij", w, problem.U)
    return np.linalg.solve(H, np.einsum("q,qij,qj->i", w, problem.U, problem.a))
