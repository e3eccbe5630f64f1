"""FedAvgM: server momentum on the averaged update (Hsu, Qi, Brown 2019).

Notes
-----
With ``Δ̄_n = Σ_k ω_k Δ_k`` (the averaged model change, i.e. minus the pseudo-gradient), buffer ``v_0 = 0``:

* ``variant="heavy_ball"`` (default; Hsu et al. 2019, seed 000's code):
  ``v ← β v + (1 − δ) Δ̄``,  ``w ← w + s v``;
* ``variant="nesterov"``: ``v ← β v + (1 − δ) Δ̄``,  ``w ← w + s (β v + (1 − δ) Δ̄)``.

``δ`` is the dampening (0 by default; seed 004's code uses ``δ = β``, an exponential moving average).
Defaults ``β = 0.9``; the seeds tune ``β ∈ {0.5, 0.7}``.

On quadratic clients the mean follows a linear recursion on ``(w − c, v)`` (:meth:`FedAvgM.server_recursion`);
the heavy ball is stable iff ``s(1 − δ)β_i < 2(1 + β)`` for the eigenvalues ``β_i`` of ``B``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedsde._validate import choice, unit_interval
from fedsde.aggregators.base import Aggregator, MomentumForm, RoundContext, ServerRecursion, weighted_mean
from fedsde.aggregators.registry import register
from fedsde.aggregators.sde_forms import SampledWeights

VARIANTS = ("heavy_ball", "nesterov")


@dataclass(frozen=True)
class MomentumState:
    """Server momentum buffer ``v``, shape (R, d)."""

    v: torch.Tensor


@register
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
    mean_only = True  # server state only: the participants' slots suffice (cross-device regime)

    def __init__(self, beta: float = 0.9, *, variant: str = "heavy_ball", dampening: float = 0.0):
        self.beta = unit_interval("beta", beta)
        self.variant = choice("variant", variant, VARIANTS)
        self.dampening = unit_interval("dampening", dampening, closed_right=True)

    def server_recursion(self, B: np.ndarray, server_lr: float) -> ServerRecursion:
        """The mean recursion on ``(w − c, v)``, shape (2d, 2d), with ``Σ_k p_k E Δ_k = −B(w − c)`` and
        ``g = 1 − δ``: ``v' = βv − gB(w − c)``; heavy ball ``w' = w + s v'``, Nesterov ``w' = w + s(βv' − gB(w − c))``
        (module docstring; arguments as :meth:`Aggregator.server_recursion`)."""
        s, beta, g, eye = float(server_lr), float(self.beta), 1.0 - float(self.dampening), np.eye(B.shape[0])
        if self.variant == "heavy_ball":
            top = np.hstack([eye - s * g * B, s * beta * eye])
        else:
            top = np.hstack([eye - s * g * (1.0 + beta) * B, s * beta * beta * eye])
        M = np.vstack([top, np.hstack([-g * B, beta * eye])])
        return ServerRecursion(M, f"the server momentum recursion of the mean ({self.name} {self.variant}, "
                                  f"beta={beta:g})")

    sde_kind = "momentum"

    def sde_weights(self, weights: np.ndarray, norms: np.ndarray, local_steps: np.ndarray, *,
                    p: np.ndarray | None = None) -> np.ndarray:
        """``ω = weights``: the buffer averages FedAvg's step ``Σ_k ω_k Δ_k`` (shapes as the base's)."""
        return np.array(weights, dtype=np.float64)

    def sampled_sde_weights(self, norms: np.ndarray, local_steps: np.ndarray, *, p: np.ndarray) -> SampledWeights:
        """``ω = W``: the buffer averages the scheme's weighted mean."""
        return SampledWeights(np.ones(np.shape(p)[0]))

    def momentum_form(self) -> MomentumForm:
        """``β``, ``g = 1 − δ`` and the variant (module docstring); first-order step ``s·g/(1 − β)``."""
        return MomentumForm(float(self.beta), 1.0 - float(self.dampening), self.variant == "nesterov")

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
