"""FedNova: normalised averaging (Wang, Liu, Liang, Joshi, Poor; seed 003, eq. (20)).

Notes
-----
Each client's change is divided by the ``‖a_k‖₁`` of its local solver (the accumulation vector, seed 003
Remark 1; :mod:`fedsde.clients.solvers`), and rescaled by ``τ_eff``:

    w_{n+1} = w_n + s · τ_eff · Σ_k ω_k Δ_k / ‖a_k‖₁,

with ``ω_k = p_k`` under full participation (so the surrogate objective is the true ``F``, Theorem 1/5).
``τ_eff`` (reference/seed-fednova.md §1.5, §5 item 5):

* ``"solver"``: ``Σ_k ω_k ‖a_k‖₁`` (the paper's default; ``Σ_k p_k τ_k`` for vanilla SGD);
* ``"steps"``: ``Σ_k ω_k τ_k`` (FedNova-Prox in the paper and its code);
* ``"auto"`` (default): ``"steps"`` when the local solver has a proximal term, else ``"solver"``;
* ``"full"``: ``Σ_k p_k ‖a_k‖₁`` over all clients (known to the server) even under partial participation;
* a number: the generalised rule eq. (6) with a user-set ``τ_eff``.

A server learning rate only multiplies ``τ_eff``.  Local solvers (``momentum=ρ``, buffers reset every round;
``mu=μ``, prox; both) change ``a_k``, never the rule.

Variants (they differ only when the clients use both local momentum and a proximal term):

* ``variant="paper"`` (default; the paper's definition, eq. (20)): ``‖a_k‖₁`` is the true accumulation norm of
  the local solver (:mod:`fedsde.clients.solvers`), whose proximal term is a separate step outside the momentum buffer;
* ``variant="official"`` reproduces seed 003's code (JYWa/FedNova, ``distoptim/FedNova.py``) exactly: the
  clients add ``μ(x − w_n)`` into the momentum buffer (``LocalSolver(prox_in_buffer=True)``), and the normaliser is
  the code's recursion ``c ← ρc + 1``, ``s ← (1 − ημ)(s + c) + 1`` (2 − ημ after one step).  It is inconsistent
  with the code's own dynamics: for ``τ = 7``, ``η = 0.1``, ``μ = 2``, ``ρ = 0.9`` it gives 16.22, while the true
  ``Σ a_k`` of those dynamics is 8.41 (and that of the ``"paper"`` dynamics 15.34).  With ``μ > 0`` the code uses
  ``τ_eff = Σ p_k τ_k`` ("steps", also the ``"auto"`` choice here); client ``k``'s gradients then enter with
  total weight ``p_k τ_eff · Σa_k/normaliser_k`` instead of ``p_k τ_eff``, and the ratio ``Σa_k/normaliser_k``
  (0.52 here) changes with ``τ_k``, so the clients are not weighted by ``p_k``.

Optional server momentum ``γ`` (the code's ``gmf``): ``b ← γ b + U/η``, ``w ← w + s η b`` with
``U = τ_eff Σ ω_k Δ_k/‖a_k‖₁``.

Partial participation (reference §1.8) follows the simulator's ``weighting``: ``"renormalised"`` is the
practical form (``p̂_k = p_k/Σ_S p_j``, ``τ_eff = Σ_S p̂_k ‖a_k‖₁``); ``"multinomial"`` is the canonical form of
the paper's analysis (``q`` draws with replacement ∝ ``p``, equal weights ``1/q``:
``τ_eff = (1/q) Σ_j ‖a_{l_j}‖₁``, update ``τ_eff (1/q) Σ_j Δ_{l_j}/‖a_{l_j}‖₁``); ``"unbiased"`` uses the
weights ``p_k Q/m`` of uniform sampling.

As a rule linear in the displacements (no server momentum), FedNova is ``w + s Σ_k ω_k Δ_k`` with

    ω_k = p_k τ_eff / ‖a_k‖₁          (seed 003, eq. (20); ``‖a_k‖₁ = τ_k`` for plain SGD)

(:meth:`FedNova.linear_weights`); in seed 003's generalised update (6) its weights are ``w_k = p_k``.

FedNova is consistent only as ``η → 0``: at finite ``ητ`` its fixed point on quadratics,
``(Σ_k p_k M_k/τ_k)⁻¹ Σ_k p_k M_k a_k/τ_k``, is biased towards clients with few steps (reference §2.3);
:func:`fedsde.exact.aggregator_round_law` gives the exact law.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedsde._compat import renamed
from fedsde._validate import choice, positive_float, unit_interval
from fedsde.aggregators.base import Aggregator, MomentumForm, RoundContext, weighted_mean
from fedsde.aggregators.registry import register
from fedsde.aggregators.sde_forms import SampledWeights
from fedsde.clients.solvers import LocalSolver
from fedsde.errors import FedsdeInputError

TAU_EFF = ("auto", "solver", "steps", "full")
VARIANTS = ("paper", "official")


@renamed(steps="local_steps")
def official_normaliser(momentum: float, prox: float, local_steps: int, eta: float) -> float:
    """Seed 003's code's normaliser after ``local_steps`` local steps (``local_normalizing_vec`` of ``FedNova.step``;
    old name of ``local_steps``: ``steps``).

    Per step: ``c ← ρc + 1``, ``s ← s + c`` with momentum; ``s ← (1 − ημ)s + 1`` with a proximal term; ``s ← s + 1``
    with neither.  Equals ``‖a‖₁`` unless both ``ρ`` and ``μ`` are non-zero (module docstring).
    """
    alpha = eta * prox
    c = s = 0.0
    for _ in range(int(local_steps)):
        if momentum:
            c = c * momentum + 1.0
            s += c
        if alpha:
            s = s * (1.0 - alpha) + 1.0
        if not momentum and not alpha:
            s += 1.0
    return s


@dataclass(frozen=True)
class NovaState:
    """Server momentum buffer ``b`` (R, d), or None without server momentum."""

    b: torch.Tensor | None


@register
class FedNova(Aggregator):
    """Normalised averaging (see module docstring).

    Parameters
    ----------
    momentum : float
        Local heavy-ball momentum ``ρ`` (buffers reset every round).
    mu : float
        Local proximal coefficient ``μ``.
    tau_eff : {"auto", "solver", "steps", "full"} or float
    server_momentum : float
        ``γ ∈ [0, 1)`` (0: none).
    local_solver : LocalSolver, optional
        Overrides ``momentum`` and ``mu``.
    variant : {"paper", "official"}
        Normaliser and local dynamics of the paper (default) or of seed 003's code (module docstring).
    """

    name = "fednova"
    paper = "Wang et al. 2021 (seed 003), eq. (20)"
    needs_norms = True

    def __init__(self, *, momentum: float = 0.0, mu: float = 0.0, tau_eff: str | float = "auto",
                 server_momentum: float = 0.0, local_solver: LocalSolver | None = None, variant: str = "paper"):
        self.variant = choice("variant", variant, VARIANTS)
        self._local_solver = local_solver or LocalSolver(momentum=momentum, prox=mu,
                                                         prox_in_buffer=variant == "official")
        self.momentum = self._local_solver.momentum
        self.mu = self._local_solver.prox
        if isinstance(tau_eff, str):
            if tau_eff not in TAU_EFF:
                raise FedsdeInputError(f"tau_eff={tau_eff!r}: must be one of {', '.join(TAU_EFF)} or a number")
            if tau_eff == "auto":
                tau_eff = "steps" if self.mu else "solver"
        else:
            tau_eff = positive_float("tau_eff", tau_eff)
        self.tau_eff = tau_eff
        self.server_momentum = unit_interval("server_momentum", server_momentum)

    @property
    def stateful(self) -> bool:
        """True with server momentum (its buffer is server state)."""
        return self.server_momentum > 0

    @property
    def sde_kind(self) -> str | None:
        """``"linear"``; ``"momentum"`` with server momentum; ``None`` with local momentum (base rule)."""
        if self.local_solver.momentum:
            return None
        return "momentum" if self.server_momentum else "linear"

    def momentum_form(self) -> MomentumForm | None:
        """With server momentum ``γ``: ``v = ηb``, ``v ← γv + U``, ``w ← w + s v`` (heavy ball, ``g = 1``)."""
        return MomentumForm(float(self.server_momentum)) if self.server_momentum else None

    def linear_weights(self, weights: np.ndarray, norms: np.ndarray, local_steps: np.ndarray, *,
                       p: np.ndarray | None = None) -> np.ndarray:
        """``ω_k = weights_k · τ_eff / ‖a_k‖₁`` (seed 003, eq. (20)) with ``τ_eff`` of :attr:`tau_eff`:
        ``Σ_k weights_k ‖a_k‖₁`` (``"solver"``), ``Σ_k weights_k τ_k`` (``"steps"``), ``Σ_k p_k ‖a_k‖₁``
        (``"full"``) or the fixed number (shapes as the base's)."""
        weights = np.asarray(weights, dtype=np.float64)
        if self.tau_eff == "solver":
            te = float(np.sum(weights * norms))
        elif self.tau_eff == "steps":
            te = float(np.sum(weights * local_steps))
        elif self.tau_eff == "full":
            te = float(np.sum((weights if p is None else np.asarray(p, dtype=np.float64)) * norms))
        else:
            te = float(self.tau_eff)
        return weights * te / norms

    def sampled_sde_weights(self, norms: np.ndarray, local_steps: np.ndarray, *, p: np.ndarray) -> SampledWeights:
        """``ω_k = W_k τ_eff(W)/‖a_k‖₁`` as :class:`~fedsde.aggregators.sde_forms.SampledWeights`: ``τ_eff = ⟨W, ‖a‖₁⟩``
        (``"solver"``), ``⟨W, τ⟩`` (``"steps"``), or fixed (``"full"``: ``Σ_k p_k‖a_k‖₁``; a number)."""
        norms = np.asarray(norms, dtype=np.float64)
        if self.tau_eff == "solver":
            return SampledWeights(1.0 / norms, norms)
        if self.tau_eff == "steps":
            return SampledWeights(1.0 / norms, np.asarray(local_steps, dtype=np.float64))
        te = float(np.sum(np.asarray(p, dtype=np.float64) * norms)) if self.tau_eff == "full" else float(self.tau_eff)
        return SampledWeights(te / norms)

    def sde_step(self, updates: torch.Tensor, weights: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """``U = τ_eff Σ_k W_k Δ_k/‖a_k‖₁`` (eq. (20)), shape (R, d)."""
        norms = self.normalisers(ctx)
        return self.effective_steps(weights, ctx, norms) * weighted_mean(weights / norms, updates)

    def apply_step(self, w: torch.Tensor, step: torch.Tensor, state: NovaState, ctx: RoundContext
                   ) -> tuple[torch.Tensor, Any]:
        """``w + sU``, or with server momentum ``b ← γb + U/η``, ``w ← w + sηb``."""
        if not self.server_momentum:
            return w + ctx.server_lr * step, state
        b = self.server_momentum * state.b + step / ctx.eta
        return w + ctx.server_lr * ctx.eta * b, NovaState(b=b)

    def generalised_weights(self, weights: np.ndarray, norms: np.ndarray, local_steps: np.ndarray) -> np.ndarray:
        """``w_k = weights_k``: FedNova's definition in seed 003's generalised update (6), eq. (20)."""
        return np.array(weights, dtype=np.float64)

    def init(self, w0: torch.Tensor) -> NovaState:
        return NovaState(b=torch.zeros_like(w0) if self.server_momentum else None)

    def normalisers(self, ctx: RoundContext) -> torch.Tensor:
        """The per-client normaliser of the round, shape (R, Q): ``ctx.norms`` (``"paper"``) or the code's."""
        if self.variant == "paper":
            return ctx.norms
        sol = self.local_solver
        steps = ctx.local_steps
        table = [official_normaliser(sol.momentum, sol.prox, t, ctx.eta) for t in range(int(steps.max()) + 1)]
        return torch.as_tensor(table, dtype=ctx.norms.dtype, device=steps.device)[steps.long()]

    def effective_steps(self, weights: torch.Tensor, ctx: RoundContext, norms: torch.Tensor | None = None
                        ) -> torch.Tensor:
        """``τ_eff`` of the round, shape (R, 1) (``norms``: the normalisers, default :meth:`normalisers`)."""
        norms = self.normalisers(ctx) if norms is None else norms
        if self.tau_eff == "solver":
            te = (weights * norms).sum(1)
        elif self.tau_eff == "steps":
            te = (weights * ctx.local_steps.to(weights.dtype)).sum(1)
        elif self.tau_eff == "full":
            te = (ctx.p * norms).sum(1)
        else:
            te = torch.full(weights.shape[:1], float(self.tau_eff), dtype=weights.dtype, device=weights.device)
        return te.unsqueeze(1)

    def apply(
        self, w: torch.Tensor, updates: torch.Tensor, weights: torch.Tensor, state: NovaState, ctx: RoundContext
    ) -> tuple[torch.Tensor, Any]:
        norms = self.normalisers(ctx)
        u = self.effective_steps(weights, ctx, norms) * weighted_mean(weights / norms, updates)
        if not self.server_momentum:
            return w + ctx.server_lr * u, state
        b = self.server_momentum * state.b + u / ctx.eta
        return w + ctx.server_lr * ctx.eta * b, NovaState(b=b)
