"""The claims registry: a claim of a seed paper, the check that tests it, and what the check returns.

A :class:`Claim` has an ``id`` following the paper's numbering (``"002/thm-4.5"``), the ``statement`` and its
``source`` (section / equation), the ``problem`` the check runs on, and ``check(options) -> ClaimResult``.
A :class:`ClaimResult` holds a :class:`~fedsde.theory.results.Verdict` for the claim **as printed** and, where
the reference lists a correction, for the **corrected** claim; verdicts are computed when the check runs.
Checks may also return a :class:`Figure` (bound against empirical value, …) that ``fedsde claims --figures``
draws.

Conventions every check follows (a new claim module copies them; helpers in ``_common``):

* **What is checked, on which problems.** ``Claim.problem`` names the family of problems in words: the paper's
  own problem(s) and small seeded random ones (heterogeneous clients, the parameter range the statement covers,
  e.g. every ``η`` with ``ηU_max < 2`` where the paper states no range).  Use exact laws
  (:mod:`fedsde.exact`, closed forms) for families; Monte Carlo only where nothing exact exists, sized by
  :meth:`CheckOptions.replicates` and seeded from ``options.seed``.  Families are seeded with fixed seeds so the
  table is reproducible; ``options.scale`` may enlarge them.
* **Margin.** Each form's verdict is derived from one number, the *margin*: the signed distance to the decision
  threshold in the claim's own units, **positive exactly when the form holds** (``_common.predicate`` computes
  the verdict from it; never set a verdict by hand).  Tolerance decisions use ``log10(tol/deviation)``
  (``_common.log_margin``); bounds ``(bound − (empirical − z·s.e.))/|bound|``; slopes ``slope − threshold``.
  ``margin_note`` says which, and the claim's docstring (its ``check_*`` function) documents it.  A compound
  decision (``A and B``) takes the smaller of the margins.  ``not applicable`` has margin ``None``.
* **Family, fraction, worst case.** A universal statement over a family gives one ``Member(label, params,
  margin)`` per problem and the verdict ``_common.family_verdict`` (``holds`` iff every member holds); the
  verdict's ``family`` reports ``size``, ``fraction_holding`` and the ``worst`` member with the parameters that
  rebuild it (the counterexample when the claim fails).  Verdicts over a few named problems use
  ``_common.combine``, which reports the same summary.
* **Details.** ``ClaimResult.details`` holds what a reader needs to rebuild the counterexample and the numbers
  that are not part of either verdict (tables, constants); arrays are fine (``emit`` serialises them).
* **Every check can fail.** No verdict or margin is hard-coded: the margin is computed from the quantity the
  claim is about, and the tests (``tests/test_claims_mutations.py``) perturb that quantity for each claim and
  assert the verdict flips.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fedsde.theory.results import NOT_APPLICABLE, Verdict


@dataclass(frozen=True)
class CheckOptions:
    """How much work a check may do.

    Attributes
    ----------
    seed : int
        Base seed of every Monte-Carlo run (checks derive their own seeds from it).
    scale : float
        Multiplier of Monte-Carlo sample sizes (1 = the default mode, sized for ``fedsde claims`` to run in
        about a minute on two cores; larger is more precise and slower).
    """

    seed: int = 0
    scale: float = 1.0

    def replicates(self, base: int, minimum: int = 64) -> int:
        return max(minimum, round(base * self.scale))


@dataclass
class Series:
    """One curve of a figure: ``y`` against ``x``, optional error bars ``yerr``."""

    label: str
    x: object
    y: object
    yerr: object = None
    style: str = "-"


@dataclass
class Figure:
    """A figure of a check (drawn by :func:`fedsde.theory.claims.figures.save_claim_figure`).

    Each panel is ``(title, xlabel, ylabel, [Series, …], {"logx": bool, "logy": bool})``; axis labels say which
    clock is meant (``t = n·h`` or rounds ``n``).
    """

    panels: list = field(default_factory=list)
    suptitle: str = ""

    def panel(self, title: str, xlabel: str, ylabel: str, series: list, *, logx: bool = False,
              logy: bool = True) -> Figure:
        self.panels.append((title, xlabel, ylabel, series, {"logx": logx, "logy": logy}))
        return self


@dataclass
class ClaimResult:
    """Verdicts of one claim: ``printed`` (as printed) and ``corrected`` (``None`` when there is no correction)."""

    printed: Verdict
    corrected: Verdict | None = None
    figure: Figure | None = None
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Claim:
    """A claim of a seed paper with the check that tests it.

    Attributes
    ----------
    id : str
        ``"<seed>/<kind>-<number>"``, e.g. ``"002/thm-4.5"``, ``"003/thm-1"``, ``"002/claim-variance-E2"``.
    statement : str
        The claim in words (as printed).
    source : str
        Section / equation of the seed.
    problem : str
        The documented problem (and parameters) the check runs on.
    check : callable
        ``check(options: CheckOptions) -> ClaimResult``.
    corrected_statement : str
        The corrected claim (empty when the printed one needs no correction).
    """

    id: str
    statement: str
    source: str
    problem: str
    check: Callable[[CheckOptions], ClaimResult]
    corrected_statement: str = ""

    @property
    def paper(self) -> str:
        return self.id.split("/", 1)[0]

    def run(self, options: CheckOptions | None = None) -> tuple[ClaimResult, float]:
        """Run the check; a missing optional module (another part of fedsde not installed) gives
        ``not applicable`` with the reason.  Returns the result and the seconds it took."""
        options = options or CheckOptions()
        t0 = time.perf_counter()
        try:
            res = self.check(options)
        except ModuleNotFoundError as exc:  # a part of fedsde this check needs is absent
            v = Verdict(NOT_APPLICABLE, reason=f"needs module {exc.name!r}, which is not available")
            res = ClaimResult(v, None)
        return res, time.perf_counter() - t0

    def result_dict(self, res: ClaimResult, seconds: float) -> dict:
        """The JSON record ``{"id", "statement", "corrected_statement", "source", "problem", "printed",
        "corrected", "details", "seconds"}`` (each verdict with its ``family`` summary, if any)."""
        return {
            "id": self.id,
            "statement": self.statement,
            "corrected_statement": self.corrected_statement or None,
            "source": self.source,
            "problem": self.problem,
            "printed": res.printed.to_dict(),
            "corrected": None if res.corrected is None else res.corrected.to_dict(),
            "details": res.details,
            "seconds": seconds,
        }
