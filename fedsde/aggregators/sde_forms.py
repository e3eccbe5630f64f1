"""What a server rule's SDE reads of the rule: its server momentum, and how its weights depend on the sampled clients.

* :class:`MomentumForm` — server heavy ball on a linear step (:meth:`~fedsde.aggregators.Aggregator.momentum_form`);
* :class:`SampledWeights` — the weights ``ω`` of the linear step ``U = Σ_k ω_k Δ_k`` as a function of a round's
  participation weights ``W`` (:meth:`~fedsde.aggregators.Aggregator.sampled_sde_weights`), from which
  :mod:`fedsde.sde.sampled` computes the law of ``ω`` under each participation scheme.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MomentumForm:
    """Server heavy ball on a linear rule's step ``U = Σ_k ω_k Δ_k``: ``v ← βv + gU``, ``w ← w + s·(v or βv + gU)``.

    Attributes
    ----------
    beta : float
        Momentum ``β ∈ [0, 1)``.
    gain : float
        ``g`` (``1 − δ`` with dampening ``δ``).
    nesterov : bool
        ``w ← w + s(βv' + gU)`` instead of ``w ← w + s v'``.
    """

    beta: float
    gain: float = 1.0
    nesterov: bool = False

    @property
    def step_factor(self) -> float:
        """``g/(1 − β)``: the first-order SDE's server step is ``s·g/(1 − β)`` (Li, Tai & E 2019, heavy ball)."""
        return self.gain / (1.0 - self.beta)


@dataclass(frozen=True)
class SampledWeights:
    """The SDE weights of a round as a function of its participation weights ``W`` (shape (Q,), zero off the sample):

        ω_k = scale_k · W_k · (⟨inner, W⟩ if inner is given, else 1).

    FedAvg, FedProx, FedAvgM and the adaptive rules: ``scale = 1``, no ``inner`` (``ω = W``); FedNova
    (seed 003, eq. (20)): ``scale_k = 1/‖a_k‖₁`` and ``inner = ‖a‖₁`` (``τ_eff = Σ_k W_k ‖a_k‖₁``) or ``τ``
    (``τ_eff = Σ_k W_k τ_k``), or ``scale_k = τ_eff/‖a_k‖₁`` for a ``τ_eff`` that does not depend on the sample.

    Attributes
    ----------
    scale : ndarray, shape (Q,)
    inner : ndarray, shape (Q,), or None
    """

    scale: np.ndarray
    inner: np.ndarray | None = None

    def __call__(self, W: np.ndarray) -> np.ndarray:
        """``ω`` for participation weights ``W`` of shape (..., Q)."""
        W = np.asarray(W, dtype=np.float64)
        out = self.scale * W
        return out if self.inner is None else out * (W @ self.inner)[..., None]
