"""``--order 1|2`` on ``fedsde compare``, ``sde``, ``validity`` and ``map``."""

from __future__ import annotations

import json

import pytest

from tests.helpers import one_line_error, run_cli

PAPER = "examples/problems/paper_table.toml"
GRUNFELD = "examples/problems/grunfeld.toml"
DIGITS = "examples/problems/digits_softmax.toml"
REFINED = ("mean", "second_moment", "covariance")


def _compare(capsys, order: int) -> dict:
    code, out, err = run_cli(capsys, ["compare", "--problem", PAPER, "--eta", "0.05", "--local-steps", "1", "--rounds",
                                      "5", "--w0", "2", "--order", str(order), "--json"])
    assert code == 0, err
    return json.loads(out)


def test_compare_order2_prints_slopes_at_least_1_85_with_intervals(capsys):
    two = _compare(capsys, 2)["order_refinement"]
    assert two["order"] == 2 and two["sde"] == "order2"
    for name in REFINED:
        rec = two[name]
        lo, hi = rec["slope_ci95"]
        assert rec["slope"] >= 1.85 and lo <= rec["slope"] <= hi
    one = _compare(capsys, 1)["order_refinement"]
    assert all(0.9 <= one[name]["slope"] <= 1.1 for name in REFINED)
    assert one["etas"] == two["etas"]  # the same runs


def test_compare_order2_h_refinement_has_intervals(capsys):
    out = _compare(capsys, 2)
    assert out["config"]["variant"] == "order2"
    for rec in out["slope"].values():
        lo, hi = rec["slope_interval"]
        assert lo <= rec["slope"] <= hi


def test_compare_order2_on_least_squares(capsys):
    code, out, err = run_cli(capsys, ["compare", "--problem", GRUNFELD, "--eta", "0.02", "--local-steps", "2",
                                      "--rounds", "5", "--order", "2", "--etas", "0.02,0.01,0.005,0.0025", "--json"])
    assert code == 0, err
    rec = json.loads(out)["order_refinement"]
    assert all(rec[name]["slope"] >= 1.85 for name in REFINED)


def test_compare_order2_refuses_other_variants_and_bad_etas(capsys):
    base = ["compare", "--problem", PAPER, "--eta", "0.05", "--local-steps", "1", "--rounds", "5", "--order", "2"]
    one_line_error(*run_cli(capsys, [*base, "--variant", "paper"]), "--variant=paper")
    one_line_error(*run_cli(capsys, [*base, "--etas", "0.05,0.03,0.01"]), "--etas")


def test_sde_order2_uses_exact_transitions(capsys):
    code, out, err = run_cli(capsys, ["sde", "--problem", PAPER, "--eta", "0.05", "--local-steps", "3", "--rounds",
                                      "10", "--replicates", "200", "--seed", "0", "--order", "2", "--json"])
    assert code == 0, err
    rec = json.loads(out)
    assert rec["config"]["variant"] == "order2" and rec["config"]["method"] == "exact"
    assert rec["config"]["substeps"] == 1


def test_sde_order2_on_least_squares_reports_its_scheme(capsys):
    # any loss: the Runge–Kutta drift with the problem's own minibatch noise, one substep per round (weak order 2)
    code, out, err = run_cli(capsys, ["sde", "--problem", GRUNFELD, "--eta", "0.02", "--local-steps", "2",
                                      "--rounds", "3", "--replicates", "4", "--seed", "0", "--order", "2", "--json"])
    assert code == 0, err
    rec = json.loads(out)
    assert rec["config"]["substeps"] == 1 and rec["config"]["order"] == 2 and "weak order 2" in rec["config"][
        "integrator"]
    assert len(rec["rounds"]) == 4 and "train_loss" in rec["metrics"]
    one_line_error(*run_cli(capsys, ["sde", "--problem", GRUNFELD, "--eta", "0.02", "--rounds", "3", "--replicates",
                                     "4", "--seed", "0", "--order", "2", "--integrator", "svag"]), "--integrator")


def test_validity_order2_gap_is_smaller(capsys):
    gaps = {}
    for order in (1, 2):
        code, out, err = run_cli(capsys, ["validity", "--problem", PAPER, "--eta", "0.05", "--local-steps", "3",
                                          "--rounds", "20", "--order", str(order), "--json"])
        assert code == 0, err
        rec = json.loads(out)
        assert rec["config"]["order"] == order
        gaps[order] = rec["verdict"]["worst"]["gap"]
    assert gaps[2] < gaps[1] / 3


def test_validity_order2_refused_without_an_exact_law(capsys):
    one_line_error(*run_cli(capsys, ["validity", "--problem", DIGITS, "--eta", "0.05", "--local-steps", "2",
                                     "--rounds", "2", "--replicates", "4", "--seed", "0", "--order", "2"]),
                   "--order=2", "compare --order 2")


def test_map_order2(tmp_path):
    # the map runs every cell as `fedsde validity --order 2` (its JSON record says so); the map's figures are
    # tested in test_map.py
    from fedsde._cli import cell_commands
    from fedsde.maps import MapGrid, run_map

    rec = run_map(PAPER, MapGrid(eta=(0.05, 0.2), local_steps=(1, 4)), rounds=10, replicates=None, seed=0,
                  out=tmp_path / "m", options={"order": 2}, progress=False, commands=cell_commands())
    assert rec["order"] == 2 and rec["counts"]["failed"] == 0
    cell = json.loads((tmp_path / "m" / rec["cells"][0]["record"]).read_text(encoding="utf-8"))
    assert cell["result"]["config"]["order"] == 2


@pytest.mark.slow
def test_compare_order2_on_a_data_problem(capsys):
    code, out, err = run_cli(capsys, ["compare", "--problem", DIGITS, "--eta", "0.05", "--local-steps", "2",
                                      "--rounds", "1", "--replicates", "4", "--seed", "0", "--order", "2",
                                      "--etas", "0.05,0.025,0.0125", "--json"])
    assert code == 0, err
    rec = json.loads(out)
    assert set(rec["order2"]) == {"mean", "second_moment", "loss"} and rec["substeps"] == 1
    assert all(len(v["slope_ci95"]) == 2 for v in rec["order2"].values())
