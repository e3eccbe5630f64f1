"""The command line: JSON output contracts, one-line errors without tracebacks, exit codes."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedsde.cli import main
from fedsde.exact import stationary_law, transient_moments
from fedsde.problems import paper_table_problem, random_quadratic_problem, save_problem

ROOT = Path(__file__).resolve().parents[1]
PAPER = str(ROOT / "examples" / "problems" / "paper_table.toml")


def run_json(capsys, argv):
    assert main(argv) == 0
    out = capsys.readouterr().out
    return json.loads(out)


def test_exact_json_contract(capsys):
    obj = run_json(capsys, ["exact", "--problem", PAPER, "--eta", "0.05", "--local-steps", "5", "--rounds", "3",
                            "--json"])
    assert set(obj) >= {"optimum", "round_law", "stationary", "transient"}
    assert set(obj["round_law"]) >= {"B", "c", "noise_cov"}
    st = stationary_law(paper_table_problem(), 0.05, 5)
    assert obj["stationary"]["cov"][0][0] == pytest.approx(st.cov[0, 0], rel=1e-12)
    tr = transient_moments(paper_table_problem(), 0.05, 5, 3, record=[3])
    assert obj["transient"]["mean"][0] == pytest.approx(tr.final_mean[0], rel=1e-12)
    assert obj["optimum"] == pytest.approx([1.0])


def test_exact_reports_missing_stationary_law(capsys):
    obj = run_json(capsys, ["exact", "--problem", PAPER, "--eta", "0.05", "--local-steps", "5", "--server-lr", "5",
                            "--json"])
    assert obj["stationary"] is None
    assert any("no stationary law" in n for n in obj["notes"])


def test_exact_client_steps_and_participation(tmp_path, capsys):
    pb = random_quadratic_problem(4, 2, seed=1)
    path = save_problem(pb, tmp_path / "pb.json")
    obj = run_json(capsys, ["exact", "--problem", str(path), "--eta", "0.1", "--client-steps", "1,2,3,4",
                            "--participation", "2", "--rounds", "4", "--w0", "1,1", "--json"])
    tr = transient_moments(pb, 0.1, [1, 2, 3, 4], 4, w0=[1, 1], participation=2, record=[4])
    np.testing.assert_allclose(obj["transient"]["cov"], tr.final_cov, rtol=1e-12)


def test_simulate_json_contract(capsys):
    obj = run_json(capsys, ["simulate", "--problem", PAPER, "--eta", "0.05", "--local-steps", "5", "--rounds", "40",
                            "--replicates", "2000", "--seed", "3", "--json"])
    st = stationary_law(paper_table_problem(), 0.05, 5)
    assert abs(obj["final"]["mean"][0] - st.mean[0]) < 5 * obj["final"]["mean_stderr"][0]
    assert obj["replicates"] == 2000
    again = run_json(capsys, ["simulate", "--problem", PAPER, "--eta", "0.05", "--local-steps", "5", "--rounds",
                              "40", "--replicates", "2000", "--seed", "3", "--json"])
    assert again["final"] == obj["final"]


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["exact", "--problem", "missing.toml", "--eta", "0.1", "--local-steps", "2"], "does not exist"),
        (["exact", "--problem", PAPER, "--eta", "-1", "--local-steps", "2"], "eta=-1.0: must be finite and > 0"),
        (["exact", "--problem", PAPER, "--eta", "0.1", "--local-steps", "0"], "--local-steps=0"),
        (["exact", "--problem", PAPER, "--eta", "0.1"], "--local-steps: required"),
        (["exact", "--problem", PAPER, "--eta", "0.1", "--client-steps", "1,2"], "need 3 integers"),
        (["exact", "--problem", PAPER, "--eta", "0.1", "--local-steps", "2", "--w0", "1,2"], "d=1"),
        (["exact", "--problem", PAPER, "--eta", "abc", "--local-steps", "2"], "invalid float value"),
        (["simulate", "--problem", PAPER, "--eta", "0.1", "--local-steps", "2", "--rounds", "3", "--replicates", "0",
          "--seed", "1"], "replicates=0"),
        (["simulate", "--problem", PAPER, "--eta", "0.1", "--local-steps", "2", "--rounds", "3", "--replicates", "5",
          "--seed", "1", "--participation", "7"], "participation=7"),
        (["simulate", "--problem", PAPER, "--eta", "0.1", "--local-steps", "2", "--rounds", "3", "--replicates", "1",
          "--seed", "1"], "--replicates=1: must be an integer >= 2"),
    ],
)
def test_user_mistakes_give_one_line_errors(argv, match, capsys):
    with pytest.raises(SystemExit) if "abc" in argv else contextlib.nullcontext():
        code = main(argv)
        assert code == 2
    err = capsys.readouterr().err.strip()
    assert match in err
    assert "Traceback" not in err and len(err.splitlines()) <= 2  # argparse prints usage + one line


@pytest.mark.parametrize("weighting", ["renormalised", "multinomial"])
def test_simulate_weighting_without_participation_is_noted(weighting, capsys):
    base = ["simulate", "--problem", PAPER, "--eta", "0.1", "--local-steps", "2", "--rounds", "3", "--replicates",
            "8", "--seed", "1", "--json"]
    obj = run_json(capsys, [*base, "--weighting", weighting])
    plain = run_json(capsys, base)
    assert obj["final"] == plain["final"]  # the weighting has no effect without --participation
    assert main([*base, "--weighting", weighting]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--weighting={weighting} only matters with --participation" in err
    assert main([*base, "--weighting", weighting, "--participation", "2"]) == 0
    assert "only matters" not in capsys.readouterr().err


def test_bad_problem_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('U = [1.0, -2.0]\na = [0.0, 1.0]\nSigma = [1.0, 1.0]\n')
    assert main(["exact", "--problem", str(bad), "--eta", "0.1", "--local-steps", "2"]) == 2
    err = capsys.readouterr().err
    assert "U[1]: not positive semi-definite" in err and err.count("\n") == 1


def test_console_script_no_traceback(tmp_path):
    exe = Path(sys.executable).with_name("fedsde")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "fedsde.cli"]
    args = ["exact", "--problem", str(tmp_path / "nope.json"), "--eta", "0.1", "--local-steps", "1"]
    out = subprocess.run([*cmd, *args], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.startswith("fedsde exact: error:") and "Traceback" not in out.stderr


def test_diverging_simulation_is_a_one_line_error(capsys):
    code = main(["simulate", "--problem", PAPER, "--eta", "1", "--local-steps", "50", "--rounds", "100",
                 "--replicates", "10", "--seed", "0", "--json"])
    err = capsys.readouterr().err.strip()
    assert code == 2  # known to diverge (eta·max_eig(U_2) = 4 >= 2): refused before running, client named
    assert "eta*max_eig(U_k) = 4 >= 2 for client(s) [1, 2]" in err and "\n" not in err and "Traceback" not in err


@pytest.mark.parametrize(("value", "match"), [("50", "--participation=50: cannot exceed the number of clients"),
                                              ("0", "--participation=0: must be an integer >= 1")])
def test_simulate_errors_name_the_options(value, match, capsys):
    code = main(["simulate", "--problem", PAPER, "--eta", "0.1", "--local-steps", "2", "--rounds", "3", "--replicates",
                 "8", "--seed", "1", "--participation", value])
    err = capsys.readouterr().err
    assert code == 2 and match in err and " participation=" not in err and err.count("\n") == 1


def test_library_argument_names_become_the_options_typed():
    import argparse

    from fedsde._cli.common import options_named
    from fedsde.errors import FedsdeInputError

    msg = "replicates=8: needs about 36 GiB; replicates in flight=8, participation=10: 80 slots (chunk_size=64)"
    with pytest.raises(FedsdeInputError) as info, options_named(argparse.Namespace(), "replicates", "participation"):
        raise FedsdeInputError(msg)
    assert str(info.value) == ("--replicates=8: needs about 36 GiB; replicates in flight=8, --participation=10: 80 "
                               "slots (chunk_size=64)")
