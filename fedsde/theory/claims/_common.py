"""Helpers shared by the per-seed claim modules: verdicts over horizons and problems, simple predicate verdicts."""

from __future__ import annotations

import numpy as np

from fedsde.theory.results import FAILS, HOLDS, NOT_APPLICABLE, Estimate, Verdict, compare_bound, worst


def bound_over_horizons(t, emp, se, bound, *, valid: bool = True, invalid_reason: str = "", z: float = 3.0,
                        label: str = "") -> Verdict:
    """``empirical ≤ bound`` at every horizon ``t`` (arrays of equal length); the worst horizon decides.

    ``numbers`` keep the whole curves (``t``, ``empirical``, ``stderr``, ``bound``, ``tightness_ratio``).
    """
    t = np.atleast_1d(np.asarray(t, dtype=np.float64))
    emp = np.atleast_1d(np.asarray(emp, dtype=np.float64))
    se = np.broadcast_to(np.asarray(se, dtype=np.float64), emp.shape)
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), emp.shape)
    vs = [compare_bound(Estimate(float(e), float(s)), float(b), z=z, valid=valid, invalid_reason=invalid_reason)
          for e, s, b in zip(emp, se, bound, strict=True)]
    v = worst(*vs)
    curves = {"t": t, "empirical": emp, "stderr": se, "bound": bound,
              "tightness_ratio": np.where(emp > 0, bound / np.where(emp > 0, emp, 1.0), np.inf)}
    numbers = {"problem": label, **curves} if label else curves
    return Verdict(v.verdict, v.margin, v.margin_note, numbers,
                   (f"{label}: " if label else "") + v.reason + (f" (worst at t={t[vs.index(v)]:g})"
                                                                   if v.verdict != NOT_APPLICABLE else ""))


def combine(parts: dict) -> Verdict:
    """Verdict over several problems (``{label: Verdict}``): ``fails`` if any fails, smallest margin kept."""
    parts = {k: v for k, v in parts.items() if v is not None}
    w = worst(*parts.values())
    numbers = {k: {"verdict": v.verdict, "margin": v.margin, **v.numbers} for k, v in parts.items()}
    return Verdict(w.verdict, w.margin, w.margin_note, numbers, w.reason)


def predicate(ok: bool, margin: float | None, margin_note: str, numbers: dict, reason_ok: str,
              reason_fail: str) -> Verdict:
    """A verdict from a computed predicate (``margin`` positive when ``ok``)."""
    return Verdict(HOLDS if ok else FAILS, None if margin is None else float(margin), margin_note, numbers,
                   reason_ok if ok else reason_fail)


def loglog_slope(x, y) -> float:
    """Least-squares slope of ``log y`` against ``log x``."""
    return float(np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)[0])
