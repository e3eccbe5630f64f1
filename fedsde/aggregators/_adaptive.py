"""Adaptive server optimisers (Reddi et al., "Adaptive Federated Optimization", ICLR 2021, Algorithm 2).

Notes
-----
With the averaged model change ``Δ_n = Σ_k ω_k Δ_k`` (minus the pseudo-gradient), ``m_0 = 0``:

    m ← β₁ m + (1 − β₁) Δ
    v ← v + Δ²                                   (FedAdagrad)
    v ← v − (1 − β₂) Δ² sign(v − Δ²)             (FedYogi)
    v ← β₂ v + (1 − β₂) Δ²                       (FedAdam)
    w ← w + s · c_t · m̂ / (√v̂ + τ)

Variants (frameworks disagree here):

* ``variant="paper"`` (default; Reddi et al. Algorithm 2): no bias correction, ``m̂ = m``, ``v̂ = v``, ``c_t = 1``
  and ``v_0 = τ²`` (the paper asks ``v_{−1} >= τ²``);
* ``variant="bias_corrected"`` (Adam-style, as optax/FedJAX): ``v_0 = 0``, ``m̂ = m/(1 − β₁^t)`` and, for Adam and
  Yogi, ``v̂ = v/(1 − β₂^t)`` with ``t = n + 1`` the number of updates so far; Adagrad's ``v`` is a sum and is not
  corrected; ``c_t = 1``;
* ``variant="flower"`` (Flower's ``FedAdam``/``FedYogi``/``FedAdagrad`` strategies, ``flwr.server.strategy``):
  ``v_0 = 0``, ``m̂ = m``, ``v̂ = v``; FedAdam alone scales the step (Kingma & Ba's ``α_t``) by

      c_r = √(1 − β₂^(r+1)) / (1 − β₁^(r+1)),   r = server_round = n + 1 (Flower counts rounds from 1),

  so round ``n = 0`` already uses exponent 2 (not the ``t = 1`` of textbook Adam), and the correction multiplies
  the step, outside ``√v + τ``.  FedYogi and FedAdagrad use ``c_r = 1``.  Unset parameters take Flower's
  defaults: ``β₁ = 0.9`` (FedAdagrad: 0, it has no ``β₁``), ``β₂ = 0.99``, ``τ = 1e−9`` (FedYogi: ``1e−3``).
  Flower's server step ``eta`` is the run's ``server_lr`` (Flower's defaults: 0.1; FedYogi 0.01).

``v_0`` can be set explicitly (seed 000's code uses ``v_0 = 0`` without bias correction, i.e. ``"paper"`` with
``v0=0``).  Defaults ``β₁ = 0.9``, ``β₂ = 0.99``, ``τ = 1e−3`` (Reddi et al.); the server step ``s`` is the run's
``server_lr`` (the seeds use ``s = 0.01`` for FedYogi on CIFAR-10).  Agreement with Flower is tested in
``tests/test_peers.py`` and listed in the documentation page "Agreement with peers".
"""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from fedsde._validate import choice, positive_float, unit_interval
from fedsde.aggregators.base import Aggregator, RoundContext, weighted_mean
from fedsde.aggregators.sde_forms import SampledWeights

VARIANTS = ("paper", "bias_corrected", "flower")


@dataclass(frozen=True)
class AdaptiveForm:
    """What the adaptive SDE (:mod:`fedsde.sde.adaptive`) reads of a rule.

    Attributes
    ----------
    beta1, beta2, tau, v0 : float
        The rule's parameters.
    second_moment : {"ema", "yogi"}
        ``v ← β₂v + (1 − β₂)Δ²`` (Adam) or Yogi's ``v ← v − (1 − β₂)Δ² sign(v − Δ²)``.
    correction : {"none", "moments", "step"}
        No bias correction (``"paper"``), ``m̂ = m/(1 − β₁^t)``, ``v̂ = v/(1 − β₂^t)`` (``"bias_corrected"``), or
        Flower's FedAdam step factor ``√(1 − β₂^(n+2))/(1 − β₁^(n+2))`` (``"step"``).
    """

    beta1: float
    beta2: float
    tau: float
    v0: float
    second_moment: str
    correction: str


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
    beta1, beta2 : float, optional
        Decay rates in ``[0, 1)`` (``beta2`` unused by Adagrad); default 0.9 and 0.99 (``"flower"``: Flower's).
    tau : float, optional
        Adaptivity ``τ > 0``; default ``1e−3`` (``"flower"``: Flower's default of the strategy).
    variant : {"paper", "bias_corrected", "flower"}
    v0 : float, optional
        Initial second moment (default ``τ²`` for ``"paper"``, 0 for ``"bias_corrected"`` and ``"flower"``).
    """

    stateful = True
    sde_kind = "adaptive"
    mean_only = True  # server state only: the participants' slots suffice (cross-device regime)
    paper = "Reddi et al. 2021, Algorithm 2"
    #: Flower's defaults of the strategy (``beta_1``, ``beta_2``, ``tau``) for ``variant="flower"``
    _flower_defaults: ClassVar[tuple[float, float, float]] = (0.9, 0.99, 1e-9)
    #: whether Flower scales the step by ``√(1 − β₂^(r+1))/(1 − β₁^(r+1))`` (FedAdam only)
    _flower_step_correction: ClassVar[bool] = False

    def __init__(self, *, beta1: float | None = None, beta2: float | None = None, tau: float | None = None,
                 variant: str = "paper", v0: float | None = None):
        self.variant = choice("variant", variant, VARIANTS)
        d1, d2, dt = self._flower_defaults if variant == "flower" else (0.9, 0.99, 1e-3)
        beta1, beta2, tau = (d1 if beta1 is None else beta1), (d2 if beta2 is None else beta2), (dt if tau is None
                                                                                                 else tau)
        self.beta1 = unit_interval("beta1", beta1)
        self.beta2 = unit_interval("beta2", beta2)
        self.tau = positive_float("tau", tau)
        default_v0 = self.tau**2 if variant == "paper" else 0.0
        self.v0 = default_v0 if v0 is None else positive_float("v0", v0, allow_zero=True)

    #: the rule's second-moment recursion as :class:`AdaptiveForm` names it (None: no SDE, e.g. Adagrad's sum)
    _second_moment_form: ClassVar[str | None] = "ema"

    def sde_weights(self, weights, norms, local_steps, *, p=None):
        """``ω = weights``: the moments run on FedAvg's averaged displacement ``Σ_k ω_k Δ_k``."""
        import numpy as np

        return np.array(weights, dtype=np.float64)

    def sampled_sde_weights(self, norms, local_steps, *, p) -> SampledWeights:
        """``ω = W``: the moments run on the scheme's weighted mean."""
        import numpy as np

        return SampledWeights(np.ones(np.shape(p)[0]))

    def adaptive_form(self) -> AdaptiveForm:
        """The parameters the adaptive SDE reads (:class:`AdaptiveForm`)."""
        if self.variant == "bias_corrected":
            corr = "moments"
        elif self.variant == "flower" and self._flower_step_correction:
            corr = "step"
        else:
            corr = "none"
        return AdaptiveForm(float(self.beta1), float(self.beta2), float(self.tau), float(self.v0),
                            str(self._second_moment_form), corr)

    def rescaled(self, *, one_minus_beta: float, tau: float) -> AdaptiveServer:
        """A copy with ``1 − β_i`` multiplied by ``one_minus_beta``, ``τ`` and ``√v₀`` by ``tau`` (the SVAG chain of
        Malladi et al. 2022 with ``k``: 1/k², k; their square-root scaling rule with ``κ``: κ, 1/√κ)."""
        b1 = 1.0 - (1.0 - self.beta1) * one_minus_beta if self.beta1 > 0 else 0.0  # β₁ = 0: no m to scale
        b2 = 1.0 - (1.0 - self.beta2) * one_minus_beta
        return type(self)(beta1=b1, beta2=b2, tau=self.tau * tau, variant=self.variant, v0=self.v0 * tau * tau)

    def init(self, w0: torch.Tensor) -> AdaptiveState:
        return AdaptiveState(m=torch.zeros_like(w0), v=torch.full_like(w0, self.v0), t=0)

    @abstractmethod
    def _second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        """The rule's second-moment update ``v_t`` from ``v_{t−1}`` and ``Δ²`` (Adam, Yogi or Adagrad)."""

    _correct_v = True

    def step_scale(self, server_round: int) -> float:
        """``c_r``: Flower's FedAdam step factor ``√(1 − β₂^(r+1))/(1 − β₁^(r+1))`` at 1-based round ``r``; else 1."""
        if self.variant != "flower" or not self._flower_step_correction:
            return 1.0
        e = float(server_round) + 1.0
        return math.sqrt(1.0 - self.beta2**e) / (1.0 - self.beta1**e)

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
        lr = ctx.server_lr * self.step_scale(ctx.round + 1)
        return w + lr * m_hat / (torch.sqrt(v_hat) + self.tau), AdaptiveState(m=m, v=v, t=t)
