"""Local solvers: plain SGD, heavy-ball momentum, proximal SGD and momentum + prox.

One local step of client ``k`` in round ``n`` (server weights ``w_n``, learning rate ``η``), in the simulator's
sign convention ``w ← w − η(∇F_k(w) + ξ)`` (seed 003 §1.4; reference/seed-fednova.md §1.4, §1.10):

* stochastic gradient ``g = ∇F_k(x) + ξ`` (plus a control-variate correction ``c − c_k`` for SCAFFOLD);
* momentum ``ρ`` (PyTorch convention, no dampening, buffer reset every round): ``v₀ = g₀``,
  ``v_i = ρ v_{i−1} + g_i``; without momentum ``v_i = g_i``;
* proximal term ``μ`` (FedProx).  Two placements, equal unless both ``ρ`` and ``μ`` are non-zero:

  - ``prox_in_buffer=False`` (default): a separate proximal step on top of the momentum of the gradients,
    ``x ← x − η (v_i + μ (x − w_n))`` — heavy-ball momentum on ``F_k`` plus FedProx's pull, the form whose
    accumulation vector the recursion below gives;
  - ``prox_in_buffer=True``: the proximal term enters the momentum buffer, ``v_i = ρ v_{i−1} + g_i + μ (x − w_n)``,
    ``x ← x − η v_i`` — heavy ball on ``F_k + (μ/2)‖x − w_n‖²``.  This is what seed 003's code
    (JYWa/FedNova, ``distoptim/FedNova.py`` and ``distoptim/FedProx.py``) does: it adds ``μ(x − w_n)`` in place to
    the tensor that *is* the momentum buffer, so the term is carried into every later step.

Every such solver is linear in the gradients, ``Δ_k = −η Σ_s a_{k,s} g_k(x^{(s)})`` with the accumulation vector
``a_k`` (seed 003, Remark 1).  Its ``‖a_k‖₁`` follows from the same recursion run on a scalar "shadow" parameter
with every gradient equal to one (reference §1.4): ``c ← ρc + 1``, ``s ← (1 − ημ)s + c`` for ``τ_k`` steps gives
``‖a_k‖₁ = s`` (prox outside the buffer); ``c ← ρc + 1 − ημ s``, ``s ← s + c`` (prox in the buffer); closed forms:
``τ`` (SGD), ``(1 − (1 − α)^τ)/α`` (prox, ``α = ημ``), ``[τ − ρ(1 − ρ^τ)/(1 − ρ)]/(1 − ρ)`` (momentum).
Worked numbers (``τ = 7``, ``η = 0.1``, ``μ = 2``, ``ρ = 0.9``): 15.34 (prox outside), 8.41 (prox in the buffer);
seed 003's code normalises its in-buffer dynamics by a third value, 16.22, from a recursion that matches neither
(:class:`fedsde.aggregators.FedNova`, ``variant="official"``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedsde._compat import renamed
from fedsde._validate import positive_float, unit_interval
from fedsde.clients.local import StepHook, local_loop
from fedsde.clients.oracles import GradientOracle
from fedsde.clients.streams import ReplicateStreams
from fedsde.errors import FedsdeInputError


@dataclass(frozen=True)
class LocalSolver:
    """A local solver (see the module docstring); ``LocalSolver()`` is plain SGD.

    Parameters
    ----------
    momentum : float
        ``ρ ∈ [0, 1)``; the buffer is reset at the start of every round (stateless clients).
    prox : float
        ``μ >= 0``; needs ``α = ημ <= 1`` for a non-negative accumulation vector.
    prox_in_buffer : bool
        Add the proximal term to the momentum buffer (seed 003's code) instead of as a separate step (default);
        no effect unless both ``momentum`` and ``prox`` are non-zero.
    """

    momentum: float = 0.0
    prox: float = 0.0
    prox_in_buffer: bool = False

    def __post_init__(self):
        unit_interval("momentum", self.momentum)
        positive_float("prox", self.prox, allow_zero=True)

    @property
    def name(self) -> str:
        parts = (["momentum"] if self.momentum else []) + (["prox"] if self.prox else [])
        if self.momentum and self.prox and self.prox_in_buffer:
            parts.append("in-buffer")
        return "+".join(parts) or "sgd"

    @property
    def buffered_prox(self) -> bool:
        """True when the proximal term enters the momentum buffer (``prox_in_buffer`` with non-zero ρ and μ)."""
        return bool(self.prox_in_buffer and self.momentum and self.prox)

    @property
    def plain(self) -> bool:
        """True for plain SGD (the simulator's fast path)."""
        return self.momentum == 0.0 and self.prox == 0.0

    def check_eta(self, eta_max: float) -> None:
        """Raise if ``α = ημ > 1`` for the largest client learning rate (seed 003 §5 item 4)."""
        if self.prox and eta_max * self.prox > 1.0:
            raise FedsdeInputError(
                f"eta*prox={eta_max * self.prox:.6g} (eta={eta_max:g}, prox={self.prox:g}): the proximal step needs "
                "eta*mu <= 1"
            )

    # ---------------------------------------------------------------- accumulation vectors
    @renamed(steps="local_steps")
    def accumulation_vector(self, local_steps: int, eta: float) -> np.ndarray:
        """``a_k`` after ``local_steps`` local steps (old name: ``steps``), oldest gradient first, shape
        (local_steps,).

        Column ``s`` is the (scaled) response of the final displacement to gradient ``s``: running the linear
        recursion with ``g_j = δ_{js}`` gives ``−Δ/η``.
        """
        tau = int(local_steps)
        alpha = eta * self.prox
        a = np.zeros(tau)
        for s in range(tau):
            y, v = 0.0, 0.0
            for j in range(tau):
                g = 1.0 if j == s else 0.0
                v = g if j == 0 else self.momentum * v + g
                if self.buffered_prox:
                    v += alpha * y
                    y -= v
                else:
                    y = (1.0 - alpha) * y - v  # y = (x − w_n)/η
            a[s] = -y
        return a

    def norm_table(self, max_steps: int, eta: float) -> np.ndarray:
        """``‖a‖₁`` after ``τ = 0..max_steps`` steps by the shadow recursion, shape (max_steps + 1,)."""
        alpha = eta * self.prox
        out = np.zeros(int(max_steps) + 1)
        c = s = 0.0
        for t in range(1, int(max_steps) + 1):
            if self.buffered_prox:
                c = self.momentum * c + 1.0 - alpha * s
                s = s + c
            else:
                c = self.momentum * c + 1.0
                s = (1.0 - alpha) * s + c
            out[t] = s
        return out

    @renamed(steps="local_steps")
    def accumulation_norm(self, local_steps: torch.Tensor, eta: float) -> torch.Tensor:
        """``‖a_k‖₁`` for every entry of ``local_steps`` (old name: ``steps``; any shape, int tensor); same shape and
        the dtype ``float64``."""
        table = torch.as_tensor(self.norm_table(int(local_steps.max()), eta), device=local_steps.device)
        return table[local_steps.long()]

    # ---------------------------------------------------------------- the local loop
    def run(
        self,
        x: torch.Tensor,
        anchor: torch.Tensor,
        oracle: GradientOracle,
        streams: ReplicateStreams,
        eta: float,
        n_steps: int,
        local_steps: torch.Tensor | None = None,
        *,
        correction: torch.Tensor | None = None,
        keep_first_grad: bool = False,
        on_step: StepHook | None = None,
    ) -> torch.Tensor | None:
        """Run ``n_steps`` local steps of this solver in place on ``x`` (block-major, shape (nb, Q, B, d)).

        The loop of :func:`fedsde.clients.local.run_local_steps` on an oracle whose round has begun; the options
        after ``local_steps`` are keyword-only.

        Parameters
        ----------
        x : Tensor, shape (nb, Q, B, d)
            Client weights, starting at the server weights.
        anchor : Tensor, shape (nb, 1, B, d)
            Server weights ``w_n`` (the prox anchor).
        oracle, streams
            Gradient oracle and its random streams.
        eta : float
        n_steps : int
            Steps of the longest client.
        local_steps : Tensor of int, broadcastable to (nb, Q, B, 1), optional
            Steps of each client (clients stop after ``τ_k`` steps); ``None`` when all run ``n_steps``.
        correction : Tensor, shape (nb, Q, B, d), optional
            Constant gradient correction (SCAFFOLD's ``c − c_k``).
        keep_first_grad : bool
            Return the oracle's gradient at the server weights (step 0, before correction).
        on_step : callable, optional
            ``on_step(i, x)`` after every step (drift recording).

        Returns
        -------
        Tensor, shape (nb, Q, B, d), or None
            The first gradients when ``keep_first_grad``.
        """
        return local_loop(x=x, oracle=oracle, streams=streams, eta=eta, n_steps=n_steps, local_steps=local_steps,
                          solver=self, anchor=anchor, correction=correction, keep_first_grad=keep_first_grad,
                          on_step=on_step)


#: plain SGD
SGD = LocalSolver()


def momentum_solver(rho: float) -> LocalSolver:
    """Heavy-ball local momentum ``ρ`` (buffer reset every round)."""
    return LocalSolver(momentum=rho)


def prox_solver(mu: float) -> LocalSolver:
    """FedProx's proximal SGD with coefficient ``μ``."""
    return LocalSolver(prox=mu)
