"""``fedsde map --refine`` keeps the validity test's error level: a simulation of the two-look design with fresh
replicates and α split over the looks (:mod:`fedsde.maps.refine`), against the verdict itself
(:func:`fedsde.validity.validity_verdict`), with fixed seeds.

One metric, one time, per-replicate gaps ``N(D, σ²)`` and a scale of 1, so ``d = |D|``; at ``D = tol`` (the
boundary, where the error rates are largest) "does not track" is a wrong decision for any truth just below the
tolerance and "tracks" one for any truth just above it.  The test's guarantee is ``α`` for any wrong decision (the
interval covers ``D`` with probability ``1 − α``); with ``σ/√R`` small against ``tol`` only one side of the interval
can err at ``D = tol``, so each wrong decision then has probability at most ``α/2``, nearly attained: the sharper
bound the simulation checks.  The naive alternative — the first look's replicates pooled with the new ones and
the full ``α`` at each look — is shown to exceed it, so the check can fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedsde.maps.refine import combine_looks, look_alpha, plan_refinement
from fedsde.validity import GapPath, validity_verdict

TOL, SIGMA, ALPHA, R, BUDGET, RUNS = 0.1, 0.1, 0.2, 8, 2000, 1000
TIMES = np.array([0.0, 1.0])


def _look(rng, D: float, n: int, alpha: float, pooled=None) -> tuple[dict, np.ndarray]:
    x = rng.normal(D, SIGMA, n)
    if pooled is not None:
        x = np.r_[pooled, x]
    gp = GapPath(estimate=np.array([0.0, x.mean()]), se=np.array([0.0, x.std(ddof=1) / math.sqrt(x.size)]),
                 sde_mean=np.array([0.0, 1.0]), sde_se=np.zeros(2))
    v = validity_verdict(TIMES, {"train_loss": gp}, replicates=x.size, reference="exact", tolerance=TOL, alpha=alpha)
    return {"outcome": v.outcome, "replicates_needed": v.replicates_needed}, x


def _cell(rng, D: float, naive: bool) -> tuple[str, str]:
    """(first look's outcome, final outcome) of one cell."""
    alpha = ALPHA if naive else look_alpha(ALPHA, True)
    first, x = _look(rng, D, R, alpha)
    plan, spent = plan_refinement([first], BUDGET)
    assert spent <= BUDGET
    second = _look(rng, D, plan[0][1], alpha, pooled=x if naive else None)[0] if plan else None
    return first["outcome"], combine_looks(first, second)["outcome"]


def _rates(D: float, naive: bool, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    runs = [_cell(rng, D, naive) for _ in range(RUNS)]
    final = [b for _, b in runs]
    return {"tracks": final.count("tracks") / RUNS, "does not track": final.count("does not track") / RUNS,
            "decided first": sum(a != "inconclusive" for a, _ in runs) / RUNS,
            "decided": sum(b != "inconclusive" for b in final) / RUNS}


def _bound(p: float) -> float:
    return p + 5.0 * math.sqrt(p * (1 - p) / RUNS)


def test_two_looks_on_fresh_replicates_keep_the_error_level():
    got = _rates(TOL, naive=False, seed=20261127)
    # each wrong decision at most α/2 (one side of the interval), so any wrong decision at most α
    assert got["tracks"] <= _bound(ALPHA / 2), got
    assert got["does not track"] <= _bound(ALPHA / 2), got


def test_refinement_decides_more_cells_where_the_sde_tracks():
    got = _rates(TOL / 3, naive=False, seed=11)
    assert got["decided"] > got["decided first"] + 0.1, got
    assert got["does not track"] <= _bound(ALPHA / 2), got


def test_pooling_with_full_alpha_at_each_look_breaks_the_level():
    got = _rates(TOL, naive=True, seed=20261127)
    assert got["does not track"] > _bound(ALPHA / 2) and got["tracks"] > _bound(ALPHA / 2), got


def test_plan_spends_the_budget_on_the_cheapest_undecided_cells():
    cells = [{"outcome": "inconclusive", "replicates_needed": 50}, {"outcome": "tracks", "replicates_needed": None},
             {"outcome": "inconclusive", "replicates_needed": 30}, {"outcome": "inconclusive",
                                                                    "replicates_needed": None},
             {"outcome": "inconclusive", "replicates_needed": 200}, {"outcome": "inconclusive",
                                                                     "replicates_needed": 60}]
    plan, spent = plan_refinement(cells, 100)
    assert plan == [(2, 30), (0, 50)] and spent == 80  # 60 would exceed the budget, 200 too
    assert plan_refinement(cells, 1) == ([], 0)
    assert combine_looks(cells[1], None)["look"] == 1
    both = combine_looks(cells[2], {"outcome": "tracks", "gap": 0.01})
    assert both["look"] == 2 and both["looks"] == ["inconclusive", "tracks"] and both["gap"] == 0.01
    kept = combine_looks(cells[2], {"outcome": None, "error": "boom"})
    assert kept["look"] == 1 and kept["outcome"] == "inconclusive" and kept["refine_error"] == "boom"
    assert look_alpha(0.05, True) == pytest.approx(0.025) and look_alpha(0.05, False) == 0.05
