"""The validity test of a server rule other than FedAvg against its own SDE (quadratic clients).

* Adaptive rules (FedAdam, FedYogi; :mod:`fedsde.sde.adaptive`): the SVAG test of Malladi et al. (NeurIPS 2022,
  §5 and their code): the chain with ``k`` runs server step ``s/k``, ``1 − β_i → (1 − β_i)/k²``, ``τ → kτ`` and ``k²``
  times the rounds on a round displacement whose noise is amplified to ``ℓ = k²`` times its covariance.  On quadratic
  clients with Gaussian gradient noise the SVAG combination of two independent rounds,
  ``(1 + √(2ℓ − 1))/2·Δ⁽¹⁾ + (1 − √(2ℓ − 1))/2·Δ⁽²⁾``, has the law of one round whose client noise covariances are
  ``ℓ·Σ_k``, so the chain is the simulator (:func:`fedsde.sim.simulate`, the rule's own code) on the problem
  with ``Σ_k → k²Σ_k`` — or, equally in law and faster, one draw per round from the exact round law
  (:func:`round_law_chain`, the default).  As ``k → ∞`` the chain tends to the SDE (their Theorem 4.2/4.4, weak
  order 1 in ``1/ℓ``); the rule (``k = 1``) is judged against the order-1 Richardson limit of the two largest ``ℓ``
  by the three-outcome verdict of :func:`fedsde.validity.verdict.validity_verdict`, with the 1/ℓ report.  Clock
  ``t = n·s²`` by default.
* Linear and momentum rules (:mod:`fedsde.sde.rules`): the rule sampled from its exact round law
  (:func:`linear_rule_chain`) against its first-order SDE's exact law.
"""

from __future__ import annotations

import numpy as np

from fedsde._validate import positive_int, start_point
from fedsde.aggregators import Aggregator, get_aggregator
from fedsde.errors import FedsdeInputError
from fedsde.params import (
    DEFAULT_EQUIVALENCE,
    DEFAULT_RECORDING,
    Equivalence,
    Integrator,
    Precision,
    Recording,
    Replication,
    Schedule,
    takes_values,
)
from fedsde.problems.metrics import evaluate_metrics, metric_names
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.validity.core import ValidityResult
from fedsde.validity.reference import ell_ratios, exact_gaps, exact_sde_paths, svag_gaps
from fedsde.validity.verdict import richardson_limit, validity_verdict

#: SVAG parameters ``k`` of the adaptive test (``ℓ = k²``: 1, 4, 16, 64)
DEFAULT_KS = (1, 2, 4, 8)


def _noisier(problem: QuadraticProblem, factor: float) -> QuadraticProblem:
    if factor == 1.0:
        return problem
    return QuadraticProblem.from_arrays(problem.U, problem.a, problem.Sigma * factor, problem.p, name=problem.name,
                                        label_distributions=problem.label_distributions)


def round_law_chain(problem: QuadraticProblem, aggregator: Aggregator, *, eta: float, local_steps, rounds: int,
                    replicates: int, seed: int, server_lr: float, w0=None, record=None, noise_factor: float = 1.0
                    ) -> np.ndarray:
    """Weights (T, R, d) of a rule run on its exact round law: each round ``Δ = −B(w − c) + ε``, ``ε ~ N(0, N)``
    (:func:`fedsde.sde.rules.rule_round_law`: FedAvg's averaged displacement on quadratic clients with Gaussian
    noise, full participation — the same law as the simulator's round, one normal draw instead of ``Q·τ``), passed
    to the rule's own ``apply`` as one client's update.  ``noise_factor`` multiplies ``N`` (SVAG's ``ℓ``); seeded
    ``torch.Generator``, float64."""
    import torch

    from fedsde.aggregators import RoundContext
    from fedsde.sde.coefficients import psd_sqrt
    from fedsde.sde.rules import rule_round_law

    law = rule_round_law(problem, aggregator, eta, local_steps, server_lr)
    as_t = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.float64)  # noqa: E731
    B, c, root = as_t(law.B), as_t(law.c), as_t(psd_sqrt(noise_factor * law.noise_cov, name="N"))
    R, d = positive_int("replicates", replicates), problem.d
    gen = torch.Generator().manual_seed(int(seed))
    w = as_t(start_point(w0, d)).expand(R, d).clone()
    state = aggregator.init(w)
    ones = torch.ones(R, 1, dtype=torch.float64)
    ctx = dict(server_lr=float(server_lr), eta=float(eta), local_steps=torch.ones(R, 1, dtype=torch.long),
               participating=torch.ones(R, 1, dtype=torch.bool), p=torch.ones(1, dtype=torch.float64))
    keep = set(range(rounds + 1)) if record is None else {int(k) for k in record}
    out = []
    for n in range(rounds + 1):
        if n in keep:
            out.append(w.numpy().copy())
        if n == rounds:
            break
        delta = -(w - c) @ B.T + torch.randn(R, d, generator=gen, dtype=torch.float64) @ root.T
        w, state = aggregator.apply(w, delta.unsqueeze(1), ones, state, RoundContext(round=n, **ctx))
    return np.stack(out)


def linear_rule_chain(problem: QuadraticProblem, aggregator: Aggregator, *, eta: float, local_steps, rounds: int,
                      replicates: int, seed: int, server_lr: float, w0=None, record=None) -> np.ndarray:
    """Weights (T, R, d) of a linear or momentum rule sampled from its exact round law: ``z' = T z + L ε`` on
    ``z = (w − c)`` or ``(w − c, v)`` (:func:`fedsde.sde.rules.momentum_transition`), ``ε ~ N(0, N_rule)``,
    ``v_0 = 0`` (numpy ``default_rng(seed)``)."""
    from fedsde.sde.coefficients import psd_sqrt
    from fedsde.sde.rules import momentum_transition, rule_sde

    r = rule_sde(problem, aggregator, eta, local_steps, server_lr)
    law, d = r.law, problem.d
    if r.momentum is None:
        T, L = law.transition, server_lr * np.eye(d)
    else:
        T, L = momentum_transition(law, r.momentum)
    root = L @ psd_sqrt(law.noise_cov, name="N")
    R = positive_int("replicates", replicates)
    rng = np.random.default_rng(seed)
    z = np.zeros((R, T.shape[0]))
    z[:, :d] = start_point(w0, d) - r.sde.c
    keep = set(range(rounds + 1)) if record is None else {int(k) for k in record}
    out = []
    for n in range(rounds + 1):
        if n in keep:
            out.append(z[:, :d] + r.sde.c)
        if n == rounds:
            break
        z = z @ T.T + rng.standard_normal((R, d)) @ root.T
    return np.stack(out)


@takes_values(schedule=("eta", "local_steps", "rounds", "server_lr"), replication=("replicates", "seed"),
              precision=("device",), recording=("record",))
def adaptive_svag_chain(problem: QuadraticProblem, aggregator: Aggregator, schedule: Schedule,
                        replication: Replication, precision: Precision | None = None, *, k: int, w0=None,
                        recording: Recording | None = None, method: str = "round-law") -> np.ndarray:
    """Weights (T, R, d) of the adaptive SVAG chain with ``k`` at the base rounds ``record`` (default all; module
    docstring).  ``method="round-law"`` (default) samples the round from its exact law (:func:`round_law_chain`);
    ``"simulate"`` runs the clients' local SGD in the simulator (the same law, slower).  The values
    (:class:`~fedsde.params.Schedule`: ``eta``, ``local_steps``, ``rounds``, ``server_lr``;
    :class:`~fedsde.params.Replication`: ``replicates``, ``seed``; :class:`~fedsde.params.Precision`: ``device``;
    :class:`~fedsde.params.Recording`: ``record``) may be given as the keywords of their fields
    (:func:`fedsde.params.takes_values`)."""
    from fedsde._validate import choice
    from fedsde.sde.adaptive import svag_aggregator

    eta, local_steps, rounds, server_lr = schedule.eta, schedule.local_steps, schedule.rounds, schedule.server_lr
    replicates, seed = replication.replicates, replication.need_seed()
    device = (precision or Precision()).device
    record = (recording or DEFAULT_RECORDING).record

    choice("method", method, ("round-law", "simulate"))
    k = positive_int("k", k)
    base = np.arange(rounds + 1) if record is None else np.asarray(record, dtype=np.int64)
    rule = svag_aggregator(aggregator, k)
    if method == "round-law":
        return round_law_chain(problem, rule, eta=eta, local_steps=local_steps, rounds=rounds * k * k,
                               replicates=replicates, seed=seed, server_lr=server_lr / k, w0=w0,
                               record=(base * k * k).tolist(), noise_factor=float(k * k))
    from fedsde.sim import simulate

    res = simulate(_noisier(problem, float(k * k)), eta=eta, local_steps=local_steps, rounds=rounds * k * k,
                   replicates=replicates, seed=seed, server_lr=server_lr / k, w0=w0, aggregator=rule,
                   record=(base * k * k).tolist(), device=device)
    return res.weights


@takes_values(schedule=("eta", "local_steps", "rounds", "server_lr", "h"), replication=("replicates", "seed"),
              precision=("device",), equivalence=("tolerance", "alpha"), recording=("record_every",))
def rule_validity_test(problem: QuadraticProblem, aggregator: str | Aggregator, schedule: Schedule,
                       replication: Replication, precision: Precision | None = None, *, w0=None, ks=None,
                       equivalence: Equivalence | None = None,
                       recording: Recording | None = None) -> ValidityResult:
    """Is the rule's own SDE a good model of the rule on ``problem``?  (Module docstring.)

    Parameters
    ----------
    problem : QuadraticProblem
    aggregator : str or Aggregator
        A rule with an SDE (:attr:`~fedsde.aggregators.Aggregator.sde_kind`).
    schedule, replication, precision, equivalence, recording : values of :mod:`fedsde.params`
        :class:`~fedsde.params.Schedule` (``eta``, ``local_steps``, ``rounds``, ``server_lr``, ``h``),
        :class:`~fedsde.params.Replication` (``replicates``, ``seed``), :class:`~fedsde.params.Precision`
        (``device``), :class:`~fedsde.params.Equivalence` (``tolerance``, ``alpha``) and
        :class:`~fedsde.params.Recording` (``record_every``); each field may be given instead as the keyword of its
        name (:func:`fedsde.params.takes_values`); the fields mean:
    eta, local_steps, server_lr
        Client rate, local steps ``τ_k``, server step ``s``.
    rounds, replicates, seed
        Base rounds ``n``, replicates ``R`` per chain, seed.
    h : float, optional
        Clock step (default: ``s²`` for adaptive rules, ``η`` otherwise).
    ks : sequence of int, optional
        SVAG parameters ``k`` of the adaptive test (default :data:`DEFAULT_KS`; 1 is the rule itself).
    tolerance, alpha, record_every, device
        As :func:`fedsde.validity.validity_test`.

    Returns
    -------
    ValidityResult
        ``ells`` are ``ℓ = k²`` (adaptive) or ``[1]``; ``verdict`` one of the three outcomes.
    """
    from fedsde.sde.rules import NoSDEError

    agg = get_aggregator(aggregator)
    if agg.sde_kind is None:
        raise NoSDEError(agg.sde_refusal)
    if not isinstance(problem, QuadraticProblem):
        raise FedsdeInputError("problem: the SDEs of the rules other than FedAvg are built on quadratic clients")
    eta, local_steps, rounds, server_lr, h = (schedule.eta, schedule.local_steps, schedule.rounds,
                                              schedule.server_lr, schedule.h)
    R, seed, device = replication.replicates, replication.need_seed(), (precision or Precision()).device
    equivalence = equivalence or DEFAULT_EQUIVALENCE
    tolerance, alpha, every = equivalence.tolerance, equivalence.alpha, (recording or DEFAULT_RECORDING).record_every
    if rounds < 1:
        raise FedsdeInputError(f"rounds={rounds}: must be an integer >= 1")
    if R < 2:
        raise FedsdeInputError(f"replicates={R}: must be an integer >= 2")
    adaptive = agg.sde_kind == "adaptive"
    hh = (server_lr**2 if adaptive else float(eta)) if h is None else h
    w0_arr = start_point(w0, problem.d)
    grid = np.unique(np.r_[np.arange(0, rounds + 1, every), rounds])
    names = list(metric_names(problem))
    ks = sorted({positive_int("ks", k) for k in (DEFAULT_KS if ks is None else ks)}) if adaptive else [1]
    if adaptive and len(ks) < 2:
        raise FedsdeInputError(f"ks={ks}: the SVAG reference needs at least two values of k")
    values = {m: np.empty((len(ks), grid.size, R)) for m in names}
    final = []
    for i, k in enumerate(ks):
        if adaptive:
            w = adaptive_svag_chain(problem, agg, eta=eta, local_steps=local_steps, rounds=rounds, k=k, replicates=R,
                                    seed=seed, server_lr=server_lr, w0=w0_arr, record=grid, device=device)
        else:
            w = linear_rule_chain(problem, agg, eta=eta, local_steps=local_steps, rounds=rounds, replicates=R,
                                  seed=seed, server_lr=server_lr, w0=w0_arr, record=grid)
        for m, v in evaluate_metrics(problem, w, w0_arr, names).items():
            values[m][i] = v
        final.append(w[-1])
    ells = [k * k for k in ks]
    times = grid * hh
    if adaptive:
        gaps = svag_gaps(ells, values, names)
        regime = ell_ratios(ells, times, values, names, alpha=alpha)
    else:
        from fedsde.sde.rules import rule_sde

        law = rule_sde(problem, agg, eta, local_steps, server_lr, hh).sde
        gaps = exact_gaps({m: values[m][0] for m in names}, exact_sde_paths(problem, law, grid, hh, w0_arr, names))
        regime = None
    base = agg.name or type(agg).__name__
    verdict = validity_verdict(times, gaps, replicates=R, reference="svag" if adaptive else "exact",
                               tolerance=tolerance, alpha=alpha, regime=regime, base=base, base_ell=1)
    summary = {m: {"mean": v.mean(-1), "se": v.std(-1, ddof=1) / np.sqrt(R)} for m, v in values.items()}
    extrapolated = {}
    if len(ells) >= 2:
        for m, s in summary.items():
            em, es = richardson_limit(ells, s["mean"], s["se"])
            extrapolated[m] = {"mean": em, "se": es}
    config = {"aggregator": agg.describe(), "sde": agg.sde_kind, "eta": float(eta),
              "local_steps": np.atleast_1d(local_steps).tolist(), "server_lr": server_lr, "h": hh, "rounds": rounds,
              "replicates": R, "seed": seed, "ells": ells, "ks": ks, "reference": verdict.reference,
              "tolerance": tolerance, "alpha": alpha, "record_every": every}
    return ValidityResult(ells=ells, rounds=grid, times=times, metrics=summary,
                          final_mean=np.array([f.mean(0) for f in final]),
                          final_cov=np.array([np.atleast_2d(np.cov(f, rowvar=False)) for f in final]),
                          verdict=verdict, extrapolated=extrapolated, values=values, config=config,
                          sde={m: {"mean": g.sde_mean, "se": g.sde_se} for m, g in gaps.items()})


@takes_values(schedule=("eta", "local_steps", "rounds", "server_lr"), replication=("replicates", "seed"),
              precision=("device",), integrator=("substeps",))
def adaptive_weak_error(problem: QuadraticProblem, aggregator: str | Aggregator, schedule: Schedule,
                        replication: Replication, precision: Precision | None = None, *, w0=None, ks=(1, 2, 4),
                        integrator: Integrator | None = None, phi: str = "loss", level: float = 0.95):
    """Monte-Carlo weak error of the adaptive SDE against the SVAG chains at ``t = n·s²`` as ``ℓ = k² → ∞``.

    For each ``k``: ``replicates`` chains (:func:`adaptive_svag_chain`) and the difference of ``E φ(w_T)`` from
    ``replicates`` SDE paths (:func:`fedsde.sde.adaptive.adaptive_sde_paths`, ``substeps·k²`` Euler steps per
    round, independent seed) with a normal interval at ``level``; the slope is fitted to ``log |error|`` against
    ``log(s²/ℓ)``, the chain's step on the clock (expected 1, Malladi et al. 2022, Theorem 4.2/4.4), and flattens
    once the error falls below the Monte-Carlo noise (compare ``errors`` with ``stderr``).  The values
    (:class:`~fedsde.params.Schedule`: ``eta``, ``local_steps``, ``rounds``, ``server_lr``;
    :class:`~fedsde.params.Replication`: ``replicates``, ``seed``; :class:`~fedsde.params.Precision`: ``device``;
    :class:`~fedsde.params.Integrator`: ``substeps``, default 4) may be given as the keywords of their fields
    (:func:`fedsde.params.takes_values`).

    Returns
    -------
    WeakErrorCurve
        ``steps`` ``s²/k²``, ``rounds`` ``n·k²``, ``errors``, ``stderr``, ``ci``, ``slope``.
    """
    from fedsde.compare.weak_error import WeakErrorCurve, fit_loglog_slope, mc_difference, phi_function
    from fedsde.sde.adaptive import adaptive_sde_paths

    eta, local_steps, rounds, server_lr = schedule.eta, schedule.local_steps, schedule.rounds, schedule.server_lr
    replicates, seed, device = replication.replicates, replication.need_seed(), (precision or Precision()).device
    substeps = 4 if integrator is None else integrator.substeps
    agg = get_aggregator(aggregator)
    ks = sorted({positive_int("ks", k) for k in ks})
    if len(ks) < 2:
        raise FedsdeInputError(f"ks={ks}: need at least two values of k for a slope")
    fn = phi_function(problem, phi)
    w0_arr = start_point(w0, problem.d)
    sde = adaptive_sde_paths(problem, agg, eta=eta, local_steps=local_steps, rounds=rounds, replicates=replicates,
                             seed=seed + 1, server_lr=server_lr, w0=w0_arr, substeps=substeps * max(ks) ** 2,
                             record=[rounds], device=device)["weights"][-1]
    errs, ses, cis, ea, eb = (np.empty(len(ks)) for _ in range(5))
    cis = np.empty((len(ks), 2))
    for j, k in enumerate(ks):
        w = adaptive_svag_chain(problem, agg, eta=eta, local_steps=local_steps, rounds=rounds, k=k,
                                replicates=replicates, seed=seed, server_lr=server_lr, w0=w0_arr, record=[rounds],
                                device=device)[-1]
        diff = mc_difference(w, sde, fn, level)
        errs[j], ses[j], cis[j], ea[j], eb[j] = diff.abs, diff.stderr, diff.ci, diff.mean_a, diff.mean_b
    steps = server_lr**2 / np.asarray(ks, dtype=np.float64) ** 2
    slope, intercept = fit_loglog_slope(steps, errs)
    config = {"aggregator": agg.name, "sde": "adaptive", "eta": float(eta), "server_lr": float(server_lr),
              "local_steps": np.atleast_1d(local_steps).tolist(), "t_end": rounds * server_lr**2, "ks": ks,
              "phi": phi, "paths": replicates, "seed": seed, "substeps": substeps, "method": "monte-carlo",
              "level": level}
    return WeakErrorCurve(steps, rounds * np.asarray(ks) ** 2, errs, slope, intercept, ea, eb, ses, cis, config)


__all__ = ["DEFAULT_KS", "adaptive_svag_chain", "adaptive_weak_error", "linear_rule_chain", "round_law_chain",
           "rule_validity_test"]
