"""A server rule against its own SDE on any loss: the weak error of its SVAG chains and their cost.

The counterpart for a rule of :func:`fedsde.validity.general.general_sde_study` (FedAvg): the rule's SDE (eq. (2)
with the rule's round moments; Malladi et al. 2022 for the adaptive rules) is sampled by the rule's SVAG chains
(:func:`fedsde.sde.rule_svag.rule_svag_chain`; ``ℓ = 1`` is the rule itself, ``ℓ = k²`` for the adaptive rules),
its value ``E φ(w_T)`` is the order-1 Richardson limit of the two largest ``ℓ``, and every chain's error against it
comes with a 95 % interval, the fitted slope against the step ``h/ℓ`` with its parametric-bootstrap interval
(:func:`fedsde._stats.error_slope_interval`) on the points independent of the reference, and the cost of a base
round relative to the rule's own.  The Monte-Carlo-coefficient Euler scheme of FedAvg's study has no rule
counterpart here.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from fedsde._stats import error_slope_interval
from fedsde._validate import start_point
from fedsde.aggregators import Aggregator, get_aggregator
from fedsde.errors import FedsdeInputError
from fedsde.params import (
    DEFAULT_RECORDING,
    FULL_PARTICIPATION,
    NO_HOOKS,
    PRECISION_FIELDS,
    ChainHooks,
    ClientSampling,
    Precision,
    Recording,
    Replication,
    Schedule,
    derive,
    takes_values,
)
from fedsde.validity.core import MetricGrid, default_start
from fedsde.validity.general import TIMING, GeneralSDEStudy, SchemeRow, _best_time, _summary, weak_error_slopes
from fedsde.validity.verdict import richardson_limit


@dataclass
class RuleSDEStudy(GeneralSDEStudy):
    """:class:`~fedsde.validity.general.GeneralSDEStudy` of a rule, with ``slope_intervals`` (metric → ``[low,
    high]``, 95 %, ``None`` where fewer than two independent errors are resolved)."""

    slope_intervals: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "slope_intervals": self.slope_intervals}


#: the metrics of :func:`rule_general_study` when none are given
DEFAULT_METRICS = ("train_loss", "test_accuracy")


@takes_values(schedule=("eta", "local_steps", "rounds", "server_lr", "h"), replication=("replicates", "seed"),
              precision=PRECISION_FIELDS, recording=("metrics", "record_every"),
              types={"sampling": ClientSampling}, sampling=("participation", "weighting"))
def rule_general_study(problem, aggregator: str | Aggregator, schedule: Schedule, replication: Replication,
                       precision: Precision | None = None, *, ells: Sequence[int] | None = None,
                       sampling: ClientSampling | None = None, recording: Recording | None = None, w0=None,
                       oracle_factory: Callable | None = None) -> RuleSDEStudy:
    """Weak error of ``E φ(w_T)`` of the rule's SVAG chains against its SDE, with cost (module docstring).

    ``ells`` must include 1 (the rule) and at least two more (default ``1, 2, 4, 8``; adaptive rules squares,
    default ``1, 4, 16, 64``); ``metrics`` (of the :class:`~fedsde.params.Recording`) default
    :data:`DEFAULT_METRICS`; ``sampling`` (:class:`~fedsde.params.ClientSampling`: ``participation``,
    ``weighting``) and the other parameters as :func:`fedsde.validity.rules.rule_validity_test` (each field of the
    values may be given instead as the keyword of its name, :func:`fedsde.params.takes_values`).
    """
    from fedsde.sde.rule_svag import run_rule_svag_chain
    from fedsde.sde.svag import default_oracle_factory
    from fedsde.validity.rules import rule_ells

    precision, recording = precision or Precision(), recording or DEFAULT_RECORDING
    eta, local_steps, server_lr, rounds = schedule.eta, schedule.local_steps, schedule.server_lr, schedule.rounds
    R, seed = replication.replicates, replication.need_seed()
    metrics = DEFAULT_METRICS if recording.metrics is None else recording.metrics
    every, device, dtype = recording.record_every, precision.device, precision.dtype
    agg = get_aggregator(aggregator)
    if rounds < 1:
        raise FedsdeInputError(f"rounds={rounds}: must be an integer >= 1")
    if R < 2:
        raise FedsdeInputError(f"replicates={R}: must be an integer >= 2")
    ells = rule_ells(agg, "svag", ells)
    if ells[0] != 1 or len(ells) < 3:
        raise FedsdeInputError(f"ells={ells}: must contain 1 (the rule itself) and at least two larger values")
    if oracle_factory is None:
        oracle_factory = default_oracle_factory(problem)
    w0_arr = start_point(default_start(problem, w0), problem.d)  # checked once, for every chain
    grid = np.unique(np.r_[np.arange(0, rounds + 1, every), rounds])
    names = list(metrics)
    sampling = sampling or FULL_PARTICIPATION
    participation, weighting = sampling.participation, sampling.weighting
    common = dict(start=w0_arr, sampling=sampling, oracle_factory=oracle_factory, keep=np.zeros(0, np.int64))
    one_round = derive(schedule, rounds=1)

    def once(ell: int) -> None:
        run_rule_svag_chain(problem, agg, one_round, replication, precision, ell=ell, hooks=NO_HOOKS, **common)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the measured runs below report their own warnings
        once(ells[0])
        once(ells[1])
        per_round = {ell: _best_time(once, ell) for ell in ells}
    dev, dt = device, dtype
    runs, hh = [], None
    for ell in ells:
        on_grid = MetricGrid(problem, names, grid, R, w0_arr, dev, dt)
        tic = time.perf_counter()
        res = run_rule_svag_chain(problem, agg, schedule, replication, precision, ell=ell,
                                  hooks=ChainHooks(on_grid=on_grid), **common)
        hh = res.h
        runs.append((ell, hh / ell, time.perf_counter() - tic, on_grid.host()))
    means = np.stack([[_summary(v)[0][m] for m in names] for *_, v in runs])
    ses = np.stack([[_summary(v)[1][m] for m in names] for *_, v in runs])
    ref_m, ref_s = richardson_limit(ells, means, ses)  # (M, T)
    reference = {m: {"mean": float(ref_m[i, -1]), "se": float(ref_s[i, -1])} for i, m in enumerate(names)}
    a, b = float(ells[-2]), float(ells[-1])
    pair_se = {m: np.hypot(ses[-2, i, -1], ses[-1, i, -1]) for i, m in enumerate(names)}
    coupled = {ells[-2]: b / (b - a), ells[-1]: a / (b - a)}
    rows = []
    for ell, step, sec, vals in runs:
        mean, se = _summary(vals)
        err_se = ({m: float(coupled[ell] * pair_se[m]) for m in names} if ell in coupled else
                  {m: float(np.hypot(se[m][-1], reference[m]["se"])) for m in names})
        rows.append(SchemeRow(scheme="svag", param=ell, step=step, seconds=sec,
                              cost_ratio=per_round[ell] / per_round[ells[0]],
                              mean={m: float(mean[m][-1]) for m in names}, se={m: float(se[m][-1]) for m in names},
                              error={m: float(mean[m][-1] - reference[m]["mean"]) for m in names}, error_se=err_se))
    slopes = weak_error_slopes(rows, names, reference_ells=ells[-2:])
    intervals = {}
    free = [r for r in rows if r.param not in coupled]
    for m in names:
        ok = [r for r in free if abs(r.error[m]) > 2 * r.error_se[m]]
        intervals[m] = None if len(ok) < 2 else list(error_slope_interval(
            [r.step for r in ok], [r.mean[m] for r in ok], [r.se[m] for r in ok], reference[m]["mean"],
            reference[m]["se"]))
    first, finest = runs[0][3], runs[-1][3]
    fm, fs = _summary(first)
    moments = {m: {"fedavg": {"mean": fm[m], "se": fs[m], "std": first[m].std(-1, ddof=1)},
                   "sde": {"mean": ref_m[i], "se": ref_s[i], "std": finest[m].std(-1, ddof=1)}}
               for i, m in enumerate(names)}
    config = {"aggregator": agg.describe(), "sde": agg.sde_kind, "eta": float(eta),
              "local_steps": np.atleast_1d(local_steps).tolist(), "server_lr": float(server_lr), "h": hh,
              "rounds": rounds, "replicates": R, "seed": seed, "ells": ells, "participation": participation,
              "weighting": weighting, "metrics": names, "threads": torch.get_num_threads(), "timing": TIMING,
              "slope_points": "the rule and the SVAG chains other than the two largest ℓ (which define the reference); "
                              "only errors beyond 2 s.e.; interval: parametric bootstrap, 95 %"}
    return RuleSDEStudy(rows=rows, reference=reference, slopes=slopes, times=grid * hh, moments=moments,
                        config=config, slope_intervals=intervals)


__all__ = ["DEFAULT_METRICS", "RuleSDEStudy", "rule_general_study"]
