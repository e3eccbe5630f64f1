"""Simultaneous intervals of the validity verdict, the three-outcome rule on them, and the replicates that would
decide (the machinery of :func:`fedsde.validity.verdict.validity_verdict`, which documents the rules).

Bonferroni over the ``K`` judged comparisons with Student's ``t`` quantile (:func:`bonferroni_quantile`), Hall's
skew correction (:func:`fedsde.validity.tails.skew_corrected`), bounds of ``|D|`` relative to the SDE's movement
(:func:`judge`), the outcome (:func:`outcome`) and the planning count :func:`replicates_needed`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.special import ndtri, stdtrit

from fedsde._compat import renamed
from fedsde.validity.tails import skew_corrected

#: metrics judged in their own units (``accuracy_tolerance``), not relative to their movement
ABSOLUTE_METRICS = ("test_accuracy",)
#: search limit of :func:`replicates_needed`
MAX_REPLICATES = 10**9


@dataclass(frozen=True)
class GapPath:
    """The base chain minus the SDE for one metric on the grid (inputs of :func:`validity_verdict`).

    Attributes
    ----------
    estimate : ndarray, shape (T,)
        ``D̂(t) = Ê φ_base(t) − Ê φ_SDE(t)`` in the metric's units.
    se : ndarray, shape (T,)
        Its standard error (from ``R`` per-replicate differences: paired, so correlated chains are accounted for).
    sde_mean : ndarray, shape (T,)
        ``E φ_SDE(t)`` (exact, or the SVAG chains' Richardson limit).
    sde_se : ndarray, shape (T,)
        Its standard error (zero for an exact law).
    unjudged : str
        Non-empty: why the SDE has no value for this metric (e.g. no closed form under its exact law); the metric
        is then left out of the verdict and named in ``skipped`` with this reason.
    tails : dict or None
        The heavy-tail diagnostic of the per-replicate values behind ``estimate``
        (:func:`fedsde.validity.tails.tail_diagnostic`: ``share`` (T,), ``hill`` (T,), ``threshold``); ``None`` when
        there are none (an exact comparison, or synthetic inputs).
    exact : ndarray, shape (T,), or None
        ``D(t)`` from FedAvg's exact mean where its moments close: what judges the metric when its sampled values
        are heavy-tailed (:mod:`fedsde.validity.heavy`).
    robust : dict or None
        FedAvg's per-replicate values and the metric's floor, for the divergence test of a heavy-tailed metric
        (:func:`fedsde.validity.heavy.robust_side`).
    """

    estimate: np.ndarray
    se: np.ndarray
    sde_mean: np.ndarray
    sde_se: np.ndarray
    unjudged: str = ""
    tails: dict | None = None
    exact: np.ndarray | None = field(default=None, repr=False)
    robust: dict | None = field(default=None, repr=False)



def bonferroni_z(alpha: float, comparisons: int) -> float:
    """Two-sided normal quantile ``Φ⁻¹(1 − α/(2K))`` for ``K`` comparisons."""
    return float(ndtri(1.0 - alpha / (2.0 * max(1, comparisons))))


def bonferroni_quantile(alpha: float, comparisons: int, df: float) -> float:
    """Two-sided Student-t quantile ``t_df⁻¹(1 − α/(2K))`` (normal for ``df = inf``) for ``K`` comparisons.

    Small ``R`` needs it: at ``α = 0.05``, ``K = 10``, ``R = 8`` it is 4.03 where the normal gives 2.81.
    """
    p = 1.0 - alpha / (2.0 * max(1, comparisons))
    return float(ndtri(p)) if not np.isfinite(df) else float(stdtrit(df, p))


def abs_bounds(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bounds of ``|D|`` from the interval ``[lo, hi]`` of ``D``."""
    upper = np.maximum(np.abs(lo), np.abs(hi))
    lower = np.where((lo <= 0) & (hi >= 0), 0.0, np.minimum(np.abs(lo), np.abs(hi)))
    return lower, upper


def judge(path: GapPath, q: float, factor: float, absolute: bool) -> dict:
    """``d̂``, its bounds and the scale of one metric, with every s.e. multiplied by ``factor``."""
    est = np.asarray(path.estimate, dtype=np.float64)
    lower_abs, upper_abs = abs_bounds(*skew_corrected(est, factor * np.asarray(path.se, np.float64), q, path.tails,
                                                       factor))
    if absolute:
        scale = lo_s = hi_s = 1.0
    else:
        m = np.asarray(path.sde_mean, dtype=np.float64)
        scale = float(m.max() - m.min())
        slack = 2.0 * q * factor * float(np.max(path.sde_se))
        lo_s, hi_s = scale - slack, scale + slack
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.abs(est) / scale
        upper = upper_abs / lo_s if lo_s > 0 else np.full(est.shape, np.inf)
        lower = lower_abs / hi_s
    return {"gap": gap, "lower": lower, "upper": upper, "scale": scale, "scale_lower": lo_s, "scale_upper": hi_s}


def decide(judged: dict, tol: dict, active: np.ndarray, heavy=()) -> str:
    """The three-outcome rule; a ``heavy``-tailed metric never says "tracks" (its mean cannot be bounded above), and
    says "does not track" only through the lower bound :func:`fedsde.validity.heavy.resolve` gives it."""
    if any(np.any(j["lower"][active] > tol[m]) for m, j in judged.items()):
        return "does not track"
    if heavy:
        return "inconclusive"
    if all(np.all(j["upper"][active] <= tol[m]) for m, j in judged.items()):
        return "tracks"
    return "inconclusive"


#: the planning assumption of :func:`replicates_needed`: how far from its tolerance a gap is assumed to be, as a
#: fraction of the tolerance
PLANNING_MARGIN = 0.1
PLANNING = ("planning gap: the point estimate of d at every time, held at least tol/10 from its tolerance (a "
            "true gap within 10 % of the tolerance is not planned for); every s.e. scaled by sqrt(R/R'), Student t "
            "with R' - 1 degrees of freedom")


def planned(path: GapPath, tol: float, absolute: bool) -> GapPath:
    """``path`` with every estimate moved away from the tolerance to at least :data:`PLANNING_MARGIN`·tol (same
    sign, same s.e.): the planning assumption of :func:`replicates_needed`."""
    est = np.asarray(path.estimate, dtype=np.float64)
    if absolute:
        scale = 1.0
    else:
        m = np.asarray(path.sde_mean, dtype=np.float64)
        scale = float(m.max() - m.min())
    d = np.abs(est) / scale
    lo, hi = (1.0 - PLANNING_MARGIN) * tol, (1.0 + PLANNING_MARGIN) * tol
    planned = np.where(d < tol, np.minimum(d, lo), np.maximum(d, hi))
    sign = np.where(est < 0, -1.0, 1.0)
    return replace(path, estimate=sign * planned * scale)


def quantile(alpha: float, K: int, R: int, noisy: bool) -> tuple[float, float]:
    df = float(R - 1) if noisy else math.inf
    return bonferroni_quantile(alpha, K, df), df


@renamed(paths="gaps")
def replicates_needed(gaps: dict, tol: dict, active: np.ndarray, *, alpha: float, comparisons: int,
                      replicates: int, absolute: dict, planning: bool = True) -> int | None:
    """Smallest ``R′ > R`` whose intervals decide under the planning assumption :data:`PLANNING`; ``None`` when none
    up to :data:`MAX_REPLICATES` does, or when ``R`` itself would (the gap is then within
    :data:`PLANNING_MARGIN`·tol of the tolerance and resolved to that: no number of replicates is planned for it).

    Why: at the point estimates ``R′`` grows like ``1/(tol − d̂)²`` and jumps with the noise of ``d̂``
    (127 to 32,326 over six seeds at ``R = 64`` on one setting).  Holding every ``d̂`` at least
    ``tol/10`` from its tolerance (the usual practice of sample-size planning for an equivalence test: plan for a
    difference of practical size, not for the estimate) bounds that: ``R′`` then depends on ``d̂`` only where it is
    already clear of the tolerance, and on the s.e. (stable: ``R·se²`` is a variance estimate) otherwise.  Every
    s.e. is scaled by ``√(R/R′)``, the ``t`` quantile has ``R′ − 1`` d.f.  ``planning=False`` keeps the point
    estimates.  ``gaps``: metric → :class:`GapPath` of the judged metrics (old name: ``paths``)."""
    gaps = {m: planned(p, tol[m], absolute[m]) for m, p in gaps.items()} if planning else gaps

    def decides(Rp: int) -> bool:
        q, _ = quantile(alpha, comparisons, Rp, True)
        f = math.sqrt(replicates / Rp)
        judged = {m: judge(p, q, f, absolute[m]) for m, p in gaps.items()}
        return decide(judged, tol, active) != "inconclusive"

    if decides(replicates):
        return None if planning else replicates
    hi = replicates
    while not decides(hi):
        if hi >= MAX_REPLICATES:
            return None
        hi = min(2 * hi, MAX_REPLICATES)
    lo = max(replicates, hi // 2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if decides(mid) else (mid, hi)
    return hi


def richardson_weights(ells) -> tuple[float, float]:
    """Weights ``(w_a, w_b)`` of the two largest ``ℓ_a < ℓ_b``: ``E_∞ ≈ w_a E_a + w_b E_b`` (order 1 in ``1/ℓ``)."""
    a, b = float(ells[-2]), float(ells[-1])
    return -a / (b - a), b / (b - a)


def richardson_limit(ells: list[int], mean: np.ndarray, se: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Order-1 extrapolation of ``E_ℓ = E_∞ + C/ℓ + o(1/ℓ)`` from the two largest ``ℓ``.

    ``E_∞ ≈ (ℓ_b E_b − ℓ_a E_a)/(ℓ_b − ℓ_a)``; its s.e. from independent runs.  Shapes: mean, se (L, T) → (T,).
    """
    wa, wb = richardson_weights(ells)
    m = wb * np.asarray(mean)[-1] + wa * np.asarray(mean)[-2]
    s = np.sqrt((wb * np.asarray(se)[-1]) ** 2 + (wa * np.asarray(se)[-2]) ** 2)
    return m, s
