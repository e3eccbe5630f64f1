"""The server-rule contract shared by every aggregator.

An aggregator turns the clients' displacements into the next server weights.  It is a pair of functions
with explicit state (in the style of FedJAX): ``init(w0) -> state`` and
``apply(w, updates, weights, state, ctx) -> (w_next, state)``, vectorised over replicates.

Shapes: ``R`` replicates, ``Q`` clients, ``d`` dimension.

* ``w`` : Tensor, shape (R, d) — server weights before the round;
* ``updates`` : Tensor, shape (R, Q, d) — client displacements ``Δ_k = w_k^{(τ_k)} − w``
  (zero for clients that did not participate);
* ``weights`` : Tensor, shape (R, Q) — aggregation weights chosen by the participation scheme
  (``p_k``; ``p_k Q/m`` on the sampled clients for unbiased partial participation; ``p_k / Σ_S p_j`` for the
  renormalised variant; draws/m for multinomial sampling; zero off the sample).

Besides the server rule, an aggregator declares what the clients do (the simulator reads these):

* ``local_solver`` — a :class:`fedsde.clients.solvers.LocalSolver` (plain SGD unless the algorithm changes it, e.g.
  FedProx's proximal term);
* ``correction(state)`` — a constant per-round gradient correction of shape (R, Q, d) (SCAFFOLD's ``c − c_k``)
  or ``None``;
* ``needs_norms`` — the simulator passes ``‖a_k‖₁`` of the local solver in ``ctx.norms`` (FedNova);
* ``needs_first_grads`` — the simulator passes the stochastic gradient at the server weights (the first local
  step's oracle draw) in ``ctx.first_grads`` (SCAFFOLD option I);
* ``warm_start_rounds`` — rounds run with full participation whatever the sampling (FedAWARE's start);
* ``bind(problem)`` — called once before ``init`` with the problem (e.g. FedDisco reads label distributions).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from fedsde.clients.solvers import SGD, LocalSolver


@dataclass(frozen=True)
class RoundContext:
    """What the server knows about the round besides the updates.

    Attributes
    ----------
    round : int
        Round index ``n`` (0-based).
    server_lr : float
        Actual server step ``s`` of this round (``h·η₀`` in seed 002's notation).
    eta : float
        Client learning rate of this round.
    local_steps : Tensor, shape (R, Q)
        Local steps each client ran this round (``τ_k``).
    participating : Tensor of bool, shape (R, Q)
        Which clients took part.
    p : Tensor, shape (Q,)
        The problem's client weights.
    norms : Tensor, shape (R, Q), optional
        ``‖a_k‖₁`` of each client's local solver this round (when the aggregator ``needs_norms``).
    first_grads : Tensor, shape (R, Q, d), optional
        Stochastic gradient of each client at the server weights (when ``needs_first_grads``).
    """

    round: int
    server_lr: float
    eta: float
    local_steps: torch.Tensor
    participating: torch.Tensor
    p: torch.Tensor
    norms: torch.Tensor | None = None
    first_grads: torch.Tensor | None = None


class Aggregator(ABC):
    """Base class of server rules (see the module docstring for the contract and shapes).

    Class attributes declare what the rule is and needs: ``name`` (registry key), ``paper`` (source),
    ``stateful`` (keeps state across rounds).
    """

    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    stateful: ClassVar[bool] = False
    #: True when the server update is ``w + s Σ_k ω_k Δ_k`` with ``ω`` fixed by the round (exact laws apply)
    linear: ClassVar[bool] = False
    needs_norms: ClassVar[bool] = False
    needs_first_grads: ClassVar[bool] = False
    warm_start_rounds: int = 0

    @property
    def local_solver(self) -> LocalSolver:
        """The clients' local solver (plain SGD by default)."""
        return getattr(self, "_local_solver", None) or SGD

    def bind(self, problem: Any) -> None:
        """Read what the rule needs from the problem before :meth:`init` (default: nothing)."""
        return None

    def init(self, w0: torch.Tensor) -> Any:
        """Initial server state for weights ``w0`` of shape (R, d) (``None`` for stateless rules)."""
        return None

    def correction(self, state: Any) -> torch.Tensor | None:
        """Constant gradient correction of every client this round, shape (R, Q, d), or ``None``."""
        return None

    def describe(self) -> dict:
        """Name, source and parameters, for records."""
        return {"name": self.name, "paper": self.paper, "local_solver": self.local_solver.name,
                **{k: v for k, v in vars(self).items() if not k.startswith("_") and _plain(v)}}

    @abstractmethod
    def apply(
        self,
        w: torch.Tensor,
        updates: torch.Tensor,
        weights: torch.Tensor,
        state: Any,
        ctx: RoundContext,
    ) -> tuple[torch.Tensor, Any]:
        """Next server weights (R, d) and state."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_") and _plain(v))
        return f"{type(self).__name__}({args})"


def _plain(v: Any) -> bool:
    return isinstance(v, bool | int | float | str | type(None)) or (
        isinstance(v, tuple) and all(isinstance(x, int | float | str) for x in v))


def weighted_mean(weights: torch.Tensor, updates: torch.Tensor) -> torch.Tensor:
    """``Σ_k ω_k Δ_k`` for weights (R, Q) and updates (R, Q, d), shape (R, d)."""
    return torch.bmm(weights.unsqueeze(1), updates).squeeze(1)
