"""``fedsde scaling``: JSON contract on quadratic and data problems, κ lists, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedsde.cli import main
from fedsde.problems import paper_table_problem
from fedsde.scaling import FedAvgConfig, compare_quadratic

ROOT = Path(__file__).resolve().parents[1]
PAPER = str(ROOT / "examples" / "problems" / "paper_table.toml")
ARGS = ["scaling", "--problem", PAPER, "--eta", "0.05", "--local-steps", "4", "--rounds", "8", "--w0", "2"]


def run_json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_quadratic_single_kappa_contract(capsys):
    obj = run_json(capsys, [*ARGS, "--rule", "clients", "--kappa", "2", "--json"])
    for end in ("base", "scaled"):
        assert set(obj[end]) >= {"eta", "local_steps", "server_lr", "rounds", "clients", "temperature", "horizon",
                                 "stationary_mean", "stationary_cov", "transient_mean", "transient_cov"}
    assert obj["scaled"]["clients"] == 6 and obj["scaled"]["server_lr"] == 2.0 and obj["scaled"]["rounds"] == 4
    assert obj["invariants"]["temperature_rel_change"] < 1e-14
    assert obj["invariants"]["horizon_rel_change"] < 1e-14
    ref = compare_quadratic(paper_table_problem(), FedAvgConfig(eta=0.05, local_steps=4, server_lr=1.0, rounds=8),
                            "clients", 2, w0=[2.0])
    assert obj["discrepancy"]["max_rel"] == pytest.approx(ref.max_rel, rel=1e-12)
    assert obj["scaled"]["stationary_cov"][0][0] == pytest.approx(ref.scaled.stationary_cov[0, 0], rel=1e-12)
    assert set(obj["discrepancy"]["stationary"]) == {"excess_loss_rel", "cov_rel", "mean_shift_sd", "w2_rel"}


def test_rules_that_keep_q_do_not_report_clients(capsys):
    obj = run_json(capsys, [*ARGS, "--rule", "local-steps", "--kappa", "2", "--json"])
    assert "clients" not in obj["base"] and "batch_size" not in obj["scaled"]
    assert obj["scaled"]["local_steps"] == 8 and obj["scaled"]["rounds"] == 4


def test_kappa_list_gives_discrepancy_vs_kappa(capsys):
    obj = run_json(capsys, [*ARGS, "--rule", "server-client", "--kappa", "0.5,1,2,4", "--json"])
    curve = obj["discrepancy_vs_kappa"]
    assert curve["kappa"] == [0.5, 1.0, 2.0, 4.0]
    assert curve["max_rel"][1] == 0.0  # κ = 1 is the base itself
    assert all(d > 0 for i, d in enumerate(curve["max_rel"]) if i != 1)
    assert len(obj["cells"]) == 4 and obj["cells"][2]["scaled"]["eta"] == pytest.approx(0.025)
    ref = compare_quadratic(paper_table_problem(), FedAvgConfig(eta=0.05, local_steps=4, server_lr=1.0, rounds=8),
                            "server-client", 2, w0=[2.0])
    cell = obj["cells"][2]["scaled"]  # every cell carries the exact moments of its scaled end
    for key in ("stationary_mean", "stationary_cov", "transient_mean", "transient_cov"):
        np.testing.assert_allclose(cell[key], getattr(ref.scaled, key), rtol=1e-12)


def test_human_output(capsys):
    assert main([*ARGS, "--rule", "local-steps", "--kappa", "2"]) == 0
    out = capsys.readouterr().out
    assert "max relative discrepancy" in out and "scaled" in out


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--rule", "local-steps", "--kappa", "3"], "rounds=8 to 8/3"),
        (["--rule", "batch", "--kappa", "2"], "no batch noise"),
        (["--rule", "server-client", "--kappa", "0.05"], ">= 2: local SGD diverges"),
        (["--rule", "clients", "--kappa", "0,2"], "every κ must be > 0"),
    ],
)
def test_one_line_errors(capsys, extra, match):
    assert main([*ARGS, *extra, "--json"]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and match in lines[0], cap.err


DIGITS = str(ROOT / "examples" / "problems" / "digits_softmax.toml")


def test_data_problem_contract(capsys):
    obj = run_json(capsys, ["scaling", "--problem", DIGITS, "--eta", "0.05", "--local-steps", "1", "--rounds", "4",
                            "--rule", "batch-linear", "--kappa", "2", "--replicates", "4", "--points", "2", "--json"])
    assert obj["scaled"]["batch_size"] == 2 * obj["base"]["batch_size"]
    assert obj["scaled"]["server_lr"] == 2.0 and obj["scaled"]["rounds"] == 2
    curves = obj["base"]["curves"]
    assert curves["tau"] == pytest.approx([0.0, 0.1, 0.2])
    assert set(curves) >= {"train_loss", "test_accuracy"}
    assert np.all(np.asarray(curves["train_loss"]["se"][1:]) > 0)
    assert set(obj["separation"]) == set(obj["discrepancy"])
    assert obj["invariants"]["horizon_rel_change"] < 1e-12
    # the minibatch covariance ∝ 1/b − 1/N_k keeps the temperature only roughly
    assert obj["invariants"]["temperature_rel_change"] < 0.2
    assert obj["invariants"]["temperature_rel_change"] > 0.05
    assert len(obj["notes"]) == 1 and "1/b − 1/N_k, not 1/b" in obj["notes"][0]


def test_data_kappa_one_has_no_discrepancy(capsys):
    argv = ["scaling", "--problem", DIGITS, "--eta", "0.05", "--local-steps", "1", "--rounds", "2", "--rule", "clients",
            "--kappa", "1", "--replicates", "3", "--points", "1"]
    obj = run_json(capsys, [*argv, "--json"])
    assert obj["notes"] == [] and obj["first_separation_tau"] is None
    for d in obj["discrepancy"].values():
        assert d["max_abs_diff"] == 0.0 and d["final_se"] == 0.0
    assert main([*argv, "--rule", "batch", "--kappa", "2"]) == 0
    assert "note: the temperature" in capsys.readouterr().out


def test_data_kappa_list_runs_through_sweep(capsys, tmp_path):
    out = tmp_path / "sweep"
    argv = ["scaling", "--problem", DIGITS, "--eta", "0.05", "--local-steps", "1", "--rounds", "4", "--rule", "batch",
            "--kappa", "1,2", "--replicates", "4", "--points", "2", "--sweep-out", str(out), "--json"]
    obj = run_json(capsys, argv)
    curve = obj["discrepancy_vs_kappa"]
    assert curve["kappa"] == [1.0, 2.0] and len(obj["cells"]) == 2
    assert obj["cells"][1]["scaled"]["batch_size"] == 32
    assert (out / "spec.toml").exists()
    again = run_json(capsys, argv)  # the stored sweep is resumed: same cells, same numbers
    assert again["discrepancy_vs_kappa"] == curve
    # every κ runs with --seed itself (shared seeds): the list's κ = 2 cell is the single run with --kappa 2
    single = run_json(capsys, [a if a != "1,2" else "2" for a in argv[:-3]] + ["--json"])
    assert obj["cells"][1]["discrepancy"] == single["discrepancy"] and obj["base"] == single["base"]


def test_diverging_scaled_chain_is_a_warning(capsys):
    argv = ["scaling", "--problem", PAPER, "--eta", "0.02", "--local-steps", "4", "--rounds", "64", "--rule",
            "clients", "--kappa", "8,16", "--json"]
    obj = run_json(capsys, argv)
    assert obj["discrepancy_vs_kappa"]["max_rel"][1] is None  # κ = 16: s = 16 makes the server chain diverge
    assert any("kappa=16: the chain has no stationary law" in w for w in obj["warnings"])
    assert main([*argv, "--strict"]) == 2
