"""FedAWARE: server-side gradient-diversity maximisation (Zeng et al.; seeds 000/001, Algorithm 1).

Notes
-----
The server keeps one momentum per client (all ``Q``).  With pseudo-gradients ``g_k = w_n − x_k = −Δ_k``:

    m_k ← α m_k + (1 − α) g_k          for participating k (others keep theirs; no decay, no bias correction)
    m̂_k = m_k / ‖m_k‖                  (variant "normalized", the default; zero stays zero)
    m̂_k = m_k                          (variant "literal", Algorithm 1 as printed)
    λ̃ = argmin_{λ ∈ Δ_Q} ‖Σ_k λ_k m̂_k‖²   (min-norm point over all Q momenta; Frank–Wolfe + exact polish,
                                         :mod:`fedsde.aggregators.min_norm`)
    w_{n+1} = w_n − s Σ_k λ̃_k m̂_k

``α = 0.5`` and ``s = 1`` in the paper.  The authors' code (which produced Table 1) unit-normalises the momenta
before the QP and in the step; the paper's Algorithm 1 does not (reference/seed-fedaware.md §1.4, §6 item 4).
Convention: ``α`` weights the old momentum (paper); the code's ``α`` is ``1 − α`` (equal at 0.5).

Warm start: a zero momentum puts 0 in the hull and stalls the update.  Three named choices:

* ``warm_start="full"`` (or ``True``; default): the first round runs with every client, then FedAWARE steps from
  round 0 on (the code's ``-startup 1``, used by all of the paper's scripts, and the paper's Lemma B.1 remark);
* ``warm_start="fedavg"``: the code's ``-startup 0`` server rule (``FeedbackSampler.explored`` in the authors'
  ``fedaware.py``/``utils.py``): until every client has been seen, the round's momenta are updated but the step is
  FedAvg over the participants, ``w ← Σ_S p̂_k x_k = w + Σ_S p̂_k Δ_k`` with ``p̂_k = p_k/Σ_S p_j`` and no server
  learning rate (the code replaces the model by the average); the round in which the last unseen client takes part
  is already a FedAWARE step, and every later one is.  Clients are sampled by the simulator's participation
  scheme (the code cycles a shuffled permutation instead, which covers everyone in ``⌈Q/m⌉`` rounds);
* ``warm_start="none"`` (or ``False``): FedAWARE from round 0 with whoever participates; a zero momentum in the hull
  gives a zero step in the first rounds.

Outside the FedAvg warm-up the client weights ``p`` are not used.  The last weights are kept in the state
(``state.lam``) for diagnostics.

**A zero momentum in the hull.**  A client that has not taken part yet (in a replicate) has ``m_k = 0``, and the
min-norm point of a hull holding ``0`` is ``0``: with ``warm_start="none"`` the step is exactly zero until every
client of the replicate has taken part once (the solver's weights are then a vertex at a zero momentum), and with
``"fedavg"`` the step is FedAvg's until then.  On a population of ``Q`` clients with ``m`` a round that takes
about ``(Q/m) ln Q`` rounds (coupon collector).

**Cross-device regime** (``warm_start`` ``"none"`` or ``"fedavg"``, :attr:`participant_state`): the rule runs on
the ``m`` participants' slots and keeps the momenta (and a seen flag) of the clients that have taken part only, in a
:class:`~fedsde.aggregators.client_table.ClientTable` (memory growing with them).  It solves the dense rule's
problem: a replicate whose hull holds a zero momentum (a client not seen, or a zero momentum) steps by exactly
zero, as the dense rule does, and one that has seen every client solves the min-norm problem over all ``Q``
momenta in client order, as the dense rule does (``tests/test_fedaware_slots.py``: the same weights as the dense
rule on the same rounds).  ``warm_start="full"`` trains every client in its first round, so it has no such regime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fedsde._tolerances import DIVISION_FLOOR
from fedsde._validate import choice, positive_int, unit_interval
from fedsde.aggregators.base import Aggregator, RoundContext
from fedsde.aggregators.client_table import ClientTable
from fedsde.aggregators.min_norm import min_norm_gram
from fedsde.aggregators.registry import register
from fedsde.errors import FedsdeInputError

VARIANTS = ("normalized", "literal")
WARM_STARTS = ("full", "fedavg", "none")


@dataclass(frozen=True)
class AwareState:
    """Client momenta ``m`` (R, Q, d), last weights ``lam`` (R, Q), last step norm ``step_norm`` (R,) and the
    clients seen so far ``seen`` (R, Q) (``warm_start="fedavg"``); on participant slots ``m`` is a
    :class:`~fedsde.aggregators.client_table.ClientTable` of momenta and seen flags, and ``lam``, ``seen`` are None."""

    m: torch.Tensor | ClientTable | None
    lam: torch.Tensor | None
    step_norm: torch.Tensor | None
    seen: torch.Tensor | None = None


@register
class FedAWARE(Aggregator):
    """Per-client server momenta and min-norm weights (see module docstring).

    Parameters
    ----------
    alpha : float
        Momentum ``α ∈ [0, 1)`` on the old value.
    variant : {"normalized", "literal"}
    warm_start : {"full", "fedavg", "none"} or bool
        Full participation in round 0 (``"full"``/``True``), FedAvg until every client has been seen
        (``"fedavg"``), or neither (``"none"``/``False``); module docstring.
    max_iter : int
        Frank–Wolfe iterations before the exact polish.
    """

    name = "fedaware"
    paper = "Zeng et al. (seeds 000/001), Algorithm 1"
    stateful = True
    sde_refusal = ("aggregator='fedaware': no SDE of the weights alone; its step is the min-norm point of Q per-client "
                   "momenta carried across rounds (normalised, non-smooth in them), so the general SDE (eq. 2) of a "
                   "one-round map of w is undefined")
    warm_start_rounds = 0  # set per instance from ``warm_start``

    def __init__(self, alpha: float = 0.5, *, variant: str = "normalized", warm_start: bool | str = True,
                 max_iter: int = 100):
        self.alpha = unit_interval("alpha", alpha)
        self.variant = choice("variant", variant, VARIANTS)
        if isinstance(warm_start, bool):
            warm_start = "full" if warm_start else "none"
        if warm_start not in WARM_STARTS:
            raise FedsdeInputError(f"warm_start={warm_start!r}: must be one of {', '.join(WARM_STARTS)}, True or False")
        self.warm_start = warm_start
        self.warm_start_rounds = 1 if warm_start == "full" else 0
        self.max_iter = positive_int("max_iter", max_iter)

    @property
    def participant_state(self) -> bool:
        """Without the full first round the momenta of the clients that took part suffice (module docstring)."""
        return self.warm_start != "full"

    @property
    def cross_device_hint(self) -> str:
        return ("" if self.participant_state else
                "aggregator='fedaware' with warm_start='full' trains all Q clients in its first round; "
                "warm_start='none' (or 'fedavg'; on the command line --aggregator-option warm_start=none) trains the "
                "participants only")

    def step_memory(self, Q: int) -> int:
        """The min-norm problem over ``Q`` momenta: the Gram matrix and the solver's pair and KKT matrices, about
        eight ``Q × Q`` float64 matrices per replicate."""
        return 64 * Q * Q

    def init(self, w0: torch.Tensor) -> AwareState:
        return AwareState(m=None, lam=None, step_norm=None)

    def apply(self, w: torch.Tensor, updates: torch.Tensor, weights: torch.Tensor, state: AwareState,
              ctx: RoundContext) -> tuple[torch.Tensor, Any]:
        if ctx.clients is not None:
            return self._apply_slots(w, updates, state, ctx)
        m = torch.zeros_like(updates) if state.m is None else state.m
        part = ctx.participating.unsqueeze(-1)
        m = torch.where(part, self.alpha * m - (1.0 - self.alpha) * updates, m)
        mh = self._normalised(m)
        lam, d = self._direction(mh, w.dtype)
        w_next = w - ctx.server_lr * d
        if self.warm_start != "fedavg":
            return w_next, AwareState(m=m, lam=lam, step_norm=torch.linalg.vector_norm(d, dim=-1))
        seen = ctx.participating if state.seen is None else state.seen | ctx.participating
        explored = seen.all(1, keepdim=True)  # (R, 1)
        pk = ctx.p.to(w.dtype) * ctx.participating.to(w.dtype)
        omega = pk / pk.sum(1, keepdim=True).clamp_min(DIVISION_FLOOR)
        w_avg = w + torch.bmm(omega.unsqueeze(1), updates).squeeze(1)
        step = torch.where(explored, d, w - w_avg)
        return (torch.where(explored, w_next, w_avg),
                AwareState(m=m, lam=torch.where(explored, lam, omega), step_norm=torch.linalg.vector_norm(step, dim=-1),
                           seen=seen))

    def _normalised(self, m: torch.Tensor) -> torch.Tensor:
        if self.variant == "literal":
            return m
        norm = torch.linalg.vector_norm(m, dim=-1, keepdim=True)
        return m / torch.where(norm > 0, norm, torch.ones_like(norm))

    def _direction(self, mh: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Min-norm weights (R, Q) of the momenta ``mh`` (R, Q, d) and the point ``Σ_k λ_k m̂_k`` (R, d)."""
        lam = min_norm_gram(torch.bmm(mh, mh.transpose(1, 2)), max_iter=self.max_iter).to(dtype)
        return lam, torch.bmm(lam.unsqueeze(1), mh).squeeze(1)

    def _apply_slots(self, w: torch.Tensor, updates: torch.Tensor, state: AwareState,
                     ctx: RoundContext) -> tuple[torch.Tensor, Any]:
        """The same step on the ``m`` participant slots (``updates`` (R, m, d), ``ctx.clients`` (R, m), idle slots
        not ``ctx.participating``).  ``state.m`` is a :class:`ClientTable` of the clients that took part, each row
        ``(m_k, seen_k)`` (d + 1 numbers); ``lam`` is not kept (it would be (R, Q))."""
        R, _, dim = updates.shape
        Q = ctx.p.shape[0]
        table = state.m if state.m is not None else ClientTable(
            torch.zeros(0, dtype=torch.int64, device=w.device), w.new_zeros((R, 0, dim + 1)))
        part = ctx.participating.unsqueeze(-1)
        old = table.gather(ctx.clients)
        mk = torch.where(part, self.alpha * old[..., :dim] - (1.0 - self.alpha) * updates, old[..., :dim])
        seen_k = torch.where(part, torch.ones_like(old[..., dim:]), old[..., dim:])
        table = table.updated(ctx.clients, torch.cat([mk, seen_k], -1), ctx.participating)
        K = table.ids.numel()
        d = w.new_zeros((R, dim))
        if K == Q:  # some replicate may have seen every client: the dense rule's problem where no momentum is zero
            mh = self._normalised(table.values[..., :dim])
            full = (torch.linalg.vector_norm(mh, dim=-1) > 0).all(1)
            if bool(full.any()):
                d[full] = self._direction(mh[full], w.dtype)[1]
        w_next = w - ctx.server_lr * d
        if self.warm_start != "fedavg":
            return w_next, AwareState(m=table, lam=None, step_norm=torch.linalg.vector_norm(d, dim=-1))
        explored = (table.values[..., dim].sum(1) == Q).unsqueeze(1) if K == Q else \
            torch.zeros((R, 1), dtype=torch.bool, device=w.device)
        pk = ctx.p[ctx.clients].to(w.dtype) * ctx.participating.to(w.dtype)
        omega = pk / pk.sum(1, keepdim=True).clamp_min(DIVISION_FLOOR)
        w_avg = w + torch.bmm(omega.unsqueeze(1), updates).squeeze(1)
        step = torch.where(explored, d, w - w_avg)
        return (torch.where(explored, w_next, w_avg),
                AwareState(m=table, lam=None, step_norm=torch.linalg.vector_norm(step, dim=-1), seen=None))
