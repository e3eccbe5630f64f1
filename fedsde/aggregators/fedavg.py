"""FedAvg with a server learning rate (McMahan et al. 2017; seed 002, Sec. 3 "averaging step").

Notes
-----
``w_{n+1} = w_n + s Σ_k ω_k Δ_k`` with client displacements ``Δ_k = w_k^{(τ_k)} − w_n``, server step ``s``
(``s = 1`` is plain FedAvg; seed 002 writes ``s = η̂₀ = h·η₀``) and weights ``ω_k`` from the participation
scheme (``p_k`` under full participation).  The clients run plain SGD unless another ``local_solver`` is given
(e.g. local momentum, as in seed 003's "FedAvg with momentum" column).

Its exact-law weights are the scheme's own, ``ω = p`` (any per-client ``τ_k``, and under client sampling:
:meth:`FedAvg.linear_weights`); its fixed point is biased towards clients with more steps (seed 003 §III, Lemma 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedsde.aggregators.base import Aggregator, RoundContext, weighted_mean
from fedsde.aggregators.registry import register
from fedsde.aggregators.sde_forms import SampledWeights
from fedsde.clients.solvers import LocalSolver


@register
class FedAvg(Aggregator):
    """``w ← w + s Σ_k ω_k Δ_k`` (see module docstring).

    Parameters
    ----------
    local_solver : LocalSolver, optional
        The clients' local solver (default plain SGD).
    """

    name = "fedavg"
    paper = "McMahan et al. 2017; seed 002 eq. (1)"
    exact_under_sampling = True

    def __init__(self, *, local_solver: LocalSolver | None = None):
        self._local_solver = local_solver

    def linear_weights(self, weights: np.ndarray, norms: np.ndarray, local_steps: np.ndarray, *,
                       p: np.ndarray | None = None) -> np.ndarray:
        """``ω = weights``: the step is the weighted mean itself (seed 002 eq. (1); shapes as the base's)."""
        return np.array(weights, dtype=np.float64)

    def sampled_sde_weights(self, norms: np.ndarray, local_steps: np.ndarray, *, p: np.ndarray) -> SampledWeights:
        """``ω = W``: the scheme's own weights (:class:`~fedsde.aggregators.sde_forms.SampledWeights`)."""
        return SampledWeights(np.ones(np.shape(p)[0]))

    def apply(
        self, w: torch.Tensor, updates: torch.Tensor, weights: torch.Tensor, state: Any, ctx: RoundContext
    ) -> tuple[torch.Tensor, Any]:
        return w + ctx.server_lr * weighted_mean(weights, updates), state
