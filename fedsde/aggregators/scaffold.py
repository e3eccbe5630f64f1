"""SCAFFOLD: stochastic controlled averaging (Karimireddy et al., ICML 2020, Algorithm 1).

Notes
-----
Server control variate ``c`` and client control variates ``c_k`` (all zero at the start).  In round ``n`` every
participating client runs its local solver on the corrected gradient ``g_k(x) − c_k + c``, then

* option I:  ``c_k⁺ = g_k(w_n)``, a stochastic gradient at the server weights (here the oracle's draw of the
  first local step, which is evaluated at ``w_n``);
* option II (default): ``c_k⁺ = c_k − c + (w_n − x_k)/(‖a_k‖₁ η) = c_k − c − Δ_k/(‖a_k‖₁ η)`` (``‖a_k‖₁ = τ_k``
  for plain SGD, as in the paper; the accumulation norm generalises it to other local solvers).

Server: ``w ← w + s Σ_k ω_k Δ_k`` and ``c ← c + Σ_{k∈S} γ_k (c_k⁺ − c_k)`` with ``γ_k = 1/Q``
(``control="uniform"``: the paper's ``(|S|/N)·mean``, and seeds 000/004's code) or ``γ_k = p_k``
(``control="weighted"``, which keeps ``c = Σ_k p_k c_k`` when the client weights are not uniform; the two agree
for ``p_k = 1/Q``).  Non-participants keep their ``c_k``.

In the simulator's cross-device regime the rule runs on the ``m`` participants' slots and keeps the controls of the
clients that have taken part only (:class:`ClientTable`: memory growing with them, not with the population); the
controls of the others are zero, as they start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fedsde._validate import choice
from fedsde.aggregators.base import Aggregator, RoundContext, weighted_mean
from fedsde.aggregators.client_table import ClientTable
from fedsde.aggregators.registry import register
from fedsde.clients.solvers import LocalSolver

OPTIONS = ("I", "II")
CONTROLS = ("uniform", "weighted")


@dataclass(frozen=True)
class ScaffoldState:
    """Server control ``c`` (R, d) and client controls ``c_k``: (R, Q, d), or on participant slots (the cross-device
    regime) a :class:`ClientTable` of the clients that have taken part."""

    c: torch.Tensor
    c_clients: torch.Tensor | ClientTable | None


@register
class Scaffold(Aggregator):
    """SCAFFOLD (see module docstring).

    Parameters
    ----------
    option : {"I", "II"}
    control : {"uniform", "weighted"}
    local_solver : LocalSolver, optional
    """

    name = "scaffold"
    paper = "Karimireddy et al. 2020, Algorithm 1"
    stateful = True
    needs_norms = True
    sde_refusal = ("aggregator='scaffold': no SDE of the weights alone; each round's step depends on the control "
                   "variates c, c_k, which are the clients' own past stochastic gradients carried across rounds, so "
                   "the general SDE (eq. 2) of a one-round map of w is undefined")
    participant_state = True  # on participant slots: the controls of the clients that took part only

    def __init__(self, option: str = "II", *, control: str = "uniform", local_solver: LocalSolver | None = None):
        option = str(option).upper()
        choice("option", option, OPTIONS)
        choice("control", control, CONTROLS)
        self.option = option
        self.control = control
        self._local_solver = local_solver

    @property
    def needs_first_grads(self) -> bool:
        """Option I reads the stochastic gradient at the server weights."""
        return self.option == "I"

    def init(self, w0: torch.Tensor) -> ScaffoldState:
        return ScaffoldState(c=torch.zeros_like(w0), c_clients=None)

    def correction(self, state: ScaffoldState, clients: torch.Tensor | None = None) -> torch.Tensor | None:
        if state.c_clients is None:  # all controls are still zero
            return None
        if clients is not None:  # participant slots: c − c_k of the slots' clients, (R, m, d)
            return state.c.unsqueeze(1) - state.c_clients.gather(clients)
        return state.c.unsqueeze(1) - state.c_clients

    def apply(
        self, w: torch.Tensor, updates: torch.Tensor, weights: torch.Tensor, state: ScaffoldState,
        ctx: RoundContext,
    ) -> tuple[torch.Tensor, Any]:
        if ctx.clients is not None:
            return self._apply_slots(w, updates, weights, state, ctx)
        R, Q, _ = updates.shape
        ck = torch.zeros_like(updates) if state.c_clients is None else state.c_clients
        if self.option == "I":
            new = ctx.first_grads
        else:
            new = ck - state.c.unsqueeze(1) - updates / (ctx.norms * ctx.eta).unsqueeze(-1)
        part = ctx.participating.unsqueeze(-1)
        dc = torch.where(part, new - ck, torch.zeros_like(ck))
        gamma = torch.full((R, Q), 1.0 / Q, dtype=w.dtype, device=w.device) if self.control == "uniform" \
            else ctx.p.expand(R, Q)
        c = state.c + weighted_mean(gamma, dc)
        w_next = w + ctx.server_lr * weighted_mean(weights, updates)
        return w_next, ScaffoldState(c=c, c_clients=ck + dc)

    def _apply_slots(self, w: torch.Tensor, updates: torch.Tensor, weights: torch.Tensor, state: ScaffoldState,
                     ctx: RoundContext) -> tuple[torch.Tensor, Any]:
        """The same step on the ``m`` participant slots (``updates`` (R, m, d), ``ctx.clients`` (R, m)): the controls
        of the clients that took part are kept in a :class:`ClientTable`; the others are zero, as they start."""
        R, m, _ = updates.shape
        table = ClientTable.empty(w) if state.c_clients is None else state.c_clients
        ck = table.gather(ctx.clients)
        if self.option == "I":
            new = ctx.first_grads
        else:
            new = ck - state.c.unsqueeze(1) - updates / (ctx.norms * ctx.eta).unsqueeze(-1)
        dc = torch.where(ctx.participating.unsqueeze(-1), new - ck, torch.zeros_like(ck))  # idle slots: none
        Q = ctx.p.shape[0]
        gamma = torch.full((R, m), 1.0 / Q, dtype=w.dtype, device=w.device) if self.control == "uniform" \
            else ctx.p[ctx.clients]
        c = state.c + weighted_mean(gamma, dc)
        w_next = w + ctx.server_lr * weighted_mean(weights, updates)
        return w_next, ScaffoldState(c=c, c_clients=table.updated(ctx.clients, ck + dc, ctx.participating))

