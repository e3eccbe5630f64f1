"""``fedsde sde`` and ``fedsde compare``: JSON contracts and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedsde.cli import main
from fedsde.exact import transient_moments
from fedsde.problems import paper_table_problem
from fedsde.sde import quadratic_sde_coefficients

ROOT = Path(__file__).resolve().parents[1]
PAPER = str(ROOT / "examples" / "problems" / "paper_table.toml")
BASE = ["--problem", PAPER, "--eta", "0.05", "--local-steps", "5"]


def run_json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_sde_json_contract(capsys):
    obj = run_json(capsys, ["sde", *BASE, "--variant", "matched", "--method", "exact", "--rounds", "40",
                            "--paths", "2000", "--seed", "1", "--json"])
    assert set(obj) >= {"final", "times", "rounds", "mean", "trace_cov", "coefficients", "stationary", "config"}
    assert set(obj["final"]) >= {"mean", "cov", "mean_stderr", "round", "time"}
    assert obj["final"]["time"] == pytest.approx(2.0) and obj["times"][-1] == pytest.approx(2.0)
    tr = transient_moments(paper_table_problem(), 0.05, 5, 40, record=[40])
    se = np.sqrt(tr.final_cov[0, 0] / 2000)
    assert abs(obj["final"]["mean"][0] - tr.final_mean[0]) < 5 * se
    lin = quadratic_sde_coefficients(paper_table_problem(), 0.05, 5, variant="matched")
    assert obj["coefficients"]["A"][0][0] == pytest.approx(lin.A[0, 0])


def test_sde_general_and_substeps(capsys):
    obj = run_json(capsys, ["sde", *BASE, "--variant", "general", "--inner-samples", "2", "--rounds", "4",
                            "--paths", "64", "--seed", "0", "--substeps", "2", "--server-lr", "0.5", "--h", "0.1",
                            "--json"])
    assert obj["config"]["substeps"] == 2 and obj["config"]["inner_samples"] == 2
    assert obj["times"][-1] == pytest.approx(0.4)
    assert "coefficients" not in obj


def test_compare_json_contract(capsys):
    obj = run_json(capsys, ["compare", *BASE, "--variant", "corrected", "--rounds", "20", "--server-lr", "0.5",
                            "--h", "0.1", "--w0", "2", "--json"])
    assert set(obj) >= {"moments", "distances", "weak_error", "slope", "stationary"}
    assert set(obj["moments"]) >= {"rounds", "times", "chain", "sde"}
    for phi in ("dist2", "loss"):
        assert 0.8 <= obj["slope"][phi]["slope"] <= 1.2
        assert len(obj["weak_error"][phi]["error"]) == len(obj["moments"]["rounds"])
    assert obj["stationary"]["w2"] > 0
    assert len(obj["distances"]["w2"]) == len(obj["moments"]["times"])


def test_compare_with_paths_and_paper(capsys):
    obj = run_json(capsys, ["compare", *BASE, "--variant", "paper", "--rounds", "10", "--paths", "500", "--seed",
                            "2", "--noise-scaling", "diffusive", "--steps", "0.05,0.025,0.0125", "--json"])
    mc = obj["monte_carlo"]
    assert mc["ks_vs_chain_law"]["statistic"][0] > 0.2  # paper's diffusion is far too large
    assert obj["slope"]["dist2"]["slope"] < 0.5
    assert obj["slope"]["dist2"]["steps"] == pytest.approx([0.05, 0.025, 0.0125])


def test_human_output(capsys):
    assert main(["compare", *BASE, "--rounds", "5"]) == 0
    out = capsys.readouterr().out
    assert "W2(chain, SDE)" in out and "slope" in out
    assert "diffusive noise" in out  # the default: a wrong diffusion does not converge


def test_compare_prints_snapped_steps_largest_first(capsys):
    # t = 20·0.05 = 1: 0.03 snaps to 1/33, 0.0101 to 1/99
    assert main(["compare", *BASE, "--rounds", "20", "--steps", "0.0101,0.05,0.03"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("refinement steps"))
    assert f"h = 0.05, {1 / 33:.6g}, {1 / 99:.6g} (rounds 20, 33, 99; t = 1)" in line
    obj = run_json(capsys, ["compare", *BASE, "--rounds", "20", "--steps", "0.0101,0.05,0.03", "--json"])
    assert obj["slope"]["loss"]["steps"] == pytest.approx([0.05, 1 / 33, 1 / 99])
    assert obj["slope"]["loss"]["rounds"] == [20, 33, 99]
    assert obj["config"]["noise_scaling"] == "diffusive"


def test_compare_paper_default_scaling_does_not_converge(capsys):
    obj = run_json(capsys, ["compare", *BASE, "--variant", "paper", "--rounds", "20", "--json"])
    assert obj["slope"]["dist2"]["slope"] < 0.5
    obj = run_json(capsys, ["compare", *BASE, "--variant", "paper", "--rounds", "20", "--noise-scaling", "fixed",
                            "--json"])
    assert obj["slope"]["dist2"]["slope"] > 0.8  # the small-noise limit hides the wrong diffusion


def test_compare_warns_when_local_slopes_disagree(capsys):
    # s = 20·h: the largest step is far outside the asymptotic regime
    assert main(["compare", *BASE, "--rounds", "4", "--w0", "3", "--steps", "0.2,0.1,0.01,0.001", "--json"]) == 0
    cap = capsys.readouterr()
    obj, err = json.loads(cap.out), cap.err
    assert err.count("\n") == 1 and err.startswith("warning:") and "local log–log slopes" in err
    local = np.asarray(obj["slope"]["dist2"]["local_slopes"])
    assert local.shape == (3,) and np.max(np.abs(local - obj["slope"]["dist2"]["slope"])) > 0.5
    assert main(["compare", *BASE, "--rounds", "20", "--json"]) == 0
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["sde", *BASE, "--variant", "matched", "--server-lr", "2.5", "--rounds", "3", "--paths", "2", "--seed",
          "0"], "matched"),
        (["sde", *BASE, "--rounds", "3", "--paths", "0", "--seed", "0"], "paths"),
        (["sde", *BASE, "--rounds", "3", "--paths", "1", "--seed", "0"], "--paths=1: must be an integer >= 2"),
        (["compare", *BASE, "--rounds", "0"], "rounds"),
        (["compare", *BASE, "--rounds", "20", "--steps", "0.05,0"],
         "--steps='0.05,0': every step must be finite and > 0"),
        (["compare", *BASE, "--rounds", "20", "--steps", "0.05,-1"], "> 0 (entry 2 is -1)"),
        (["compare", *BASE, "--rounds", "20", "--steps", "0.05,0.025,0.05"], "step 0.05 is given twice"),
        (["compare", *BASE, "--rounds", "20", "--steps", "0.05,0.049"], "both snap to h = 0.05"),
        (["compare", *BASE, "--rounds", "20", "--steps", "0.05"], "at least two steps"),
        (["compare", *BASE, "--rounds", "20", "--steps", "0.05,1e-12"], "rounds per step"),
        (["compare", *BASE, "--rounds", "20", "--paths", "1"], "--paths=1: must be an integer >= 2"),
    ],
)
def test_errors_are_one_line(capsys, argv, match):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err and err.count("\n") == 1
