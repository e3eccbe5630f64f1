"""Monte-Carlo weak error of a rule's SVAG chains against the rule's SDE, with the slope's interval (any
participation).

A rule's chains with ``ℓ = 1, 2, 4, …`` (:func:`fedsde.sde.rule_svag.rule_svag_chain`: the rule's own code, its
clients' local SGD and the simulator's participation draws) tend to the rule's SDE at order 1 in the step ``h/ℓ``.
The error ``E φ(w_T)`` of each chain against the SDE's value is measured with its standard error; the log–log
slope against the step comes with a parametric-bootstrap interval (:func:`fedsde._stats.error_slope_interval`),
and each error says whether it is resolved from zero (``|e| > z·se`` at the interval's level).

The SDE's value: for linear and momentum rules on quadratic clients, exact (``E φ`` from the SDE's exact mean and
covariance, :mod:`fedsde.sde.rules`, with client sampling :mod:`fedsde.sde.sampled_sde`; ``φ`` quadratic, so the
law's first two moments fix it); the adaptive rules' counterpart, against paths of their SDE, is
:func:`fedsde.validity.adaptive.adaptive_weak_error`.  Unlike the exact weak error of
:mod:`fedsde.compare.rule_weak` — whose chain, for a linear rule, is the Euler–Maruyama scheme of the SDE's own
moment equations and so cannot fail — these chains are the rule's code, with its sampling: a wrong drift or a
missing term of the diffusion leaves an error that does not vanish with ``ℓ`` and a slope far from 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedsde._validate import positive_int, start_point
from fedsde.aggregators import Aggregator, get_aggregator
from fedsde.compare.slope_curve import weak_error_curve
from fedsde.compare.weak_error import WeakErrorCurve, expected_phi, phi_function
from fedsde.errors import FedsdeInputError
from fedsde.params import (
    FULL_PARTICIPATION,
    ClientSampling,
    Integrator,
    Precision,
    Recording,
    Replication,
    Schedule,
    derive,
    fedavg_rates,
    takes_values,
)


def slope_summary(curve: WeakErrorCurve) -> str:
    """``"slope 0.97 [0.88, 1.06] (95 %)"`` with the interval of ``curve.config["slope_interval"]`` and a note when some
    error is not resolved from zero."""
    lo, hi = curve.config["slope_interval"]
    level = curve.config.get("level", 0.95)
    text = f"slope {curve.slope:.2f} [{lo:.2f}, {hi:.2f}] ({100 * level:.0f} %)"
    unresolved = [int(e) for e, ok in zip(curve.config["ells"], curve.config["resolved"], strict=True) if not ok]
    if unresolved:
        text += f"; errors at ℓ = {', '.join(map(str, unresolved))} not resolved from zero"
    return text


@takes_values(schedule=("eta", "local_steps", "rounds", "server_lr", "h"), replication=("replicates", "seed"),
              precision=("device",), integrator=("substeps",), types={"sampling": ClientSampling},
              sampling=("participation", "weighting"))
def rule_svag_weak_error(problem, aggregator: str | Aggregator, schedule: Schedule, replication: Replication,
                         precision: Precision | None = None, *, w0=None, ells: Sequence[int] = (1, 2, 4, 8),
                         phi: str = "dist2", sampling: ClientSampling | None = None, level: float = 0.95,
                         integrator: Integrator | None = None) -> WeakErrorCurve:
    """Weak error of ``E φ(w_T)``, ``T = rounds·h``, of the rule's SVAG chains against its SDE (module docstring).

    Parameters
    ----------
    problem : QuadraticProblem
    aggregator : str or Aggregator
        A linear or momentum rule (adaptive rules: :func:`fedsde.validity.adaptive.adaptive_weak_error`).
    schedule, replication, precision, integrator, sampling : values of :mod:`fedsde.params`
        :class:`~fedsde.params.Schedule` (``eta``, ``local_steps``, ``rounds``, ``server_lr``, ``h``),
        :class:`~fedsde.params.Replication` (``replicates``, ``seed``), :class:`~fedsde.params.Precision`
        (``device``), :class:`~fedsde.params.Integrator` (``substeps``) and :class:`~fedsde.params.ClientSampling`
        (``participation``, ``weighting``); each field may be given instead as the keyword of its name
        (:func:`fedsde.params.takes_values`); the fields mean:
    eta, local_steps, server_lr, rounds, replicates, seed
        As :func:`fedsde.sde.rule_svag.rule_svag_chain` (every ``ℓ`` its own streams, the same seed).
    h : float, optional
        Clock step (default ``η``).
    ells : sequence of int
        At least two.
    phi : {"dist2", "loss"}
    participation, weighting
        The client sampling of the chains and of the SDE.
    level : float
        Level of the error intervals and of the slope's.
    substeps : int
        Kept for the calls of earlier releases; not read (adaptive rules, whose SDE paths it would refine, are
        refused here).

    Returns
    -------
    WeakErrorCurve
        ``steps`` ``h/ℓ``; ``config`` with ``ells``, ``slope_interval`` (low, high), ``resolved`` (per ``ℓ``) and
        ``reference`` (``"exact"`` or ``"sde paths"``).
    """
    from fedsde.problems.quadratic import QuadraticProblem

    eta, local_steps, rounds, h = schedule.eta, schedule.local_steps, schedule.rounds, schedule.h
    R, seed, precision = replication.replicates, replication.need_seed(), precision or Precision()
    sampling = sampling or FULL_PARTICIPATION
    participation, weighting = sampling.participation, sampling.weighting
    agg = get_aggregator(aggregator)
    if not isinstance(problem, QuadraticProblem):
        raise FedsdeInputError("problem: the SDE's exact value needs quadratic clients (on other losses compare the "
                               "chains with their Richardson limit: fedsde.validity.rules)")
    ells = sorted({positive_int("ells", e) for e in ells})
    if len(ells) < 2:
        raise FedsdeInputError(f"ells={ells}: need at least two values of ℓ for a slope")
    if R < 2:
        raise FedsdeInputError(f"replicates={R}: must be an integer >= 2")
    eta, _, server_lr = fedavg_rates(schedule, None, None, problem.Q)  # one number each, τ one per client
    w0_arr = start_point(w0, problem.d)
    if agg.sde_kind == "adaptive":
        raise FedsdeInputError(f"aggregator={agg.name!r}: an adaptive rule's SDE has no exact law; its weak error is "
                               "measured against paths of the SDE (fedsde.validity.adaptive.adaptive_weak_error)")
    from fedsde.sde.rule_svag import rule_svag_chain
    from fedsde.sde.rules import rule_sde

    hh = eta if h is None else h
    r = rule_sde(problem, agg, eta, local_steps, server_lr, hh, participation=participation, weighting=weighting)
    law = r.sde.moments(rounds * hh, w0_arr)
    ref = float(expected_phi(problem, law.mean, law.cov, phi))
    fn = phi_function(problem, phi)
    chains = derive(schedule, h=hh)  # the chains on the SDE's clock
    means, ses = np.empty(len(ells)), np.empty(len(ells))
    for j, ell in enumerate(ells):
        w = rule_svag_chain(problem, agg, chains, replication, precision, ell=ell, w0=w0_arr, sampling=sampling,
                            recording=Recording(record=[rounds])).weights[-1]
        v = fn(w)
        means[j], ses[j] = v.mean(), v.std(ddof=1) / np.sqrt(R)
    exact = svag_chain_expectations(problem, agg, eta=eta, local_steps=local_steps, rounds=rounds, server_lr=server_lr,
                                    h=hh, w0=w0_arr, ells=ells, phi=phi, participation=participation,
                                    weighting=weighting)
    config = {"aggregator": agg.name, "sde": agg.sde_kind, "phi": phi, "replicates": R, "seed": seed,
              "participation": participation, "weighting": weighting, "reference": "exact", "t_end": rounds * hh,
              "method": "monte-carlo", "exact_errors": (exact - ref).tolist(),
              "z_chain": ((means - exact) / ses).tolist()}
    return weak_error_curve(np.asarray(ells), hh, rounds, means, ses, ref, level=level, config=config)


def svag_chain_expectations(problem, aggregator: str | Aggregator, *, eta: float, local_steps, rounds: int,
                            server_lr: float, h: float, w0, ells: Sequence[int], phi: str = "dist2",
                            participation: int | None = None, weighting: str = "unbiased") -> np.ndarray:
    """Exact ``E φ(w_T)`` of a linear or momentum rule's SVAG chains on quadratic clients, shape (len(ells),).

    The chain with ``ℓ`` runs ``ℓ·rounds`` steps of server step ``s/ℓ`` on a step of mean ``E U(w)`` and covariance
    ``ℓ Cov U(w)`` (:mod:`fedsde.sde.rule_svag`): its first two moments follow the rule's exact law
    (:mod:`fedsde.sde.rules`, :mod:`fedsde.sde.sampled_sde`) with ``s/ℓ`` and ``ℓ`` times the covariance, and ``φ``
    is quadratic.  The Monte-Carlo chains (:func:`rule_svag_weak_error`, ``config["z_chain"]``) are checked against
    these values.
    """
    import dataclasses

    from fedsde.sde.rules import chain_transition, rule_sde
    from fedsde.sde.sampled_sde import chain_moments

    w0 = np.asarray(w0, dtype=np.float64)
    out = []
    for ell in ells:
        r = rule_sde(problem, aggregator, eta, local_steps, server_lr / ell, h, participation=participation,
                     weighting=weighting)
        law = r.law
        sampling = getattr(law, "sampling", None)
        law = dataclasses.replace(law, noise_cov=ell * law.noise_cov,
                                  **({} if sampling is None else {"sampling": dataclasses.replace(
                                      sampling, C=ell * sampling.C)}))
        if sampling is None:  # the zero sampling term of a full-participation law
            from fedsde.sde.sampled import SampledRoundLaw, SamplingTerm

            law = SampledRoundLaw(**{**law.__dict__, "sampling": SamplingTerm(np.zeros((law.Q, law.Q)), law.M,
                                                                               law.a)})
        T, L = chain_transition(dataclasses.replace(r, law=law))
        ch = chain_moments(T, L, law, rounds * ell, w0, record=[rounds * ell])
        out.append(float(expected_phi(problem, ch.mean[-1], ch.cov[-1], phi)))
    return np.array(out)


def round_law_vs_simulator(problem, aggregator: str | Aggregator, *, eta: float, local_steps, server_lr: float, w,
                           replicates: int, seed: int, participation: int | None = None,
                           weighting: str = "unbiased") -> dict:
    """One round of the simulator (:func:`fedsde.sim.simulate`, the rule's own code) from ``w`` against the exact law
    of the rule's step ``U`` (:func:`fedsde.sde.rules.rule_round_law`): ``z``-scores of the sample mean and covariance
    of ``U`` (standard errors from the samples' own second and fourth moments, no Gaussian assumption).

    ``U`` is read off the first round's move: ``w₁ − w = s·U`` (linear rules) or ``s·g·(1 + β·[Nesterov])·U`` (server
    momentum from ``v₀ = 0``).

    Returns
    -------
    dict
        ``mean`` and ``cov`` (the law's), ``sample_mean``, ``sample_cov``, ``z_mean`` (d,), ``z_cov`` (d, d),
        ``max_z``, ``replicates``.
    """
    from fedsde.sde.rules import rule_kind, rule_round_law
    from fedsde.sim import simulate

    agg = rule_kind(aggregator)
    R = positive_int("replicates", replicates, minimum=2)
    w = np.asarray(w, dtype=np.float64)
    law = rule_round_law(problem, agg, eta, local_steps, server_lr, participation=participation, weighting=weighting)
    mf = agg.momentum_form() if agg.sde_kind == "momentum" else None
    factor = server_lr * (1.0 if mf is None else mf.gain * (1.0 + (mf.beta if mf.nesterov else 0.0)))
    res = simulate(problem, eta=eta, local_steps=local_steps, rounds=1, replicates=R, seed=seed, server_lr=server_lr,
                   w0=w, aggregator=agg, participation=participation, weighting=weighting, record=[1])
    U = (res.weights[-1] - w) / factor
    mean = -law.B @ (w - law.c)
    cov = law.noise_at(w) if getattr(law, "sampling", None) is not None else law.noise_cov
    x = U - U.mean(0)
    prods = x[:, :, None] * x[:, None, :]
    z_mean = (U.mean(0) - mean) / (U.std(0, ddof=1) / np.sqrt(R))
    z_cov = (prods.mean(0) * R / (R - 1) - cov) / (prods.std(0, ddof=1) / np.sqrt(R))
    return {"mean": mean, "cov": cov, "sample_mean": U.mean(0), "sample_cov": np.cov(U, rowvar=False),
            "z_mean": z_mean, "z_cov": z_cov, "max_z": float(max(np.abs(z_mean).max(), np.abs(z_cov).max())),
            "replicates": R}


__all__ = ["round_law_vs_simulator", "rule_svag_weak_error", "slope_summary", "svag_chain_expectations"]
