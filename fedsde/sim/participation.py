"""Who takes part in a round, with what aggregation weight, and the slots that train only the participants.

Schemes (:data:`WEIGHTINGS`; seed 003, eq. (14) for the multinomial one), with client weights ``p`` (Q,) and
``m`` clients per round:

* ``"unbiased"`` — a uniform ``m``-subset ``S`` per replicate, weights ``p_k Q/m`` on ``S`` (``E ω = p``);
* ``"renormalised"`` — the same subsets, weights ``p_k / Σ_{j∈S} p_j``;
* ``"multinomial"`` — ``m`` draws with replacement with probabilities ``p_k``, each weighted ``1/m``.

Without sampling (``m`` None or ``Q``, not multinomial) every client takes part with weight ``p_k``.

**Cross-device regime** (:func:`is_cross_device`: at least :data:`CROSS_DEVICE_Q` clients, at most
:data:`CROSS_DEVICE_M` participants, any scheme).  The ordinary draw keeps the ``m`` smallest of
``Q`` uniforms per replicate (O(Q) draws and work, and the whole ``(R, Q)`` mask); here the subset is drawn by
Floyd's algorithm from ``m`` uniforms per replicate (:func:`draw_subsets`, O(m²) work), and the round trains,
weights and aggregates only the participants (:mod:`fedsde.sim.runner`).  The law is the same (a uniform
``m``-subset, the same weights); the random numbers are not, which is why the regime starts at a threshold that no
run of ordinary size reaches: below it every draw is what it always was.  Multinomial draws are the ordinary ones
(the same ``m`` uniforms, the same clients and weights): a client drawn ``c`` times holds one slot weighted ``c/m``
and the ``c − 1`` other slots of its draws are idle (weight zero, not participating, :func:`first_occurrences`).

**Participant slots** (any number of clients, an oracle that trains only the clients handed to it): uniform
subsets train their ``m`` participants (:func:`participant_slots`) and multinomial draws their ``m`` draws
(:func:`multinomial_slots`, repeats idle as above), so a round reads only the drawn clients' rows (a population's
included), not all ``Q``; the weights and the rule's step stay those of all ``Q`` clients.
"""

from __future__ import annotations

import torch

from fedsde.clients.data_oracles import floyd_sample
from fedsde.clients.streams import BLOCK, ReplicateStreams
from fedsde.params.sampling import WEIGHTINGS  # the schemes (their home: what a ClientSampling accepts)

#: cross-device regime (module docstring): at least this many clients …
CROSS_DEVICE_Q = 10_000
#: … and at most this many participants per round (Floyd's draw does O(m²) work per replicate)
CROSS_DEVICE_M = 1024


def is_cross_device(m: int | None, Q: int, weighting: str) -> bool:
    """True when a round draws and trains only its ``m`` participants (see the module docstring)."""
    return m is not None and m < Q and Q >= CROSS_DEVICE_Q and m <= CROSS_DEVICE_M and weighting in WEIGHTINGS


def draw_subsets(streams: ReplicateStreams, nb: int, Q: int, m: int, weighting: str, p: torch.Tensor,
                 block: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """The cross-device draw: participants and their weights, both of shape (nb·block, m), for one round.

    A uniform ``m``-subset of ``0..Q−1`` per replicate by Floyd's algorithm (``m`` uniforms, sorted increasingly),
    weighted ``p_k Q/m`` (``"unbiased"``) or ``p_k / Σ_{j∈S} p_j`` (``"renormalised"``); parameters as
    :func:`draw_participation`.  ``"multinomial"``: the ``m`` draws of :func:`draw_participation` (the same
    uniforms, clients and weights), sorted; a client drawn ``c`` times has weight ``c/m`` on its first slot and zero
    on the others (:func:`first_occurrences` marks the slots that take part).
    """
    R = nb * block
    if weighting == "multinomial":
        cid = torch.sort(_multinomial_draws(streams, nb, block, m, p), dim=1).values
        count = torch.searchsorted(cid, cid, right=True) - torch.searchsorted(cid, cid)
        return cid, torch.where(first_occurrences(cid), count.to(p.dtype) / m, torch.zeros_like(p[cid]))
    u = streams.uniform_(torch.empty((nb, block, m), dtype=torch.float64, device=p.device)).view(R, m)
    full = torch.full((R,), m, dtype=torch.int64, device=p.device)
    cid = torch.sort(floyd_sample(u, full.new_full((R,), Q), full), dim=1).values
    pm = p[cid]
    if weighting == "unbiased":
        return cid, pm * (Q / m)
    tot = pm.sum(1, keepdim=True)
    return cid, torch.where(tot > 0, pm / tot.clamp_min(torch.finfo(p.dtype).tiny), pm)


def first_occurrences(cid: torch.Tensor) -> torch.Tensor:
    """Which slots of sorted participants ``cid`` (R, m) take part: the first slot of each client (all of them for
    the distinct clients of a subset; a multinomial draw's repeats are idle)."""
    first = torch.ones_like(cid, dtype=torch.bool)
    first[:, 1:] = cid[:, 1:] != cid[:, :-1]
    return first


def _multinomial_draws(streams: ReplicateStreams, nb: int, block: int, m: int, p: torch.Tensor) -> torch.Tensor:
    """``m`` clients per replicate drawn with replacement, ``P(k) = p_k`` (searchsorted on the cdf), (nb·block, m)."""
    u = streams.uniform_(torch.empty((nb, block, m), dtype=torch.float64, device=p.device)).view(nb * block, m)
    cdf = torch.cumsum(p.to(torch.float64), 0)
    cdf = cdf / cdf[-1]
    return torch.searchsorted(cdf, u, right=True).clamp(max=p.shape[0] - 1)  # P(idx = k) = p_k


def is_sampled(m: int | None, Q: int, weighting: str) -> bool:
    """True when the round's participants are drawn (and the participation streams are used)."""
    return m is not None and (m != Q or weighting == "multinomial")


def draw_participation(
    streams: ReplicateStreams | None, nb: int, Q: int, m: int | None, weighting: str, p: torch.Tensor,
    block: int = BLOCK,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Participation mask and aggregation weights, both of shape (nb·block, Q), for one round.

    Parameters
    ----------
    streams : ReplicateStreams or None
        The participation streams (``None`` is allowed when nothing is drawn, see :func:`is_sampled`).
    nb, Q : int
        Blocks of replicates and clients.
    m : int or None
        Clients per round (``None``: all).
    weighting : {"unbiased", "renormalised", "multinomial"}
    p : Tensor, shape (Q,)
        Client weights (their dtype and device are those of the weights returned).
    block : int
        Replicates per block.
    """
    R = nb * block
    if weighting == "multinomial" and m is not None:
        idx = _multinomial_draws(streams, nb, block, m, p)
        counts = torch.zeros((R, Q), dtype=p.dtype, device=p.device).scatter_add_(
            1, idx, torch.ones((R, m), dtype=p.dtype, device=p.device))
        return counts > 0, counts / m
    if m is None or m == Q:
        mask = torch.ones((R, Q), dtype=torch.bool, device=p.device)
        return mask, p.expand(R, Q)
    u = streams.uniform_(torch.empty((nb, block, Q), dtype=p.dtype, device=p.device)).view(R, Q)
    idx = torch.topk(u, m, dim=1, largest=False).indices  # uniform m-subset per replicate
    mask = torch.zeros((R, Q), dtype=torch.bool, device=p.device).scatter_(1, idx, True)
    pm = p.expand(R, Q) * mask
    if weighting == "unbiased":
        return mask, pm * (Q / m)
    tot = pm.sum(1, keepdim=True)
    # a sample whose weights are all zero contributes nothing (avoid 0/0)
    return mask, torch.where(tot > 0, pm / tot.clamp_min(torch.finfo(p.dtype).tiny), pm)


def participant_slots(mask: torch.Tensor, m: int, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``m`` participants of every replicate, for local training on ``m`` slots instead of ``Q``.

    Parameters
    ----------
    mask : Tensor of bool, shape (Rp, Q)
        Participation of a uniform ``m``-subset scheme (exactly ``m`` per row).
    m, block : int

    Returns
    -------
    cid : Tensor of int, shape (Rp, m)
        Participants of each replicate in increasing order (gather per-client rows with it).
    clients : Tensor of int, shape (nb, m, block)
        The client held by each slot, block-major (for the oracle's ``begin_round``).
    """
    Rp = mask.shape[0]
    cid = torch.nonzero(mask)[:, 1].view(Rp, m)
    return cid, cid.view(Rp // block, block, m).transpose(1, 2)


def multinomial_slots(streams: ReplicateStreams, nb: int, Q: int, m: int, p: torch.Tensor, block: int = BLOCK
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The multinomial draws of :func:`draw_participation` (the same uniforms) on ``m`` slots.

    Returns
    -------
    mask, weights : Tensor, shape (nb·block, Q)
        Those of :func:`draw_participation`, bit for bit (the weights ``c/m`` summed from the slots, zeros added).
    cid : Tensor of int, shape (nb·block, m)
        The draws of each replicate, sorted: the client each slot trains.
    keep : Tensor of bool, shape (nb·block, m)
        The slot that carries each drawn client (its first); the others are idle (:func:`scatter_slots`).
    """
    cid, w = draw_subsets(streams, nb, Q, m, "multinomial", p, block)
    keep = first_occurrences(cid)
    weights = torch.zeros((cid.shape[0], Q), dtype=p.dtype, device=p.device).scatter_add_(1, cid, w)
    mask = torch.zeros((cid.shape[0], Q), dtype=torch.bool, device=p.device).scatter_(1, cid, True)
    return mask, weights, cid, keep


def scatter_slots(values: torch.Tensor, cid: torch.Tensor, Q: int, keep: torch.Tensor | None = None) -> torch.Tensor:
    """Per-slot rows (Rp, m, d) back to per-client rows (Rp, Q, d), zero for the clients that did not take part;
    with ``keep`` (Rp, m) only the kept slots (a client's idle repeats add zeros)."""
    Rp, m, d = values.shape
    index = cid.unsqueeze(-1).expand(Rp, m, d)
    out = torch.zeros((Rp, Q, d), dtype=values.dtype, device=values.device)
    if keep is None:
        return out.scatter_(1, index, values)
    return out.scatter_add_(1, index, torch.where(keep.unsqueeze(-1), values, torch.zeros_like(values)))
