"""The validity test of a server rule against its own SDE, on every problem kind and under client sampling.

The rule (``ℓ = 1``: its own code, :func:`fedsde.sde.rule_svag.rule_svag_chain`, the simulator's numbers) is
judged against its SDE by the verdict FedAvg gets (:func:`fedsde.validity.verdict.validity_verdict`: simultaneous
intervals, three outcomes, the heavy-tail check, the 1/ℓ report):

* **exact reference** — linear and momentum rules on quadratic clients: the SDE's exact mean and covariance at the
  grid times (:mod:`fedsde.sde.rules`; under client sampling :class:`fedsde.sde.sampled_sde.SampledSDE`, whose law
  is not Gaussian: ``E F`` and ``E‖∇F‖²`` are functions of the two moments, ``E‖w − w₀‖`` is not and is left out of
  the verdict with that reason);
* **SVAG reference** — every other case (data and module problems; adaptive rules): the order-1 Richardson limit of
  the rule's SVAG chains with the two largest ``ℓ`` (``ℓ = k²`` for adaptive rules, Malladi et al. 2022), paired
  per replicate with the rule's chain (:func:`fedsde.validity.reference.svag_gaps`).

Clock ``t = n·h``: ``h = η`` by default, ``s²`` for adaptive rules (Malladi et al.'s clock).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from fedsde._validate import start_point
from fedsde.aggregators import Aggregator, get_aggregator
from fedsde.errors import FedsdeInputError
from fedsde.params import (
    DEFAULT_EQUIVALENCE,
    DEFAULT_RECORDING,
    DEFAULT_SDE_REFERENCE,
    FULL_PARTICIPATION,
    PRECISION_FIELDS,
    ChainHooks,
    ClientSampling,
    Equivalence,
    Precision,
    Recording,
    Replication,
    Schedule,
    SDEReference,
    fedavg_rates,
    takes_values,
)
from fedsde.validity.core import MetricGrid, ValidityResult, _check_names, default_start, parse_ells
from fedsde.validity.reference import checked_exact_sde_paths, ell_ratios, gaussian_metric_means, svag_gaps
from fedsde.validity.verdict import ABSOLUTE_METRICS, GapPath, richardson_limit, validity_verdict

#: default SVAG parameters per (reference, adaptive rule): the rule alone against an exact law; the rule and three
#: chains (ℓ = k² for the adaptive rules) against the Richardson limit
RULE_ELLS = {("exact", False): (1,), ("svag", False): (1, 2, 4, 8), ("svag", True): (1, 4, 16, 64)}
#: why ``‖w − w₀‖`` is left out against the exact law of an SDE under client sampling
NO_NORM_SAMPLED = ("E‖w − w₀‖ is not a function of the mean and covariance of the SDE's law under client sampling "
                   "(not Gaussian: its diffusion depends on w); judge it against the SVAG reference ('svag')")


def rule_reference(problem, aggregator: Aggregator, reference: str | None) -> str:
    """``reference`` checked for the rule on ``problem``: ``"exact"`` where the rule's SDE has an exact law (linear
    and momentum rules on quadratic clients), else ``"svag"``."""
    from fedsde.problems.quadratic import QuadraticProblem

    exact = isinstance(problem, QuadraticProblem) and aggregator.sde_kind in ("linear", "momentum")
    if reference is None:
        return "exact" if exact else "svag"
    if reference not in ("exact", "svag"):
        raise FedsdeInputError(f"reference={reference!r}: must be one of exact, svag")
    if reference == "exact" and not exact:
        raise FedsdeInputError(f"reference='exact': the SDE of aggregator={aggregator.name!r} has an exact law only "
                               "for linear and momentum rules on quadratic clients; use the SVAG reference ('svag')")
    return reference


def rule_ells(aggregator: Aggregator, reference: str, ells: Sequence[int] | None) -> list[int]:
    """The chains' ``ℓ`` (default :data:`RULE_ELLS`), checked: distinct, >= 1, squares for adaptive rules, at least
    two against the SVAG reference."""
    adaptive = aggregator.sde_kind == "adaptive"
    return _fit_ells(aggregator, reference, parse_ells(RULE_ELLS[(reference, adaptive)] if ells is None else ells))


def _fit_ells(aggregator: Aggregator, reference: str, out: list[int]) -> list[int]:
    """Checked ``ℓ`` (distinct, increasing) against the rule and the reference (:func:`rule_ells`)."""
    adaptive = aggregator.sde_kind == "adaptive"
    if adaptive and any(math.isqrt(e) ** 2 != e for e in out):
        raise FedsdeInputError(f"ells={out}: the adaptive SVAG chain has ℓ = k², so each value must be a square "
                               "(e.g. 1,4,16,64)")
    if reference == "svag" and len(out) < 2:
        raise FedsdeInputError(f"ells={out}: the SVAG reference needs at least two values of ℓ (its Richardson limit "
                               "uses the two largest), e.g. " + ("1,4,16,64" if adaptive else "1,2,4,8"))
    return out


def _exact_means(problem, agg, schedule: Schedule, *, h, w0, grid, names, sampling: ClientSampling) -> dict:
    """``E φ`` of the rule's SDE at the grid rounds from its exact law (``None`` where it has no value)."""
    from fedsde.sde.rules import rule_sde

    r = rule_sde(problem, agg, schedule, None, None, h, participation=sampling.participation,
                 weighting=sampling.weighting)
    if r.sampling is None:
        return checked_exact_sde_paths(problem, r.sde, grid, h, w0, names)
    laws = [r.sde.moments(float(n) * h, w0) for n in grid]
    mean, cov = np.array([law.mean for law in laws]), np.array([law.cov for law in laws])
    moment = [m for m in names if m != "distance_from_start"]
    out = gaussian_metric_means(problem, mean, cov, w0, moment)  # the loss and ‖∇F‖²: any law with these moments
    return {m: out.get(m) for m in names}


@takes_values(schedule=("eta", "local_steps", "rounds", "server_lr", "h"), replication=("replicates", "seed"),
              precision=PRECISION_FIELDS, recording=("metrics", "record_every", "final_cov"),
              equivalence=("tolerance", "accuracy_tolerance", "alpha", "verdict_metrics"),
              types={"sde": SDEReference, "sampling": ClientSampling}, sde=("reference", "ells"),
              sampling=("participation", "weighting"))
def rule_validity_test(problem, aggregator: str | Aggregator, schedule: Schedule, replication: Replication,
                       precision: Precision | None = None, *, w0=None, sde: SDEReference | None = None,
                       sampling: ClientSampling | None = None, equivalence: Equivalence | None = None,
                       recording: Recording | None = None, oracle_factory: Callable | None = None,
                       progress: bool = False) -> ValidityResult:
    """Is the rule's own SDE a good model of the rule on ``problem``?  (Module docstring.)

    Parameters as :func:`fedsde.validity.validity_test` (the values :class:`~fedsde.params.Schedule`,
    :class:`~fedsde.params.Replication`: ``replicates >= 2``, ``seed``; :class:`~fedsde.params.Precision`,
    :class:`~fedsde.params.SDEReference`: ``reference``, ``ells``; :class:`~fedsde.params.Equivalence` and
    :class:`~fedsde.params.Recording`: ``metrics``, ``record_every``, ``final_cov``; each field may be given
    instead as the keyword of its name, :func:`fedsde.params.takes_values`), and ``aggregator`` (a rule with an
    SDE), ``sampling`` (:class:`~fedsde.params.ClientSampling`: ``participation``, ``weighting``, as
    :func:`fedsde.sim.simulate` draws them; the SDE carries its term).
    ``ells``: default ``1`` (exact reference), ``1,2,4,8`` or, adaptive rules, ``1,4,16,64`` (SVAG reference).
    ``final_cov``: what ``final_cov`` keeps per ``ℓ``: ``"full"`` (d × d, the default), ``"diag"`` (d) or
    ``"none"``.

    Returns
    -------
    ValidityResult
        ``config`` names the rule, its SDE kind and the sampling.
    """
    from fedsde.sde.rule_svag import run_rule_svag_chain
    from fedsde.sde.rules import NoSDEError
    from fedsde.sde.svag import default_oracle_factory

    precision, recording = precision or Precision(), recording or DEFAULT_RECORDING
    equivalence, sde = equivalence or DEFAULT_EQUIVALENCE, sde or DEFAULT_SDE_REFERENCE
    sampling = sampling or FULL_PARTICIPATION
    participation, weighting = sampling.participation, sampling.weighting
    eta, local_steps, server_lr, rounds, h = (schedule.eta, schedule.local_steps, schedule.server_lr,
                                              schedule.rounds, schedule.h)
    R = replication.replicates
    replication.need_seed()  # the chains are random: refused up front without a seed
    metrics, every, final_cov = recording.metrics, recording.record_every, recording.final_cov or "full"
    tolerance, accuracy_tolerance = equivalence.tolerance, equivalence.accuracy_tolerance
    alpha, verdict_metrics = equivalence.alpha, equivalence.verdict_metrics
    agg = get_aggregator(aggregator)
    if agg.sde_kind is None:
        raise NoSDEError(agg.sde_refusal)
    if rounds < 1:
        raise FedsdeInputError(f"rounds={rounds}: must be an integer >= 1")
    if R < 2:
        raise FedsdeInputError(f"replicates={R}: must be an integer >= 2")
    eta, _, server_lr = fedavg_rates(schedule, None, None, problem.Q)  # one number each, τ one per client
    reference = rule_reference(problem, agg, sde.reference)
    adaptive = agg.sde_kind == "adaptive"
    ells = _fit_ells(agg, reference, list(RULE_ELLS[(reference, adaptive)] if sde.ells is None else sde.ells))
    names, judged = _check_names(problem, metrics, verdict_metrics)
    hh = (server_lr**2 if adaptive else eta) if h is None else h
    w0_arr = start_point(default_start(problem, w0), problem.d)  # checked once, for every chain
    grid = np.unique(np.r_[np.arange(0, rounds + 1, every), rounds])
    sde_exact = None
    if reference == "exact":  # before any chain runs
        sde_exact = _exact_means(problem, agg, schedule, h=hh, w0=w0_arr, grid=grid, names=judged,
                                 sampling=sampling)
    if oracle_factory is None:
        oracle_factory = default_oracle_factory(problem)
    dev, dt = precision.device, precision.dtype
    L, T = len(ells), grid.size
    values = {m: np.empty((L, T, R)) for m in names}
    final_mean, covs = np.empty((L, problem.d)), []
    seconds = []
    bar = tqdm(total=rounds * sum(ells), desc=f"validity {agg.name}", unit="step", disable=not progress, leave=False)
    try:
        for li, ell in enumerate(ells):
            on_grid = MetricGrid(problem, names, grid, R, w0_arr, dev, dt)
            tic = time.perf_counter()
            res = run_rule_svag_chain(problem, agg, schedule, replication, precision, ell=ell, start=w0_arr,
                                      sampling=sampling, oracle_factory=oracle_factory, keep=np.zeros(0, np.int64),
                                      hooks=ChainHooks(on_grid=on_grid, bar=bar))
            seconds.append(time.perf_counter() - tic)
            for m, v in on_grid.host().items():
                values[m][li] = v
            final_mean[li] = res.final.mean(0)
            if final_cov == "full":
                covs.append(np.atleast_2d(np.cov(res.final, rowvar=False)))
            elif final_cov == "diag":
                covs.append(res.final.var(0, ddof=1))
    finally:
        bar.close()
    times = grid * hh
    if sde_exact is not None:
        gaps = _exact_gaps({m: values[m][0] for m in judged}, sde_exact)
        regime = ell_ratios(ells, times, {m: values[m] for m in judged}, judged, alpha=alpha)
    else:
        gaps = svag_gaps(ells, values, judged)
        tol_of = {m: accuracy_tolerance if m in ABSOLUTE_METRICS else tolerance for m in judged}
        detect = {m: tol_of[m] * (1.0 if m in ABSOLUTE_METRICS else float(np.ptp(gaps[m].sde_mean)))
                  for m in judged if not gaps[m].unjudged}
        regime = ell_ratios(ells, times, {m: values[m] for m in judged}, judged, alpha=alpha, detect=detect)
    base = agg.name or type(agg).__name__
    verdict = validity_verdict(times, gaps, replicates=R, reference=reference, tolerance=tolerance,
                               accuracy_tolerance=accuracy_tolerance, alpha=alpha, regime=regime,
                               base=base if ells[0] == 1 else f"the {base} ℓ={ells[0]} chain", base_ell=ells[0])
    summary = {m: {"mean": v.mean(-1), "se": v.std(-1, ddof=1) / np.sqrt(R)} for m, v in values.items()}
    extrapolated = {}
    if L >= 2:
        for m, s in summary.items():
            em, es = richardson_limit(ells, s["mean"], s["se"])
            extrapolated[m] = {"mean": em, "se": es}
    config = {"aggregator": agg.describe(), "sde": agg.sde_kind, "eta": float(eta),
              "local_steps": np.atleast_1d(local_steps).tolist(), "server_lr": server_lr, "h": hh, "rounds": rounds,
              "replicates": R, "seed": res.config["seed"], "ells": ells,
              "ks": [math.isqrt(e) for e in ells] if adaptive else None, "reference": reference,
              "participation": participation, "weighting": weighting, "tolerance": tolerance,
              "accuracy_tolerance": accuracy_tolerance, "alpha": alpha, "record_every": every,
              "device": res.config["device"], "dtype": res.config["dtype"], "oracle": res.config["oracle"],
              "seconds": seconds, "fedavg": "sampled"}
    sde_values = {m: {"mean": g.sde_mean, "se": g.sde_se} for m, g in gaps.items()}
    return ValidityResult(ells=ells, rounds=grid, times=times, metrics=summary, final_mean=final_mean,
                          final_cov=np.array(covs) if covs else None, verdict=verdict, extrapolated=extrapolated,
                          values=values, config=config, sde=sde_values)


def _exact_gaps(values: dict, sde: dict) -> dict:
    """:class:`GapPath` per metric against exact means; a metric without one is unjudged (:data:`NO_NORM_SAMPLED`)."""
    from fedsde.validity.reference import exact_gaps

    out = exact_gaps({m: values[m] for m, v in sde.items() if v is not None}, {m: v for m, v in sde.items()
                                                                             if v is not None})
    for m, v in sde.items():
        if v is None:
            nan = np.full(values[m].shape[0], np.nan)
            out[m] = GapPath(nan, nan, nan, nan, unjudged=NO_NORM_SAMPLED)
    return {m: out[m] for m in sde}


__all__ = ["NO_NORM_SAMPLED", "RULE_ELLS", "rule_ells", "rule_reference", "rule_validity_test"]
