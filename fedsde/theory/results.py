"""Small result types shared by the theory modules: constants with provenance, bound values, verdicts.

Every number that enters a bound says how it was obtained (:class:`Constant`); every evaluated bound keeps
its terms (:class:`BoundValue`); every check of a claim returns a :class:`Verdict` whose ``verdict`` is one of
``"holds"``, ``"fails"``, ``"not applicable"``, computed when the check runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedsde._validate import choice

HOLDS = "holds"
FAILS = "fails"
NOT_APPLICABLE = "not applicable"
VERDICTS = (HOLDS, FAILS, NOT_APPLICABLE)

#: how a constant was obtained
CLOSED_FORM = "closed form"
OPTIMISATION = "optimisation"
MONTE_CARLO = "monte carlo"
QUADRATURE = "quadrature"
GIVEN = "given"


@dataclass(frozen=True)
class Constant:
    """A constant entering a bound, with how it was obtained.

    Attributes
    ----------
    value : float or ndarray
    method : str
        ``"closed form"``, ``"optimisation"``, ``"monte carlo"``, ``"quadrature"`` or ``"given"``.
    stderr : float or ndarray, optional
        Monte-Carlo standard error (``None`` for deterministic values).
    note : str
        Where the value is valid (e.g. the region) and which formula gave it.
    """

    value: Any
    method: str
    stderr: Any = None
    note: str = ""

    def __float__(self) -> float:
        return float(self.value)

    def to_dict(self) -> dict:
        out = {"value": self.value, "method": self.method, "note": self.note}
        if self.stderr is not None:
            out["stderr"] = self.stderr
        return out


@dataclass(frozen=True)
class BoundValue:
    """Right-hand side of a bound, with its terms.

    Attributes
    ----------
    value : float or ndarray
        The bound (same shape as the time argument it was evaluated at).
    terms : dict
        Name → value of each additive term (they sum to ``value``).
    variant : str
        ``"paper"`` (as printed) or ``"corrected"``.
    source : str
        Seed and equation.
    notes : tuple of str
        Conditions that failed or caveats (empty when none).
    valid : bool
        False when a hypothesis of the result is violated (the number is then not a bound).
    """

    value: Any
    terms: dict
    variant: str
    source: str
    notes: tuple[str, ...] = ()
    valid: bool = True

    def to_dict(self) -> dict:
        return {"value": self.value, "terms": self.terms, "variant": self.variant, "source": self.source,
                "notes": list(self.notes), "valid": self.valid}


@dataclass(frozen=True)
class Estimate:
    """A Monte-Carlo (or exact, ``stderr = 0``) estimate with its standard error."""

    value: float
    stderr: float = 0.0

    def ci(self, z: float = 3.0) -> tuple[float, float]:
        """``value ± z·stderr``."""
        return self.value - z * self.stderr, self.value + z * self.stderr

    def to_dict(self) -> dict:
        return {"value": self.value, "stderr": self.stderr}


@dataclass
class Verdict:
    """Outcome of checking one form (as printed or corrected) of a claim.

    Attributes
    ----------
    verdict : str
        ``"holds"``, ``"fails"`` or ``"not applicable"``.
    margin : float or None
        Signed distance to the decision threshold, in the claim's own units: positive exactly when the verdict is
        ``"holds"``, ``None`` when ``"not applicable"``; its meaning is given in ``margin_note`` (for bounds:
        ``(bound − (empirical − z·s.e.))/|bound|``).
    margin_note : str
    numbers : dict
        The numbers behind the verdict (empirical value, bound, tightness ratio, conditions …).
    reason : str
        One sentence: why this verdict.
    family : dict or None
        When the verdict is over a family of problems: ``{"name", "size", "fraction_holding", "worst"}`` with the
        worst member's label, parameters and margin (see :mod:`fedsde.theory.claims.base`).
    """

    verdict: str
    margin: float | None = None
    margin_note: str = ""
    numbers: dict = field(default_factory=dict)
    reason: str = ""
    family: dict | None = None

    def __post_init__(self):
        choice("verdict", self.verdict, VERDICTS)

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "margin": self.margin, "margin_note": self.margin_note,
                "reason": self.reason, "family": self.family, "numbers": self.numbers}


def compare_bound(empirical: Estimate | float, bound: float, *, z: float = 3.0, valid: bool = True,
                  invalid_reason: str = "", extra: dict | None = None) -> Verdict:
    """Verdict for ``empirical ≤ bound`` with the Monte-Carlo error taken into account.

    ``fails`` only when the lower end of the ``z``-s.e. interval exceeds the bound (a significant violation);
    ``holds`` otherwise.  ``margin = (bound − (empirical − z·s.e.))/|bound|``, the signed distance of the
    interval's lower end to the bound (positive exactly when the verdict is ``holds``); ``tightness =
    bound/empirical``.
    ``valid=False`` (a hypothesis is violated) gives ``not applicable``.
    """
    est = empirical if isinstance(empirical, Estimate) else Estimate(float(empirical), 0.0)
    lo, hi = est.ci(z)
    bound = float(bound)
    numbers = {"empirical": est.value, "empirical_stderr": est.stderr, "ci": [lo, hi], "z": z, "bound": bound,
               "tightness_ratio": bound / est.value if est.value > 0 else float("inf")}
    if extra:
        numbers.update(extra)
    if not valid:
        return Verdict("not applicable", None, "", numbers, invalid_reason)
    if not np.isfinite(bound):
        return Verdict("not applicable", None, "", numbers, "the bound is not finite (a denominator is <= 0)")
    margin = (bound - lo) / abs(bound) if bound != 0 else float(bound - lo)
    ok = margin > 0
    if ok:
        why = ("empirical ≤ bound" if hi <= bound else
               f"empirical within {z:g} s.e. of the bound (not a significant violation)")
        return Verdict("holds", margin, "(bound − (empirical − z·s.e.))/|bound|", numbers, why)
    return Verdict("fails", margin, "(bound − (empirical − z·s.e.))/|bound|", numbers,
                   f"empirical exceeds the bound by more than {z:g} s.e.")


def worst(*verdicts: Verdict) -> Verdict:
    """Combine verdicts of one form on several problems: ``fails`` beats ``holds``; the smallest margin is kept."""
    vs = [v for v in verdicts if v is not None]
    applicable = [v for v in vs if v.verdict != NOT_APPLICABLE]
    if not applicable:
        return vs[0]
    failing = [v for v in applicable if v.verdict == FAILS]
    pool = failing or applicable
    return min(pool, key=lambda v: np.inf if v.margin is None else v.margin)
