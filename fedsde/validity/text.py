"""How the validity test's numbers are written where they can mislead: an interval without a finite upper bound, a
ratio that is not defined, an extrapolated accuracy outside [0, 1].

* :func:`bounds_text` — ``[lower, upper]``, or ``[lower, ∞)`` with the reason: the bounds of ``d`` divide by the
  SDE's range (:mod:`fedsde.validity.verdict`), which has no positive lower bound while it is within its noise.
* :func:`ratio_text` — a row of the 1/ℓ report (:func:`fedsde.validity.reference.ell_ratios`): its ratio of
  successive SVAG gaps, or why there is none (the gap it divides by is exactly zero).
* :func:`bounded_value` — a Richardson-extrapolated value of a metric confined to an interval (test accuracy in
  ``[0, 1]``): the extrapolation ``E_∞ ≈ (ℓ_b E_b − ℓ_a E_a)/(ℓ_b − ℓ_a)`` is linear in ``1/ℓ`` and can leave the
  interval by its noise or curvature; shown clipped, with a note giving the extrapolated value (the verdict uses it
  unclipped, as its standard error describes it).
"""

from __future__ import annotations

import math

#: metrics whose values lie in a closed interval, and that interval
BOUNDED = {"test_accuracy": (0.0, 1.0)}


def bounds_text(lower: float, upper: float, metric: str = "") -> str:
    """``[lower, upper]`` (3 significant digits), or ``[lower, ∞)`` saying why there is no upper bound."""
    if math.isfinite(upper):
        return f"[{lower:.3g}, {upper:.3g}]"
    what = f"the SDE's movement of {metric}" if metric else "the SDE's movement"
    return (f"[{lower:.3g}, ∞) (no upper bound: {what}, the range that d is relative to, is not resolved from its "
            "noise; more replicates or a longer horizon resolve it)")


def ratio_text(row: dict) -> str:
    """``metric ℓ=a,b,c: ratio`` of a 1/ℓ row, ``n/a (…)`` where the ratio is not defined, ``(off)`` where off."""
    ells = ",".join(map(str, row["ells"]))
    ratio = row.get("ratio")
    if ratio is None or not math.isfinite(ratio):
        a, b = row["ells"][1], row["ells"][2]
        value = f"n/a (the mean gap between ℓ = {a} and ℓ = {b} is 0: no ratio)"
    else:
        value = f"{ratio:.3g}"
    return f"{row['metric']} ℓ={ells}: {value}" + (" (off)" if row.get("off") else "")


def bounded_value(metric: str, value: float) -> tuple[float, str]:
    """``(value clipped to the metric's interval, note)``; the note is empty when nothing was clipped."""
    lo, hi = BOUNDED.get(metric, (-math.inf, math.inf))
    if not math.isfinite(value) or lo <= value <= hi:
        return value, ""
    clipped = min(max(value, lo), hi)
    return clipped, (f"{metric}: the SDE's value {value:.4g} is a Richardson extrapolation (linear in 1/ℓ), which "
                     f"can leave [{lo:g}, {hi:g}]; shown clipped to {clipped:g}, judged as extrapolated")
