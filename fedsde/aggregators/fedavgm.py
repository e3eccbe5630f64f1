"""FedAvgM: server momentum on the averaged update (Hsu, Qi, Brown 2019).

Notes
-----
With ``Δ̄_n = Σ_k ω_k Δ_k`` (the averaged model change, i.e. minus the pseudo-gradient), buffer ``v_0 = 0``:

* ``variant="heavy_ball"`` (default; Hsu et al. 2019, seed 000's code):
  ``v ← β v + (1 − δ) Δ̄``,  ``w ← w + s v``;
* ``variant="nesterov"``: ``v ← β v + (1 − δ) Δ̄``,  ``w ← w + s (β v + (1 − δ) Δ̄)``.

``δ`` is the dampening (0 by default; seed 004's code uses ``δ = β``, an exponential moving average).
Defaults ``β = 0.9``; the seeds tune ``β ∈ {0.5, 0.7}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fedsde._validate import positive_float
from fedsde.aggregators.base import Aggregator, RoundContext, weighted_mean
from fedsde.errors import FedsdeInputError

VARIANTS = ("heavy_ball", "nesterov")


@dataclass(frozen=True)
class MomentumState:
    """Server momentum buffer ``v``, shape (R, d)."""

    v: torch.Tensor


class FedAvgM(Aggregator):
    """Server heavy-ball or Nesterov momentum (see module docstring).

    Parameters
    ----------
    beta : float
        Momentum ``β ∈ [0, 1)``.
    variant : {"heavy_ball", "nesterov"}
    dampening : float
        ``δ ∈ [0, 1]``.
    """

    name = "fedavgm"
    paper = "Hsu, Qi, Brown 2019"
    stateful = True

    def __init__(self, beta: float = 0.9, *, variant: str = "heavy_ball", dampening: float = 0.0):
        self.beta = positive_float("beta", beta, allow_zero=True)
        if self.beta >= 1:
            raise FedsdeInputError(f"beta={beta!r}: must lie in [0, 1)")
        if variant not in VARIANTS:
            raise FedsdeInputError(f"variant={variant!r}: must be one of {', '.join(VARIANTS)}")
        self.variant = variant
        self.dampening = positive_float("dampening", dampening, allow_zero=True)
        if self.dampening > 1:
            raise FedsdeInputError(f"dampening={dampening!r}: must lie in [0, 1]")

    def init(self, w0: torch.Tensor) -> MomentumState:
        return MomentumState(v=torch.zeros_like(w0))

    def apply(
        self, w: torch.Tensor, updates: torch.Tensor, weights: torch.Tensor, state: MomentumState,
        ctx: RoundContext,
    ) -> tuple[torch.Tensor, Any]:
        step = (1.0 - self.dampening) * weighted_mean(weights, updates)
        v = self.beta * state.v + step
        move = v if self.variant == "heavy_ball" else self.beta * v + step
        return w + ctx.server_lr * move, MomentumState(v=v)
