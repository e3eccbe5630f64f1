"""FedYogi (Reddi et al. 2021, Algorithm 2): ``v ← v − (1 − β₂) Δ² sign(v − Δ²)``.

See :mod:`fedsde.aggregators._adaptive` for the full update and its variants; ``variant="flower"`` (Flower's
``FedYogi``) is ``"paper"`` with ``v_0 = 0``.
"""

from __future__ import annotations

import torch

from fedsde.aggregators._adaptive import AdaptiveServer
from fedsde.aggregators.registry import register


@register
class FedYogi(AdaptiveServer):
    """Yogi on the server (formula, defaults and bias-correction variants: :mod:`fedsde.aggregators._adaptive`)."""

    name = "fedyogi"
    _second_moment_form = "yogi"
    _flower_defaults = (0.9, 0.99, 1e-3)  # Flower's FedYogi: beta_1, beta_2, tau

    def _second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        return v - (1.0 - self.beta2) * d2 * torch.sign(v - d2)
