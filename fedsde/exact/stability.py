"""Settings known to diverge, found before running: on quadratic clients an expanding local solver or a server
recursion of the mean with spectral radius above one (:func:`known_divergence`); on least-squares clients the same
and a second-moment operator with spectral radius above one (:func:`least_squares_stability`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from fedsde._compat import renamed
from fedsde._tolerances import DIVERGENCE_SLACK, STATIONARY_MARGIN
from fedsde.errors import FedsdeInputError
from fedsde.exact.aggregators import aggregator_round_weights
from fedsde.exact.round_law import round_law
from fedsde.params import Schedule, unpack
from fedsde.problems.quadratic.problem import QuadraticProblem


@renamed(steps="local_steps")
def known_divergence(problem, eta: float | Schedule, local_steps=None, server_lr: float = 1.0, *,
                     aggregator="fedavg", participation: int | None = None) -> list[str]:
    """Why these settings diverge on quadratic clients, known before running (empty list: nothing known).

    ``local_steps`` (old name: ``steps``): an int, or one per client.  ``eta`` may be a
    :class:`~fedsde.params.Schedule` holding the three rates (checked where it was built, handed on whole).

    * the local solver expands on a client: the linear map of one local step on the direction of ``λ_max(U_k)``
      has spectral radius >= 1 (plain SGD: ``η·λ_max(U_k) >= 2``; heavy-ball momentum ``ρ`` and proximal ``μ``
      are included, :mod:`fedsde.clients.solvers`);
    * the server recursion of the mean has spectral radius above one: the mean grows geometrically.  Each rule
      declares its recursion (:meth:`fedsde.aggregators.Aggregator.server_recursion`): ``w ← w − s·B(w − c)``,
      ``ρ(I − s·B) > 1``, for rules linear in the client displacements (fedavg, fednova, feddisco; ``B`` with
      their exact-law weights), the recursion on ``(w − c, v)`` with the server momentum ``v`` for fedavgm (heavy
      ball: stable iff ``s·β_i < 2(1 + β)``; ``B`` with the weights ``p``).

    Rules without a linear mean recursion (FedAdam, FedYogi, SCAFFOLD, FedAWARE, …) are left to the blow-up
    watch of the simulator (:class:`fedsde.sim.moments.BlowUpWatch`); so are local solvers other than plain SGD
    (the recursion's ``B`` is plain SGD's).

    Problems without quadratic clients (data problems) return an empty list.
    """
    sched, eta, local_steps, server_lr = unpack(eta, local_steps, server_lr)
    if not isinstance(problem, QuadraticProblem) or not (np.isfinite(eta) and eta > 0):
        return []
    from fedsde.aggregators import get_aggregator  # the rules' classes import torch: only on quadratic clients

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
    bad = np.flatnonzero([_local_step_expands(eta, float(lk), beta, mu, in_buffer) for lk in lam])
    if bad.size:
        k = int(bad[np.argmax(lam[bad])])
        if beta == 0.0 and mu == 0.0:
            what = (f"eta*max_eig(U_k) = {eta * lam[k]:.6g} >= 2 for client(s) {bad.tolist()} (eta={eta:g}, "
                    f"max_eig(U_{k}) = {lam[k]:.6g}): local SGD diverges; need eta < {2.0 / lam[k]:.6g}")
        else:
            rho = _local_step_radius(eta, float(lam[k]), beta, mu, in_buffer)
            what = (f"one local step (momentum {beta:g}, prox {mu:g}) expands on client(s) {bad.tolist()}: spectral "
                    f"radius {rho:.6g} >= 1 at max_eig(U_{k}) = {lam[k]:.6g} with eta={eta:g}: local training "
                    "diverges")
        return [what]
    if agg is None or not (np.isfinite(server_lr) and server_lr > 0) or not agg.local_solver.plain:
        return []
    return _server_divergence(problem, eta, local_steps, float(server_lr), agg, participation, sched)


def _server_divergence(problem, eta: float, local_steps, s: float, agg, participation: int | None,
                       sched: Schedule | None = None) -> list[str]:
    """The rule's mean recursion (:meth:`~fedsde.aggregators.Aggregator.server_recursion`) with ``B`` of its exact
    weights (stateless rules) or of the scheme's weights ``p`` (rules with server state); ``sched``: the checked
    Schedule the rates came from, handed on (not checked again)."""
    try:
        omega = None if agg.stateful else aggregator_round_weights(problem, agg, sched or local_steps,
                                                                   participation=participation)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            B = round_law(problem, sched or eta, local_steps, s, participation=participation, weights=omega,
                          warn=False).B
    except FedsdeInputError:  # no exact law for this rule (or settings refused elsewhere with their own message)
        return []
    if not np.all(np.isfinite(B)):
        return []
    rec = agg.server_recursion(B, s)
    if rec is None:
        return []
    rho = float(np.max(np.abs(np.linalg.eigvals(rec.matrix))))
    if rho > 1.0 + DIVERGENCE_SLACK:
        radius = f"{rec.symbol} = {rho:.6g}" if rec.symbol else f"{rho:.6g}"
        need = f"; need server_lr < {rec.max_server_lr:.6g}" if rec.max_server_lr is not None else ""
        return [f"server_lr={s:g}: {rec.description} has spectral radius {radius} > 1 (eta={eta:g}): the chain "
                f"diverges{need}"]
    return []


def _local_step_expands(eta: float, lam: float, beta: float, mu: float, in_buffer: bool) -> bool:
    """Whether one local step does not contract on a curvature-``lam`` direction (spectral radius >= 1 of the map
    of :func:`_local_step_radius`), decided by the Schur–Cohn (Jury) conditions of its characteristic polynomial
    ``z² − Tz + D`` written without cancellation, so that a tiny ``η`` is not lost to rounding (``1 − ηλ`` rounds
    to 1 at ``η = 1e-20``, and a radius computed from the matrix would read as 1).

    With ``λ, μ >= 0`` and ``0 <= β < 1``: ``p(1) = 1 − T + D >= 0`` always (a flat direction, ``λ = μ = 0``, has
    the root 1 and is not expanding), so the map expands iff ``|D| >= 1`` or ``p(−1) = 1 + T + D <= 0``:
    ``η(λ + μ) >= 2(1 + β)`` (prox in the buffer) or ``η(λ + μ(1 + β)) >= 2(1 + β)`` (prox outside; the classical
    heavy-ball bound ``ηλ < 2(1 + β)`` at ``μ = 0``), and ``ηλ >= 2`` for plain SGD.
    """
    if in_buffer:
        D, a2 = beta, lam + mu
    else:
        D, a2 = beta * (1.0 - eta * mu), lam + mu * (1.0 + beta)
    return bool(abs(D) >= 1.0 or eta * a2 >= 2.0 * (1.0 + beta))


def _local_step_radius(eta: float, lam: float, beta: float, mu: float, in_buffer: bool) -> float:
    """Spectral radius of one local step on a curvature-``lam`` direction, state ``(x − w_n, momentum buffer)``."""
    if in_buffer:  # v ← βv + (λ + μ)x, x ← x − ηv
        c = lam + mu
        M = np.array([[1.0 - eta * c, -eta * beta], [c, beta]])
    else:  # v ← βv + λx, x ← x − ημx − ηv
        M = np.array([[1.0 - eta * mu - eta * lam, -eta * beta], [lam, beta]])
    return float(np.max(np.abs(np.linalg.eigvals(M))))


@dataclass(frozen=True)
class LeastSquaresStability:
    """What is known, before sampling, about minibatch FedAvg on least-squares clients with these settings.

    Attributes
    ----------
    expanding : tuple of int
        Clients whose local SGD expands (``η·λ_max(A_k + λI) >= 2``).
    mean_radius : float
        ``ρ(A)`` of the mean map ``E[w' | w] = A w + a`` (:class:`~fedsde.exact.LeastSquaresRoundLaw`).
    second_moment_radius : float or None
        ``ρ(T)`` of the second-moment operator (``None`` where the mean map does not contract: not needed).
    where : str
        The settings, as :func:`~fedsde.exact.least_squares_stationary_law` names them.
    """

    expanding: tuple
    mean_radius: float
    second_moment_radius: float | None
    where: str

    @property
    def grows(self) -> bool:
        """Whether the chain's second moment grows without bound (mean map or second-moment operator ``>= 1``)."""
        return self.mean_radius >= 1.0 - STATIONARY_MARGIN or (
            self.second_moment_radius is not None and self.second_moment_radius >= 1.0 - STATIONARY_MARGIN)

    @property
    def growth(self) -> str:
        """Why the second moment grows, in the words of :func:`~fedsde.exact.least_squares_stationary_law` (empty
        when it does not)."""
        if self.mean_radius >= 1.0 - STATIONARY_MARGIN:
            return (f"{self.where}: the mean map has spectral radius {self.mean_radius:.6g} >= 1, so the chain has no "
                    "stationary law")
        if self.grows:
            return (f"{self.where}: the second-moment operator has spectral radius {self.second_moment_radius:.6g} "
                    ">= 1 (the minibatch noise makes the variance diverge), so there is no stationary law")
        return ""

    def messages(self, eta: float) -> list[str]:
        """The warnings ``fedsde exact`` prints for these settings (one line each)."""
        out = []
        if self.expanding:
            out.append(f"eta*max_eig(U_k) >= 2 for clients {list(self.expanding)} (eta={eta}): local SGD expands on "
                       "them")
        if self.grows:
            out.append(f"the chain's variance or mean grows without bound with these settings: {self.growth}")
        return out


def least_squares_stability(problem, eta, local_steps=None, server_lr: float = 1.0) -> LeastSquaresStability:
    """:class:`LeastSquaresStability` of minibatch FedAvg on a :class:`~fedsde.problems.RegressionProblem`: the
    clients whose local SGD expands and the spectral radii of the exact round law's mean map and second-moment
    operator (:func:`~fedsde.exact.least_squares_round_law`; ``ρ(T)`` by Lanczos, as
    :func:`~fedsde.exact.least_squares_stationary_law` finds it).  ``eta``: a number, or a
    :class:`~fedsde.params.Schedule` holding the rates (checked where it was built)."""
    from fedsde.exact._least_squares_solve import perron_root
    from fedsde.exact.least_squares import _steps_repr, least_squares_round_law

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        law = least_squares_round_law(problem, eta, local_steps, server_lr)
    expanding = tuple(int(k) for k in np.flatnonzero(law.eta * np.asarray(problem.max_curvature()) >= 2.0))
    where = f"eta={law.eta}, local_steps={_steps_repr(law.local_steps)}, server_lr={law.server_lr}"
    rho1 = float(law.spectral_radius)
    rho2 = None if rho1 >= 1.0 - STATIONARY_MARGIN else float(perron_root(law.second_moment_map, problem.d))
    return LeastSquaresStability(expanding, rho1, rho2, where)
