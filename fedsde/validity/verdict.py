"""The verdict of the validity test: an equivalence test of FedAvg against the SDE, with three outcomes.

For every judged metric ``φ`` and grid time ``t`` (clock ``t = n·h``) the test estimates

    D_φ(t) = E φ_FedAvg(t) − E φ_SDE(t),        d_φ(t) = |D_φ(t)| / scale_φ,

FedAvg's side by Monte Carlo (the ``ℓ = 1`` chain, ``R`` replicates) and the SDE's from its exact law or from the
SVAG chains (:mod:`fedsde.validity.reference`).  ``scale_φ`` makes the gap free of units and offsets:

* train loss, ``‖∇F‖²``, ``‖w − w₀‖``: the **range** ``max_t − min_t`` of the SDE's mean path of ``φ`` over the
  grid ``[0, T]`` (``t = 0`` included: the movement starts there), so adding a constant to the loss or changing
  its units changes nothing, and the tolerance ``tol`` is a fraction of the metric's total movement;
* test accuracy: ``1`` — judged in accuracy units against ``accuracy_tolerance`` (``0.01``: one point).

**Intervals.**  ``D̂_φ(t) ± q·se_φ(t)`` are simultaneous two-sided intervals at family level ``α``: Bonferroni over
the ``K`` judged (metric, time > 0) comparisons, with Student's ``t`` quantile ``q = t_{R−1}⁻¹(1 − α/(2K))`` (the
s.e. is estimated from ``R`` per-replicate differences; normal only when no s.e. is estimated), corrected for the
values' skewness (Hall 1992, :func:`~fedsde.validity.tails.skew_corrected`).  They bound ``|D|`` by ``[lower,
upper]`` (``lower = 0`` when the interval covers 0).  A heavy-tailed metric's intervals decide nothing
(:mod:`.tails`): FedAvg's exact mean judges it where known, and otherwise only a distribution-free lower bound can
say "does not track" (:mod:`.heavy`).  With
an *estimated* scale (SVAG reference) the ``K`` intervals ``Ê φ_SDE(t) ± q·se`` join the family, so that, jointly, the
true range lies in ``rangê ± 2q·max_t se_SDE(t)``; ``d``'s bounds divide ``|D|``'s upper bound by the smallest and its
lower bound by the largest range (``upper = ∞`` while the range is not resolved from noise).

**Outcome** — an equivalence test by confidence intervals (Schuirmann 1987: equivalence is shown when the whole
interval lies inside the tolerance, non-equivalence when it lies outside):

* ``"tracks"`` — every ``upper_φ(t) ≤ tol_φ``;
* ``"does not track"`` — some ``lower_φ(t) > tol_φ``;
* ``"inconclusive"`` — otherwise, or when the SVAG reference's ``1/ℓ`` regime is off beyond noise; with
  :func:`replicates_needed`, the replicates per chain that would decide at the current estimates (s.e. × ``√(R/R′)``).

Fewer replicates only widen the intervals, so noise can turn a decision into "inconclusive", never "does not
track" into "tracks" (up to the ``α`` the test allows).  A metric whose SDE path does not move (range at the
floating-point floor, :data:`~fedsde._tolerances.RANGE_FLOOR`) cannot be judged relative to its movement: it is
left out of the verdict and named in ``skipped``; so is a metric for which the reference has no value
(:attr:`GapPath.unjudged`, e.g. ``‖w − w₀‖`` under the exact law of the least-squares SDE, which gives the mean and
covariance of ``w`` but not the mean of a norm).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from fedsde._tolerances import RANGE_FLOOR
from fedsde.validity.heavy import HEAVY_PLANNING, divergence_reason, exact_reason, resolve
from fedsde.validity.intervals import (  # noqa: F401 — re-exported: the verdict's machinery moved there
    ABSOLUTE_METRICS,
    MAX_REPLICATES,
    PLANNING,
    PLANNING_MARGIN,
    GapPath,
    bonferroni_quantile,
    bonferroni_z,
    decide,
    judge,
    quantile,
    replicates_needed,
    richardson_limit,
    richardson_weights,
)
from fedsde.validity.tails import heavy_reason, summarise_tails
from fedsde.validity.text import bounds_text

OUTCOMES = ("tracks", "does not track", "inconclusive")


@dataclass(frozen=True)
class ValidityVerdict:
    """Outcome of :func:`validity_verdict` (see the module docstring).

    Attributes
    ----------
    outcome : str
        ``"tracks"``, ``"does not track"`` or ``"inconclusive"``.
    tracks : bool
        ``outcome == "tracks"``.
    reference : str
        ``"exact"`` (the SDE's exact law) or ``"svag"`` (Richardson limit of the SVAG chains).
    worst : dict or None
        The decisive metric (largest ``lower/tol`` when the SDE does not track, else largest ``upper/tol``):
        ``metric``, ``time`` (of the largest ``d̂``), ``gap`` (``max_t d̂(t)``, the estimate of ``max_t d(t)``),
        ``lower``/``upper`` (``max_t`` of the simultaneous bounds: an interval for ``max_t d(t)``), ``tolerance``,
        ``estimate`` and ``se`` (``D̂`` in the metric's units at that time), ``scale`` and ``ells`` (the chain
        judged and ``None`` for ``ℓ → ∞``).  ``None`` when no metric could be judged.
    replicates_needed : int or None
        When inconclusive, the replicates per chain that would decide under the planning assumption
        ``replicates_needed_basis`` (:func:`replicates_needed`); ``None`` when the outcome is decided, when the
        values are heavy-tailed, or when no finite number decides.
    reason : str
        One sentence.
    margin : float
        ``min (1 − upper/tol)`` over judged metrics and times: ``>= 0`` exactly when every upper bound is within
        tolerance (NaN when nothing was judged).
    horizon : float
        Largest grid time ``t*`` with every upper bound within tolerance on ``[0, t*]`` (``0`` if the 1/ℓ check fails).
    tolerance, accuracy_tolerance, alpha : float
    z : float
        The simultaneous quantile ``q``.
    df : float
        Its degrees of freedom (``R − 1``; ``inf`` for a normal quantile).
    replicates : int
    metrics : list of str
        Metrics judged.
    comparisons : int
        Intervals in the Bonferroni family.
    skipped : dict
        metric → why it was not judged.
    ell_ratios : list of dict
        The 1/ℓ report (:func:`fedsde.validity.reference.ell_ratios`): ratios of successive SVAG gaps.
    regime : str
        ``"ok"``, ``"off"`` (beyond noise) or ``"not checked"``.
    curves : list of dict
        Per metric: ``scale`` (with ``scale_lower``/``scale_upper``), ``tolerance``, and over the grid
        ``sde_mean``, ``sde_se``, ``estimate``, ``se``, ``gap``, ``lower``, ``upper`` (and ``share``, ``hill``
        where the tail diagnostic ran).
    tails : dict
        metric → the heavy-tail diagnostic (:mod:`fedsde.validity.tails`) at the time of its largest share:
        ``heavy`` (share above threshold at some ``t > 0``), ``share``, ``threshold``, ``hill``, ``time``,
        ``times_flagged``, ``checked`` (``False`` where ``R`` is too small for the rule to ever fire).  Empty for
        an exact comparison.
    regime_note : str
        The 1/ℓ check's note (why it is off, or not checked).
    replicates_needed_basis : str
        The planning assumption behind ``replicates_needed`` (:data:`PLANNING`; with heavy tails also
        :data:`~fedsde.validity.heavy.HEAVY_PLANNING`).
    divergence : dict
        What is known of the growth of FedAvg's second moment (``grows``, ``mean_radius``,
        ``second_moment_radius``, ``how``, ``text``; empty where nothing is known).
    """

    outcome: str
    tracks: bool
    reference: str
    worst: dict | None
    replicates_needed: int | None
    reason: str
    margin: float
    horizon: float
    tolerance: float
    accuracy_tolerance: float
    alpha: float
    z: float
    df: float
    replicates: int
    metrics: list
    comparisons: int
    skipped: dict = field(default_factory=dict)
    ell_ratios: list = field(default_factory=list)
    regime: str = "not checked"
    curves: list = field(default_factory=list, repr=False)
    tails: dict = field(default_factory=dict)
    regime_note: str = ""
    replicates_needed_basis: str = ""
    divergence: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def sentence(self, base: str | None = None) -> str:
        """The outcome in capitals, the reason, and the horizon (``base`` is ignored: the reason names the chain)."""
        return f"{self.outcome.upper()}: {self.reason}; tracks up to t = {self.horizon:.4g}"


def validity_verdict(
    times: np.ndarray,
    gaps: dict[str, GapPath],
    *,
    replicates: int,
    reference: str,
    tolerance: float = 0.05,
    accuracy_tolerance: float = 0.01,
    alpha: float = 0.05,
    regime: dict | None = None,
    base: str = "FedAvg",
    base_ell: int | None = 1,
    divergence: dict | None = None,
) -> ValidityVerdict:
    """Three-outcome equivalence verdict from the gap paths of the judged metrics (see the module docstring).

    Parameters
    ----------
    times : ndarray, shape (T,)
        Grid ``t = n·h`` (``t = 0`` is not a comparison: every chain starts at ``w₀``).
    gaps : dict
        metric → :class:`GapPath` (over the grid).
    replicates : int or None
        ``R``: the s.e. have ``R − 1`` degrees of freedom (``None`` for an exact comparison: every s.e. is zero).
    reference : {"exact", "svag"}
    tolerance : float
        ``tol``: largest ``d`` accepted, as a fraction of the metric's movement.
    accuracy_tolerance : float
        For :data:`ABSOLUTE_METRICS`, in their own units.
    alpha : float
        Family level of the simultaneous intervals.
    regime : dict, optional
        The 1/ℓ check (:func:`fedsde.validity.reference.ell_ratios`): ``{"status", "note", "ratios"}``.
    base : str
        Name of the chain judged (``"FedAvg"`` for ``ℓ = 1``).
    base_ell : int, optional
        Its ``ℓ`` (``worst.ells`` is ``[base_ell, None]``: that chain against ``ℓ → ∞``).
    divergence : dict, optional
        What is known of the growth of FedAvg's second moment (:func:`fedsde.validity.heavy.divergence_record`),
        reported as ``verdict.divergence``.
    """
    times = np.asarray(times, dtype=np.float64)
    active = times > 0
    tol_of = {m: accuracy_tolerance if m in ABSOLUTE_METRICS else tolerance for m in gaps}
    absolute = {m: m in ABSOLUTE_METRICS for m in gaps}
    skipped: dict[str, str] = {}
    paths: dict[str, GapPath] = {}
    for m, p in gaps.items():
        if p.unjudged:
            skipped[m] = p.unjudged
            continue
        sde = np.asarray(p.sde_mean, dtype=np.float64)
        rng = float(sde.max() - sde.min()) if sde.size else 0.0
        if not absolute[m] and not rng > RANGE_FLOOR * float(np.max(np.abs(sde), initial=0.0)):
            skipped[m] = (f"the SDE's mean path of {m} does not move on [0, T] (range {rng:.3g}): a gap relative "
                          "to its movement is undefined")
        else:
            paths[m] = p
    noisy = any(np.any(np.asarray(p.se) > 0) or np.any(np.asarray(p.sde_se) > 0) for p in paths.values())
    estimated = sum(bool(np.any(np.asarray(p.sde_se) > 0)) for m, p in paths.items() if not absolute[m])
    K = int(active.sum()) * (len(paths) + estimated)  # the gaps, and the SDE means behind estimated scales
    q, df = quantile(alpha, K, replicates, noisy)
    judged = {m: judge(p, q, 1.0, absolute[m]) for m, p in paths.items()}
    ratios = list((regime or {}).get("ratios", []))
    status = (regime or {}).get("status", "not checked")
    T = float(times[-1])
    note = (regime or {}).get("note", "")
    if not judged:
        reason = "no metric could be judged: " + "; ".join(skipped.values()) if skipped else "no metric was judged"
        return ValidityVerdict("inconclusive", False, reference, None, None, reason, math.nan, 0.0, tolerance,
                               accuracy_tolerance, alpha, q, df, replicates, [], K, skipped, ratios, status, [],
                               regime_note=note, replicates_needed_basis=PLANNING)
    tails = {m: summarise_tails(p.tails, times, active) for m, p in paths.items() if p.tails is not None}
    # heavy tails (fedsde.validity.heavy): FedAvg's exact mean where known, else the divergence test's lower bound
    judged, heavy = resolve(paths, judged, {m for m, tl in tails.items() if tl["heavy"]}, tails, q=q, alpha=alpha,
                            comparisons=K, times=times, absolute=absolute, judge=judge)
    exact_side = sorted(m for m, tl in tails.items() if tl.get("decided_by") == "exact")
    outcome = decide(judged, tol_of, active, heavy)
    off = reference == "svag" and status == "off"
    if off:
        outcome = "inconclusive"
    # the decisive metric: the one farthest beyond (does not track) or closest to (otherwise) its tolerance
    key = "lower" if outcome == "does not track" else "upper"
    wm = max(judged, key=lambda m: np.max(np.where(active, judged[m][key], -np.inf)) / tol_of[m])
    j, path = judged[wm], paths[wm]
    ti = int(np.argmax(np.where(active, j["gap"], -np.inf))) if active.any() else 0
    est, se = (path.exact, np.zeros_like(path.exact)) if wm in exact_side else (path.estimate, path.se)
    worst = {"metric": wm, "time": float(times[ti]), "gap": float(j["gap"][ti]),
             "lower": float(np.max(j["lower"][active], initial=0.0)),
             "upper": float(np.max(j["upper"][active], initial=0.0)), "tolerance": tol_of[wm],
             "estimate": float(est[ti]), "se": float(se[ti]), "scale": j["scale"], "ells": [base_ell, None]}
    ok_t = np.all([np.where(active, (judged[m]["upper"] <= tol_of[m]) & (m not in heavy or paths[m].tails["share"]
                                                                          <= tails[m]["threshold"]), True)
                   for m in judged], axis=0)
    first_bad = np.flatnonzero(~ok_t)
    horizon = 0.0 if off else T if first_bad.size == 0 else float(times[max(first_bad[0] - 1, 0)])
    with np.errstate(invalid="ignore"):
        margin = float(min(np.min(1.0 - j2["upper"][active] / tol_of[m], initial=np.inf)
                           for m, j2 in judged.items()))
    needed = None
    if outcome == "inconclusive" and not off:  # heavy tails: from the width the sampled intervals achieved
        needed = replicates_needed({m: p for m, p in paths.items() if m not in exact_side}, tol_of, active,
                                   alpha=alpha, comparisons=K, replicates=replicates, absolute=absolute)
    reason = _reason(outcome, worst, base, T, replicates, needed, regime if off else None, skipped,
                     exact=wm in exact_side)
    if heavy and outcome == "inconclusive":
        reason = heavy_reason(heavy, tails, base, T, replicates, reason, needed)
    if exact_side:
        reason += exact_reason(exact_side, tails, replicates, divergence)
    if outcome == "does not track" and wm in heavy:
        reason += divergence_reason(wm, worst["lower"], tol_of[wm])
    if status == "not checked" and note.startswith("too few replicates"):
        reason += "; 1/ℓ regime not checked — too few replicates"
    curves = [{"metric": m, "tolerance": tol_of[m], "scale": j2["scale"], "scale_lower": j2["scale_lower"],
               "scale_upper": j2["scale_upper"], "sde_mean": paths[m].sde_mean, "sde_se": paths[m].sde_se,
               "estimate": paths[m].estimate, "se": paths[m].se, "gap": j2["gap"], "lower": j2["lower"],
               "upper": j2["upper"]} | ({} if paths[m].tails is None else
                                        {"share": paths[m].tails["share"], "hill": paths[m].tails["hill"]})
              for m, j2 in judged.items()]
    return ValidityVerdict(outcome, outcome == "tracks", reference, worst, needed, reason, margin, horizon,
                           tolerance, accuracy_tolerance, alpha, q, df, replicates, list(judged), K, skipped,
                           ratios, status, curves, tails, note, PLANNING + (HEAVY_PLANNING if heavy else ""),
                           dict(divergence or {}))


def _reason(outcome: str, w: dict, base: str, T: float, R: int, needed: int | None, regime: dict | None,
            skipped: dict, *, exact: bool = False) -> str:
    units = "accuracy units" if w["metric"] in ABSOLUTE_METRICS else "of its movement"
    at = (f"{w['metric']} at t = {w['time']:.4g}: d = {w['gap']:.3g} {units}, " + ("exact" if R is None or exact else
          f"simultaneous bounds {bounds_text(w['lower'], w['upper'], w['metric'])}") + f" against tolerance "
          f"{w['tolerance']:g}")
    if regime is not None:
        text = (f"whether the SDE tracks {base} is undecided: the SVAG gaps are off the 1/ℓ regime that the "
                f"Richardson reference assumes ({regime.get('note', '')})")
    elif outcome == "tracks":
        text = f"the SDE tracks {base} on [0, {T:.4g}] (worst {at})"
    elif outcome == "does not track":
        text = f"the SDE does not track {base} on [0, {T:.4g}] ({at})"
    else:
        more = (f"about {needed} replicates per chain would decide" if needed is not None else
                "no number of replicates is planned (the gap is within tol/10 of its tolerance, or none decides)")
        text = f"whether the SDE tracks {base} on [0, {T:.4g}] is undecided at R = {R} ({at}); {more}"
    if skipped:
        still = [m for m, why in skipped.items() if "does not move" in why]
        other = [m for m in skipped if m not in still]
        text += "".join(f"; not judged: {', '.join(ms)}{why}" for ms, why in (
            (still, " (does not move)"), (other, " (no value under the SDE's law)")) if ms)
    return text
