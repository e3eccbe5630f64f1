"""FedAvg with a server learning rate (McMahan et al. 2017; seed 002, Sec. 3 "averaging step").

Notes
-----
``w_{n+1} = w_n + s Σ_k ω_k Δ_k`` with client displacements ``Δ_k = w_k^{(τ_k)} − w_n``, server step ``s``
(``s = 1`` is plain FedAvg; seed 002 writes ``s = η̂₀ = h·η₀``) and weights ``ω_k`` from the participation
scheme (``p_k`` under full participation).
"""

from __future__ import annotations

from typing import Any

import torch

from fedsde.aggregators.base import Aggregator, RoundContext


class FedAvg(Aggregator):
    """``w ← w + s Σ_k ω_k Δ_k`` (see module docstring)."""

    name = "fedavg"
    paper = "McMahan et al. 2017; seed 002 eq. (1)"
    stateful = False

    def apply(
        self, w: torch.Tensor, updates: torch.Tensor, weights: torch.Tensor, state: Any, ctx: RoundContext
    ) -> tuple[torch.Tensor, Any]:
        avg = torch.bmm(weights.unsqueeze(1), updates).squeeze(1)  # (R, d)
        return w + ctx.server_lr * avg, state
