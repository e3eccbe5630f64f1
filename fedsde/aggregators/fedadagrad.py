"""FedAdagrad (Reddi et al. 2021, Algorithm 2): ``v ← v + Δ²`` (no ``β₂``; bias correction touches ``m`` only).

See :mod:`fedsde.aggregators._adaptive` for the full update and its variants.
"""

from __future__ import annotations

import torch

from fedsde.aggregators._adaptive import AdaptiveServer


class FedAdagrad(AdaptiveServer):
    """Adagrad on the server (formula, defaults and variants: :mod:`fedsde.aggregators._adaptive`)."""

    name = "fedadagrad"
    _correct_v = False

    def _second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        return v + d2
