"""More replicates for the undecided cells of a map, at the test's error level (``fedsde map --refine BUDGET``).

**Design: Bonferroni α-spending over two looks, with fresh independent replicates at each.**  With ``--refine``
a map is planned as :data:`LOOKS` = 2 looks, each a complete validity test at level ``α/2``:

1. every cell runs with ``R`` replicates at family level ``α/2`` (:func:`look_alpha`);
2. the cells still inconclusive get a second test on **new** replicates only (independent seeds: the second look's
   cells have coordinates of their own, so their derived seeds differ), again at level ``α/2``, with the number of
   replicates the first look's ``replicates_needed`` asks for (itself computed at ``α/2``), cheapest cells first
   while the budget lasts (:func:`plan_refinement`; ``BUDGET`` counts replicates per chain, summed over the
   refined cells).

A cell keeps the outcome of the first look that decides it (:func:`combine_looks`).  A wrong decision ("tracks"
where the SDE does not, or the reverse) needs a wrong decision at some look; each look errs with probability at
most ``α/2`` given everything before it (its data are new, so the choice of its size from the first look does not
bias it), hence the whole procedure errs with probability at most ``α/2 + α/2 = α`` (union bound).  Pooling the
two looks' replicates instead would make the second look's sample size depend on its own data, and the union bound
would need the group-sequential boundaries of a joint law; fresh replicates keep each look an ordinary test.  The
price: the first look runs at ``α/2`` (slightly wider intervals), and the first look's replicates are not reused.
Without ``--refine`` a map is one look at level ``α``.
"""

from __future__ import annotations

from collections.abc import Sequence

from fedsde._validate import positive_int

#: looks of a refined map: the grid, then the undecided cells on fresh replicates
LOOKS = 2
DESIGN = (f"Bonferroni α-spending over {LOOKS} looks: each look is a validity test at level α/{LOOKS} on its own, "
          "fresh replicates (independent seeds); the undecided cells of the first look get a second one with the "
          "replicates it says would decide, cheapest first within the budget; a cell keeps the first decided "
          "outcome; P(any wrong decision) <= α by the union bound")


def look_alpha(alpha: float, refine: bool) -> float:
    """The family level of each look: ``α/LOOKS`` for a refined map, else ``α``."""
    return alpha / LOOKS if refine else alpha


def plan_refinement(cells: Sequence[dict], budget: int) -> tuple[list[tuple[int, int]], int]:
    """Which undecided cells get a second look, and with how many fresh replicates.

    Parameters
    ----------
    cells
        The first look's cells: ``outcome`` and ``replicates_needed`` (``None`` when no finite number decides).
    budget
        Replicates per chain to spend, summed over the refined cells (>= 1).

    Returns
    -------
    (plan, spent)
        ``plan``: ``(position in cells, replicates)`` for each refined cell, cheapest first (ties by position);
        a cell whose need exceeds what is left of the budget is passed over, cheaper ones after it still run.
        ``spent``: the replicates the plan uses.
    """
    budget = positive_int("refine", budget)
    todo = sorted((int(c["replicates_needed"]), i) for i, c in enumerate(cells)
                  if c.get("outcome") == "inconclusive" and c.get("replicates_needed") is not None)
    plan, spent = [], 0
    for need, i in todo:
        need = max(2, need)
        if spent + need <= budget:
            plan.append((i, need))
            spent += need
    return plan, spent


def combine_looks(first: dict, second: dict | None) -> dict:
    """The cell's final record: the first look where it was decided (or the second look's numbers, which rest on
    more replicates, when neither decides); ``look`` says which, ``looks`` keeps both outcomes.  A second look that
    failed leaves the first standing (its error in ``refine_error``)."""
    if second is None:
        return {**first, "look": 1, "looks": [first.get("outcome")]}
    if second.get("outcome") is None:  # the second look failed to run: the first one stands, the error is kept
        return {**first, "look": 1, "looks": [first.get("outcome"), None], "refine_error": second.get("error")}
    if first.get("outcome") != "inconclusive":
        return {**first, "look": 1, "looks": [first.get("outcome")]}
    return {**second, "look": 2, "looks": [first.get("outcome"), second.get("outcome")]}
