"""``fedsde scaling``: the client-lr rule as a user runs it, κ lists that keep every warning, memory checked up front,
``--workers`` capped at the machine's cores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedsde.cli import main
from fedsde.problems import paper_table_problem
from fedsde.scaling import FedAvgConfig, compare_quadratic

ROOT = Path(__file__).resolve().parents[1]
PAPER = str(ROOT / "examples" / "problems" / "paper_table.toml")
DIGITS = str(ROOT / "examples" / "problems" / "digits_softmax.toml")
ARGS = ["scaling", "--problem", PAPER, "--eta", "0.05", "--local-steps", "4", "--rounds", "64", "--w0", "2"]


def run_json(capsys, argv):
    assert main(argv) == 0
    cap = capsys.readouterr()
    return json.loads(cap.out), cap.err


def one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1, cap.err
    return lines[0]


def test_client_lr_help_lists_the_rule(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["scaling", "--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "client-lr" in out and "η → κη" in out


def test_client_lr_json_has_the_keys_of_the_other_rules(capsys):
    obj, _ = run_json(capsys, [*ARGS, "--rule", "client-lr", "--kappa", "2", "--json"])
    ref, _ = run_json(capsys, [*ARGS, "--rule", "clients", "--kappa", "2", "--json"])
    assert set(obj) == set(ref) and set(obj["scaled"]) == set(ref["scaled"]) and set(obj["base"]) == set(ref["base"])
    assert set(obj["discrepancy"]) == set(ref["discrepancy"])
    s = obj["scaled"]
    assert (s["eta"], s["clients"], s["rounds"], s["server_lr"], s["local_steps"]) == (0.1, 6, 32, 1.0, 4)
    assert obj["invariants"]["temperature_rel_change"] < 1e-14 and obj["invariants"]["horizon_rel_change"] < 1e-14
    exact = compare_quadratic(paper_table_problem(), FedAvgConfig(eta=0.05, local_steps=4, server_lr=1.0, rounds=64),
                              "client-lr", 2, w0=[2.0])
    assert obj["discrepancy"]["max_rel"] == pytest.approx(exact.max_rel, rel=1e-12)
    lst, _ = run_json(capsys, [*ARGS, "--rule", "client-lr", "--kappa", "1,2,4", "--json"])
    assert lst["discrepancy_vs_kappa"]["max_rel"][1] == pytest.approx(exact.max_rel, rel=1e-12)
    assert lst["discrepancy_vs_kappa"]["max_rel"][0] == 0.0


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--kappa", "1.5"], "kappa=1.5: rule 'client-lr' on a quadratic problem copies each client κ times"),
        (["--kappa", "16"], "eta*max_eig(U_k) = 0.8*4 = 3.2 >= 2: local SGD diverges"),
        (["--kappa", "3"], "maps rounds=64 to 64/3"),
        (["--kappa", "2", "--workers", "0"], "--workers=0: must be an integer >= 1"),
    ],
)
def test_client_lr_bad_input_is_one_line(capsys, extra, match):
    assert match in one_line_error(capsys, [*ARGS, "--rule", "client-lr", *extra, "--json"])


@pytest.fixture
def blowing_up(tmp_path) -> str:
    """A data problem on which the clients rule's server step κ·s = 8 makes the ridge term expand (|1 − 8·ηλ| > 1)."""
    path = tmp_path / "ridge.toml"
    path.write_text('kind = "classification"\ndataset = "breast_cancer"\nclients = 4\npartition = "iid"\n'
                    "batch_size = 8\nl2 = 1.0\nseed = 0\n")
    return str(path)


def _blowup_argv(path: str, workers: int) -> list[str]:
    return ["scaling", "--problem", path, "--eta", "0.4", "--local-steps", "1", "--rounds", "160", "--rule",
            "clients", "--kappa", "1,8", "--replicates", "2", "--points", "4", "--workers", str(workers), "--json"]


def _check_blowup_reported(obj: dict, err: str) -> None:
    warned = [w for w in obj["warnings"] if "blowing up" in w]
    assert len(warned) == 1 and warned[0].startswith("kappa=8: the simulation is blowing up"), obj["warnings"]
    assert obj["cells"][0]["warnings"] == []  # each cell carries its own warnings only
    assert any("blowing up" in w for w in obj["cells"][1]["warnings"])
    assert "warning: kappa=8: the simulation is blowing up" in err


def test_kappa_list_on_data_keeps_each_cells_warnings(capsys, blowing_up):
    obj, err = run_json(capsys, _blowup_argv(blowing_up, 1))
    _check_blowup_reported(obj, err)
    assert "kappa=8: the simulation is blowing up" in one_line_error(capsys, [*_blowup_argv(blowing_up, 1),
                                                                              "--strict"])


@pytest.mark.slow
def test_kappa_list_keeps_warnings_of_cells_on_worker_processes(capsys, blowing_up):
    """With --workers 2 the cells run on Dask worker processes: their warnings come back with their results."""
    obj, err = run_json(capsys, _blowup_argv(blowing_up, 2))
    _check_blowup_reported(obj, err)


def _refuse(*_a, **_k):
    raise AssertionError("allocated or simulated before the memory check")


@pytest.mark.parametrize("kappa", ["2", "1,2"])
def test_data_scaling_checks_memory_before_running(capsys, monkeypatch, kappa):
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "1M")
    monkeypatch.setattr("fedsde.scaling.data.end_problem", _refuse)  # the client split: built only after the check
    monkeypatch.setattr("fedsde.sweep.run", _refuse)
    line = one_line_error(capsys, ["scaling", "--problem", DIGITS, "--eta", "0.05", "--local-steps", "1", "--rounds",
                                   "4", "--rule", "clients", "--kappa", kappa, "--replicates", "4", "--points", "2",
                                   "--json"])
    assert line.startswith("fedsde scaling: error: replicates=4: needs about ")
    assert "MiB of memory but about 1 MiB is available" in line


def test_workers_beyond_the_cores_are_capped_with_a_warning(capsys, monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    obj, err = run_json(capsys, ["scaling", "--problem", DIGITS, "--eta", "0.05", "--local-steps", "1", "--rounds",
                                 "2", "--rule", "batch", "--kappa", "1,2", "--replicates", "2", "--points", "1",
                                 "--workers", "3", "--json"])
    msg = "--workers=3: more than the 1 CPU cores of this machine; running 1 workers"
    assert msg in obj["warnings"] and f"warning: {msg}" in err
    assert len(obj["cells"]) == 2
