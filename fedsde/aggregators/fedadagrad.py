"""FedAdagrad (Reddi et al. 2021, Algorithm 2): ``v ← v + Δ²`` (no ``β₂``; bias correction touches ``m`` only).

See :mod:`fedsde.aggregators._adaptive` for the full update and its variants; ``variant="flower"`` (Flower's
``FedAdagrad``) is ``"paper"`` with ``β₁ = 0`` and ``v_0 = 0``.
"""

from __future__ import annotations

import torch

from fedsde.aggregators._adaptive import AdaptiveServer
from fedsde.aggregators.registry import register


@register
class FedAdagrad(AdaptiveServer):
    """Adagrad on the server (formula, defaults and variants: :mod:`fedsde.aggregators._adaptive`)."""

    name = "fedadagrad"
    _correct_v = False
    _second_moment_form = None
    sde_kind = None
    sde_refusal = ("aggregator='fedadagrad': no adaptive SDE; its v is a running sum of Δ², not a moving average, so "
                   "there is no 1 − β₂ for the SDE scaling of Malladi et al. 2022 (their SDEs cover RMSprop and Adam)")
    _flower_defaults = (0.0, 0.99, 1e-9)  # Flower's FedAdagrad has no beta_1 (FedOpt's 0); beta_2 unused

    def _second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        return v + d2
