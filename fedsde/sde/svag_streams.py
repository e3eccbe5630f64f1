"""Random streams of the SVAG chains, independent or common between chains (common random numbers).

A validity test compares FedAvg (``ℓ = 1``) with the Richardson limit ``2E₈ − E₄`` of SVAG chains (e.g. ``ℓ = 4,
8``) by **paired** per-replicate differences (:func:`fedsde.validity.reference.svag_gaps`).  Their standard error is
valid whatever the chains share, and it shrinks when replicate ``r`` of the chains is driven by the same random
numbers: common random numbers (Glasserman 2003, *Monte Carlo Methods in Financial Engineering*, Sec. 4.2), here the
same minibatches and dropout masks where the schemes' steps begin at the same time.

**Keys by time.**  Base round ``n`` of chain ``ℓ`` has ``ℓ`` steps; step ``j`` begins at ``t = (n + j/ℓ)·h`` and runs
two client rounds (rollouts ``ρ = 0, 1``; FedAvg: one).  With ``common=True`` the rollout ``ρ`` of step ``j`` draws
from the stream keyed by the reduced fraction ``j/ℓ = a/c`` and ``ρ`` (per replicate block, drawn once per base
round), so every chain whose step begins at the same time within the round draws the same numbers: step ``2j`` of
``ℓ = 8`` those of step ``j`` of ``ℓ = 4`` and of ``ℓ = 2``'s step ``j/2``, and step 0's rollout 0 of every chain
those of FedAvg's round.  The key ``(0/1, ρ = 0)`` is the simulator's own stream (purpose 0), so FedAvg keeps the
numbers of :func:`fedsde.sim.simulate`.

**Marginals unchanged.**  Within one chain the ``2ℓ`` keys of a round are distinct and each key is drawn from once
per round, so every client round of the chain draws fresh, independent numbers of the same distribution as with
independent streams: each chain's law is the same, only the joint law of the chains changes.  (The minibatches are
drawn afresh at every step, without state across steps, :mod:`fedsde.clients.module_oracle`, so sharing a step's
draws shares nothing else.)

**What it buys.**  To first order in the noise, step ``j`` of chain ``ℓ`` adds ``(s/ℓ)(c₁ξ⁽⁰⁾ + c₂ξ⁽¹⁾)``
(:func:`fedsde.sde.svag.svag_coefficients`); chains ``ℓ`` and ``2ℓ`` share the two rollouts of every step of the
first, which correlates their noise per base round by ``(c₁c₁' + c₂c₂')/(2ℓ)`` (0.70 for ``ℓ = 4, 8``), and
FedAvg's noise with chain ``ℓ``'s by ``c₁/ℓ`` (0.46 for ``ℓ = 4``, 0.30 for ``ℓ = 8``).  The measured variance of
the paired difference is in docs/validity.md ("Common random numbers").
"""

from __future__ import annotations

import math

import torch

from fedsde.clients.streams import ReplicateStreams

#: stream family of the common SVAG keys: purpose = _COMMON + key (disjoint from the simulator's 0, 1, 2, the
#: general SDE's 1 << 19, the Brownian motion's 1 << 20 + window and the independent SVAG chains' 3 << 20 + ℓ)
_COMMON = 5 << 40


def common_purpose(j: int, ell: int, rollout: int) -> int:
    """Stream purpose of rollout ``rollout`` of the steps that begin at the fraction ``j/ℓ`` of a base round: 0 (the
    simulator's stream) for FedAvg's key ``(0, rollout 0)``, else a key of the reduced fraction ``a/c`` and the
    rollout, the same for every ``(j, ℓ)`` with ``j/ℓ = a/c``."""
    g = math.gcd(j, ell)
    a, c = j // g, ell // g
    if a == 0 and rollout == 0:
        return 0
    return _COMMON + ((c << 21) + (a << 1) + rollout)


class InterleavedStreams:
    """Draws for the ``(nb·rollouts, …)`` layout of a chain's client rounds (block ``b``'s rollouts at rows
    ``rollouts·b + ρ``), each rollout from its own :class:`~fedsde.clients.streams.ReplicateStreams` over the ``nb``
    blocks.  One rollout: that stream itself (no copy, the same calls)."""

    def __init__(self, parts: list[ReplicateStreams]):
        self.parts = parts
        self.device = parts[0].device
        self.block = parts[0].block
        self.nblocks = parts[0].nblocks * len(parts)

    def _split(self, out: torch.Tensor) -> list[torch.Tensor]:
        return list(out.view(-1, len(self.parts), *out.shape[1:]).unbind(1))

    def normal_(self, out: torch.Tensor) -> torch.Tensor:
        for part, view in zip(self.parts, self._split(out), strict=True):
            part.normal_(view)
        return out

    def uniform_(self, out: torch.Tensor) -> torch.Tensor:
        for part, view in zip(self.parts, self._split(out), strict=True):
            part.uniform_(view)
        return out

    def randint(self, low: int, high: int, shape: tuple[int, ...]) -> torch.Tensor:
        got = [part.randint(low, high, shape) for part in self.parts]
        return torch.stack(got, 1).reshape(-1, *shape)


def chain_streams(seed: int, first_block: int, nb: int, device, block: int, ell: int, purpose: int,
                  common: bool) -> list:
    """The streams of chain ``ℓ`` on blocks ``first_block … first_block + nb − 1``, one entry per step of a base
    round (step ``j`` uses entry ``j mod len``).

    ``common=False``: one :class:`~fedsde.clients.streams.ReplicateStreams` of ``purpose`` over the chain's
    ``nb·rollouts`` blocks, drawn step after step (the numbers of :func:`fedsde.sde.svag.svag_chain` without
    coupling).  ``common=True``: per step ``j`` the rollouts' keyed streams (:func:`common_purpose`), each drawn
    once per base round; FedAvg (``ℓ = 1``) gets the simulator's stream either way.
    """
    rollouts = 1 if ell == 1 else 2
    if ell == 1 or not common:
        return [ReplicateStreams(seed, first_block * rollouts, nb * rollouts, device, purpose, block)]
    return [InterleavedStreams([ReplicateStreams(seed, first_block, nb, device, common_purpose(j, ell, r), block)
                                for r in range(rollouts)]) for j in range(ell)]
