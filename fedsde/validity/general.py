"""The general SDE (2) against discrete FedAvg on any loss: weak error vs step and cost, for both integrators.

Two samplers of SDE (2) for a loss without closed forms:

* ``svag`` — the SVAG chain with parameter ``ℓ`` (:mod:`fedsde.sde.svag`): step ``h/ℓ``, two client rounds per
  step and path, weak order 1 in the step; ``ℓ = 1`` is FedAvg itself;
* ``mc-euler`` — Euler–Maruyama with Monte-Carlo coefficients (:class:`fedsde.sde.models.FedAvgSDE`): step
  ``h/k``, ``K = inner_samples`` client rounds per step and path.

The SDE's value ``E φ(w(T))`` is unknown; :func:`general_sde_study` takes the order-1 Richardson extrapolation of
the two finest SVAG chains as reference (its standard error included) and reports, for every scheme and step,
``E_scheme φ(w_T) − E_ref`` with a 95 % confidence interval, the fitted log–log slope against the step (on the
points independent of the reference: the two chains that define it are left out, their errors being in a fixed
ratio by construction), and the cost per path relative to one FedAvg run (``ℓ = 1``) with the same replicates
(per base round, each scheme's the minimum over a few one-round runs after a warm-up: :data:`TIMING`).  ``φ``
ranges over the metrics of :mod:`fedsde.problems.metrics` (train loss, test accuracy, …).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from fedsde._progress import progress_bar
from fedsde._stats import fit_slope_interval
from fedsde._tolerances import Z95
from fedsde._validate import positive_int, start_point
from fedsde.params import (
    DEFAULT_RECORDING,
    PRECISION_FIELDS,
    ChainHooks,
    Integrator,
    Precision,
    Recording,
    Replication,
    Schedule,
    derive,
    fedavg_rates,
    takes_values,
)
from fedsde.sde.svag import default_oracle_factory, svag_chain
from fedsde.validity.core import MetricGrid, default_start, parse_ells
from fedsde.validity.verdict import richardson_limit

#: runs of FedAvg (ℓ = 1) timed; the minimum is the denominator of the cost ratios
TIMING_REPEATS = 3
TIMING = (f"cost_ratio: wall time of one base round of the scheme over FedAvg's (same replicates), each the minimum "
          f"over {TIMING_REPEATS} one-round runs after a warm-up run of every code path; seconds: wall time of the "
          "measured run")


def _best_time(fn: Callable[[int], None], arg: int) -> float:
    """Minimum wall time of ``fn(arg)`` over :data:`TIMING_REPEATS` calls."""
    best = np.inf
    for _ in range(TIMING_REPEATS):
        tic = time.perf_counter()
        fn(arg)
        best = min(best, time.perf_counter() - tic)
    return float(best)
SLOPE_POINTS = ("steps independent of the reference: SVAG chains other than the two largest ℓ (which define the "
                "Richardson reference) and every Monte-Carlo Euler run; only errors beyond 2 s.e.; null with fewer "
                "than 2 such points")


def weak_error_slope_fits(rows: Sequence[SchemeRow], names: Sequence[str], reference_ells: Sequence[int]) -> dict:
    """scheme → metric → :class:`~fedsde._stats.SlopeFit`: the log–log slope of ``|error|`` vs step, fitted on points
    independent of the reference, with its 95 % interval (:func:`fedsde._stats.fit_slope_interval` from the errors'
    s.e., which it treats as independent although the errors share the reference's noise, and the fit's residuals).

    The reference is the Richardson limit of the SVAG chains ``reference_ells``; their own errors are then
    ``E_a − E_ref = −ℓ_b(E_b − E_a)/(ℓ_b − ℓ_a)`` and ``E_b − E_ref = −ℓ_a(E_b − E_a)/(ℓ_b − ℓ_a)``, in exact ratio
    ``ℓ_b/ℓ_a`` whatever the data (a slope of 1 by construction), so they are left out.  Only errors beyond 2 s.e.
    enter; NaN with fewer than two points.
    """
    ref = {int(e) for e in reference_ells}
    fits: dict = {}
    for scheme in ("svag", "mc-euler"):
        sel = [r for r in rows if r.scheme == scheme and not (scheme == "svag" and int(r.param) in ref)]
        fits[scheme] = {}
        for m in names:
            ok = [r for r in sel if abs(r.error[m]) > 2 * r.error_se[m]]
            fits[scheme][m] = fit_slope_interval([r.step for r in ok], [abs(r.error[m]) for r in ok],
                                                 [r.error_se[m] for r in ok])
            if len(ok) < 2:
                fits[scheme][m] = replace(fits[scheme][m], basis="fewer than two errors beyond 2 s.e.")
    return fits


def weak_error_slopes(rows: Sequence[SchemeRow], names: Sequence[str], reference_ells: Sequence[int]) -> dict:
    """scheme → metric → the slope of :func:`weak_error_slope_fits` (``nan``, JSON null, with fewer than two
    points)."""
    return {s: {m: f.slope for m, f in d.items()} for s, d in
            weak_error_slope_fits(rows, names, reference_ells).items()}


@dataclass
class SchemeRow:
    """One scheme at one step: ``E φ(w_T)`` per metric with s.e., the weak error against the reference, cost."""

    scheme: str
    param: int
    step: float
    seconds: float
    cost_ratio: float
    mean: dict
    se: dict
    error: dict
    error_se: dict

    def to_dict(self) -> dict:
        return {"scheme": self.scheme, "param": self.param, "step": self.step, "seconds": self.seconds,
                "cost_ratio": self.cost_ratio, "mean": self.mean, "se": self.se, "error": self.error,
                "error_se": self.error_se,
                "ci95": {m: [e - Z95 * self.error_se[m], e + Z95 * self.error_se[m]] for m, e in self.error.items()}}


@dataclass
class GeneralSDEStudy:
    """Result of :func:`general_sde_study`.

    Attributes
    ----------
    rows : list of SchemeRow
        FedAvg (``svag``, ``ℓ = 1``), the SVAG chains and the Monte-Carlo Euler runs.
    reference : dict
        metric → ``{"mean", "se"}``: Richardson limit of the two finest SVAG chains at ``T``.
    slopes : dict
        scheme → metric → fitted log–log slope of ``|error|`` vs step on the points independent of the reference
        (:func:`weak_error_slopes`: not the two largest ``ℓ``; ``nan`` when fewer than two such errors are resolved,
        i.e. exceed 2 s.e.).
    slope_fits : dict
        The same slopes with their 95 % intervals (:func:`weak_error_slope_fits`; JSON ``slope_intervals``:
        scheme → metric → ``{"slope", "lower", "upper", "level", "basis", "points"}``).
    times : ndarray (T_grid,)
    moments : dict
        metric → ``{"fedavg": {"mean", "se", "std"}, "sde": {"mean", "se", "std"}}`` over the grid: the SDE's mean
        is the Richardson limit, its standard deviation over replicates that of the finest SVAG chain.
    config : dict
    """

    rows: list
    reference: dict
    slopes: dict
    times: np.ndarray
    moments: dict
    config: dict = field(default_factory=dict)
    slope_fits: dict = field(default_factory=dict)

    def row(self, scheme: str, param: int) -> SchemeRow:
        return next(r for r in self.rows if r.scheme == scheme and r.param == param)

    def to_dict(self) -> dict:
        return {"rows": [r.to_dict() for r in self.rows], "reference": self.reference, "slopes": self.slopes,
                "slope_intervals": {s: {m: f.to_dict() for m, f in d.items()} for s, d in self.slope_fits.items()},
                "times": self.times, "moments": self.moments, "config": self.config}


def _summary(vals: dict[str, np.ndarray]) -> tuple[dict, dict]:
    R = next(iter(vals.values())).shape[-1]
    return ({m: v.mean(-1) for m, v in vals.items()}, {m: v.std(-1, ddof=1) / np.sqrt(R) for m, v in vals.items()})


@takes_values(schedule=("eta", "local_steps", "rounds", "server_lr", "h"), replication=("replicates", "seed"),
              precision=PRECISION_FIELDS, recording=("metrics", "record_every"))
def general_sde_study(
    problem,
    schedule: Schedule,
    replication: Replication,
    precision: Precision | None = None,
    *,
    ells: Sequence[int] = (1, 2, 4, 8),
    mc_substeps: Sequence[int] = (1, 2),
    inner_samples: int = 16,
    recording: Recording | None = None,
    w0=None,
    oracle_factory: Callable | None = None,
    progress: bool = False,
) -> GeneralSDEStudy:
    """Weak error of ``E φ(w_T)`` and cost of both samplers of SDE (2), against FedAvg (see the module docstring).

    ``ells`` must include 1 (FedAvg) and at least two more values (the two largest give the reference);
    ``mc_substeps`` may be empty.  Every scheme uses ``replicates`` paths and its own random streams.  ``metrics``:
    names of :func:`fedsde.problems.metrics.metric_names` (default ``train_loss`` and, where the problem has a test
    set, ``test_accuracy``); a name the problem does not define is refused in one line.  ``progress``: one bar on
    stderr over the timing runs and every scheme's run (in SVAG steps and Euler rounds).

    The values of :mod:`fedsde.params`: :class:`~fedsde.params.Schedule` (``eta``, ``local_steps``, ``rounds``,
    ``server_lr``, ``h``), :class:`~fedsde.params.Replication` (``replicates``, ``seed``),
    :class:`~fedsde.params.Precision` (``device``, ``dtype``) and :class:`~fedsde.params.Recording` (``metrics``,
    ``record_every``); each field may be given instead as the keyword of its name, the call of earlier releases
    (:func:`fedsde.params.takes_values`).
    """
    from fedsde.errors import FedsdeInputError
    from fedsde.sde.integrate import simulate_sde

    precision, recording = precision or Precision(), recording or DEFAULT_RECORDING
    rounds, R, seed = schedule.rounds, replication.replicates, replication.need_seed()
    metrics, every = recording.metrics, recording.record_every
    eta, local_steps, server_lr = schedule.eta, schedule.local_steps, schedule.server_lr
    if rounds < 1:
        raise FedsdeInputError(f"rounds={rounds}: must be an integer >= 1")
    if R < 2:
        raise FedsdeInputError(f"replicates={R}: must be an integer >= 2")
    fedavg_rates(schedule, None, None, problem.Q)  # one number each (no schedules here), τ one per client
    ells = parse_ells(ells)
    if ells[0] != 1 or len(ells) < 3:
        raise FedsdeInputError(f"ells={ells}: must contain 1 (FedAvg) and at least two larger values")
    subs = sorted({positive_int("mc_substeps", k) for k in mc_substeps})
    mc_integrator = Integrator(inner_samples=inner_samples)  # the Euler scheme's rollouts (substeps: per run)
    if oracle_factory is None:
        oracle_factory = default_oracle_factory(problem)
    start = default_start(problem, w0)
    w0_arr = start_point(start, problem.d)
    grid = np.unique(np.r_[np.arange(0, rounds + 1, every), rounds])
    names = _study_metrics(problem, metrics)
    from fedsde._memory import json_bytes, keep_memory

    runs_n = len(ells) + len(subs)  # per scheme and metric: values (T, R), and the printed moments and rows
    keep_memory(f"the metric values of {runs_n} schemes ({len(names)} × {grid.size} × {R} numbers each)",
                16 * runs_n * len(names) * grid.size * R + json_bytes(runs_n * len(names) * (8 + 6 * grid.size)),
                "use fewer replicates or record fewer rounds (record_every)")
    common = dict(w0=start, oracle_factory=oracle_factory)
    one_round = derive(schedule, rounds=1)  # the timing runs: one base round each
    mc_rep = derive(replication, seed=seed + 1)  # the Euler scheme's own random streams

    # cost per base round of every scheme: wall time of one-round runs with the same replicates, the minimum over
    # TIMING_REPEATS after a warm-up run of every code path (one-time costs and other work on shared cores must not
    # enter the ratios); the measured runs below are timed too (``seconds``) but not used for the ratios
    units = (3 + (1 if subs else 0) + (TIMING_REPEATS + rounds) * (sum(ells) + len(subs)))  # steps, timing included
    bar = progress_bar(units, "compare: timing", unit="step", enabled=progress)

    timing_hooks = ChainHooks(bar=bar)

    def svag_once(ell: int) -> None:
        svag_chain(problem, one_round, replication, precision, ell=ell, hooks=timing_hooks, **common)

    def mc_once(k: int) -> None:
        simulate_sde(problem, one_round, mc_rep, precision, variant="general",
                     integrator=derive(mc_integrator, substeps=k),
                     recording=derive(DEFAULT_RECORDING, record=[1], moments_only=True, full_cov_rounds=()),
                     **common)
        bar.update()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the measured runs below report their own warnings
        svag_once(1)
        svag_once(2)
        if subs:
            mc_once(subs[0])
        per_round = {("svag", ell): _best_time(svag_once, ell) for ell in ells}
        per_round |= {("mc-euler", k): _best_time(mc_once, k) for k in subs}
    runs = []  # (scheme, param, step, seconds, values (T, R) per metric)
    hh = None
    dev, dt = precision.device, precision.dtype
    for ell in ells:  # metrics on the chains' device as they run (MetricGrid: one transfer per chain)
        bar.set_description(f"compare: {'FedAvg' if ell == 1 else f'svag ℓ={ell}'}")
        on_grid = MetricGrid(problem, names, grid, R, w0_arr, dev, dt)
        tic = time.perf_counter()
        res = svag_chain(problem, schedule, replication, precision, ell=ell, hooks=ChainHooks(on_grid=on_grid, bar=bar),
                         **common)
        sec = time.perf_counter() - tic
        hh = res.h
        runs.append(("svag", ell, hh / ell, sec, on_grid.host()))
    for k in subs:  # metrics as the paths pass the grid (MetricGrid); no paths kept, no covariance formed
        bar.set_description(f"compare: mc-euler k={k}")
        on_grid = MetricGrid(problem, names, grid, R, w0_arr, dev, dt)
        tic = time.perf_counter()
        simulate_sde(problem, schedule, mc_rep, precision, variant="general",
                     integrator=derive(mc_integrator, substeps=k),
                     recording=derive(DEFAULT_RECORDING, record=grid, moments_only=True, full_cov_rounds=(),
                                      on_record=on_grid), progress=progress, **common)  # a bar of its own
        sec = time.perf_counter() - tic
        bar.update(rounds)
        runs.append(("mc-euler", k, hh / k, sec, on_grid.host()))

    bar.close()
    svag_means = np.stack([[_summary(v)[0][m] for m in names] for s, _, _, _, v in runs if s == "svag"])
    svag_ses = np.stack([[_summary(v)[1][m] for m in names] for s, _, _, _, v in runs if s == "svag"])
    ref_m, ref_s = richardson_limit(ells, svag_means, svag_ses)  # (M, T)
    reference = {m: {"mean": float(ref_m[i, -1]), "se": float(ref_s[i, -1])} for i, m in enumerate(names)}
    base = per_round[("svag", 1)] if 1 in ells else np.nan
    # the two chains that define the reference are not independent of it: E_a − E_ref = −b/(b−a)·(E_b − E_a) and
    # E_b − E_ref = −a/(b−a)·(E_b − E_a), whose s.e. is that factor times hypot(se_a, se_b); other rows are independent
    a, b = float(ells[-2]), float(ells[-1])
    pair_se = {m: np.hypot(svag_ses[-2, i, -1], svag_ses[-1, i, -1]) for i, m in enumerate(names)}
    coupled = {ells[-2]: b / (b - a), ells[-1]: a / (b - a)}
    rows = []
    for scheme, param, step, sec, vals in runs:
        mean, se = _summary(vals)
        if scheme == "svag" and param in coupled:
            err_se = {m: float(coupled[param] * pair_se[m]) for m in names}
        else:
            err_se = {m: float(np.hypot(se[m][-1], reference[m]["se"])) for m in names}
        rows.append(SchemeRow(
            scheme=scheme, param=param, step=step, seconds=sec, cost_ratio=per_round[(scheme, param)] / base,
            mean={m: float(mean[m][-1]) for m in names}, se={m: float(se[m][-1]) for m in names},
            error={m: float(mean[m][-1] - reference[m]["mean"]) for m in names},
            error_se=err_se,
        ))
    fits = weak_error_slope_fits(rows, names, reference_ells=ells[-2:])
    slopes = {s: {m: f.slope for m, f in d.items()} for s, d in fits.items()}
    fed_m, fed_s = _summary(runs[0][4])
    finest = [v for s, _, _, _, v in runs if s == "svag"][-1]
    moments = {m: {"fedavg": {"mean": fed_m[m], "se": fed_s[m], "std": runs[0][4][m].std(-1, ddof=1)},
                   "sde": {"mean": ref_m[i], "se": ref_s[i], "std": finest[m].std(-1, ddof=1)}}
               for i, m in enumerate(names)}
    config = {"eta": float(eta), "local_steps": np.atleast_1d(local_steps).tolist(), "server_lr": float(server_lr),
              "h": hh, "rounds": rounds, "replicates": R, "seed": seed, "ells": ells, "mc_substeps": subs,
              "inner_samples": inner_samples, "metrics": names, "threads": torch.get_num_threads(),
              "timing": TIMING, "slope_points": SLOPE_POINTS}
    return GeneralSDEStudy(rows=rows, reference=reference, slopes=slopes, times=grid * hh, moments=moments,
                           config=config, slope_fits=fits)


def _study_metrics(problem, metrics) -> list[str]:
    """The metrics of :func:`general_sde_study`, checked against those the problem defines."""
    from fedsde.problems.metrics import metric_names

    have = metric_names(problem)
    if metrics is None:
        return [m for m in ("train_loss", "test_accuracy") if m in have]
    names = list(dict.fromkeys(str(m) for m in metrics))
    bad = [m for m in names if m not in have]
    if bad or not names:
        from fedsde.errors import FedsdeInputError

        raise FedsdeInputError(f"metrics={names}: {'not defined for this problem' if bad else 'name at least one'} "
                               f"(available: {', '.join(have)})")
    return names


def cost_to_error(study: GeneralSDEStudy, metric: str, target: float, *, z: float = 0.0) -> dict:
    """Cheapest row of each scheme (FedAvg itself excluded) whose ``|error| + z·s.e.`` is at most ``target``:
    scheme → cost ratio (``nan`` when no step reaches it).  ``z = 0``: the point estimate;
    ``z =`` :data:`~fedsde._tolerances.Z95` (1.96): the upper end of the 95 % interval."""
    out = {}
    for scheme in ("svag", "mc-euler"):
        ok = [r.cost_ratio for r in study.rows if r.scheme == scheme and not (scheme == "svag" and r.param == 1)
              and abs(r.error[metric]) + z * r.error_se[metric] <= target]
        out[scheme] = min(ok) if ok else float("nan")
    return out
