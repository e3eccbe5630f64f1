"""Per-client vectors of the clients that have taken part: the state of a server rule on participant slots.

In the simulator's cross-device regime (:mod:`fedsde.sim.participation`) a rule with per-client state
(:attr:`~fedsde.aggregators.Aggregator.participant_state`: SCAFFOLD's controls, FedAWARE's momenta) keeps it for the
clients that any replicate has drawn so far only, in a :class:`ClientTable`: memory growing with them, not with the
population.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ClientTable:
    """Per-client vectors of the clients that have taken part: ``ids`` (K,) increasing, ``values`` (R, K, d) (zero
    where a replicate has not drawn the client: the value a client starts with).  Memory grows with ``K``, the
    clients drawn so far by any replicate of the chunk, not with the population."""

    ids: torch.Tensor
    values: torch.Tensor

    def gather(self, clients: torch.Tensor) -> torch.Tensor:
        """The vectors of ``clients`` (R, m), shape (R, m, d) (zero for clients not in the table)."""
        R, m = clients.shape
        d = self.values.shape[-1]
        if not self.ids.numel():
            return self.values.new_zeros((R, m, d))
        pos = torch.searchsorted(self.ids, clients).clamp(max=self.ids.numel() - 1)
        hit = (self.ids[pos] == clients).unsqueeze(-1)
        vals = self.values.gather(1, pos.unsqueeze(-1).expand(R, m, d))
        return torch.where(hit, vals, torch.zeros_like(vals))

    def updated(self, clients: torch.Tensor, vals: torch.Tensor, keep: torch.Tensor | None = None) -> ClientTable:
        """A table with ``vals`` (R, m, d) set for ``clients`` (R, m), new clients added; ``keep`` (R, m) bool, if
        given, selects the slots written (the participating ones, distinct per row; the others are ignored),
        otherwise every slot is written (distinct per row)."""
        R, m, d = vals.shape
        ids = torch.unique(torch.cat([self.ids, clients.reshape(-1) if keep is None else clients[keep]]))
        K = ids.numel()
        out = vals.new_zeros((R, K + (keep is not None), d))  # with keep: one spare column takes the idle slots
        if self.ids.numel():
            out[:, torch.searchsorted(ids, self.ids)] = self.values
        pos = torch.searchsorted(ids, clients)
        if keep is not None:
            pos = torch.where(keep, pos, K)
        out.scatter_(1, pos.unsqueeze(-1).expand(R, m, d), vals)
        return ClientTable(ids, out if keep is None else out[:, :K])

    @staticmethod
    def empty(like: torch.Tensor) -> ClientTable:
        """No client yet, for weights ``like`` (R, d)."""
        return ClientTable(torch.zeros(0, dtype=torch.int64, device=like.device),
                           like.new_zeros((like.shape[0], 0, like.shape[-1])))
