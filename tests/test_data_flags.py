"""The frictions of a data problem on the command line: ``--batch-size`` and ``--l2`` over the file's keys (each
command that takes data problems gives what the file with those keys gives; quadratic clients refuse them in one
line), ``compare`` on a problem without a test set (the metrics it has, and ``--metrics``), and the help texts of
``map`` and ``scaling`` naming module problems."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from fedsde.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAPER = str(ROOT / "examples" / "problems" / "paper_table.toml")
GRUNFELD = str(ROOT / "examples" / "problems" / "grunfeld.toml")
SOFTMAX = str(ROOT / "examples" / "problems" / "digits_softmax.toml")

MODEL = '''
from torch import nn


class TinyMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 3))

    def forward(self, x):
        return self.l(x)
'''


def run(argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def ok(argv) -> dict:
    code, out, err = run([*argv, "--json"])
    assert code == 0, err
    return json.loads(out)


def refused(argv) -> str:
    code, out, err = run(argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and ": error: " in err, (code, out, err)
    return err


@pytest.fixture()
def files(tmp_path):
    (tmp_path / "tiny.py").write_text(MODEL)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((36, 4))
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
    np.savez(tmp_path / "d.npz", x=x, y=y, client=np.arange(36) % 3)  # no test set
    np.savez(tmp_path / "dt.npz", x=x, y=y, client=np.arange(36) % 3, x_test=x[:6], y_test=y[:6])

    def write(name="pb", batch_size=4, l2=0.0, data="d.npz") -> str:
        path = tmp_path / f"{name}.toml"
        path.write_text(f'kind = "module"\nmodel = "tiny.py:TinyMLP"\ndata = "{data}"\nbatch_size = {batch_size}\n'
                        f"l2 = {l2}\n")
        return str(path)

    write.dir = tmp_path
    return write


def _without(record: dict, *keys) -> dict:
    """A JSON record without its wall-clock and file-path entries (which differ between two equal runs)."""
    if isinstance(record, dict):
        return {k: _without(v, *keys) for k, v in record.items() if k not in keys}
    if isinstance(record, list):
        return [_without(v, *keys) for v in record]
    return record


TIMES = ("seconds", "wall_s", "cost_ratio", "timing", "threads", "file", "problem_file", "batching",
         "memory_budget_bytes")  # the free memory when the command started


@pytest.mark.parametrize("argv", [
    ["simulate", "--eta", "0.1", "--local-steps", "2", "--rounds", "2", "--replicates", "3", "--seed", "0"],
    ["validity", "--eta", "0.1", "--local-steps", "1", "--rounds", "1", "--replicates", "2", "--seed", "0"],
    ["sde", "--variant", "general", "--eta", "0.1", "--local-steps", "1", "--rounds", "1", "--paths", "2",
     "--seed", "0"],
    ["scaling", "--eta", "0.1", "--local-steps", "1", "--rounds", "2", "--rule", "batch", "--kappa", "2",
     "--replicates", "2"],
])
def test_the_flags_give_what_the_file_gives(files, argv):
    """``--batch-size 2 --l2 0.3`` on a file of batch 4 and λ = 0 is the run of the file with batch 2 and λ = 0.3."""
    flags = ok([argv[0], "--problem", files(), *argv[1:], "--batch-size", "2", "--l2", "0.3"])
    edited = ok([argv[0], "--problem", files("edited", batch_size=2, l2=0.3), *argv[1:]])
    plain = ok([argv[0], "--problem", files(), *argv[1:]])
    assert _without(flags, *TIMES) == _without(edited, *TIMES)
    assert _without(flags, *TIMES) != _without(plain, *TIMES)


def test_the_flags_reach_least_squares_and_module_files_in_their_records(files):
    rec = ok(["exact", "--problem", GRUNFELD, "--eta", "0.01", "--local-steps", "1", "--rounds", "1", "--batch-size",
              "3", "--l2", "0.5"])
    assert (rec["problem"]["batch_size"], rec["problem"]["l2"]) == (3, 0.5)
    rec = ok(["simulate", "--problem", files(), "--eta", "0.1", "--local-steps", "1", "--rounds", "1",
              "--replicates", "2", "--seed", "0", "--batch-size", "full"])
    assert rec["problem"]["batch_size"] == "full"
    rec = ok(["compare-aggregators", "--problem", files(data="dt.npz"), "--batch-size", "3", "--l2", "0.01",
              "--rounds", "1", "--replicates", "2", "--aggregators", "fedavg", "--out", files.dir / "ca", "--no-plot"])
    assert (rec["config"]["batch_size"], rec["config"]["l2"]) == (3, 0.01)


@pytest.mark.parametrize("command", ["simulate", "sde", "validity", "compare", "exact", "scaling", "map"])
def test_quadratic_clients_refuse_the_flags(command, tmp_path):
    extra = {"simulate": ["--replicates", "2", "--seed", "0"], "sde": ["--paths", "2", "--seed", "0"],
             "validity": ["--seed", "0"], "compare": [], "exact": [], "scaling": ["--rule", "batch", "--kappa", "2"],
             "map": ["--seed", "0", "--out", tmp_path / "m"]}[command]
    err = refused([command, "--problem", PAPER, "--eta", "0.1", "--local-steps", "1", "--rounds", "2", *extra,
                   "--batch-size", "8"])
    assert "--batch-size=8" in err and "quadratic clients" in err, err
    err = refused([command, "--problem", PAPER, "--eta", "0.1", "--local-steps", "1", "--rounds", "2", *extra,
                   "--l2", "0.1"])
    assert "--l2=0.1" in err, err
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize(("flags", "needle"), [
    (["--batch-size", "0"], "--batch-size='0': must be an integer >= 1 or 'full'"),
    (["--batch-size", "half"], "--batch-size='half'"),
    (["--l2", "-1"], "--l2=-1.0: must be a finite number >= 0"),
    (["--l2", "nan"], "--l2=nan"),
    (["--batch-size", "50"], "--batch-size=50: exceeds the 20 rows"),
])
def test_bad_flag_values_are_one_line(flags, needle):
    err = refused(["exact", "--problem", GRUNFELD, "--eta", "0.01", "--local-steps", "1", "--rounds", "1", *flags])
    assert needle in err, err


def test_a_classification_file_refuses_full_batches_naming_the_flag():
    err = refused(["simulate", "--problem", SOFTMAX, "--eta", "0.1", "--local-steps", "1", "--rounds", "1",
                   "--replicates", "2", "--seed", "0", "--batch-size", "full"])
    assert "--batch-size='full': must be an integer >= 1" in err, err


def test_map_cells_read_the_file_with_the_flags(files, monkeypatch):
    """map loads the problem with the flags (κ, checks) and hands them to every cell as validity flags."""
    import fedsde.maps
    from fedsde.cli import cell_commands
    from fedsde.sweep.command import command_info

    seen = {}

    def fake_run_map(problem_file, grid, *, options, problem, **kw):
        seen.update(options=options, batch_size=problem.batch_size, l2=problem.l2)
        raise KeyboardInterrupt  # stop here: the map's own run is tested elsewhere

    monkeypatch.setattr(fedsde.maps, "run_map", fake_run_map)
    code, _, _ = run(["map", "--problem", files(), "--eta", "0.1", "--local-steps", "1", "--rounds", "1",
                      "--replicates", "2", "--seed", "0", "--out", files.dir / "m", "--batch-size", "2", "--l2", "0.3"])
    assert code == 130
    assert seen["options"]["batch_size"] == 2 and seen["options"]["l2"] == 0.3
    assert (seen["batch_size"], seen["l2"]) == (2, 0.3)
    assert {"batch_size", "l2"} <= set(command_info("validity", cell_commands()).options)


# ------------------------------------------------------------------------------------------------ compare
def test_compare_a_problem_without_a_test_set(files, monkeypatch):
    """Was refused with "names=['test_accuracy']: not defined for this problem", an argument never given."""
    import fedsde.validity.general as general

    monkeypatch.setattr(general, "_best_time", lambda fn, arg: 1.0)  # the cost ratios are not under test here
    argv = ["compare", "--problem", files(), "--eta", "0.1", "--local-steps", "1", "--rounds", "1", "--replicates",
            "2", "--ells", "1,2,4", "--mc-substeps", "0"]
    rec = ok(argv)
    assert rec["config"]["metrics"] == ["train_loss"] and set(rec["reference"]) == {"train_loss"}
    rec = ok([*argv, "--metrics", "grad_norm_sq,train_loss"])
    assert set(rec["reference"]) == {"grad_norm_sq", "train_loss"}
    err = refused([*argv, "--metrics", "test_accuracy"])
    assert "--metrics=['test_accuracy']: not defined for this problem (available: train_loss, grad_norm_sq" in err
    err = refused(["compare", "--problem", PAPER, "--eta", "0.1", "--local-steps", "1", "--rounds", "1",
                   "--metrics", "train_loss"])
    assert "--metrics='train_loss'" in err and "exactly" in err


# ------------------------------------------------------------------------------------------------ help
@pytest.mark.parametrize("command", ["map", "scaling"])
def test_help_names_module_problems(command):
    code, out, _ = run([command, "--help"])
    text = " ".join(out.split())
    assert code == 0 and "module" in text and "nn.Module" in text and "--batch-size" in text and "--l2" in text
