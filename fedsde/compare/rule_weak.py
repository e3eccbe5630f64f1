"""Exact weak error of a server rule's own SDE against its chain as ``h → 0`` (quadratic clients, no sampling).

For a rule of kind ``"linear"`` or ``"momentum"`` (:mod:`fedsde.sde.rules`): at fixed end time ``t`` (clock
``t = n·h``), client rate ``η``, local steps ``τ_k`` and server rate ``η₀``, the step ``h`` shrinks, the server step
is ``s = h·η₀`` and the chain runs ``n = t/h`` rounds.  ``E φ(w_n)`` of the chain comes from its exact moments
(:func:`fedsde.sde.rules.rule_chain_moments`: the rule's round law, and for server momentum the ``(w − c, v)``
recursion from ``v_0 = 0``), ``E φ(w(t))`` of the first-order SDE from its exact OU law; ``φ`` is ``‖w − w*‖²`` or
``F(w)`` (:func:`fedsde.compare.weak_error.expected_phi`).  No Monte Carlo.

Noise scalings as :func:`fedsde.compare.weak_error.weak_error_vs_step`: ``"diffusive"`` (default) scales the
gradient-noise covariances by ``h_max/h`` so that the noise injected per unit time is fixed (the chain is then a
consistent discretisation of one SDE, whose weak error is ``O(h)``: slope 1); ``"fixed"`` keeps the problem.
For server momentum at fixed ``β`` the buffer's lag of ``β/(1 − β)`` rounds is ``O(h)`` in time, so the first-order
SDE with step ``s/(1 − β)`` keeps order 1 (Li, Tai & E 2019, Thm 9 for SGD with momentum).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from fedsde._validate import positive_float
from fedsde.aggregators import Aggregator
from fedsde.compare.moments import initial_law
from fedsde.compare.study import UNSETTLED_SLOPE
from fedsde.compare.weak_error import (
    NOISE_SCALINGS,
    PHIS,
    WeakErrorCurve,
    _rounds_for,
    _scaled,
    _step_sizes,
    exact_weak_curve,
    expected_phi,
    fit_loglog_slope,
    local_loglog_slopes,
)
from fedsde.errors import FedsdeInputError
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.sde.rules import chain_stationary_law, rule_chain_moments, rule_kind, rule_sde


def rule_weak_error_vs_step(
    problem: QuadraticProblem,
    aggregator: str | Aggregator,
    eta: float,
    local_steps: int | np.ndarray,
    *,
    t_end: float,
    time_steps: Sequence[float],
    server_rate: float = 1.0,
    phi: str = "dist2",
    w0=None,
    noise_scaling: str = "diffusive",
    participation: int | None = None,
    weighting: str = "unbiased",
) -> WeakErrorCurve:
    """Exact weak error of ``aggregator``'s first-order SDE against its chain (module docstring).

    Parameters
    ----------
    problem : QuadraticProblem
    aggregator : str or Aggregator
        A rule of kind ``"linear"`` or ``"momentum"``.
    eta : float
        Client rate (fixed).
    local_steps : int or array of int, shape (Q,)
    t_end : float
        End time (every ``t_end/h`` a whole number).
    time_steps : sequence of float
        At least two distinct steps ``h``.
    server_rate : float
        ``η₀``: server step ``s = h·η₀``.
    phi : {"dist2", "loss"}
    w0 : array, shape (d,), optional
        Start point (default the origin; ``v_0 = 0``).
    noise_scaling : {"diffusive", "fixed"}
    participation, weighting
        Client sampling (:func:`fedsde.sde.rules.rule_round_law`); the chain's moments and the SDE's are then
        those of :mod:`fedsde.sde.sampled_sde` (the sampling term is not rescaled by ``noise_scaling``).

    Returns
    -------
    WeakErrorCurve
        ``config["aggregator"]`` and ``config["sde"]`` name the rule and its kind.
    """
    agg = rule_kind(aggregator)
    m0, _ = initial_law(problem.d, w0, None)

    def laws(pb: QuadraticProblem, h: float, n: int):
        r = rule_sde(pb, agg, eta, local_steps, h * server_rate, h, participation=participation, weighting=weighting)
        ch = rule_chain_moments(r, n, m0, record=[n])
        law = r.sde.moments(n * h, m0)
        return ch.mean[-1], ch.cov[-1], law.mean, law.cov

    config = {"aggregator": agg.name, "sde": agg.sde_kind, "eta": float(eta),
              "local_steps": np.atleast_1d(local_steps).tolist(), "participation": participation,
              "weighting": weighting}
    return exact_weak_curve(problem, laws, t_end=t_end, time_steps=time_steps, server_rate=server_rate, phi=phi,
                            noise_scaling=noise_scaling, config=config)


def underdamped_weak_error_vs_step(
    problem: QuadraticProblem,
    eta: float,
    local_steps: int | np.ndarray,
    *,
    t_end: float,
    time_steps: Sequence[float],
    friction: float = 1.0,
    server_rate: float = 1.0,
    phi: str = "dist2",
    w0=None,
    noise_scaling: str = "diffusive",
) -> tuple[WeakErrorCurve, np.ndarray]:
    """Exact weak error of the underdamped SDE of server heavy ball (FedAvgM) with ``1 − β ∝ √s`` as ``h → 0``.

    Step ``h`` of the clock, server step ``s = η₀ h²`` and momentum ``β = 1 − γ h`` (``γ`` = ``friction``), so
    ``1 − β = γ √(s/η₀)``; the SDE on ``(w, u)`` (:meth:`fedsde.sde.rules.RuleSDE.underdamped`: friction ``γ``,
    force ``η₀ B``) is fixed while the chain refines.  Other arguments as :func:`rule_weak_error_vs_step`.

    Returns
    -------
    curve : WeakErrorCurve
        Of the underdamped SDE.
    first_order : ndarray, shape (J,)
        The weak error of the first-order SDE (step ``s/(1 − β)``) at the same steps, which does not vanish in
        this regime.
    """
    from fedsde.aggregators import FedAvgM

    friction = positive_float("friction", friction)
    t_end = positive_float("t_end", t_end)
    server_rate = positive_float("server_rate", server_rate)
    if noise_scaling not in NOISE_SCALINGS:
        raise FedsdeInputError(f"noise_scaling={noise_scaling!r}: must be one of {', '.join(NOISE_SCALINGS)}")
    hs = _step_sizes(time_steps)
    if np.any(friction * hs >= 1.0):
        raise FedsdeInputError(f"friction={friction}, time_steps: need friction·h < 1 (β = 1 − friction·h >= 0)")
    m0, _ = initial_law(problem.d, w0, None)
    d, h_ref = problem.d, float(hs.max())
    rounds = np.empty(hs.size, np.int64)
    chain_e, sde_e, errs, first = (np.empty(hs.size) for _ in range(4))
    for j, h in enumerate(hs):
        h = float(h)
        n = rounds[j] = _rounds_for(t_end, h)
        pb = _scaled(problem, h_ref / h) if noise_scaling == "diffusive" else problem
        r = rule_sde(pb, FedAvgM(1.0 - friction * h), eta, local_steps, server_rate * h * h, h)
        ch = rule_chain_moments(r, n, m0, record=[n])
        law = r.underdamped().moments(n * h, np.concatenate([m0, np.zeros(d)]))
        chain_e[j] = expected_phi(pb, ch.mean[-1], ch.cov[-1], phi)
        sde_e[j] = expected_phi(pb, law.mean[:d], law.cov[:d, :d], phi)
        errs[j] = abs(chain_e[j] - sde_e[j])
        lin = r.sde.moments(n * h, m0)
        first[j] = abs(chain_e[j] - expected_phi(pb, lin.mean, lin.cov, phi))
    slope, intercept = fit_loglog_slope(hs, errs)
    config = {"aggregator": "fedavgm", "sde": "underdamped", "eta": float(eta), "friction": friction,
              "local_steps": np.atleast_1d(local_steps).tolist(), "t_end": t_end, "server_rate": server_rate,
              "phi": phi, "noise_scaling": noise_scaling, "method": "exact"}
    return WeakErrorCurve(hs, rounds, errs, slope, intercept, chain_e, sde_e, config=config), first


def rule_sde_study(problem: QuadraticProblem, aggregator: str | Aggregator, *, eta: float, local_steps,
                   rounds: int, server_lr: float = 1.0, h: float | None = None, w0=None,
                   time_steps: Sequence[float] | None = None, noise_scaling: str = "diffusive",
                   participation: int | None = None, weighting: str = "unbiased") -> dict:
    """``fedsde compare --aggregator A``: the rule's chain against its own first-order SDE, exactly (under client
    sampling, ``participation``/``weighting``, both laws are not Gaussian: ``w2`` is then that of their Gaussian fits,
    a lower bound).

    Moments of both at every round up to ``rounds`` (clock ``t = n·h``, ``h`` default ``η``) with their W2
    distance, the weak error against the step at fixed ``t`` and ``η₀ = s/h`` with its fitted slope for each ``φ``
    (:func:`rule_weak_error_vs_step`; default steps ``h, h/2, …, h/16``) and both stationary laws.

    Returns
    -------
    dict
        ``aggregator``, ``sde``, ``t_end``, ``h``, ``moments`` (``rounds``, ``w2``, ``chain_mean``, ``sde_mean``,
        ``chain_var``, ``sde_var`` — traces of the covariances), ``weak_error`` (per ``φ``: ``steps``, ``rounds``,
        ``errors``, ``slope``), ``stationary`` (``chain``, ``sde``, ``w2``).
    """
    from fedsde.compare.distances import gaussian_w2

    h = float(eta) if h is None else positive_float("h", h)
    r = rule_sde(problem, aggregator, eta, local_steps, server_lr, h, participation=participation, weighting=weighting)
    m0, _ = initial_law(problem.d, w0, None)
    chain = rule_chain_moments(r, rounds, m0)
    sde = [r.sde.moments(n * h, m0) for n in chain.rounds]
    w2 = [gaussian_w2(chain.mean[i], chain.cov[i], law.mean, law.cov) for i, law in enumerate(sde)]
    t_end = rounds * h
    hs = np.asarray(time_steps if time_steps is not None else [h / 2**j for j in range(5)], dtype=np.float64)
    weak = {}
    for phi in PHIS:
        c = rule_weak_error_vs_step(problem, r.aggregator, eta, local_steps, t_end=t_end, time_steps=hs,
                                    server_rate=server_lr / h, phi=phi, w0=m0, noise_scaling=noise_scaling,
                                    participation=participation, weighting=weighting)
        local = local_loglog_slopes(c.steps, c.errors)
        settled = bool(np.all(np.abs(local - c.slope) <= UNSETTLED_SLOPE)) if np.all(np.isfinite(local)) else False
        weak[phi] = {"steps": c.steps, "rounds": c.rounds, "errors": c.errors, "slope": c.slope,
                     "local_slopes": local, "settled": settled, "exact_at_grid": c.exact_at_grid}
        if not settled and not c.exact_at_grid:
            warnings.warn(f"weak error of {phi}: local slopes {np.round(local, 3).tolist()} differ from the fitted "
                          f"{c.slope:.3f} by more than {UNSETTLED_SLOPE}; the steps are not in the asymptotic regime "
                          "(give smaller time steps)", UserWarning, stacklevel=2)
    cst, sst = chain_stationary_law(r), r.sde.stationary()
    stat = {"chain": None if cst is None else {"mean": cst[0], "cov": cst[1]},
            "sde": None if sst is None else {"mean": sst.mean, "cov": sst.cov},
            "w2": None if cst is None or sst is None else gaussian_w2(cst[0], cst[1], sst.mean, sst.cov)}
    return {"aggregator": r.aggregator.describe(), "sde": r.kind, "effective_server_lr": r.effective_server_lr,
            "participation": participation, "weighting": weighting,
            "clock": "t = n*h", "h": h, "t_end": t_end, "noise_scaling": noise_scaling,
            "moments": {"rounds": chain.rounds, "w2": np.array(w2), "chain_mean": chain.mean,
                        "sde_mean": np.array([law.mean for law in sde]),
                        "chain_var": np.trace(chain.cov, axis1=1, axis2=2),
                        "sde_var": np.array([np.trace(law.cov) for law in sde])},
            "weak_error": weak, "stationary": stat}


__all__ = ["rule_sde_study", "rule_weak_error_vs_step", "underdamped_weak_error_vs_step"]
