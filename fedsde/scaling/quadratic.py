"""Both ends of a scaling rule on quadratic clients, computed exactly (no sampling).

Each end is the discrete FedAvg chain of :mod:`fedsde.exact`: its stationary mean and covariance (discrete
Lyapunov equation) and its mean and covariance after its own number of rounds, i.e. at the common horizon
``τ = n·s·η·E``.  The ``clients`` and ``client-lr`` rules copy every client ``κ`` times with weight ``p_k/κ``
(:meth:`~fedsde.problems.QuadraticProblem.replicated`, as gallery F4 does), so ``κ`` must be a whole number; a
quadratic problem has no minibatch, so the ``batch`` rule does not apply to it (on quadratics with ``Σ_k ∝ 1/b``
it would coincide exactly with ``clients``, which divides the round noise by ``κ`` the same way).

Discrepancy between laws ``(m_b, P_b)`` (base) and ``(m_s, P_s)`` (scaled), :func:`law_discrepancy`:

* ``excess_loss_rel = |L_s − L_b| / L_b`` with ``L = E F(w) − F* = ½ (m − w*)ᵀH(m − w*) + ½ Tr(H P)``;
* ``cov_rel = ‖P_s − P_b‖_F / ‖P_b‖_F``;
* ``mean_shift_sd = ‖m_s − m_b‖ / √Tr P_b`` (the shift in units of the base spread);
* ``w2_rel = W₂(N(m_b, P_b), N(m_s, P_s)) / √(E_b ‖w − w*‖²)``.

First-order rate (derived in ``docs/scaling.md``): for scalar clients with curvatures ``u_k`` the chain's
stationary variance equals the SDE's times ``1 + c + O(η²)`` with
``c = η·((E − 1)(ū₂/(2ū) − ũ) + s·E·ū/2)`` (:func:`first_order_correction`; ``ū = Σ p_k u_k``,
``ū₂ = Σ p_k u_k²``, ``ũ`` the mean of ``u_k`` weighted by ``p_k² σ_k²``), which is ``η·u·(s·E − E + 1)/2`` when
every ``u_k = u``.  Both ``cov_rel`` and ``excess_loss_rel`` are then ``|c_s − c_b| + O(η²)``: linear in ``η``.
Two rules are exact, to every order: ``server-client`` at ``E = 1`` (the round depends on ``(s, η)`` only through
``s·η``) and ``local-steps`` at ``s = 1`` when every client has the same Hessian (the local maps are affine with a
common linear part, so averaging commutes with them).  ``local-steps`` at ``s = 1`` with different Hessians is
``O(η)``: ``c_s − c_b = η(κ − 1)E·(ū₂/(2ū) − ũ + ū/2)`` (``η(κ − 1)E·Var_p(u)/(2ū)`` for equal noise and weights),
whether or not the optima differ.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace

import numpy as np

from fedsde._tolerances import INT_TOL
from fedsde._validate import start_point
from fedsde.compare.distances import gaussian_w2
from fedsde.errors import FedsdeInputError, NoStationaryLawError
from fedsde.exact import round_law, stationary_law, transient_moments
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.scaling.rules import FedAvgConfig, ScalingRule, check_client_step, get_rule


def temperature_matrix(problem: QuadraticProblem, config: FedAvgConfig) -> np.ndarray:
    """First-order diffusion on the ``τ`` clock: ``s·η·Σ_k p_k² Σ_k``, shape (d, d)."""
    return config.server_lr * config.eta * np.einsum("q,qij->ij", problem.p**2, problem.Sigma)


def first_order_coefficients(problem: QuadraticProblem, config: FedAvgConfig) -> dict:
    """The coefficients of the first-order SDE ``dw = −H(w − w*) dτ + T^{1/2} dB_τ`` and its horizon.

    Returns ``{"hessian": H (d, d), "optimum": w* (d,), "temperature": T (d, d), "horizon": τ,
    "tau_per_round": s·η·E}``; :mod:`fedsde.scaling`'s rules leave every entry but ``tau_per_round`` unchanged
    (the ``server-client`` rule keeps that one too).
    """
    return {
        "hessian": problem.hessian,
        "optimum": problem.optimum,
        "temperature": temperature_matrix(problem, config),
        "horizon": config.horizon,
        "tau_per_round": config.tau_per_round,
    }


def first_order_correction(u, eta: float, local_steps: int, server_lr: float, *, p=None, noise=None) -> float:
    """Relative O(η) correction ``c`` of the chain's stationary variance over the SDE's, scalar clients.

    Parameters
    ----------
    u : float or array, shape (Q,)
        Curvature of every client (a float: all clients alike) or of each client ``u_k``.
    eta, local_steps, server_lr : float, int, float
        ``η``, ``E``, ``s``.
    p : array, shape (Q,), optional
        Client weights (default uniform); only with an array ``u``.
    noise : array, shape (Q,), optional
        Noise variances ``σ_k²`` (default equal); only with an array ``u``.

    Returns
    -------
    float
        ``c = η·((E − 1)(ū₂/(2ū) − ũ) + s·E·ū/2)`` with ``ū = Σ p_k u_k``, ``ū₂ = Σ p_k u_k²`` and
        ``ũ = Σ p_k²σ_k² u_k / Σ p_k²σ_k²``; for a float ``u`` this is ``η·u·(s·E − E + 1)/2``.

    Notes
    -----
    Derivation (seed 002, Sec. 6's scalar chain, expanded to first order in ``η``): one round is
    ``w' = (1 − sB) w + … + noise`` with ``B = Σ p_k(1 − r_k^E)``, ``r_k = 1 − η u_k``, and round noise variance
    ``s²η² Σ p_k² σ_k² Γ_k``, ``Γ_k = (1 − r_k^{2E})/(1 − r_k²)``; its stationary variance is
    ``X = s²η² Σ p_k²σ_k²Γ_k / (sB(2 − sB))``.  With ``B = ηEū(1 − (E − 1)η ū₂/(2ū))`` and
    ``Γ_k = E(1 − (E − 1)η u_k)`` to first order, ``X = (T/2ū)(1 + c + O(η²))`` where ``T = s·η·Σ p_k²σ_k²`` is
    the temperature and ``T/2ū`` the stationary variance of the first-order SDE.
    """
    if np.ndim(u) == 0:
        if p is not None or noise is not None:
            raise FedsdeInputError("p, noise: only with per-client curvatures u (an array)")
        return eta * u * (server_lr * local_steps - local_steps + 1) / 2.0
    u = np.asarray(u, dtype=np.float64).reshape(-1)
    w = np.full(u.size, 1.0 / u.size) if p is None else np.asarray(p, dtype=np.float64).reshape(-1)
    s2 = np.ones(u.size) if noise is None else np.asarray(noise, dtype=np.float64).reshape(-1)
    if w.shape != u.shape or s2.shape != u.shape:
        raise FedsdeInputError(f"p, noise: need one entry per client ({u.size}), got shapes {w.shape}, {s2.shape}")
    w = w / w.sum()
    u_bar, u2_bar = float(w @ u), float(w @ u**2)
    u_noise = float((w**2 * s2) @ u / np.sum(w**2 * s2))
    E = local_steps
    return eta * ((E - 1) * (u2_bar / (2 * u_bar) - u_noise) + server_lr * E * u_bar / 2)


def scaled_problem(problem: QuadraticProblem, rule: str | ScalingRule, kappa: float) -> QuadraticProblem:
    """The problem at the scaled end: rules that change ``Q`` copy each client ``κ`` times (weights ``p_k/κ``)."""
    rule = get_rule(rule)
    if "batch_size" in rule.changes:
        raise FedsdeInputError(
            f"rule={rule.name!r}: a quadratic problem has no batch noise (its Σ_k is fixed, not a minibatch "
            "covariance); use a data problem (kind = \"classification\" with batch_size)"
        )
    if "clients" not in rule.changes:
        return problem
    copies = round(kappa)
    if copies < 1 or abs(kappa - copies) > INT_TOL * max(1.0, kappa):
        raise FedsdeInputError(
            f"kappa={float(kappa)!r}: rule {rule.name!r} on a quadratic problem copies each client κ times, so κ "
            "must be a whole number >= 1"
        )
    return problem if copies == 1 else problem.replicated(copies)


@dataclass(frozen=True)
class EndLaw:
    """Exact laws of one end of a rule.

    Attributes
    ----------
    config : FedAvgConfig
    problem : QuadraticProblem
    stationary_mean, stationary_cov : ndarray, shapes (d,), (d, d), or None
        ``None`` when the chain has no stationary law (spectral radius of ``I − sB`` ≥ 1).
    spectral_radius : float
    transient_mean, transient_cov : ndarray, shapes (d,), (d, d)
        Moments after ``config.rounds`` rounds from ``w0``.
    temperature : ndarray, shape (d, d)
        ``s·η·Σ_k p_k² Σ_k`` of this end.
    """

    config: FedAvgConfig
    problem: QuadraticProblem = field(repr=False)
    stationary_mean: np.ndarray | None
    stationary_cov: np.ndarray | None
    spectral_radius: float
    transient_mean: np.ndarray
    transient_cov: np.ndarray
    temperature: np.ndarray


def end_law(problem: QuadraticProblem, config: FedAvgConfig, *, w0=None, which: str = "base",
            aggregator=None) -> EndLaw:
    """Exact stationary and transient (at ``config.rounds``) moments of the chain at one end (``aggregator``: a
    linear or momentum rule's chain, :mod:`fedsde.sde.rules`; default FedAvg)."""
    check_client_step(config.eta, float(problem.max_curvature().max()), which=which)
    if aggregator is not None:
        from fedsde.sde.rules import chain_spectral_radius, chain_stationary_law, rule_chain_moments, rule_sde

        r = rule_sde(problem, aggregator, config.eta, config.local_steps, config.server_lr)
        st = chain_stationary_law(r)
        tr = rule_chain_moments(r, config.rounds, start_point(w0, problem.d), record=[config.rounds])
        return EndLaw(config, problem, None if st is None else st[0], None if st is None else st[1],
                      chain_spectral_radius(r), tr.final_mean, tr.final_cov, temperature_matrix(problem, config))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            st = stationary_law(problem, config.eta, config.local_steps, config.server_lr)
        except NoStationaryLawError:
            st = None
        if st is None:
            law = round_law(problem, config.eta, config.local_steps, config.server_lr, warn=False)
            tr = transient_moments(problem, config.eta, config.local_steps, config.rounds, config.server_lr, w0=w0,
                                   record=[config.rounds])
            return EndLaw(config, problem, None, None, law.spectral_radius, tr.final_mean, tr.final_cov,
                          temperature_matrix(problem, config))
    m_n, P_n = transient_closed_form(st.law.transition, st.mean, st.cov, start_point(w0, problem.d), config.rounds)
    return EndLaw(config, problem, st.mean, st.cov, st.law.spectral_radius, m_n, P_n,
                  temperature_matrix(problem, config))


def transient_closed_form(A: np.ndarray, c: np.ndarray, X: np.ndarray, w0: np.ndarray,
                          rounds: int) -> tuple[np.ndarray, np.ndarray]:
    """Moments after ``n`` rounds of ``w' = A w + (I − A) c + noise`` from the point ``w0``, in O(log n) products.

    With the stationary covariance ``X = A X Aᵀ + K`` (so ``ρ(A) < 1``), unrolling ``P_n = A P_{n−1} Aᵀ + K``
    from ``P_0 = 0`` gives ``P_n = X − Aⁿ X (Aⁿ)ᵀ``; the mean is ``m_n = c + Aⁿ (w0 − c)``.  Equal to
    :func:`fedsde.exact.transient_moments` (full participation, constant η and s), which loops over rounds.
    """
    An = np.linalg.matrix_power(A, int(rounds))
    P = X - An @ X @ An.T
    return c + An @ (w0 - c), 0.5 * (P + P.T)


def law_discrepancy(problem: QuadraticProblem, mean_b, cov_b, mean_s, cov_s) -> dict[str, float]:
    """``excess_loss_rel``, ``cov_rel``, ``mean_shift_sd``, ``w2_rel`` between two laws (module docstring).

    A missing scaled law (``mean_s is None``: no stationary law) gives ``inf`` everywhere.
    """
    return moment_discrepancy(problem.hessian, problem.optimum, mean_b, cov_b, mean_s, cov_s)


def moment_discrepancy(hessian, optimum, mean_b, cov_b, mean_s, cov_s) -> dict[str, float]:
    """:func:`law_discrepancy` for any quadratic objective ``F(w) = F* + ½ (w − w*)ᵀH(w − w*)`` (a least-squares
    problem's too): ``hessian`` H (d, d), ``optimum`` w* (d,), the laws' means (d,) and covariances (d, d)."""
    keys = ("excess_loss_rel", "cov_rel", "mean_shift_sd", "w2_rel")
    if mean_b is None or mean_s is None:
        return dict.fromkeys(keys, float("inf"))
    H, w_star = np.asarray(hessian, dtype=np.float64), np.asarray(optimum, dtype=np.float64)

    def excess(mean, cov):  # ½ (m − w*)ᵀH(m − w*) + ½ Tr(H P), as QuadraticProblem.excess_loss
        m = mean - w_star
        return float(0.5 * m @ H @ m + 0.5 * np.trace(H @ cov))

    mb, ms = np.asarray(mean_b, float), np.asarray(mean_s, float)
    Pb, Ps = np.asarray(cov_b, float), np.asarray(cov_s, float)
    Lb, Ls = excess(mb, Pb), excess(ms, Ps)
    spread = float(np.trace(Pb))
    rms = float(np.sqrt(spread + np.sum((mb - w_star) ** 2)))
    nb = float(np.linalg.norm(Pb))
    return {
        "excess_loss_rel": abs(Ls - Lb) / Lb if Lb > 0 else float("inf"),
        "cov_rel": float(np.linalg.norm(Ps - Pb)) / nb if nb > 0 else float("inf"),
        "mean_shift_sd": float(np.linalg.norm(ms - mb)) / np.sqrt(spread) if spread > 0 else float("inf"),
        "w2_rel": gaussian_w2(mb, Pb, ms, Ps) / rms if rms > 0 else float("inf"),
    }


@dataclass(frozen=True)
class QuadraticScaling:
    """Both ends of a rule on a quadratic problem and their discrepancy.

    Attributes
    ----------
    rule : ScalingRule
    kappa : float
    base, scaled : EndLaw
    stationary, transient : dict[str, float]
        :func:`law_discrepancy` of the stationary laws and of the laws at the horizon.
    """

    rule: ScalingRule
    kappa: float
    base: EndLaw
    scaled: EndLaw
    stationary: dict
    transient: dict

    @property
    def max_rel(self) -> float:
        """Largest of ``excess_loss_rel`` and ``cov_rel`` over the stationary and horizon laws."""
        return max(d[k] for d in (self.stationary, self.transient) for k in ("excess_loss_rel", "cov_rel"))


def compare_quadratic(problem: QuadraticProblem, config: FedAvgConfig, rule: str | ScalingRule, kappa: float,
                      *, w0=None, aggregator=None) -> QuadraticScaling:
    """Exact moments at both ends of ``rule`` with factor ``kappa`` and their discrepancy.

    Parameters
    ----------
    problem : QuadraticProblem
    config : FedAvgConfig
        The base run (``clients`` defaults to ``problem.Q``).
    rule : str or ScalingRule
    kappa : float
    w0 : array, shape (d,), optional
        Start of both chains (default zero).
    aggregator : str or Aggregator, optional
        A linear or momentum server rule run at both ends instead of FedAvg (its exact chain,
        :mod:`fedsde.sde.rules`).

    Raises
    ------
    FedsdeInputError
        If the rule cannot apply: non-integer rounds/steps/clients, ``batch`` on a quadratic problem, or
        ``η·λ_max ≥ 2`` at either end.
    """
    rule = get_rule(rule)
    if config.clients is None:
        config = replace(config, clients=problem.Q)
    elif config.clients != problem.Q:
        raise FedsdeInputError(f"clients={config.clients}: the problem has Q={problem.Q} clients")
    other = scaled_problem(problem, rule, kappa)
    new = rule.apply(config, kappa)
    base = end_law(problem, config, w0=w0, which="base", aggregator=aggregator)
    scaled = end_law(other, new, w0=w0, which=f"kappa={float(kappa)!r} (rule {rule.name!r}, eta={new.eta:g})",
                     aggregator=aggregator)
    stat = law_discrepancy(problem, base.stationary_mean, base.stationary_cov, scaled.stationary_mean,
                           scaled.stationary_cov)
    trans = law_discrepancy(problem, base.transient_mean, base.transient_cov, scaled.transient_mean,
                            scaled.transient_cov)
    return QuadraticScaling(rule, float(kappa), base, scaled, stat, trans)
