"""The one local-training loop: every client of every replicate runs its local steps at once.

One round of local training (seed 002, Sec. 3, in the sign convention of :mod:`fedsde.clients.solvers`): from the
server weights ``w_n`` client ``k`` runs ``τ_k`` steps

    x ← x − η g,      g = ∇F_k(x) + ξ      (one draw of the gradient oracle),

for all replicates and client slots together, one batched operation per step on ``x`` of shape ``(nb, slots, B, d)``
(block-major, see :mod:`fedsde.clients.oracles`).  The loop runs ``n_steps = max_k τ_k`` steps; a client with
fewer steps stops by a 0/1 mask on its update (``τ_k > i``), so every step draws the same random numbers whatever
the ``τ_k`` and results never depend on which client is longest.

Non-plain local solvers (momentum, prox; :class:`~fedsde.clients.solvers.LocalSolver`), a constant gradient
correction (SCAFFOLD's ``c − c_k``) and keeping the first gradients (SCAFFOLD option I) take the solver path, whose
steps equal the plain ones bit for bit when momentum and prox are zero and nothing is added.

Callers: the simulator (:func:`fedsde.sim.simulate`), the SVAG chain (:func:`fedsde.sde.svag.svag_chain`) and the
Monte-Carlo coefficients of :class:`fedsde.sde.models.FedAvgSDE`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from fedsde.clients.oracles import GradientOracle
from fedsde.clients.streams import ReplicateStreams
from fedsde.errors import FedsdeInputError
from fedsde.params import takes_values

#: ``on_step(i, x)`` after local step ``i`` (0-based) with the client weights ``x`` (a live view: copy what you keep)
StepHook = Callable[[int, torch.Tensor], None]


class LocalSolverLike(Protocol):
    """What the loop reads of a local solver (:class:`fedsde.clients.solvers.LocalSolver`, which runs this loop)."""

    @property
    def momentum(self) -> float: ...

    @property
    def prox(self) -> float: ...

    @property
    def plain(self) -> bool: ...

    @property
    def buffered_prox(self) -> bool: ...


def step_limits(local_steps: np.ndarray, *, device: torch.device | str) -> torch.Tensor | None:
    """Per-client local steps as the loop's stop limits, shape (1, Q, 1, 1); ``None`` when all clients are equal.

    Parameters
    ----------
    local_steps : array of int, shape (Q,)
        ``τ_k`` of every client (validated by the caller).
    device : torch.device or str
    """
    steps = np.asarray(local_steps)
    if bool(np.all(steps == steps.flat[0])):
        return None
    return torch.as_tensor(steps.astype(np.int64), device=device).view(1, -1, 1, 1)


@dataclass(frozen=True)
class RoundBatches:
    """What a round's draws are cut from: the arguments of ``oracle.begin_round``
    (:class:`~fedsde.clients.oracles.GradientOracle`), built by the caller from its own checked plan.

    Parameters
    ----------
    batch : Tensor of int, shape (R, slots), optional
        Each slot's batch size this round (``None``: the oracle's own).
    max_batch : int, optional
        Their padded length.
    clients : Tensor of int, shape (nb, slots, B), optional
        The client of each slot (``None``: slot ``k`` is client ``k``).
    """

    batch: torch.Tensor | None = None
    max_batch: int | None = None
    clients: torch.Tensor | None = None


_NO_BATCHES = RoundBatches()


@takes_values(types={"round_batches": RoundBatches}, round_batches=("batch", "max_batch", "clients"))
def run_local_steps(
    *,
    x: torch.Tensor,
    oracle: GradientOracle,
    streams: ReplicateStreams,
    eta: float,
    n_steps: int,
    local_steps: torch.Tensor | None = None,
    round_batches: RoundBatches | None = None,
    solver: LocalSolverLike | None = None,
    anchor: torch.Tensor | None = None,
    correction: torch.Tensor | None = None,
    keep_first_grad: bool = False,
    on_step: StepHook | None = None,
) -> torch.Tensor | None:
    """Start a round on ``oracle`` and run ``n_steps`` local steps in place on ``x`` (see the module docstring).

    Parameters
    ----------
    x : Tensor, shape (nb, slots, B, d)
        Client weights, starting at the server weights; updated in place.
    oracle : GradientOracle
        Gradient oracle of the chunk; its ``begin_round`` is called first with ``batch``, ``max_batch`` and
        ``clients`` (an oracle without ``begin_round`` needs no start).
    streams : ReplicateStreams
        The random streams the oracle draws from.
    eta : float
        Client learning rate ``η``.
    n_steps : int
        Steps of the longest client.
    local_steps : Tensor of int, broadcastable to (nb, slots, B, 1), optional
        ``τ_k`` of every client (clients stop after their ``τ_k`` steps); ``None`` when all run ``n_steps``
        (see :func:`step_limits`).
    round_batches : RoundBatches, optional
        Handed to ``oracle.begin_round`` (:class:`~fedsde.clients.oracles.GradientOracle`): the round's batch sizes
        (R, slots), their padded length, the client of each slot (nb, slots, B); ``None`` for the defaults.  The
        keywords ``batch=``, ``max_batch=``, ``clients=`` still build it.
    solver : LocalSolver, optional
        Local solver; default plain SGD.
    anchor : Tensor, shape (nb, 1, B, d), optional
        Server weights ``w_n`` (the proximal anchor); needed when ``solver`` has a proximal term.
    correction : Tensor, broadcastable to (nb, slots, B, d), optional
        Constant gradient correction added to every draw (SCAFFOLD's ``c − c_k``).
    keep_first_grad : bool
        Return a copy of the oracle's draw at the starting weights (step 0, before the correction).
    on_step : callable, optional
        ``on_step(i, x)`` after every step (drift recording).

    Returns
    -------
    Tensor, shape (nb, slots, B, d), or None
        The first gradients when ``keep_first_grad``, else ``None``.
    """
    begin_round = getattr(oracle, "begin_round", None)
    if begin_round is not None:
        b = round_batches or _NO_BATCHES
        begin_round(batch=b.batch, max_batch=b.max_batch, clients=b.clients)
    return local_loop(x=x, oracle=oracle, streams=streams, eta=eta, n_steps=n_steps, local_steps=local_steps,
                      solver=solver, anchor=anchor, correction=correction, keep_first_grad=keep_first_grad,
                      on_step=on_step)


def local_loop(
    *,
    x: torch.Tensor,
    oracle: GradientOracle,
    streams: ReplicateStreams,
    eta: float,
    n_steps: int,
    local_steps: torch.Tensor | None = None,
    solver: LocalSolverLike | None = None,
    anchor: torch.Tensor | None = None,
    correction: torch.Tensor | None = None,
    keep_first_grad: bool = False,
    on_step: StepHook | None = None,
) -> torch.Tensor | None:
    """The steps of :func:`run_local_steps` on an oracle whose round has already begun (same parameters)."""
    if (solver is None or solver.plain) and correction is None and not keep_first_grad:
        for i in range(n_steps):
            g = oracle.sample(x, streams)
            if local_steps is None:
                x.sub_(g, alpha=eta)
            else:
                x.sub_(g * (local_steps > i).to(x.dtype), alpha=eta)
            if on_step is not None:
                on_step(i, x)
        return None
    # the solver path: momentum v_i = ρ v_{i−1} + g_i (buffer reset every round) and the proximal pull μ (x − w_n),
    # outside or inside the buffer (fedsde.clients.solvers, seed 003 §1.4)
    rho, mu = (0.0, 0.0) if solver is None else (solver.momentum, solver.prox)
    buffered = solver is not None and solver.buffered_prox
    if mu and anchor is None:
        raise FedsdeInputError(f"anchor: the proximal solver (prox={mu:g}) needs the server weights w_n")
    first = v = None
    for i in range(n_steps):
        g = oracle.sample(x, streams)
        if keep_first_grad and i == 0:
            first = g.clone()
        if correction is not None:
            g = g + correction
        if rho:
            v = g.clone() if v is None else v.mul_(rho).add_(g)
            if buffered:
                v.add_(x - anchor, alpha=mu)
            step = v
        else:
            step = g
        if mu and not buffered:
            step = step + mu * (x - anchor)
        if local_steps is not None:
            step = step * (local_steps > i).to(x.dtype)
        x.sub_(step, alpha=eta)
        if on_step is not None:
            on_step(i, x)
    return first

