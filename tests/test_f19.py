"""F19 (order 1 and order 2 against the exact chain): registered with a schema, runs on a tiny configuration, and
its slopes separate the orders."""

from __future__ import annotations

from fedsde.problems import paper_table_problem
from fedsde.report.config import load_config, validate
from fedsde.report.gallery import GALLERY, RunContext, run_figure

TINY = {"eta": 0.05, "local_steps": 3, "rounds": 4, "server_lr": 1.0, "levels": 4, "w0": -3.0}


def test_f19_is_registered_with_a_schema():
    assert GALLERY["F19"].module == "f19_order2"
    for quick in (True, False):
        assert set(load_config(quick=quick)["F19"]) == set(TINY)


def test_f19_runs_and_its_slopes_separate_the_orders(tmp_path):
    validate({"F19": TINY}, partial=True)
    ctx = RunContext(seed=0, device="cpu", problem=paper_table_problem(), progress=False, quick=True)
    rec = run_figure("F19", {"F19": TINY}, ctx, tmp_path)
    assert rec.error is None, rec.error
    slopes = rec.output.numbers["slopes"]
    for name in ("mean", "second_moment", "covariance"):
        assert 0.85 <= slopes[f"order1/{name}"]["slope"] <= 1.15
        assert 1.8 <= slopes[f"order2/round-law/{name}"]["slope"] <= 2.2
        lo, hi = slopes[f"order2/round-law/{name}"]["ci95"]
        assert lo <= slopes[f"order2/round-law/{name}"]["slope"] <= hi
    assert "order-2 SDE the command line uses" in rec.output.caption
