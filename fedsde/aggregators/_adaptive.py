"""Adaptive server optimisers (Reddi et al., "Adaptive Federated Optimization", ICLR 2021, Algorithm 2).

Notes
-----
With the averaged model change ``Δ_n = Σ_k ω_k Δ_k`` (minus the pseudo-gradient), ``m_0 = 0``:

    m ← β₁ m + (1 − β₁) Δ
    v ← v + Δ²                                   (FedAdagrad)
    v ← v − (1 − β₂) Δ² sign(v − Δ²)             (FedYogi)
    v ← β₂ v + (1 − β₂) Δ²                       (FedAdam)
    w ← w + s · m̂ / (√v̂ + τ)

Variants (frameworks disagree here):

* ``variant="paper"`` (default; Reddi et al. Algorithm 2): no bias correction, ``m̂ = m``, ``v̂ = v``, and
  ``v_0 = τ²`` (the paper asks ``v_{−1} >= τ²``);
* ``variant="bias_corrected"`` (Adam-style, as optax/FedJAX): ``v_0 = 0``, ``m̂ = m/(1 − β₁^t)`` and, for Adam and
  Yogi, ``v̂ = v/(1 − β₂^t)`` with ``t = n + 1`` the number of updates so far; Adagrad's ``v`` is a sum and is not
  corrected.

``v_0`` can be set explicitly (seed 000's and Flower's code use ``v_0 = 0`` without bias correction).
Defaults ``β₁ = 0.9``, ``β₂ = 0.99``, ``τ = 1e−3`` (Reddi et al.); the server step ``s`` is the run's
``server_lr`` (the seeds use ``s = 0.01`` for FedYogi on CIFAR-10).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

import torch

from fedsde._validate import positive_float
from fedsde.aggregators.base import Aggregator, RoundContext, weighted_mean
from fedsde.errors import FedsdeInputError

VARIANTS = ("paper", "bias_corrected")


@dataclass(frozen=True)
class AdaptiveState:
    """First and second moment estimates ``m``, ``v`` (each shape (R, d)) and the update count ``t``."""

    m: torch.Tensor
    v: torch.Tensor
    t: int


class AdaptiveServer(Aggregator):
    """Shared machinery of FedAdam / FedYogi / FedAdagrad (see the module docstring).

    Parameters
    ----------
    beta1, beta2 : float
        Decay rates in ``[0, 1)`` (``beta2`` unused by Adagrad).
    tau : float
        Adaptivity ``τ > 0``.
    variant : {"paper", "bias_corrected"}
    v0 : float, optional
        Initial second moment (default ``τ²`` for ``"paper"``, 0 for ``"bias_corrected"``).
    """

    stateful = True
    paper = "Reddi et al. 2021, Algorithm 2"

    def __init__(self, *, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3, variant: str = "paper",
                 v0: float | None = None):
        self.beta1 = positive_float("beta1", beta1, allow_zero=True)
        self.beta2 = positive_float("beta2", beta2, allow_zero=True)
        if self.beta1 >= 1 or self.beta2 >= 1:
            raise FedsdeInputError(f"beta1={beta1!r}, beta2={beta2!r}: must lie in [0, 1)")
        self.tau = positive_float("tau", tau)
        if variant not in VARIANTS:
            raise FedsdeInputError(f"variant={variant!r}: must be one of {', '.join(VARIANTS)}")
        self.variant = variant
        default_v0 = self.tau**2 if variant == "paper" else 0.0
        self.v0 = default_v0 if v0 is None else positive_float("v0", v0, allow_zero=True)

    def init(self, w0: torch.Tensor) -> AdaptiveState:
        return AdaptiveState(m=torch.zeros_like(w0), v=torch.full_like(w0, self.v0), t=0)

    @abstractmethod
    def _second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        """The rule's second-moment update ``v_t`` from ``v_{t−1}`` and ``Δ²`` (Adam, Yogi or Adagrad)."""

    _correct_v = True

    def apply(
        self, w: torch.Tensor, updates: torch.Tensor, weights: torch.Tensor, state: AdaptiveState,
        ctx: RoundContext,
    ) -> tuple[torch.Tensor, Any]:
        delta = weighted_mean(weights, updates)
        m = self.beta1 * state.m + (1.0 - self.beta1) * delta
        v = self._second_moment(state.v, delta * delta)
        t = state.t + 1
        m_hat, v_hat = m, v
        if self.variant == "bias_corrected":
            m_hat = m / (1.0 - self.beta1**t)
            if self._correct_v:
                v_hat = v / (1.0 - self.beta2**t)
        return w + ctx.server_lr * m_hat / (torch.sqrt(v_hat) + self.tau), AdaptiveState(m=m, v=v, t=t)
