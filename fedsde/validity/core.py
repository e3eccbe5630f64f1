"""The validity test: run FedAvg (and SVAG chains), record metrics on the base grid ``t = n·h``, and judge FedAvg
against the SDE (its exact law, or the SVAG chains' limit).

The metrics are evaluated where the chains run, in their dtype (:func:`fedsde.problems.metrics.evaluate_metrics_torch`):
every chunk of replicates hands its weights to :class:`MetricGrid` at every grid time, whose per-replicate values
accumulate in one tensor on the device and reach the host once per chain.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fedsde._memory import keep_memory
from fedsde._progress import progress_bar
from fedsde._samples import cov_numbers, replicate_cov, resolve_final_cov
from fedsde._validate import distinct_ints, start_point
from fedsde.errors import FedsdeInputError
from fedsde.params import (
    DEFAULT_EQUIVALENCE,
    DEFAULT_RECORDING,
    DEFAULT_SDE_REFERENCE,
    PRECISION_FIELDS,
    ChainHooks,
    Equivalence,
    Precision,
    Recording,
    Replication,
    Schedule,
    SDEReference,
    fedavg_rates,
    takes_values,
)
from fedsde.problems.metrics import metric_names
from fedsde.sde.svag import default_oracle_factory, run_svag_chain
from fedsde.validity.exact_fedavg import exact_fedavg_paths, moments_close, resolve_fedavg
from fedsde.validity.heavy import divergence_record, sampled_sides
from fedsde.validity.metric_grid import METRIC_WORK, MetricGrid, evaluate_metrics  # noqa: F401 (re-exported)
from fedsde.validity.reference import (
    NO_NORM_MEAN,
    check_order,
    checked_exact_sde_paths,
    ell_ratios,
    exact_gaps,
    exact_sde_law,
    resolve_reference,
    svag_gaps,
)
from fedsde.validity.stability import warn_stability
from fedsde.validity.verdict import ABSOLUTE_METRICS, GapPath, ValidityVerdict, richardson_limit, validity_verdict

#: default SVAG parameters per reference: FedAvg alone against an exact law; with the SVAG reference, FedAvg and the
#: chains whose Richardson limit is the SDE (three besides FedAvg, so that the 1/ℓ regime can be checked)
DEFAULT_ELLS = {"exact": (1,), "svag": (1, 2, 4, 8)}


def default_start(problem, w0) -> np.ndarray | None:
    """``w0``, else the problem's own initial weights (seeded for an MLP), else ``None`` (zero)."""
    if w0 is not None:
        return w0
    init = getattr(problem, "initial_weights", None)
    return None if init is None else np.asarray(init(), dtype=np.float64)


@dataclass
class ValidityResult:
    """Result of :func:`validity_test`.

    Attributes
    ----------
    ells : list of int
    rounds : ndarray of int, shape (T,)
        Base rounds ``n`` of the grid.
    times : ndarray, shape (T,)
        ``t = n·h``.
    metrics : dict
        name → ``{"mean": (L, T), "se": (L, T)}`` over replicates.
    final_mean : ndarray, shape (L, d)
    final_cov : ndarray of shape (L, d, d) or (L, d), or None
        Covariance of the final weights over replicates per ``ℓ`` as ``config["final_cov"]`` says: ``full``,
        ``diag`` (the d variances) or ``none``; computed as such (no d × d array unless ``full``).
    final_cov_trace : ndarray, shape (L,)
        Its trace: the total variance of the final weights per ``ℓ`` (``O(R·d)``, always).
    verdict : ValidityVerdict
        FedAvg (the smallest ``ℓ``) against the SDE (:func:`fedsde.validity.verdict.validity_verdict`).
    extrapolated : dict
        name → ``{"mean": (T,), "se": (T,)}``: order-1 Richardson limit ``ℓ → ∞`` of the two largest ``ℓ``
        (empty with a single ``ℓ``).
    values : dict
        name → per-replicate values (L, T, R) (for weak errors with confidence intervals).
    config : dict
    sde : dict
        name → ``{"mean": (T,), "se": (T,)}``: the SDE's value used by the verdict (exact law, or Richardson limit)
        for the judged metrics.
    """

    ells: list
    rounds: np.ndarray
    times: np.ndarray
    metrics: dict
    final_mean: np.ndarray
    final_cov: np.ndarray | None
    verdict: ValidityVerdict | None
    extrapolated: dict
    values: dict = field(repr=False, default_factory=dict)
    config: dict = field(default_factory=dict)
    sde: dict = field(default_factory=dict)
    final_cov_trace: np.ndarray | None = None

    @property
    def reference(self) -> str:
        """``"exact"`` or ``"svag"``: where the SDE's value came from."""
        return self.verdict.reference

    def to_dict(self) -> dict:
        """JSON-able record (the ``fedsde validity --json`` object, without per-replicate values)."""
        return {"ells": self.ells, "rounds": self.rounds, "times": self.times, "metrics": self.metrics,
                "final_mean": self.final_mean, "final_cov": self.final_cov, "final_cov_trace": self.final_cov_trace,
                "verdict": None if self.verdict is None else self.verdict.to_dict(),
                "extrapolated": self.extrapolated, "config": self.config}


def parse_ells(ells: Sequence[int]) -> list[int]:
    """Distinct integers ``ℓ >= 1`` in increasing order (:func:`fedsde._validate.distinct_ints`; an
    :class:`~fedsde.params.SDEReference` holds them checked)."""
    return list(distinct_ints("ells", ells))


@takes_values(schedule=("eta", "local_steps", "rounds", "server_lr", "h"), replication=("replicates", "seed"),
              precision=PRECISION_FIELDS, recording=("metrics", "record_every", "final_cov"),
              equivalence=("tolerance", "accuracy_tolerance", "alpha", "verdict_metrics"),
              types={"sde": SDEReference}, sde=("reference", "ells", "order", "common_random"))
def validity_test(
    problem,
    schedule: Schedule,
    replication: Replication | None = None,
    precision: Precision | None = None,
    *,
    sde: SDEReference | None = None,
    w0=None,
    equivalence: Equivalence | None = None,
    recording: Recording | None = None,
    oracle_factory: Callable | None = None,
    progress: bool = False,
    fedavg: str | None = None,
) -> ValidityResult:
    """Does seed 002's SDE (2) describe FedAvg on ``problem``?  FedAvg by Monte Carlo against the SDE.

    Runs the SVAG chain (:func:`fedsde.sde.svag.svag_chain`) for each ``ℓ`` in ``ells`` (``ℓ = 1`` is FedAvg)
    with ``R`` replicates, records the metrics' means and standard errors on the grid ``t = n·h`` of the base run
    (every ``record_every`` rounds and the last), and judges the smallest ``ℓ`` (FedAvg) against the SDE: its
    exact law (``reference="exact"``, quadratic clients) or the Richardson limit of the two largest ``ℓ``
    (``"svag"``), by the three-outcome equivalence test of :func:`fedsde.validity.verdict.validity_verdict`.
    Memory ``O(R·Q·d)`` for the chains plus ``O(L·T·R)`` metric values.

    Parameters
    ----------
    problem : QuadraticProblem or a data problem (with a batch size, or pass ``oracle_factory``)
    schedule, replication, precision, sde, equivalence, recording : values of :mod:`fedsde.params`
        :class:`~fedsde.params.Schedule` (``eta``, ``local_steps``, ``rounds``, ``server_lr``, ``h``),
        :class:`~fedsde.params.Replication` (``replicates``, ``seed``; none with ``fedavg="exact"``),
        :class:`~fedsde.params.Precision` (``device``, ``dtype``), :class:`~fedsde.params.SDEReference` (the SDE
        side: ``reference``, ``ells``, ``order``, ``common_random``), :class:`~fedsde.params.Equivalence`
        (``tolerance``, ``accuracy_tolerance``, ``alpha``, ``verdict_metrics``) and
        :class:`~fedsde.params.Recording` (``metrics``, ``record_every``, ``final_cov``).  Each field may be
        given instead as the keyword of its name, the call of earlier releases
        (:func:`fedsde.params.takes_values`); the fields mean:
    eta, local_steps, server_lr
        Client learning rate ``η``, local steps ``E`` (or per-client ``τ_k``), server step ``s`` of FedAvg.
    rounds : int
        Base rounds ``n >= 1``.
    replicates : int
        ``R >= 2`` per ``ℓ`` (sampled chains only; not used by ``fedavg="exact"``).
    seed : int or torch.Generator
        ``ℓ = 1`` reproduces :func:`fedsde.sim.simulate` with the same seed; the other ``ℓ`` share its numbers
        where their steps begin together (``common_random``) or are independent (sampled chains only).
    ells : sequence of int, optional
        SVAG parameters; default ``(1,)`` with the exact reference (add ``ℓ > 1`` for the 1/ℓ report) and
        ``(1, 2, 4, 8)`` with the SVAG reference (which needs at least two).
    h : float, optional
        Time step of a base round (default ``η``).
    w0 : array (d,), optional
        Start (default: the problem's initial weights, else zero).
    reference : {"exact", "svag"}, optional
        The SDE's value: default ``"exact"`` where the problem has an exact law
        (:func:`fedsde.validity.reference.exact_sde_law`), else ``"svag"``.
    tolerance : float
        Largest accepted ``d = |E φ_FedAvg − E φ_SDE| / range of E φ_SDE`` (losses, ``‖∇F‖²``, distances).
    accuracy_tolerance : float
        Largest accepted gap of the test accuracy, in accuracy units (0.01: one point).
    alpha : float
        Family level of the simultaneous intervals.
    metrics : sequence of str, optional
        Metrics to record (default all of :func:`metric_names`; ``train_loss`` is always recorded).
    verdict_metrics : sequence of str, optional
        Metrics judged (default all recorded).
    record_every : int
        Grid spacing in base rounds.
    oracle_factory : callable, optional
        Gradient oracle (default: Gaussian quadratic, or minibatches of the problem's batch size).
    device, dtype, progress
    fedavg : {"exact", "sampled"}, optional
        FedAvg's side: ``"exact"`` — its exact moments where they close (quadratic and least-squares clients,
        :mod:`fedsde.validity.exact_fedavg`) against the SDE's exact law: no replicates, ``worst.gap`` is the exact
        gap and ``lower = upper = gap``; ``"sampled"`` — the Monte-Carlo chains (where the moments close, FedAvg's
        exact means still judge a metric whose sampled values are heavy-tailed or whose bounds miss the exact gap,
        :mod:`fedsde.validity.heavy`).  Default ``"exact"`` where the moments close, the reference is exact and no
        ``ℓ > 1`` is asked for, else ``"sampled"``.
    final_cov : {"full", "diag", "none"}, optional
        What ``final_cov`` keeps, decided where it is computed: the (d, d) covariance of the final weights per
        ``ℓ``, their d variances, or nothing.  Default ``"full"`` up to ``d = 256``
        (:data:`fedsde._samples.FULL_COV_MAX_D`), ``"diag"`` above; ``"full"`` is charged to the memory budget
        up front (``L·d²`` numbers).
    order : {1, 2}
        The SDE judged against: seed 002's first-order SDE, or the order-2 SDE of :mod:`fedsde.sde.order2` (its
        exact law: quadratic and least-squares clients only).
    common_random : bool
        Drive replicate ``r`` of every chain by the same random numbers where their steps begin at the same time
        (common random numbers, :mod:`fedsde.sde.svag_streams`): each chain's law is unchanged and the paired
        differences the verdict averages vary less (measured in docs/validity.md); ``False``: independent chains.
    """
    precision, recording = precision or Precision(), recording or DEFAULT_RECORDING
    equivalence, sde = equivalence or DEFAULT_EQUIVALENCE, sde or DEFAULT_SDE_REFERENCE
    eta, local_steps, server_lr, rounds = schedule.eta, schedule.local_steps, schedule.server_lr, schedule.rounds
    replicates, seed = (None, None) if replication is None else (replication.replicates, replication.seed)
    metrics, every, final_cov = recording.metrics, recording.record_every, recording.final_cov
    tolerance, accuracy_tolerance = equivalence.tolerance, equivalence.accuracy_tolerance
    alpha, verdict_metrics = equivalence.alpha, equivalence.verdict_metrics
    if rounds < 1:
        raise FedsdeInputError(f"rounds={rounds}: must be an integer >= 1")
    fedavg_rates(schedule, None, None, problem.Q)  # one number each (no schedules here), τ one per client
    how = resolve_final_cov("final_cov", final_cov, problem.d)
    reference = resolve_reference(problem, sde.reference)
    order = check_order(problem, sde.order, reference)
    mode = resolve_fedavg(problem, fedavg, reference, sde.ells)
    if mode == "exact":
        if replicates is not None:
            warnings.warn(f"replicates={replicates}: not used — FedAvg's side is exact (fedavg='exact'); pass "
                          "fedavg='sampled' to sample it", UserWarning, stacklevel=3)
        return _exact_test(problem, schedule, w0=w0, equivalence=equivalence, metrics=metrics, every=every,
                           precision=precision, how=how, order=order)
    if replicates is None or seed is None:
        raise FedsdeInputError(f"replicates={replicates}, seed={seed}: both are needed to sample the chains "
                               "(fedavg='sampled')")
    if replicates < 2:
        raise FedsdeInputError(f"replicates={replicates}: must be an integer >= 2")
    R = replicates
    ells = list(DEFAULT_ELLS[reference] if sde.ells is None else sde.ells)  # checked where the value was built
    if reference == "svag" and len(ells) < 2:
        raise FedsdeInputError(f"ells={ells}: the SVAG reference needs at least two values of ℓ (its Richardson "
                               "limit uses the two largest), e.g. 1,2,4,8")
    # the verdict's inputs are checked before any chain runs (a typo must not cost the whole run)
    names, judged = _check_names(problem, metrics, verdict_metrics)
    if oracle_factory is None:
        oracle_factory = default_oracle_factory(problem)
    w0_arr = start_point(default_start(problem, w0), problem.d)  # checked once, for every chain
    grid = np.unique(np.r_[np.arange(0, rounds + 1, every), rounds])
    hh = schedule.time_step
    known = warn_stability(problem, schedule, stacklevel=4)  # what `fedsde exact` warns about
    sde_exact = None
    if reference == "exact":  # closed form, before any chain runs (its errors are the user's to fix first)
        law = exact_sde_law(problem, schedule, order=order)
        sde_exact = checked_exact_sde_paths(problem, law, grid, hh, w0_arr, judged)
    L, T = len(ells), grid.size
    keep_results(problem.d, L, T, R, len(names), how)
    values = {m: np.empty((L, T, R)) for m in names}
    final_mean, covs, traces = np.empty((L, problem.d)), [], np.empty(L)
    seconds: list[float] = []
    dev, dt = precision.device, precision.dtype
    bar = progress_bar(rounds * sum(ells), "validity", unit="step", enabled=progress)
    at_start: dict = {}  # the metrics of the common start, once for every chain
    try:
        for li, ell in enumerate(ells):
            bar.set_description(f"validity ℓ={ell}")
            on_grid = MetricGrid(problem, names, grid, R, w0_arr, dev, dt, start=at_start)
            tic = time.perf_counter()
            res = run_svag_chain(problem, schedule, replication, precision, ell=ell, start=w0_arr,
                                 keep=np.zeros(0, np.int64), oracle_factory=oracle_factory,
                                 hooks=ChainHooks(on_grid=on_grid, bar=bar), common=sde.common_random)
            seconds.append(time.perf_counter() - tic)
            for m, v in on_grid.host().items():
                values[m][li] = v
            final_mean[li] = res.final.mean(0)
            traces[li] = float(res.final.var(axis=0, ddof=1).sum())
            covs.append(replicate_cov(res.final, how))
            chain_config = res.config
            del res  # the next chain's replicates in its place
    finally:
        bar.close()
    summary = {m: {"mean": v.mean(-1), "se": v.std(-1, ddof=1) / np.sqrt(R)} for m, v in values.items()}
    extrapolated = {}
    if L >= 2:
        for m, s in summary.items():
            em, es = richardson_limit(ells, s["mean"], s["se"])
            extrapolated[m] = {"mean": em, "se": es}
    times = grid * hh
    if sde_exact is not None:
        gaps = exact_gaps({m: values[m][0] for m in judged}, sde_exact)
    else:
        gaps = svag_gaps(ells, values, judged)

    def exact_means():  # FedAvg's exact metric means, for heavy-tailed values where its moments close
        if sde_exact is None or not moments_close(problem):
            return None
        try:
            return exact_fedavg_paths(problem, eta=schedule, grid=grid, w0=w0_arr, names=judged)[0]
        except FedsdeInputError:  # its moments overflow: the divergence test is left
            return None

    gaps = sampled_sides(problem, gaps, values, ells, exact_means)  # fedsde.validity.heavy
    tol_of = {m: accuracy_tolerance if m in ABSOLUTE_METRICS else tolerance for m in judged}
    detect = {m: tol_of[m] * (1.0 if m in ABSOLUTE_METRICS else float(np.ptp(gaps[m].sde_mean)))
              for m in judged if not gaps[m].unjudged}
    regime = ell_ratios(ells, times, {m: values[m] for m in judged}, judged, alpha=alpha, detect=detect)
    base = "FedAvg" if ells[0] == 1 else f"the ℓ={ells[0]} chain"
    verdict = validity_verdict(times, gaps, replicates=R, reference=reference, tolerance=tolerance,
                               accuracy_tolerance=accuracy_tolerance, alpha=alpha, regime=regime, base=base,
                               base_ell=ells[0], divergence=divergence_record(known))
    sde_values = {m: {"mean": g.sde_mean, "se": g.sde_se} for m, g in gaps.items()}
    config = {"eta": float(eta), "local_steps": np.atleast_1d(local_steps).tolist(), "server_lr": float(server_lr),
              "h": hh, "rounds": rounds, "replicates": R, "seed": seed, "ells": ells, "reference": reference,
              "tolerance": tolerance, "accuracy_tolerance": accuracy_tolerance, "alpha": alpha,
              "record_every": every, "device": chain_config["device"], "dtype": chain_config["dtype"],
              "oracle": chain_config["oracle"], "seconds": seconds, "fedavg": "sampled", "final_cov": how,
              "order": order, "common_random": sde.common_random}
    return ValidityResult(ells=ells, rounds=grid, times=times, metrics=summary, final_mean=final_mean,
                          final_cov=None if how == "none" else np.stack(covs), verdict=verdict,
                          extrapolated=extrapolated, values=values, config=config, sde=sde_values,
                          final_cov_trace=traces)


def keep_results(d: int, L: int, T: int, R: int, metrics: int, how: str) -> int:
    """Charge what a sampled validity test keeps until it ends to the command's memory budget, up front
    (:func:`fedsde._memory.keep_memory`): the final mean and covariance per ``ℓ`` (``final_cov``: ``L·d²`` numbers
    when ``full``) and the per-replicate metric values ``(L, T, R)``, each twice (the result and its printed JSON)."""
    from fedsde._memory import json_bytes

    cov = L * cov_numbers(how, d)
    kept = keep_memory(f"the final covariances (final_cov={how}: {L} × {cov // max(L, 1)} numbers)",
                       8 * cov + json_bytes(cov), "final_cov=diag (the d variances) or none" if how == "full" else
                       "final_cov=none")
    return kept + keep_memory(f"the final means and metric values ({L} × {d} and {metrics} × {L} × {T} × {R} "
                              "numbers)", 8 * L * d + json_bytes(L * d) + 16 * metrics * L * T * R,
                              "use fewer replicates or record fewer rounds (record_every)")


def _check_names(problem, metrics, verdict_metrics) -> tuple[list[str], list[str]]:
    """The metrics recorded and judged, checked against the problem."""
    available = metric_names(problem)
    names = list(available) if metrics is None else list(dict.fromkeys(["train_loss", *metrics]))
    bad = [m for m in names if m not in available]
    if bad:
        raise FedsdeInputError(f"metrics={bad}: not available for this problem (available: {', '.join(available)})")
    unknown = [m for m in (verdict_metrics or ()) if m not in names]
    if unknown:
        raise FedsdeInputError(f"verdict_metrics={unknown}: not recorded (recorded: {', '.join(names)})")
    return names, (names if verdict_metrics is None else list(dict.fromkeys(verdict_metrics)))


def _exact_test(problem, schedule: Schedule, *, w0, equivalence: Equivalence, metrics, every: int,
                precision: Precision, how: str, order: int = 1) -> ValidityResult:
    """``fedavg="exact"``: FedAvg's exact moments against the SDE's exact law (:mod:`fedsde.validity.exact_fedavg`);
    the verdict's intervals collapse onto the exact gap.  The exact laws are d × d by nature (quadratic and
    least-squares clients); ``how`` keeps their covariance's diagonal or nothing."""
    eta, local_steps, server_lr, rounds = schedule.eta, schedule.local_steps, schedule.server_lr, schedule.rounds
    tolerance, accuracy_tolerance, alpha = equivalence.tolerance, equivalence.accuracy_tolerance, equivalence.alpha
    names, judged = _check_names(problem, metrics, equivalence.verdict_metrics)
    dev, dt = precision.device, precision.dtype  # checked, though nothing runs on it
    w0_arr = start_point(default_start(problem, w0), problem.d)
    grid = np.unique(np.r_[np.arange(0, rounds + 1, every), rounds])
    hh = schedule.time_step
    warn_stability(problem, schedule, stacklevel=5)  # what `fedsde exact` warns about
    law = exact_sde_law(problem, schedule, order=order)
    sde = checked_exact_sde_paths(problem, law, grid, hh, w0_arr, names)
    fed, final_mean, final_cov = exact_fedavg_paths(problem, eta=schedule, grid=grid, w0=w0_arr, names=names)
    gaps = {}
    for m in judged:
        if sde[m] is None or fed[m] is None:
            nan = np.full(grid.size, np.nan)
            gaps[m] = GapPath(nan, nan, nan, nan, unjudged=NO_NORM_MEAN)
        else:
            zero = np.zeros(grid.size)
            gaps[m] = GapPath(np.asarray(fed[m]) - sde[m], zero, np.asarray(sde[m]), zero)
    times = grid * hh
    regime = {"status": "not checked", "note": "no SVAG chains: an exact comparison", "ratios": []}
    verdict = validity_verdict(times, gaps, replicates=None, reference="exact", tolerance=tolerance,
                               accuracy_tolerance=accuracy_tolerance, alpha=alpha, regime=regime)
    summary = {m: {"mean": (np.full((1, grid.size), np.nan) if fed[m] is None else np.asarray(fed[m])[None]),
                   "se": np.zeros((1, grid.size))} for m in names}
    config = {"eta": float(eta), "local_steps": np.atleast_1d(local_steps).tolist(), "server_lr": float(server_lr),
              "h": hh, "rounds": rounds, "replicates": None, "seed": None, "ells": [1], "reference": "exact",
              "tolerance": tolerance, "accuracy_tolerance": accuracy_tolerance, "alpha": alpha,
              "record_every": every, "device": str(dev), "dtype": str(dt).replace("torch.", ""), "oracle": None,
              "seconds": [], "fedavg": "exact", "final_cov": how, "order": order}
    sde_out = {m: {"mean": g.sde_mean, "se": g.sde_se} for m, g in gaps.items()}
    kept = {"full": final_cov, "diag": np.diagonal(final_cov).copy(), "none": None}[how]
    return ValidityResult(ells=[1], rounds=grid, times=times, metrics=summary, final_mean=final_mean[None],
                          final_cov=None if kept is None else kept[None], verdict=verdict, extrapolated={}, values={},
                          config=config, sde=sde_out, final_cov_trace=np.array([float(np.trace(final_cov))]))
