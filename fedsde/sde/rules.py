"""The SDE of each server rule on quadratic clients, from the rule's own exact one-round law.

A rule declares the SDE it has (:attr:`fedsde.aggregators.Aggregator.sde_kind`); this module builds the linear
ones.  Clock ``t = n·h``, server step ``s`` (``= h·η₀``), client rate ``η``, per-client local steps ``τ_k``.

**Linear rules** (``"linear"``: FedAvg, FedProx, FedNova, FedDisco, any rule with linear weights).  The round is
``w' = w + s Σ_k ω_k Δ_k`` with the rule's weights ``ω`` (:meth:`~fedsde.aggregators.Aggregator.sde_weights`;
FedNova ``ω_k = p_k τ_eff/τ_k``, seed 003 eq. (20); FedDisco the Disco weights, seed 004 eq. (3)).  Client ``k``
runs plain or proximal local SGD, ``x ← x − η(∇F_k(x) + ξ + μ(x − w))``; with ``P_k = I − η(U_k + μI)``,

    E Δ_k = −M_k (w − a_k),   M_k = η Σ_{m<τ_k} P_k^m U_k,     Cov Δ_k = η² Γ_k,  Γ_k = Σ_{m<τ_k} P_k^m Σ_k P_k^m

(``μ = 0``: ``M_k = I − (I − ηU_k)^{τ_k}``, :func:`fedsde.exact.round_law.client_round_maps`).  So the exact round
is ``w' = w − s B_rule (w − c_rule) + s ε`` with ``B_rule = Σ_k ω_k M_k``, ``c_rule = B_rule⁻¹ Σ_k ω_k M_k a_k``
and ``Cov ε = N_rule = η² Σ_k ω_k² Γ_k`` (a :class:`~fedsde.exact.round_law.RoundLaw` with ``p = ω``), and its
first-order SDE (seed 002 eq. (2) with the rule's exact round moments) is the OU process

    dw = −(s/h) B_rule (w − c_rule) dt + √((s²/h) N_rule) dB,

whose drift vanishes at the rule's own fixed point ``c_rule``: FedNova's objective inconsistency (seed 003 §III,
reference/seed-fednova.md §2.3) is the SDE's stationary mean.  One Euler–Maruyama step of size ``h`` is one
round of the Gaussian chain; the law of the OU is exact (:meth:`~fedsde.sde.coefficients.LinearSDE.moments`).

**Server momentum** (``"momentum"``: FedAvgM, FedNova with server momentum; :class:`~fedsde.aggregators.
MomentumForm` ``β, g``).  ``v' = βv + gU``, ``w' = w + s v'`` (Nesterov: ``w' = w + s(βv' + gU)``) with the linear
step ``U = −B(w − c) + ε``.  Its first-order SDE replaces ``s`` by ``s·g/(1 − β)`` (Li, Tai & E, JMLR 2019, §4
heavy ball; the effective learning rate of Hsu et al. 2019); for ``1 − β ∝ √s`` the second-order (underdamped)
SDE on ``(w, u)``, ``u = (s/h)·v``, is (same source; derived here on the clock ``t = n·h``)

    dw = u dt,   du = −((1 − β)/h) u dt − (s g/h²) B (w − c) dt + √(s² g²/h³ · N) dB

(heavy ball; ``h = √s`` gives friction ``(1 − β)/√s``, force ``gB``, diffusion ``√s g² N``).  The exact law of the
``(w − c, v)`` chain is :func:`momentum_chain_moments`.

Rules of kind ``"adaptive"`` have the SDE of Malladi et al. 2022 (:mod:`fedsde.sde.adaptive`); others are refused
with the rule's own one-line reason (:class:`NoSDEError`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedsde._validate import positive_float, positive_int
from fedsde.aggregators import Aggregator, MomentumForm, get_aggregator
from fedsde.errors import FedsdeInputError
from fedsde.exact.moments import Moments
from fedsde.exact.round_law import RoundLaw, _eig, client_round_maps, geometric_sum
from fedsde.params import Schedule, fedavg_rates
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.sde.coefficients import LinearSDE


class NoSDEError(FedsdeInputError):
    """The rule declares no SDE of the kind asked for (the message is the rule's own one-line reason)."""


def rule_kind(aggregator: str | Aggregator, kinds: tuple[str, ...] = ("linear", "momentum")) -> Aggregator:
    """The aggregator instance, after checking that it declares one of ``kinds`` (else :class:`NoSDEError`)."""
    agg = get_aggregator(aggregator)
    kind = agg.sde_kind
    if kind is None:
        raise NoSDEError(agg.sde_refusal)
    if kind not in kinds:
        raise NoSDEError(f"aggregator={agg.name or type(agg).__name__!r}: its SDE is of kind {kind!r}; here "
                         f"{' or '.join(repr(k) for k in kinds)} is needed")
    return agg


def prox_round_maps(problem: QuadraticProblem, eta: float, local_steps: np.ndarray, mu: float
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``M_k = η Σ_{m<τ} P^m U_k`` and ``Γ_k = Σ_{m<τ} P^m Σ_k P^m`` with ``P = I − η(U_k + μI)``, shapes (Q, d, d)
    (module docstring; evaluated in the eigenbasis of each ``U_k``, cost independent of ``τ``)."""
    if mu == 0.0:
        return client_round_maps(problem, eta, local_steps)
    lam, V, S_rot = _eig(problem)
    r = 1.0 - eta * (lam + mu)
    tau = np.asarray(local_steps, dtype=np.float64)[:, None]
    Vt = np.swapaxes(V, 1, 2)
    M = (V * (eta * lam * geometric_sum(r, tau))[:, None, :]) @ Vt
    G = geometric_sum(r[:, :, None] * r[:, None, :], tau[:, :, None])
    Gamma = V @ (S_rot * G) @ Vt
    return M, 0.5 * (Gamma + np.swapaxes(Gamma, 1, 2))


def rule_round_law(problem: QuadraticProblem, aggregator: str | Aggregator, eta: float,
                   local_steps: int | np.ndarray, server_lr: float = 1.0, *, participation: int | None = None,
                   weighting: str = "unbiased") -> RoundLaw:
    """The exact law of the linear step ``U = Σ_k ω_k Δ_k`` a rule is built on.

    Parameters
    ----------
    problem : QuadraticProblem
    aggregator : str or Aggregator
        A rule of kind ``"linear"``, ``"momentum"`` or ``"adaptive"`` (their buffers run on this step).
    eta : float or Schedule
        Client rate ``η``; or a :class:`~fedsde.params.Schedule` holding ``η``, ``τ_k`` and ``s`` (constant),
        checked where it was built (``local_steps`` and ``server_lr`` are then not read).
    local_steps : int or array of int, shape (Q,)
        ``τ_k``.
    server_lr : float
        Server step ``s`` (stored on the law; a linear rule's round is ``w' = w − s B(w − c) + s ε``).
    participation : int, optional
        ``m`` clients (draws) per round, drawn and weighted as :func:`fedsde.sim.simulate` does (``weighting``);
        default all.
    weighting : {"unbiased", "renormalised", "multinomial"}

    Returns
    -------
    RoundLaw
        ``B = B_rule``, ``Ba``, ``noise_cov = N_rule``, ``p = ω`` (module docstring); under client sampling a
        :class:`~fedsde.sde.sampled.SampledRoundLaw` (``p = E ω``, ``noise_cov = N₀`` and the sampling term).

    Raises
    ------
    NoSDEError
        Client sampling with a rule that does not declare how its weights depend on the sample.
    """
    agg = rule_kind(aggregator, ("linear", "momentum", "adaptive"))
    eta, tau, server_lr = fedavg_rates(eta, local_steps, server_lr, problem.Q)  # a Schedule: checked already
    solver = agg.local_solver
    solver.check_eta(eta)
    agg.bind(problem)
    norms = solver.norm_table(int(tau.max()), eta)[tau]
    M, Gamma = prox_round_maps(problem, eta, tau, float(solver.prox))
    from fedsde.sim.participation import is_sampled

    if participation is not None and is_sampled(participation, problem.Q, weighting):
        return _sampled_law(problem, agg, (eta, server_lr), (tau, norms, M, Gamma), participation, weighting)
    omega = np.asarray(agg.sde_weights(problem.p, norms, tau.astype(np.float64), p=problem.p), dtype=np.float64)
    return RoundLaw(
        B=np.einsum("q,qij->ij", omega, M), Ba=np.einsum("q,qij,qj->i", omega, M, problem.a),
        noise_cov=eta**2 * np.einsum("q,qij->ij", omega**2, Gamma), eta=eta, server_lr=server_lr,
        local_steps=tau, participation=None, M=M, Gamma=Gamma, p=omega, a=problem.a,
    )


def _sampled_law(problem, agg, rates, clients, participation, weighting):
    """The :class:`~fedsde.sde.sampled.SampledRoundLaw` of :func:`rule_round_law` under client sampling
    (``rates = (η, s)``, ``clients = (τ, ‖a‖₁, M, Γ)``)."""
    from fedsde.sde.sampled import SampledRoundLaw, SamplingTerm, weight_moments

    (eta, server_lr), (tau, norms, M, Gamma) = rates, clients
    form = agg.sampled_sde_weights(norms.astype(np.float64), tau.astype(np.float64), p=problem.p)
    if form is None:
        raise NoSDEError(f"aggregator={agg.name or type(agg).__name__!r}, participation={participation}: the rule "
                         "does not declare how its weights depend on the sampled clients, so its SDE holds under "
                         "full participation only")
    mu, K = weight_moments(form, problem.p, participation, weighting)
    C = K - np.outer(mu, mu)
    term = SamplingTerm(0.5 * (C + C.T), M, problem.a, int(participation), weighting)
    return SampledRoundLaw(
        B=np.einsum("q,qij->ij", mu, M), Ba=np.einsum("q,qij,qj->i", mu, M, problem.a),
        noise_cov=eta**2 * np.einsum("q,qij->ij", np.diag(K), Gamma), eta=eta, server_lr=server_lr,
        local_steps=tau, participation=None, M=M, Gamma=Gamma, p=mu, a=problem.a, sampling=term,
    )


@dataclass(frozen=True)
class RuleSDE:
    """A rule's first-order SDE (and, for server momentum, its underdamped one) on the clock ``t = n·h``.

    Attributes
    ----------
    sde : LinearSDE or SampledSDE
        ``dw = −A(w − c) dt + b dB``: ``A = (s_eff/h) B_rule``, ``c = c_rule``, ``b bᵀ = (s_eff²/h) N_rule``; under
        client sampling a :class:`~fedsde.sde.sampled_sde.SampledSDE` (its diffusion quadratic in ``w``).
    law : RoundLaw
        The exact law of the rule's linear step.
    aggregator : Aggregator
    kind : str
        ``"linear"`` or ``"momentum"``.
    effective_server_lr : float
        ``s_eff``: ``s`` (linear) or ``s·g/(1 − β)`` (momentum).
    momentum : MomentumForm or None
    """

    sde: LinearSDE
    law: RoundLaw
    aggregator: Aggregator
    kind: str
    effective_server_lr: float
    momentum: MomentumForm | None = None

    @property
    def sampling(self):
        """The between-sample term of the round (:class:`~fedsde.sde.sampled.SamplingTerm`), or ``None`` under full
        participation."""
        return getattr(self.law, "sampling", None)

    def underdamped(self) -> LinearSDE | None:
        """The second-order SDE on ``(w, u)`` (heavy ball; module docstring), a :class:`LinearSDE` in dimension
        ``2d`` centred at ``(c, 0)``; ``None`` for a linear rule or under client sampling."""
        mf = self.momentum
        if mf is None or self.sampling is not None:
            return None
        d, h, s, g = self.sde.d, self.sde.h, self.law.server_lr, mf.gain
        A = np.zeros((2 * d, 2 * d))
        A[:d, d:] = -np.eye(d)
        A[d:, :d] = (s * g / h**2) * self.law.B
        A[d:, d:] = ((1.0 - mf.beta) / h) * np.eye(d)
        D = np.zeros((2 * d, 2 * d))
        D[d:, d:] = (s * s * g * g / h**3) * self.law.noise_cov
        return LinearSDE(A=A, c=np.concatenate([self.sde.c, np.zeros(d)]), diffusion_cov=0.5 * (D + D.T),
                         variant="underdamped", h=h, server_lr=s, eta=self.sde.eta, local_steps=self.sde.local_steps)

    def to_dict(self) -> dict:
        """``{"drift": {"A", "c"}, "diffusion_cov", "stationary": {"mean", "cov"} | None, …}`` (``derive``'s keys)."""
        st = self.sde.stationary()
        out = {
            "aggregator": self.aggregator.describe(), "sde": self.kind, "clock": "t = n*h", "h": self.sde.h,
            "server_lr": self.law.server_lr, "effective_server_lr": self.effective_server_lr, "eta": self.law.eta,
            "local_steps": self.law.local_steps.tolist(), "weights": self.law.p,
            "drift": {"A": self.sde.A, "c": self.sde.c}, "diffusion_cov": self.sde.diffusion_cov,
            "stationary": None if st is None else {"mean": st.mean, "cov": st.cov},
            "round_law": {"B": self.law.B, "c": self.sde.c, "noise_cov": self.law.noise_cov},
        }
        if self.sampling is not None:
            sm = self.sampling
            out["sampling"] = {"participation": sm.participation, "weighting": sm.weighting, "C": sm.C,
                               "diffusion": "diffusion_cov + (s_eff^2/h) sum_kl C_kl M_k (w - a_k)(w - a_l)^T M_l^T",
                               "M": self.law.M, "a": self.law.a}
        if self.momentum is not None and self.sampling is None:
            ud = self.underdamped()
            out["momentum"] = {"beta": self.momentum.beta, "gain": self.momentum.gain,
                               "nesterov": self.momentum.nesterov, "step_factor": self.momentum.step_factor}
            out["second_order"] = {"state": "(w, u), u = (s/h) v", "drift": {"A": ud.A, "c": ud.c},
                                   "diffusion_cov": ud.diffusion_cov}
        return out


def rule_sde(problem: QuadraticProblem, aggregator: str | Aggregator, eta: float, local_steps: int | np.ndarray,
             server_lr: float = 1.0, h: float | None = None, *, participation: int | None = None,
             weighting: str = "unbiased") -> RuleSDE:
    """The first-order SDE of a linear or momentum rule (module docstring); ``h`` defaults to ``η``; under client
    sampling (``participation``, ``weighting`` as :func:`rule_round_law`) its diffusion gains the sampling term
    (:mod:`fedsde.sde.sampled_sde`).  ``eta`` may be a :class:`~fedsde.params.Schedule` holding the rates, as in
    :func:`rule_round_law`.

    Raises
    ------
    NoSDEError
        The rule declares no SDE of kind ``"linear"`` or ``"momentum"`` (its one-line reason).
    FedsdeInputError
        ``B_rule`` singular (no unique fixed point) or bad arguments.
    """
    agg = rule_kind(aggregator)
    law = rule_round_law(problem, agg, eta, local_steps, server_lr, participation=participation, weighting=weighting)
    if h is None:  # a Schedule's own h (checked where it was built), else η (seed 002, Section 6)
        h = eta.time_step if isinstance(eta, Schedule) else law.eta
    else:
        h = positive_float("h", h)
    mf = agg.momentum_form() if agg.sde_kind == "momentum" else None
    s_eff = law.server_lr * (mf.step_factor if mf is not None else 1.0)
    D = (s_eff * s_eff / h) * law.noise_cov
    common = dict(A=(s_eff / h) * law.B, c=law.c, diffusion_cov=0.5 * (D + D.T), h=h, server_lr=s_eff, eta=law.eta,
                  local_steps=law.local_steps)
    if getattr(law, "sampling", None) is not None:
        from fedsde.sde.sampled_sde import SampledSDE

        sde = SampledSDE(sampling=law.sampling, scale=s_eff * s_eff / h, variant=f"rule:{agg.sde_kind}:sampled",
                         **common)
    else:
        sde = LinearSDE(variant=f"rule:{agg.sde_kind}", **common)
    return RuleSDE(sde, law, agg, agg.sde_kind, s_eff, mf)


def momentum_transition(law: RoundLaw, form: MomentumForm) -> tuple[np.ndarray, np.ndarray]:
    """The ``(w − c, v)`` chain: ``z' = T z + L ε`` with ``T`` (2d, 2d) and ``L`` (2d, d) (module docstring)."""
    d, s, beta, g = law.d, law.server_lr, form.beta, form.gain
    eye = np.eye(d)
    lead = beta if form.nesterov else 1.0  # w' = w + s(lead·v' + [nesterov] gU)
    wv = s * beta * lead
    wu = s * g * (lead + (1.0 if form.nesterov else 0.0))
    T = np.block([[eye - wu * law.B, wv * eye], [-g * law.B, beta * eye]])
    L = np.vstack([wu * eye, g * eye])
    return T, L


def momentum_chain_moments(rsde: RuleSDE, rounds: int, w0, *, record=None) -> Moments:
    """Exact mean and covariance of the server weights of a momentum rule's chain (``v_0 = 0``, ``w_0`` a point).

    ``z = (w − c, v)``, ``E z' = T E z``, ``Cov z' = T Cov z Tᵀ + L N Lᵀ`` (:func:`momentum_transition`).
    Returns the ``w`` block at the recorded rounds (default every round).
    """
    if rsde.momentum is None:
        raise FedsdeInputError(f"aggregator={rsde.aggregator.name!r}: has no server momentum")
    rounds = positive_int("rounds", rounds, minimum=0)
    law, d = rsde.law, rsde.law.d
    T, L = momentum_transition(law, rsde.momentum)
    noise = L @ law.noise_cov @ L.T
    z = np.concatenate([np.asarray(w0, dtype=np.float64).reshape(d) - rsde.sde.c, np.zeros(d)])
    P = np.zeros((2 * d, 2 * d))
    keep = np.arange(rounds + 1) if record is None else np.asarray(record, dtype=np.int64)
    means, covs = [], []
    for n in range(rounds + 1):
        if n in keep:
            means.append(z[:d] + rsde.sde.c)
            covs.append(P[:d, :d].copy())
        z, P = T @ z, T @ P @ T.T + noise
    return Moments(keep, np.array(means), np.array(covs))


def linear_chain_moments(law: RoundLaw, rounds: int, w0, *, record=None) -> Moments:
    """Exact moments of a linear rule's chain from the point ``w0`` (:meth:`RoundLaw.step` each round)."""
    rounds = positive_int("rounds", rounds, minimum=0)
    m, P = np.asarray(w0, dtype=np.float64).reshape(law.d), np.zeros((law.d, law.d))
    keep = np.arange(rounds + 1) if record is None else np.asarray(record, dtype=np.int64)
    means, covs = [], []
    for n in range(rounds + 1):
        if n in keep:
            means.append(m)
            covs.append(P)
        m, P = law.step(m, P)
    return Moments(keep, np.array(means), np.array(covs))


def rule_chain_moments(rsde: RuleSDE, rounds: int, w0, *, record=None) -> Moments:
    """Exact moments of the rule's chain (linear or momentum, any participation) from the point ``w0``."""
    if rsde.sampling is not None:
        from fedsde.sde.sampled_sde import chain_moments

        T, L = chain_transition(rsde)
        return chain_moments(T, L, rsde.law, positive_int("rounds", rounds, minimum=0), w0, record=record)
    if rsde.momentum is not None:
        return momentum_chain_moments(rsde, rounds, w0, record=record)
    return linear_chain_moments(rsde.law, rounds, w0, record=record)


def chain_stationary_law(rsde: RuleSDE) -> tuple[np.ndarray, np.ndarray] | None:
    """The chain's stationary mean and covariance of ``w`` (discrete Lyapunov on ``w − c`` or ``(w − c, v)``), or
    ``None`` when the mean recursion does not contract."""
    import scipy.linalg

    law, d = rsde.law, rsde.law.d
    if rsde.sampling is not None:
        from fedsde.sde.sampled_sde import chain_stationary

        return chain_stationary(*chain_transition(rsde), law)
    if rsde.momentum is None:
        T, noise = law.transition, law.server_noise_cov
    else:
        T, L = momentum_transition(law, rsde.momentum)
        noise = L @ law.noise_cov @ L.T
    if np.max(np.abs(np.linalg.eigvals(T))) >= 1.0:
        return None
    P = scipy.linalg.solve_discrete_lyapunov(T, noise)[:d, :d]
    return rsde.sde.c.copy(), 0.5 * (P + P.T)


def chain_transition(rsde: RuleSDE) -> tuple[np.ndarray, np.ndarray]:
    """``(T, L)`` of the chain ``z' = Tz + Lε`` on ``z = w − c`` (``I − sB``, ``sI``) or ``(w − c, v)``
    (:func:`momentum_transition`)."""
    if rsde.momentum is not None:
        return momentum_transition(rsde.law, rsde.momentum)
    return rsde.law.transition, rsde.law.server_lr * np.eye(rsde.law.d)


def chain_spectral_radius(rsde: RuleSDE) -> float:
    """Spectral radius of the chain's mean recursion (``I − sB``, or the momentum transition)."""
    T = rsde.law.transition if rsde.momentum is None else momentum_transition(rsde.law, rsde.momentum)[0]
    return float(np.max(np.abs(np.linalg.eigvals(T))))


def simulate_rule_sde(rsde: RuleSDE, rounds: int, replicates: int, seed: int, w0=None, *, method: str = "exact",
                      substeps: int = 1, record=None) -> tuple[np.ndarray, np.ndarray]:
    """Paths of a rule's first-order SDE on the round grid (float64, numpy ``default_rng(seed)``).

    ``method="exact"``: the OU transition over ``h/substeps`` (:meth:`LinearSDE.transition`); ``"euler"``:
    Euler–Maruyama with step ``h/substeps``.  Returns ``rounds`` (T,) and the paths ``(T, R, d)`` at the recorded
    rounds (default every round).
    """
    from fedsde._validate import choice

    choice("method", method, ("exact", "euler"))
    rounds = positive_int("rounds", rounds, minimum=0)
    replicates = positive_int("replicates", replicates)
    substeps = positive_int("substeps", substeps)
    if rsde.sampling is not None:
        if method == "exact":
            raise FedsdeInputError("method='exact': under client sampling the SDE's diffusion depends on w, so it has "
                                   "no exact Gaussian transition; use method='euler' (with substeps)")
        from fedsde.sde.sampled_sde import euler_paths

        return euler_paths(rsde.sde, rounds, replicates, seed, w0, substeps=substeps, record=record)
    sde, d = rsde.sde, rsde.sde.d
    dt = sde.h / substeps
    if method == "exact":
        Phi, K = sde.transition(dt)
    else:
        Phi, K = np.eye(d) - dt * sde.A, dt * sde.diffusion_cov
    from fedsde.sde.coefficients import psd_sqrt

    root = psd_sqrt(K, name="the transition covariance")
    rng = np.random.default_rng(seed)
    w = np.broadcast_to(np.zeros(d) if w0 is None else np.asarray(w0, dtype=np.float64), (replicates, d)).copy()
    keep = set(range(rounds + 1)) if record is None else {int(k) for k in record}
    out, at = [], []
    for n in range(rounds + 1):
        if n in keep:
            out.append(w.copy())
            at.append(n)
        if n == rounds:
            break
        for _ in range(substeps):
            w = sde.c + (w - sde.c) @ Phi.T + rng.standard_normal((replicates, d)) @ root.T
    return np.asarray(at), np.stack(out)


__all__ = [
    "NoSDEError",
    "RuleSDE",
    "chain_spectral_radius",
    "chain_stationary_law",
    "chain_transition",
    "linear_chain_moments",
    "momentum_chain_moments",
    "momentum_transition",
    "prox_round_maps",
    "rule_chain_moments",
    "rule_kind",
    "rule_round_law",
    "rule_sde",
    "simulate_rule_sde",
]
