"""FedAdam (Reddi et al. 2021, Algorithm 2): ``v ← β₂ v + (1 − β₂) Δ²``; see :mod:`fedsde.aggregators._adaptive`."""

from __future__ import annotations

import torch

from fedsde.aggregators._adaptive import AdaptiveServer


class FedAdam(AdaptiveServer):
    """Adam on the server (formula, defaults and bias-correction variants: :mod:`fedsde.aggregators._adaptive`)."""

    name = "fedadam"

    def _second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        return self.beta2 * v + (1.0 - self.beta2) * d2
