"""Progress on stderr: every long command shows its bars there, also under ``--json`` (whose stdout stays exactly
one JSON object), ``--quiet`` silences them, sweep cells never show any, and the metric evaluation has a bar of
its own that does not change a number."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from test_module_cli import _files

from fedsde._progress import ENV, advance, counting, progress_bar, progress_wanted, tracking
from fedsde.cli import main
from fedsde.problems import evaluate_metrics, load_problem


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_wanted_on_a_terminal_unless_quiet_or_switched_off(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert progress_wanted(stream=_Terminal()) and not progress_wanted(stream=io.StringIO())
    assert not progress_wanted(quiet=True, stream=_Terminal())
    monkeypatch.setenv(ENV, "0")
    assert not progress_wanted(stream=_Terminal())
    monkeypatch.setenv(ENV, "1")
    assert progress_wanted(stream=io.StringIO()) and not progress_wanted(quiet=True, stream=io.StringIO())
    monkeypatch.setenv(ENV, "sometimes")  # not a switch: as if unset
    assert not progress_wanted(stream=io.StringIO())


def test_advance_moves_only_the_bar_installed_for_the_block(capsys):
    with progress_bar(10, "outer", enabled=True) as outer:
        advance(3)  # nothing installed
        with counting(4, "inner", enabled=True) as inner:
            advance(1)
            with tracking(None):
                advance(5)  # hidden
            assert inner.n == 1
        assert inner.n == 4 and outer.n == 0  # filled at the end; the outer bar never moved
    err = capsys.readouterr()
    assert err.out == "" and "inner" in err.err and "outer" in err.err


def _run(capsys, argv) -> tuple[dict, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out), err  # stdout is exactly one JSON object


def _bars(err: str) -> list[str]:
    """The descriptions of the bars drawn on stderr (tqdm draws ``desc: …%|``)."""
    return sorted({part.split(":")[0].strip() for part in err.replace("\r", "\n").splitlines() if "%|" in part})


#: command → (its options after --problem FILE --eta 0.1 --local-steps 2 --seed 0 --json, the bars it must draw)
COMMANDS = {
    "simulate": (["--rounds", "2", "--replicates", "3"], {"simulate", "metrics"}),
    "sde": (["--rounds", "2", "--replicates", "3", "--variant", "general", "--integrator", "svag", "--ell", "2"],
            {"sde[svag ℓ=2]"}),  # its metrics are evaluated as the paths pass the recorded rounds
    "validity": (["--rounds", "2", "--replicates", "4", "--ells", "1,2"], {"validity ℓ=2"}),
    "compare": (["--rounds", "1", "--replicates", "2", "--ells", "1,2,3", "--mc-substeps", "1", "--inner-samples",
                 "1"], {"compare", "sde[general]"}),
    "scaling": (["--rounds", "2", "--replicates", "2", "--rule", "local-steps", "--kappa", "2"],
                {"simulate", "metrics"}),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_long_command_shows_progress_on_stderr_also_under_json(command, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(ENV, "1")  # captured stderr is not a terminal
    monkeypatch.setattr("fedsde.validity.general.TIMING_REPEATS", 1)  # compare's cost ratios: one timed run each
    options, bars = COMMANDS[command]
    argv = [command, "--problem", _files(tmp_path), "--eta", "0.1", "--local-steps", "2", "--seed", "0", "--json"]
    _, err = _run(capsys, argv + options)
    assert bars <= set(_bars(err)), _bars(err)


def test_a_sweep_shows_its_cells_and_no_cell_draws_a_bar(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(ENV, "1")
    from fedsde.sweep.store import read_cells

    spec = tmp_path / "sweep.toml"
    spec.write_text(f'[run]\ncommand = "simulate"\nseed = 0\n\n[base]\nproblem = "{_files(tmp_path)}"\n'
                    "local_steps = 2\nrounds = 1\nreplicates = 2\n\n[grid]\neta = [0.05, 0.1]\n")
    sw, err = _run(capsys, ["sweep", str(spec), "--out", str(tmp_path / "sw"), "--json"])
    assert _bars(err) == ["sweep"] and sw["done"] == 2
    cells = read_cells(tmp_path / "sw").values()  # a cell runs with --quiet: no bar in its stored stderr
    assert len(cells) == 2 and not any("%|" in rec.get("stderr", "") for rec in cells)


def test_quiet_silences_the_bars_and_changes_no_number(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(ENV, "1")
    path = _files(tmp_path)
    argv = ["simulate", "--problem", path, "--eta", "0.1", "--local-steps", "2", "--rounds", "2", "--replicates",
            "3", "--seed", "0", "--json"]
    shown, err = _run(capsys, argv)
    quiet, err_quiet = _run(capsys, [*argv, "--quiet"])
    assert _bars(err) and "%|" not in err_quiet and err_quiet == ""
    for out in (shown, quiet):  # the batching choice's timings and the free memory are measurements, not results
        out.pop("batching", None)
        out.pop("resources", None)
        out["config"].pop("batching", None)
    assert shown == quiet  # same call, same shapes: the same numbers (docs/determinism.md)


def test_map_shows_its_kappa_and_report_phases(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(ENV, "1")
    from pathlib import Path

    paper = str(Path(__file__).resolve().parents[1] / "examples" / "problems" / "paper_table.toml")
    _, err = _run(capsys, ["map", "--problem", paper, "--eta", "0.05", "--local-steps", "2", "--rounds", "4",
                           "--seed", "0", "--out", str(tmp_path / "map"), "--json"])
    assert "sweep" in _bars(err) and "map: κ" in err and "map: report" in err


def test_metric_bar_counts_the_weights_and_changes_no_number(tmp_path, capsys):
    pb = load_problem(_files(tmp_path))
    w = pb.initial_weights() + 0.1 * np.random.default_rng(0).standard_normal((3, 2, pb.d))
    plain = evaluate_metrics(pb, w)
    with counting(6, "metrics", enabled=True) as bar, tracking(bar):
        seen = []
        real = bar.update
        bar.update = lambda n=1: (seen.append(n), real(n))[-1]
        shown = evaluate_metrics(pb, w)
    assert sum(seen) == 6  # the module's metric loop ticks once per weight vector
    for name in plain:
        assert np.array_equal(plain[name], shown[name])  # same call, same shapes (docs/determinism.md)
    assert capsys.readouterr().out == ""


def test_an_error_clears_the_bars_before_its_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(ENV, "1")
    import fedsde.problems.metrics as metrics
    from fedsde.errors import FedsdeInputError

    def boom(*args, **kwargs):
        advance(1)
        raise FedsdeInputError("metric evaluation cut short")

    monkeypatch.setattr(metrics, "evaluate_metrics", boom)  # fails inside the metrics bar
    monkeypatch.setattr(metrics, "evaluate_metrics_torch", boom)  # (a module problem's metrics run in torch)
    path = _files(tmp_path)
    code = main(["simulate", "--problem", path, "--eta", "0.1", "--local-steps", "2", "--rounds", "2",
                 "--replicates", "3", "--seed", "0", "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "metrics:" in err
    last = err.rstrip("\n").split("\n")[-1].split("\r")
    assert last[-1] == "fedsde simulate: error: metric evaluation cut short"
    assert set(last[-2]) <= {" "}  # the bar's line was cleared before the message


@pytest.mark.parametrize("dtype", [torch.float64])
def test_simulate_gives_the_metrics_in_one_call_as_the_command_line_does(tmp_path, capsys, dtype):
    from fedsde.sim import simulate

    path = _files(tmp_path)
    pb = load_problem(path)
    res = simulate(pb, eta=0.1, local_steps=2, rounds=2, replicates=3, seed=0, metrics=True, dtype=dtype,
                   record=[0, 1, 2])
    assert set(res.metrics) == {"train_loss", "grad_norm_sq", "test_accuracy", "distance_from_start"}
    assert res.metrics["train_loss"].shape == (3, 3)
    cli, _ = _run(capsys, ["simulate", "--problem", path, "--eta", "0.1", "--local-steps", "2", "--rounds", "2",
                           "--replicates", "3", "--seed", "0", "--json"])
    summary = res.metric_summary()
    for name, v in cli["metrics"].items():
        assert v["mean"] == summary[name]["mean"].tolist() and v["se"] == summary[name]["se"].tolist()
    again = res.evaluate(pb, ["train_loss"])  # a method on the result, as well
    assert np.array_equal(again["train_loss"], res.metrics["train_loss"])
    old = simulate(pb, eta=0.1, local_steps=2, rounds=2, replicates=3, seed=0)  # today's call: no metrics
    assert old.metrics is None and np.array_equal(old.weights, res.weights)
