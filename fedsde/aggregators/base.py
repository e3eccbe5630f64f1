"""The server-rule contract shared by every aggregator.

An aggregator turns the clients' displacements into the next server weights.  It is a pair of functions
with explicit state (in the style of FedJAX): ``init(w0) -> state`` and
``apply(w, updates, weights, state, ctx) -> (w_next, state)``, vectorised over replicates.

Shapes: ``R`` replicates, ``Q`` clients, ``d`` dimension.

* ``w`` : Tensor, shape (R, d) — server weights before the round;
* ``updates`` : Tensor, shape (R, Q, d) — client displacements ``Δ_k = w_k^{(τ_k)} − w``
  (zero for clients that did not participate);
* ``weights`` : Tensor, shape (R, Q) — aggregation weights chosen by the participation scheme
  (``p_k``; ``p_k Q/m`` on the sampled clients for unbiased partial participation; ``p_k / Σ_S p_j`` for the
  renormalised variant; draws/m for multinomial sampling; zero off the sample).

Besides the server rule, an aggregator declares what the clients do (the simulator reads these):

* ``local_solver`` — a :class:`fedsde.clients.solvers.LocalSolver` (plain SGD unless the algorithm changes it, e.g.
  FedProx's proximal term);
* ``correction(state)`` — a constant per-round gradient correction of shape (R, Q, d) (SCAFFOLD's ``c − c_k``)
  or ``None``;
* ``needs_norms`` — the simulator passes ``‖a_k‖₁`` of the local solver in ``ctx.norms`` (FedNova);
* ``needs_first_grads`` — the simulator passes the stochastic gradient at the server weights (the first local
  step's oracle draw) in ``ctx.first_grads`` (SCAFFOLD option I);
* ``warm_start_rounds`` — rounds run with full participation whatever the sampling (FedAWARE's start);
* ``bind(problem)`` — called once before ``init`` with the problem (e.g. FedDisco reads label distributions).

And what it is, for the exact laws, the stability checks and the theory (quadratic clients; callers read these and
never compare names):

* ``stateful`` — keeps state across rounds (no one-round law of the weights alone);
* ``mean_only`` — reads the displacements only through their weighted mean and keeps no per-client state (the
  cross-device regime of the simulator then trains and aggregates the participants alone);
* ``participant_state`` — keeps per-client state only for the clients that have taken part, on participant slots
  (``correction(state, clients)``, ``ctx.clients``; slots not ``ctx.participating`` are idle), so the cross-device
  regime applies too (SCAFFOLD, FedAWARE without its full first round);
* ``linear_weights(weights, norms, local_steps)`` — the weights ``ω`` that make the server step
  ``w + s Σ_k ω_k Δ_k`` (rules linear in the client displacements; the base raises :class:`NoExactLawError`);
* ``exact_weights(problem, local_steps, participation=)`` — those weights for plain local SGD on a problem, after
  the checks that an exact law exists (the weights of :func:`fedsde.exact.round_law`);
* ``generalised_weights(weights, norms, local_steps)`` — the weights of seed 003's generalised update (6);
* ``server_recursion(B, server_lr)`` — the linear recursion of the server mean (:class:`ServerRecursion`), or
  ``None``;
* ``check_problem(problem, source)`` — a one-line error when the rule needs data the problem does not carry;
* ``sde_kind`` — which continuous-time model the rule has (:data:`SDE_KINDS`: ``"linear"``, the first-order SDE of
  its exact one-round law; ``"momentum"``, server heavy ball; ``"adaptive"``, the SDE of Malladi et al. 2022), or
  ``None`` with ``sde_refusal`` saying why; ``sde_weights`` and ``momentum_form`` give what those SDEs read
  (:mod:`fedsde.sde.rules`, :mod:`fedsde.sde.adaptive`); ``sampled_sde_weights`` how those weights depend on the
  sampled clients (the SDE under client sampling, :mod:`fedsde.sde.sampled`), and ``sde_step``/``apply_step`` the
  rule's step and server update apart (the SVAG chains of :mod:`fedsde.sde.rule_svag`).

A new rule that is linear in the displacements implements ``apply`` and ``linear_weights``; the exact laws, the
stability check and the theory functions then apply to it unchanged.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from fedsde.aggregators.sde_forms import MomentumForm, SampledWeights
from fedsde.clients.solvers import SGD, LocalSolver
from fedsde.errors import NoExactLawError
from fedsde.params import local_steps_of


@dataclass(frozen=True)
class RoundContext:
    """What the server knows about the round besides the updates.

    Attributes
    ----------
    round : int
        Round index ``n`` (0-based).
    server_lr : float
        Actual server step ``s`` of this round (``h·η₀`` in seed 002's notation).
    eta : float
        Client learning rate of this round.
    local_steps : Tensor, shape (R, Q)
        Local steps each client ran this round (``τ_k``).
    participating : Tensor of bool, shape (R, Q)
        Which clients took part.
    p : Tensor, shape (Q,)
        The problem's client weights.
    norms : Tensor, shape (R, Q), optional
        ``‖a_k‖₁`` of each client's local solver this round (when the aggregator ``needs_norms``).
    first_grads : Tensor, shape (R, Q, d), optional
        Stochastic gradient of each client at the server weights (when ``needs_first_grads``).
    clients : Tensor of int, shape (R, m), optional
        The cross-device regime (rules with :attr:`~Aggregator.participant_state`): the updates, weights, steps,
        norms and first gradients are those of ``m`` participant slots, and this names each slot's client
        (``p`` stays the population's, shape (Q,)).
    """

    round: int
    server_lr: float
    eta: float
    local_steps: torch.Tensor
    participating: torch.Tensor
    p: torch.Tensor
    norms: torch.Tensor | None = None
    first_grads: torch.Tensor | None = None
    clients: torch.Tensor | None = None


#: the continuous-time models a rule can declare (:attr:`Aggregator.sde_kind`)
SDE_KINDS = ("linear", "momentum", "adaptive")


@dataclass(frozen=True)
class ServerRecursion:
    """The linear recursion of the server mean over one round on quadratic clients (for stability checks).

    Attributes
    ----------
    matrix : ndarray, shape (n, n)
        Transition of the state (``w − c``, and the server's buffers, if any) from one round to the next; the mean
        grows geometrically when its spectral radius exceeds one.
    description : str
        How messages name the recursion.
    symbol : str
        Notation of its spectral radius in messages (empty when there is none).
    max_server_lr : float, optional
        The largest stable server step where it has a closed form.
    """

    matrix: np.ndarray
    description: str
    symbol: str = ""
    max_server_lr: float | None = None


def linear_recursion(B: np.ndarray, server_lr: float) -> ServerRecursion:
    """``w − c ← (I − s·B)(w − c)``: the mean of a rule ``w + s Σ_k ω_k Δ_k`` with ``Σ_k ω_k E Δ_k = −B(w − c)``
    (seed 002, one-round map of the mean); stable iff ``s·β_i < 2`` for the eigenvalues ``β_i`` of ``B``."""
    beta_max = float(np.max(np.abs(np.linalg.eigvals(B))))
    return ServerRecursion(np.eye(B.shape[0]) - server_lr * B,
                           "the server recursion of the mean, w ← w − s·B(w − c)", "rho(I − s·B)",
                           2.0 / beta_max if beta_max > 0 else None)


class Aggregator(ABC):
    """Base class of server rules (see the module docstring for the contract and shapes).

    Class attributes declare what the rule is: ``name`` (registry key) and ``paper`` (source).  The flags
    ``stateful``, ``needs_norms``, ``needs_first_grads``, ``warm_start_rounds`` and ``exact_under_sampling`` are
    read-only properties here; a rule declares a constant one as a class attribute (``stateful = True``) and one
    that depends on its parameters or on a wrapped rule as a property.
    """

    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""

    @property
    def stateful(self) -> bool:
        """Keeps state across rounds (so the chain of the weights alone has no one-round law)."""
        return False

    @property
    def needs_norms(self) -> bool:
        """The simulator passes ``‖a_k‖₁`` of the local solver in ``ctx.norms``."""
        return False

    @property
    def needs_first_grads(self) -> bool:
        """The simulator passes the first local step's stochastic gradient in ``ctx.first_grads``."""
        return False

    @property
    def warm_start_rounds(self) -> int:
        """Rounds run with full participation whatever the sampling."""
        return 0

    @property
    def exact_under_sampling(self) -> bool:
        """The weights of :meth:`linear_weights` are the participation scheme's own, so the exact law holds under
        client sampling too (``round_law(..., participation=m, weights=ω)``); False where they depend on which
        clients are sampled."""
        return False

    @property
    def mean_only(self) -> bool:
        """The rule reads a round's displacements only through ``Σ_k ω_k Δ_k`` (the participation scheme's weights,
        :func:`weighted_mean`) and keeps no per-client state (its state, if any, is the server's, shape (R, d)):
        the cross-device regime may hand it the ``m`` participants' slots alone (server momentum, adaptive server
        rules)."""
        return False

    @property
    def participant_state(self) -> bool:
        """The rule keeps per-client state for the clients that have taken part only (memory growing with them) and
        runs on participant slots: :meth:`correction` and :meth:`apply` accept the slots' clients (``ctx.clients``),
        so the cross-device regime may hand it the ``m`` participants alone (SCAFFOLD)."""
        return False

    def step_memory(self, Q: int) -> int:
        """Bytes per replicate the server step needs for ``Q`` clients beyond the round's ``(Q, d)`` tensors (for the
        up-front memory estimate; FedAWARE: its min-norm problem on a ``Q × Q`` Gram matrix)."""
        return 0

    @property
    def cross_device_hint(self) -> str:
        """Why the rule trains every client in some round whatever the sampling, and which setting does not (one
        clause for the up-front refusal of a population too large for that round; empty when nothing to say)."""
        return ""

    @property
    def local_solver(self) -> LocalSolver:
        """The clients' local solver (plain SGD by default)."""
        return getattr(self, "_local_solver", None) or SGD

    def bind(self, problem: Any) -> None:
        """Read what the rule needs from the problem before :meth:`init` (default: nothing)."""
        return None

    def check_problem(self, problem: Any, source: str) -> None:
        """Raise a one-line :class:`FedsdeInputError` when the rule needs data ``problem`` does not carry.

        ``source`` names where the problem came from (a file path or a name) for the message.  Default: nothing
        is needed.
        """
        return None

    def init(self, w0: torch.Tensor) -> Any:
        """Initial server state for weights ``w0`` of shape (R, d) (``None`` for stateless rules)."""
        return None

    def correction(self, state: Any, clients: torch.Tensor | None = None) -> torch.Tensor | None:
        """Constant gradient correction of every client this round, shape (R, Q, d), or ``None``; given ``clients``
        (R, m) (rules with :attr:`participant_state`, the cross-device regime): of those slots' clients, (R, m, d)."""
        return None

    # ---------------------------------------------------------------- what the theory reads
    def linear_weights(self, weights: np.ndarray, norms: np.ndarray, local_steps: np.ndarray, *,
                       p: np.ndarray | None = None) -> np.ndarray:
        """The weights ``ω`` that make this rule's server step ``w + s Σ_k ω_k Δ_k``.

        Parameters
        ----------
        weights : ndarray, shape (Q,)
            The round's aggregation weights from the participation scheme (``p`` under full participation).
        norms : ndarray, shape (Q,)
            ``‖a_k‖₁`` of each client's local solver (``τ_k`` for plain SGD).
        local_steps : ndarray, shape (Q,)
            ``τ_k``.
        p : ndarray, shape (Q,), optional
            The problem's client weights (default ``weights``).

        Returns
        -------
        ndarray, shape (Q,)

        Raises
        ------
        NoExactLawError
            The default: the rule is not linear in the client displacements with weights fixed by the round.
        """
        raise NoExactLawError(f"aggregator={self._label!r}: no exact law (exact laws exist for fedavg, fednova, "
                              "feddisco)")

    def generalised_weights(self, weights: np.ndarray, norms: np.ndarray, local_steps: np.ndarray) -> np.ndarray:
        """The weights ``w_k`` (summing to one) of seed 003's generalised update, eq. (6),
        ``x⁺ = x − τ_eff Σ_k w_k η d_k`` with normalised gradients ``d_k = G_k a_k/‖a_k‖₁``.

        Default: ``w_k ∝ ω_k ‖a_k‖₁`` with ``ω`` of :meth:`linear_weights` (``Σ_k ω_k Δ_k = −η Σ_k ω_k ‖a_k‖₁ d_k``);
        FedAvg's is eq. (7), ``w_k = p_k‖a_k‖₁/Σ_j p_j‖a_j‖₁``.  Arguments and shapes as :meth:`linear_weights`.
        """
        lw = self.linear_weights(weights, norms, local_steps) * norms
        return lw / np.sum(lw)

    def exact_weights(self, problem: Any, local_steps: int | np.ndarray, *,
                      participation: int | None = None) -> np.ndarray:
        """The weights ``ω`` that make the rule ``w + s Σ_k ω_k Δ_k`` for clients running plain local SGD on
        ``problem``: :func:`fedsde.exact.round_law` with ``weights=ω`` is then its exact one-round law.

        Parameters
        ----------
        problem : QuadraticProblem
        local_steps : int or array of int, shape (Q,)
            Fixed ``τ_k``.
        participation : int, optional
            Clients sampled per round.

        Returns
        -------
        ndarray, shape (Q,)
            :meth:`linear_weights` with the problem's weights ``p`` and ``‖a_k‖₁ = τ_k``, after :meth:`bind`.

        Raises
        ------
        NoExactLawError
            The rule keeps server state, its clients run another local solver, its weights depend on the sampled
            clients (``participation < Q`` unless :attr:`exact_under_sampling`), or it is not linear.
        """
        tau = local_steps_of(local_steps, problem.Q).astype(np.float64)
        if self.stateful:
            raise NoExactLawError(
                f"aggregator={self._label!r}: keeps server state across rounds, so the chain of the weights alone has "
                "no one-round law (exact laws exist for fedavg, fednova and feddisco)"
            )
        if not self.local_solver.plain:
            raise NoExactLawError(
                f"aggregator={self._label!r}: its clients run {self.local_solver.name} local steps; the exact laws "
                "assume plain local SGD"
            )
        if participation is not None and participation < problem.Q and not self.exact_under_sampling:
            raise NoExactLawError(
                f"aggregator={self._label!r}, participation={participation}: the weights depend on which clients are "
                "sampled, so there is no exact law under client sampling"
            )
        self.bind(problem)
        return self.linear_weights(problem.p, tau, tau, p=problem.p)

    def server_recursion(self, B: np.ndarray, server_lr: float) -> ServerRecursion | None:
        """The linear recursion of the server mean, or ``None`` where there is none.

        Default: :func:`linear_recursion` (``I − s·B``) for stateless rules, ``None`` for rules with server state.

        Parameters
        ----------
        B : ndarray, shape (d, d)
            The mean map of the averaged displacement, ``Σ_k ω_k E Δ_k = −B(w − c)`` (:func:`fedsde.exact.round_law`'s
            ``B``), with ``ω`` of :meth:`exact_weights` for stateless rules and the participation scheme's weights
            ``p`` for rules with server state.
        server_lr : float
            Server step ``s``.
        """
        return None if self.stateful else linear_recursion(B, server_lr)

    # ---------------------------------------------------------------- the SDE the rule declares
    @property
    def sde_kind(self) -> str | None:
        """The rule's continuous-time model, one of :data:`SDE_KINDS`, or ``None`` (then :attr:`sde_refusal` says
        why).  Default: ``"linear"`` for a stateless rule whose :meth:`linear_weights` exist and whose clients run
        plain or proximal SGD (no local momentum), else ``None``."""
        if self.stateful or self.local_solver.momentum:
            return None
        try:
            self.linear_weights(np.ones(1), np.ones(1), np.ones(1))
        except NoExactLawError:
            return None
        except Exception:  # weights that need bound data (FedDisco) still declare linearity
            return "linear"
        return "linear"

    @property
    def sde_refusal(self) -> str:
        """Why the rule has no SDE here (one line; empty when :attr:`sde_kind` is set)."""
        if self.sde_kind is not None:
            return ""
        if self.local_solver.momentum:
            return (f"aggregator={self._label!r}: its clients run local momentum, whose round map the rule SDEs do "
                    "not model (SDEs exist for plain and proximal local SGD)")
        return (f"aggregator={self._label!r}: declares no SDE (SDEs exist for linear rules, server momentum and the "
                "adaptive server rules)")

    def sde_weights(self, weights: np.ndarray, norms: np.ndarray, local_steps: np.ndarray, *,
                    p: np.ndarray | None = None) -> np.ndarray:
        """The weights ``ω`` of the linear step ``U = Σ_k ω_k Δ_k`` the rule's SDE is built on (default
        :meth:`linear_weights`; a momentum rule gives those of the step under its buffer).  Shapes as
        :meth:`linear_weights`."""
        return self.linear_weights(weights, norms, local_steps, p=p)

    def momentum_form(self) -> MomentumForm | None:
        """The server heavy ball on top of :meth:`sde_weights` (rules of kind ``"momentum"``), else ``None``."""
        return None

    def sampled_sde_weights(self, norms: np.ndarray, local_steps: np.ndarray, *,
                            p: np.ndarray) -> SampledWeights | None:
        """How :meth:`sde_weights` depend on a round's participation weights (:class:`SampledWeights`; ``norms``,
        ``local_steps``, ``p`` of shape (Q,)), which the SDE under client sampling needs; ``None`` (default): not
        declared, and the rule's SDE holds for full participation only."""
        return None

    def sde_step(self, updates: torch.Tensor, weights: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """The linear step ``U = Σ_k ω_k Δ_k`` (R, d) the SDE is built on, from a round's displacements (R, Q, d) and
        participation weights (R, Q) (the SVAG chains combine two rounds' steps; :mod:`fedsde.sde.rule_svag`).
        Default: the weighted mean (rules whose :meth:`sde_weights` are the scheme's own)."""
        return weighted_mean(weights, updates)

    def apply_step(self, w: torch.Tensor, step: torch.Tensor, state: Any, ctx: RoundContext) -> tuple[torch.Tensor,
                                                                                                     Any]:
        """The server update for a given step ``U`` (R, d) of :meth:`sde_step`.  Default: :meth:`apply` with ``U``
        as the displacement of one client of weight 1 (rules that read the round only through the weighted mean)."""
        R = step.shape[0]
        one = RoundContext(round=ctx.round, server_lr=ctx.server_lr, eta=ctx.eta,
                           local_steps=torch.ones((R, 1), dtype=torch.long, device=step.device),
                           participating=torch.ones((R, 1), dtype=torch.bool, device=step.device),
                           p=torch.ones(1, dtype=step.dtype, device=step.device))
        return self.apply(w, step.unsqueeze(1), torch.ones((R, 1), dtype=step.dtype, device=step.device), state, one)

    @property
    def _label(self) -> str:
        return self.name or type(self).__name__

    def describe(self) -> dict:
        """Name, source and parameters, for records."""
        return {"name": self.name, "paper": self.paper, "local_solver": self.local_solver.name,
                **{k: v for k, v in vars(self).items() if not k.startswith("_") and _plain(v)}}

    @abstractmethod
    def apply(
        self,
        w: torch.Tensor,
        updates: torch.Tensor,
        weights: torch.Tensor,
        state: Any,
        ctx: RoundContext,
    ) -> tuple[torch.Tensor, Any]:
        """Next server weights (R, d) and state."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_") and _plain(v))
        return f"{type(self).__name__}({args})"


def _plain(v: Any) -> bool:
    return isinstance(v, bool | int | float | str | type(None)) or (
        isinstance(v, tuple) and all(isinstance(x, int | float | str) for x in v))


def weighted_mean(weights: torch.Tensor, updates: torch.Tensor) -> torch.Tensor:
    """``Σ_k ω_k Δ_k`` for weights (R, Q) and updates (R, Q, d), shape (R, d)."""
    return torch.bmm(weights.unsqueeze(1), updates).squeeze(1)
