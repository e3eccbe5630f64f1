"""Settings known to diverge on quadratic clients, found before running: an expanding local solver, or a server
recursion of the mean with spectral radius above one."""

from __future__ import annotations

import warnings

import numpy as np

from fedsde.aggregators import get_aggregator
from fedsde.errors import FedsdeInputError
from fedsde.exact.aggregators import aggregator_round_weights
from fedsde.exact.round_law import round_law
from fedsde.problems.quadratic import QuadraticProblem


def known_divergence(problem, eta: float, steps, server_lr: float = 1.0, *, aggregator="fedavg",
                     participation: int | None = None) -> list[str]:
    """Why these settings diverge on quadratic clients, known before running (empty list: nothing known).

    * the local solver expands on a client: the linear map of one local step on the direction of ``λ_max(U_k)``
      has spectral radius >= 1 (plain SGD: ``η·λ_max(U_k) >= 2``; heavy-ball momentum ``ρ`` and proximal ``μ``
      are included, :mod:`fedsde.clients.solvers`);
    * the server recursion of the mean, ``w ← w − s·B(w − c)`` (rules linear in the client displacements: fedavg,
      fednova, feddisco), has spectral radius ``ρ(I − s·B) > 1``: the mean grows geometrically; for fedavgm the
      recursion on ``(w − c, v)`` with the server momentum ``v`` (heavy ball: stable iff ``s·β_i < 2(1 + β)``).

    Rules without a linear mean recursion (FedAdam, FedYogi, SCAFFOLD, FedAWARE, …) are left to the blow-up
    watch of the simulator (:class:`fedsde.sim.moments.BlowUpWatch`).

    Problems without quadratic clients (data problems) return an empty list.
    """
    if not isinstance(problem, QuadraticProblem) or not (np.isfinite(eta) and eta > 0):
        return []
    try:
        agg = get_aggregator(aggregator)
        solver = agg.local_solver
        beta, mu, in_buffer = float(solver.momentum), float(solver.prox), bool(solver.prox_in_buffer)
    except (FedsdeInputError, AttributeError, TypeError):
        agg, beta, mu, in_buffer = None, 0.0, 0.0, False
    try:
        lam = problem.max_curvature()
    except np.linalg.LinAlgError:  # non-finite curvatures: left to the command's own checks
        return []
    rho = np.array([_local_step_radius(eta, float(lk), beta, mu, in_buffer) for lk in lam])
    bad = np.flatnonzero(rho >= 1.0)
    if bad.size:
        k = int(bad[np.argmax(lam[bad])])
        if beta == 0.0 and mu == 0.0:
            what = (f"eta*max_eig(U_k) = {eta * lam[k]:.6g} >= 2 for client(s) {bad.tolist()} (eta={eta:g}, "
                    f"max_eig(U_{k}) = {lam[k]:.6g}): local SGD diverges; need eta < {2.0 / lam[k]:.6g}")
        else:
            what = (f"one local step (momentum {beta:g}, prox {mu:g}) expands on client(s) {bad.tolist()}: spectral "
                    f"radius {rho[k]:.6g} >= 1 at max_eig(U_{k}) = {lam[k]:.6g} with eta={eta:g}: local training "
                    "diverges")
        return [what]
    if agg is None or not (np.isfinite(server_lr) and server_lr > 0):
        return []
    if getattr(agg, "name", "") == "fedavgm":
        return _momentum_server_divergence(problem, eta, steps, float(server_lr), agg)

    try:
        omega = aggregator_round_weights(problem, agg, steps, participation=participation)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            law = round_law(problem, eta, steps, server_lr, participation=participation, weights=omega)
    except FedsdeInputError:  # no exact law for this rule (or settings refused elsewhere with their own message)
        return []
    if law.spectral_radius > 1.0 + 1e-9:
        beta_max = float(np.max(np.abs(np.linalg.eigvals(law.B)))) if np.all(np.isfinite(law.B)) else 0.0
        need = f"; need server_lr < {2.0 / beta_max:.6g}" if beta_max > 0 else ""
        return [f"server_lr={server_lr:g}: the server recursion of the mean, w ← w − s·B(w − c), has spectral radius "
                f"rho(I − s·B) = {law.spectral_radius:.6g} > 1 (eta={eta:g}): the chain diverges{need}"]
    return []


def _momentum_server_divergence(problem, eta: float, steps, s: float, agg) -> list[str]:
    """FedAvgM: the mean recursion on ``(w − c, v)`` with ``Σ p_k Δ_k = −B(w − c)`` and ``g = 1 − dampening``:
    ``v' = βv − gB(w − c)``; heavy ball ``w' = w + s v'``, Nesterov ``w' = w + s(βv' − gB(w − c))``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            B = round_law(problem, eta, steps, 1.0, warn=False).B
    except FedsdeInputError:
        return []
    if not np.all(np.isfinite(B)):
        return []
    beta, g, eye = float(agg.beta), 1.0 - float(agg.dampening), np.eye(B.shape[0])
    if agg.variant == "heavy_ball":
        top = np.hstack([eye - s * g * B, s * beta * eye])
    else:
        top = np.hstack([eye - s * g * (1.0 + beta) * B, s * beta * beta * eye])
    M = np.vstack([top, np.hstack([-g * B, beta * eye])])
    rho = float(np.max(np.abs(np.linalg.eigvals(M))))
    if rho > 1.0 + 1e-9:
        return [f"server_lr={s:g}: the server momentum recursion of the mean (fedavgm {agg.variant}, beta={beta:g}) "
                f"has spectral radius {rho:.6g} > 1 (eta={eta:g}): the chain diverges"]
    return []


def _local_step_radius(eta: float, lam: float, beta: float, mu: float, in_buffer: bool) -> float:
    """Spectral radius of one local step on a curvature-``lam`` direction, state ``(x − w_n, momentum buffer)``."""
    if in_buffer:  # v ← βv + (λ + μ)x, x ← x − ηv
        c = lam + mu
        M = np.array([[1.0 - eta * c, -eta * beta], [c, beta]])
    else:  # v ← βv + λx, x ← x − ημx − ηv
        M = np.array([[1.0 - eta * mu - eta * lam, -eta * beta], [lam, beta]])
    return float(np.max(np.abs(np.linalg.eigvals(M))))
