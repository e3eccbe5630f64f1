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
  renormalised variant; zero off the sample).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch


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
    """

    round: int
    server_lr: float
    eta: float
    local_steps: torch.Tensor
    participating: torch.Tensor
    p: torch.Tensor


class Aggregator(ABC):
    """Base class of server rules (see the module docstring for the contract and shapes).

    Class attributes declare what the rule is and needs: ``name`` (registry key), ``paper`` (source),
    ``stateful`` (keeps state across rounds).
    """

    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    stateful: ClassVar[bool] = False

    def init(self, w0: torch.Tensor) -> Any:
        """Initial server state for weights ``w0`` of shape (R, d) (``None`` for stateless rules)."""
        return None

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
        return f"{type(self).__name__}()"
