"""The command line on data problems: `simulate` reports metrics over rounds, the closed-form commands refuse data
problems with a one-line reason, `compare-aggregators --problem FILE` runs on the file's data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedsde.cli import main
from fedsde.problems import evaluate_metrics, load_problem
from fedsde.sim import simulate

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = str(ROOT / "examples" / "problems" / "digits_softmax.toml")
MLP = str(ROOT / "examples" / "problems" / "digits_mlp.toml")
PAPER = str(ROOT / "examples" / "problems" / "paper_table.toml")


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_simulate_reports_metrics_over_rounds(capsys):
    argv = ["simulate", "--problem", SOFTMAX, "--eta", "0.1", "--local-steps", "2", "--rounds", "4",
            "--replicates", "3", "--seed", "5", "--record-every", "2", "--json"]
    obj = _json(capsys, argv)
    assert obj["metrics_rounds"] == [0, 2, 4]
    assert set(obj["metrics"]) == {"train_loss", "grad_norm_sq", "test_accuracy", "distance_from_start"}
    pb = load_problem(SOFTMAX)
    res = simulate(pb, eta=0.1, local_steps=2, rounds=4, replicates=3, seed=5, record=[0, 2, 4])
    vals = evaluate_metrics(pb, res.weights)
    for name, v in vals.items():
        np.testing.assert_allclose(obj["metrics"][name]["mean"], v.mean(1), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(obj["metrics"][name]["se"], v.std(1, ddof=1) / np.sqrt(3), rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(obj["final"]["mean"], res.weights[-1].mean(0), rtol=1e-12, atol=1e-15)
    assert "cov" not in obj["final"] and obj["config"]["block_size"] == 3
    assert obj["metrics"]["train_loss"]["mean"][-1] < obj["metrics"]["train_loss"]["mean"][0]


def test_simulate_mlp_starts_from_the_problem_initial_weights(capsys):
    obj = _json(capsys, ["simulate", "--problem", MLP, "--eta", "0.1", "--local-steps", "1", "--rounds", "1",
                         "--replicates", "2", "--seed", "0", "--json"])
    assert obj["metrics"]["distance_from_start"]["mean"][0] == 0.0
    assert obj["metrics"]["grad_norm_sq"]["mean"][0] > 0
    main(["simulate", "--problem", SOFTMAX, "--eta", "0.1", "--local-steps", "1", "--rounds", "2",
          "--replicates", "2", "--seed", "0"])
    assert "train_loss" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["exact", "--problem", SOFTMAX, "--eta", "0.1", "--local-steps", "2"],
    ["derive", "--problem", SOFTMAX, "--eta", "0.1", "--local-steps", "2"],
    ["sde", "--problem", SOFTMAX, "--eta", "0.1", "--local-steps", "2", "--rounds", "2", "--paths", "4", "--seed",
     "0", "--variant", "paper"],
    ["simulate", "--problem", PAPER, "--eta", "0.1", "--local-steps", "2", "--rounds", "2", "--replicates", "4",
     "--seed", "0", "--record-every", "1"],
    ["compare-aggregators", "--problem", PAPER, "--out", "unused"],
    ["compare-aggregators", "--problem", SOFTMAX, "--clients", "4", "--out", "unused"],
])
def test_refusals_are_one_line(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "error" in err
    if argv[0] in ("exact", "derive", "sde"):
        assert "needs quadratic clients" in err and ("closed-form" in err or "closed form" in err)


def test_compare_aggregators_on_a_problem_file(capsys, tmp_path):
    obj = _json(capsys, ["compare-aggregators", "--problem", SOFTMAX, "--rounds", "2", "--runs", "2",
                         "--aggregators", "fedavg", "--participation", "3", "--out", str(tmp_path), "--no-plot",
                         "--json"])
    assert obj["config"]["settings"] == ["digits_softmax"] and obj["config"]["n_clients"] == 10
    assert obj["config"]["batch_size"] == 16 and len(obj["summary"]) == 1
    assert "digits_softmax.toml" in (tmp_path / "table.md").read_text()
