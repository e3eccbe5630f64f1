"""FedProx (Li et al., MLSys 2020): FedAvg whose clients minimise ``F_k(x) + (μ/2)‖x − w_n‖²``.

Notes
-----
Client step (proximal SGD, :class:`fedsde.clients.solvers.LocalSolver` with ``prox=μ``):
``x ← x − η (g + μ (x − w_n))``; server step as FedAvg, ``w_{n+1} = w_n + s Σ_k ω_k Δ_k``.
Its accumulation vector is ``a_k = [(1 − α)^{τ−1}, …, 1 − α, 1]`` with ``α = ημ`` (seed 003 §IV-B), so FedProx
weights clients by ``p_k (1 − (1 − α)^{τ_k})`` instead of ``p_k τ_k``.  Needs ``ημ <= 1``.  ``μ = 0`` is FedAvg.
Defaults: ``μ = 0.01`` (tuned value in seeds 000 and 004).

With local momentum ``ρ`` the proximal term is, by default, a separate step outside the momentum buffer,
``v ← ρv + g``, ``x ← x − η (v + μ (x − w_n))``.  Seed 003's code (JYWa/FedNova, ``distoptim/FedProx.py``) instead
adds ``μ (x − w_n)`` in place into the momentum buffer, so it is carried into later steps (heavy ball on the
proximal objective); ``prox_in_buffer=True`` reproduces that (:mod:`fedsde.clients.solvers`).  The two agree when
``ρ = 0`` or ``μ = 0``.
"""

from __future__ import annotations

from fedsde._validate import positive_float
from fedsde.aggregators.fedavg import FedAvg
from fedsde.aggregators.registry import register
from fedsde.clients.solvers import LocalSolver


@register
class FedProx(FedAvg):
    """FedAvg with the proximal local solver (see module docstring).

    Parameters
    ----------
    mu : float
        Proximal coefficient ``μ >= 0``.
    momentum : float
        Optional local heavy-ball momentum ``ρ`` (buffer reset every round).
    prox_in_buffer : bool
        Put the proximal term into the momentum buffer, as seed 003's code does (default: a separate step).
    """

    name = "fedprox"
    paper = "Li et al. 2020 (FedProx); seed 003 §IV-B"

    def __init__(self, mu: float = 0.01, *, momentum: float = 0.0, prox_in_buffer: bool = False):
        self.mu = positive_float("mu", mu, allow_zero=True)
        self.momentum = float(momentum)
        self.prox_in_buffer = bool(prox_in_buffer)
        super().__init__(local_solver=LocalSolver(momentum=momentum, prox=self.mu, prox_in_buffer=self.prox_in_buffer))
