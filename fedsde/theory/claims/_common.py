"""Helpers shared by the per-seed claim modules: verdicts from margins, over horizons, problems and families.

Every helper derives the verdict from the margin (``holds`` exactly when ``margin > 0``), so a margin can never
disagree with its verdict; see :mod:`fedsde.theory.claims.base` for the conventions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from fedsde._stats import loglog_slope
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


def combine(parts: dict, *, family: str = "documented problems", params: dict | None = None) -> Verdict:
    """Verdict over several problems (``{label: Verdict}``): ``fails`` if any fails, smallest margin kept.

    The problems form the verdict's family: ``family`` reports the fraction that hold and the worst one, with its
    ``params[label]`` (the parameters that rebuild a random member; ``{}`` for documented problems).
    """
    parts = {k: v for k, v in parts.items() if v is not None}
    w = worst(*parts.values())
    numbers = {k: {"verdict": v.verdict, "margin": v.margin, **v.numbers} for k, v in parts.items()}
    applicable = {k: v for k, v in parts.items() if v.verdict != NOT_APPLICABLE}
    fam = None
    if applicable:
        wk = min(applicable, key=lambda k: np.inf if applicable[k].margin is None else applicable[k].margin)
        if params:
            family = f"{family} and {len(params)} seeded random problems"
        fam = {"name": family, "size": len(applicable),
               "fraction_holding": sum(v.verdict == HOLDS for v in applicable.values()) / len(applicable),
               "worst": {"label": wk, "params": (params or {}).get(wk, {}), "margin": applicable[wk].margin}}
    return Verdict(w.verdict, w.margin, w.margin_note, numbers, w.reason, fam)


def predicate(margin: float, margin_note: str, numbers: dict, reason_ok: str, reason_fail: str,
              family: dict | None = None) -> Verdict:
    """A verdict from a margin: ``holds`` exactly when ``margin > 0`` (NaN fails)."""
    margin = float(margin)
    ok = bool(margin > 0)
    return Verdict(HOLDS if ok else FAILS, margin, margin_note, numbers, reason_ok if ok else reason_fail, family)


def log_margin(tol: float, deviation: float) -> float:
    """``log10(tol/deviation)``: positive exactly when ``deviation < tol`` (``+40`` for an exact zero)."""
    deviation = abs(float(deviation))
    return 40.0 if deviation == 0.0 else float(np.log10(tol / deviation))


@dataclass
class Member:
    """One problem of a family: its ``label``, the ``params`` that rebuild it, its ``margin`` and its numbers."""

    label: str
    params: dict
    margin: float
    numbers: dict = field(default_factory=dict)


def family_verdict(name: str, members: Iterable[Member], margin_note: str, reason_ok: str, reason_fail: str,
                   numbers: dict | None = None, *, keep: int = 0) -> Verdict:
    """A universal claim over a family: ``holds`` exactly when every member's margin is positive.

    The verdict's margin is the smallest member margin (the worst case); ``family`` reports ``name``, ``size``,
    ``fraction_holding`` and the ``worst`` member (label, params, margin).  ``reason_fail`` may use the
    placeholders ``{worst}`` (label), ``{params}``, ``{fraction}``, ``{size}`` and ``{failing}`` ("k of n");
    ``keep`` members (the worst
    first) are listed in ``numbers["members"]``.
    """
    members = list(members)
    margins = np.array([m.margin for m in members], dtype=np.float64)
    k = int(np.nanargmin(np.where(np.isnan(margins), -np.inf, margins)))
    wm = members[k]
    frac = float(np.mean(margins > 0))
    fam = {"name": name, "size": len(members), "fraction_holding": frac,
           "worst": {"label": wm.label, "params": wm.params, "margin": float(wm.margin), **wm.numbers}}
    nums = dict(numbers or {})
    if keep:
        order = np.argsort(np.where(np.isnan(margins), -np.inf, margins))[:keep]
        nums["members"] = [{"label": members[i].label, "params": members[i].params, "margin": float(margins[i]),
                            **members[i].numbers} for i in order]
    fill = {"worst": wm.label, "params": wm.params, "fraction": f"{frac:.3g}", "size": len(members),
            "failing": f"{int(np.sum(~(margins > 0)))} of {len(members)}"}
    return predicate(float(wm.margin), margin_note, nums, reason_ok.format(**fill), reason_fail.format(**fill), fam)


def random_scalar_problems(n: int, seed: int, *, clients: int = 3, u_range=(0.2, 4.0), a_sd: float = 2.0,
                           eta_max_u: float = 0.9) -> list[dict]:
    """``n`` seeded random scalar heterogeneous problems: ``U ~ U[u_range]``, ``a ~ N(0, a_sd²)``,
    ``p ~ Dirichlet(1)``, ``Σ ~ U[0.1, 2]`` and ``η ~ U(0, eta_max_u/max U)``; each a dict of arrays."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        U = rng.uniform(*u_range, clients)
        out.append({"U": U, "a": rng.normal(0.0, a_sd, clients), "p": rng.dirichlet(np.ones(clients)),
                    "Sigma": rng.uniform(0.1, 2.0, clients), "eta": float(rng.uniform(0.0, eta_max_u / U.max()))})
    return out


def rounded(params: dict, digits: int = 12) -> dict:
    """Parameters for ``details``: arrays as lists rounded to ``digits`` significant digits."""
    out = {}
    for k, v in params.items():
        if isinstance(v, np.ndarray) or isinstance(v, list | tuple):
            out[k] = [float(f"{float(x):.{digits}g}") for x in np.ravel(v)]
        elif isinstance(v, float | np.floating):
            out[k] = float(f"{float(v):.{digits}g}")
        else:
            out[k] = v
    return out


__all__ = ["FAILS", "HOLDS", "Member", "bound_over_horizons", "combine", "family_verdict", "log_margin",
           "loglog_slope", "predicate", "random_scalar_problems", "rounded"]
