"""Defects of the newest surfaces, each pinned: 0/0 ratios of the surrogate against a point law, compare's relative
covariance error at t = 0, --device where nothing is simulated, an old and a new flag name together, the memory
refusal of exact naming the rows, data whose moments overflow float64, and scaling's messages (κ unrounded, the
split refusal's wording); with a small hypothesis fuzz of regression files through exact."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsde.cli import main
from fedsde.errors import FedsdeInputError
from fedsde.exact.least_squares_surrogate import surrogate_gap
from fedsde.problems.regression.problem import RegressionProblem

ROOT = Path(__file__).resolve().parents[1]
PAPER = str(ROOT / "examples" / "problems" / "paper_table.toml")
MY_DATA = str(ROOT / "examples" / "problems" / "my_data.toml")
TOML = """kind = "regression"
model = "least-squares"
data = "{csv}"
features = ["x1", "x2"]
target = "y"
client_column = "site"
batch_size = {b}
sampling = "{sampling}"
l2 = {l2}
"""


def run(argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def refused(argv) -> str:
    code, out, err = run(argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and ": error: " in err, (code, out, err)
    return err


def write_problem(tmp_path: Path, rows: list[tuple], *, b: int, sampling="without-replacement", l2=0.0) -> str:
    csv = tmp_path / "data.csv"
    csv.write_text("site,x1,x2,y\n" + "".join(f"{s},{float(a)!r},{float(c)!r},{float(y)!r}\n" for s, a, c, y in rows))
    toml = tmp_path / "problem.toml"
    toml.write_text(TOML.format(csv=csv.name, b=b, sampling=sampling, l2=l2))
    return str(toml)


# ------------------------------------------------------------------------------------------------ (a) 0/0
def test_noise_free_minibatches_give_none_ratios_with_a_note(tmp_path):
    rng = np.random.default_rng(0)
    rows = [(s, *rng.normal(size=2), float(rng.normal())) for s in ("a", "b") for _ in range(4)]
    problem = write_problem(tmp_path, rows, b=4)  # b = n_k: every step uses all rows, no noise
    code, out, _ = run(["exact", "--problem", problem, "--eta", "0.1", "--local-steps", "2", "--rounds", "5",
                        "--json"])
    assert code == 0
    r = json.loads(out)
    sur = r["surrogate"]
    assert sur["variance_ratio"] is None and sur["cov_rel_error"] is None and sur["mean_error"] is None
    assert sur["worst_direction_ratio"] is None and sur["transient_cov_rel_error"] is None
    assert any("0/0" in n for n in r["notes"])
    assert np.abs(np.asarray(r["stationary"]["cov"])).max() == 0.0


def test_a_point_law_never_divides_by_its_zero_spread():
    X = [np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[1.0, 1.0], [1.0, -1.0]])]
    y = [np.array([1.0, 2.0]), np.array([0.5, 0.25])]
    pb = RegressionProblem.from_clients(X, y, batch_size=2)
    gap = surrogate_gap(pb, 0.2, 3)
    assert gap.mean_error is None and gap.note and "0/0" in gap.note
    assert gap.summary()["variance_ratio"] is None


# ------------------------------------------------------------------------------------------ (b) t = 0
@pytest.mark.parametrize("problem", [PAPER, MY_DATA])
def test_compare_defines_the_relative_cov_error_at_a_point_start(problem):
    code, out, _ = run(["compare", "--problem", problem, "--eta", "0.05", "--local-steps", "2", "--rounds", "3",
                        "--json"])
    assert code == 0
    rel = json.loads(out)["distances"]["cov_rel_error"]
    assert rel[0] == 0.0 and all(v is not None and v > 0 for v in rel[1:])


# ------------------------------------------------------------------------------------------ (c) --device
@pytest.mark.parametrize("device", ["garbage", "mps", "cuda:7"])
@pytest.mark.parametrize("argv", [
    ["compare", "--problem", PAPER, "--eta", "0.05", "--local-steps", "2", "--rounds", "2"],
    ["compare", "--problem", MY_DATA, "--eta", "0.05", "--local-steps", "2", "--rounds", "2"],
    ["scaling", "--problem", PAPER, "--eta", "0.05", "--local-steps", "2", "--rounds", "2", "--rule", "clients",
     "--kappa", "2"],
    ["scaling", "--problem", MY_DATA, "--eta", "0.05", "--local-steps", "2", "--rounds", "2", "--rule", "clients",
     "--kappa", "2"],
])
def test_device_is_checked_where_nothing_is_simulated(argv, device):
    pytest.importorskip("torch")
    import torch

    if device.startswith("cuda") and torch.cuda.device_count() > 7:
        pytest.skip("cuda:7 exists here")
    assert f"--device={device!r}" in refused([*argv, "--device", device])


# ---------------------------------------------------------------------------------- (d) old and new names
@pytest.mark.parametrize(("argv", "old", "new"), [
    (["sde", "--problem", PAPER, "--eta", "0.1", "--local-steps", "2", "--rounds", "2", "--seed", "0",
      "--paths", "4", "--replicates", "6"], "--paths", "--replicates"),
    (["compare", "--problem", PAPER, "--eta", "0.1", "--rounds", "2", "--steps", "0.1", "--time-steps", "0.2"],
     "--steps", "--time-steps"),
    (["compare", "--problem", PAPER, "--eta", "0.1", "--rounds", "2", "--replicates", "3", "--paths", "2"],
     "--paths", "--replicates"),
    (["compare-aggregators", "--replicates", "3", "--runs", "4"], "--runs", "--replicates"),
])
def test_an_old_and_a_new_flag_name_together_are_refused(argv, old, new):
    err = refused(argv)
    assert f"{old} is the old name of {new}; give {new} only" in err


# ------------------------------------------------------------------------------------------ (e) memory
def test_the_memory_refusal_of_exact_names_the_rows(monkeypatch):
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "1K")
    err = refused(["exact", "--problem", MY_DATA, "--eta", "0.05", "--local-steps", "2"])
    assert "24 rows" in err and "rows times the features" in err and "O(d⁴)" not in err


# ------------------------------------------------------------------------------------------ (f) overflow
@pytest.mark.parametrize(("column", "value"), [("x1", 1e300), ("x2", 1e200), ("y", 1e300), ("y", -1e100)])
@pytest.mark.parametrize("command", ["exact", "simulate", "validity", "scaling"])
def test_values_that_overflow_the_moments_are_refused_at_load(tmp_path, column, value, command):
    rng = np.random.default_rng(1)
    rows = [[s, *rng.normal(size=2).tolist(), float(rng.normal())] for s in ("a", "b") for _ in range(5)]
    rows[6][{"x1": 1, "x2": 2, "y": 3}[column]] = value
    problem = write_problem(tmp_path, [tuple(r) for r in rows], b=2)
    extra = {"exact": [], "simulate": ["--rounds", "2", "--replicates", "4", "--seed", "0"],
             "validity": ["--rounds", "2", "--replicates", "4", "--seed", "0"],
             "scaling": ["--rounds", "2", "--rule", "clients", "--kappa", "2"]}[command]
    err = refused([command, "--problem", problem, "--eta", "0.05", "--local-steps", "2", *extra])
    assert "data.csv" in err and "row 7 (line 8)" in err and f"column {column!r}" in err and "overflow" in err


def test_the_api_refuses_overflowing_values_by_client_row_and_column():
    X = [np.ones((3, 2)), np.ones((2, 2))]
    X[1][1, 0] = 1e200
    with pytest.raises(FedsdeInputError, match=r"X_clients\[1\]\[1, 0\]: 1e\+200 is too large"):
        RegressionProblem.from_clients(X, [np.ones(3), np.ones(2)])


# ------------------------------------------------------------------------------------------ (g) messages
def test_scaling_prints_kappa_unrounded_and_the_split_message_reads_naturally():
    err = refused(["scaling", "--problem", MY_DATA, "--eta", "0.05", "--local-steps", "2", "--rounds", "2",
                   "--rule", "client-lr", "--kappa", "2.0000000001"])
    assert "kappa=2.0000000001:" in err
    err = refused(["scaling", "--problem", MY_DATA, "--eta", "0.05", "--local-steps", "2", "--rounds", "2",
                   "--rule", "clients", "--kappa", "2", "--new-clients", "split"])
    assert "''s" not in err and "splits the 6 rows of client 'east' into 2 clients" in err


# ------------------------------------------------------------------------------------------ fuzz
CELL = st.one_of(st.floats(-3, 3, allow_nan=False), st.sampled_from([0.0, 1e-300, 1e30, -1e60, 1e76, 1e200, 1e300]))


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(cells=st.lists(st.tuples(CELL, CELL, CELL), min_size=4, max_size=8), b=st.integers(1, 3),
       sampling=st.sampled_from(["without-replacement", "with-replacement"]), l2=st.sampled_from([0.0, 0.1]),
       rounds=st.sampled_from([None, 0, 3, 10**8]), eta=st.sampled_from(["0.05", "0.5", "3"]))
def test_fuzz_exact_on_regression_files(tmp_path_factory, cells, b, sampling, l2, rounds, eta):
    tmp = tmp_path_factory.mktemp("fuzz")
    rows = [("a" if i % 2 else "b", x1, x2, y) for i, (x1, x2, y) in enumerate(cells)]
    problem = write_problem(tmp, rows, b=b, sampling=sampling, l2=l2)
    argv = ["exact", "--problem", problem, "--eta", eta, "--local-steps", "2", "--json"]
    argv += [] if rounds is None else ["--rounds", str(rounds)]
    code, out, err = run(argv)
    assert "Traceback" not in err
    if code == 0:
        obj = json.loads(out, parse_constant=lambda c: pytest.fail(f"JSON has {c}"))
        sur = obj["surrogate"]
        assert sur.get("mean_error") is None or sur["mean_error"] < 1e6
    else:
        assert code == 2 and out == "" and err.count("\n") == 1, (out, err)


@pytest.mark.parametrize("command", ["validity", "simulate", "compare", "sde"])
def test_a_start_whose_objective_overflows_is_refused_in_one_line(capsys, command):
    argv = [command, "--problem", PAPER, "--eta", "0.1", "--local-steps", "1",
            "--rounds", "2", "--w0", "1e300", "--json"]
    if command in ("simulate", "sde"):
        argv += ["--replicates", "2", "--seed", "0"]
    if command == "sde":
        argv += ["--variant", "corrected", "--h", "0.1"]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--w0" in err and "overflows" in err, err
