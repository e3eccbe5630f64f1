"""FedAdam (Reddi et al. 2021, Algorithm 2): ``v ← β₂ v + (1 − β₂) Δ²``; see :mod:`fedsde.aggregators._adaptive`.

``variant="flower"`` reproduces Flower's ``FedAdam`` strategy: ``m_0 = v_0 = 0``, no correction of ``m`` or ``v``,
but the step is bias-corrected, ``w ← w + s·√(1 − β₂^(r+1))/(1 − β₁^(r+1)) · m/(√v + τ)`` with ``r`` Flower's
``server_round`` (1 in the first round), ``τ = 1e−9`` by default.
"""

from __future__ import annotations

import torch

from fedsde.aggregators._adaptive import AdaptiveServer
from fedsde.aggregators.registry import register


@register
class FedAdam(AdaptiveServer):
    """Adam on the server (formula, defaults and the variants paper / bias_corrected / flower:
    :mod:`fedsde.aggregators._adaptive`)."""

    name = "fedadam"
    _flower_defaults = (0.9, 0.99, 1e-9)
    _flower_step_correction = True

    def _second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        return self.beta2 * v + (1.0 - self.beta2) * d2
