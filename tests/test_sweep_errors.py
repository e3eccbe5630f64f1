"""Sweeps: commands and options a cell may not use, --out that cannot be created, clean-up when a run stops
before any cell finished, and the exit status when cells fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedsde.errors import FedsdeInputError
from fedsde.sweep import load, load_spec, run

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = str(ROOT / "examples" / "problems" / "paper_table.toml")


def spec_text(grid: str, base: str = 'local_steps = 2\n') -> str:
    return (f'[run]\ncommand = "simulate"\nseed = 1\n[base]\nproblem = "{PROBLEM}"\nrounds = 3\nreplicates = 8\n'
            f'{base}[grid]\n{grid}\n')


@pytest.mark.parametrize("command", ["reproduce", "sweep", "compare-aggregators", "compare_aggregators", "common"])
def test_commands_that_write_their_own_files_are_refused(command):
    with pytest.raises(FedsdeInputError, match=rf"run.command='{command}': .*; cell commands: .*simulate") as err:
        load_spec({"run": {"command": command, "seed": 1}})
    assert "\n" not in str(err.value) and "reproduce" not in str(err.value).split("cell commands:")[1]


@pytest.mark.parametrize(("command", "key", "value"), [("claims", "figures", "figs"),
                                                      ("scaling", "sweep_out", "x"), ("scaling", "workers", 2)])
def test_options_that_write_outside_the_sweep_are_refused(command, key, value):
    with pytest.raises(FedsdeInputError, match=rf"base.{key}: --{key.replace('_', '-')} .*not allowed in a sweep"):
        load_spec({"run": {"command": command, "seed": 1}, "base": {key: value}})


def test_out_that_cannot_be_created_names_out(tmp_path, capsys):
    from fedsde.cli import main

    spec = tmp_path / "s.toml"
    spec.write_text(spec_text("eta = [0.05]"))
    blocker = tmp_path / "file"
    blocker.write_text("")
    for out in ("/proc/x", str(blocker / "sub")):
        assert main(["sweep", str(spec), "--out", out]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"fedsde sweep: error: --out={out!r}: ") and "\n" not in err and "Errno" not in err
    with pytest.raises(FedsdeInputError, match=r"--out='/proc/x': cannot create the sweep folder there \("):
        run(spec, "/proc/x", progress=False)


def test_nothing_left_behind_when_the_cluster_cannot_be_reached(tmp_path, monkeypatch):
    import fedsde.sweep.execute as execute

    def unreachable(workers, scheduler, plan=None):
        raise FedsdeInputError(f"--scheduler={scheduler!r}: cannot connect (OSError: timed out)")

    monkeypatch.setattr(execute, "_client", unreachable)
    spec = load_spec({"run": {"command": "simulate", "seed": 1},
                      "base": {"problem": PROBLEM, "rounds": 2, "replicates": 4, "local_steps": 1},
                      "grid": {"eta": [0.05]}})
    out = tmp_path / "a" / "b"
    with pytest.raises(FedsdeInputError, match="cannot connect"):
        run(spec, out, scheduler="tcp://127.0.0.1:1", progress=False)
    assert not (tmp_path / "a").exists()  # the folders this run created are gone too
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FedsdeInputError, match="cannot connect"):
        run(spec, empty, scheduler="tcp://127.0.0.1:1", progress=False)
    assert empty.is_dir() and not list(empty.iterdir())  # a folder that existed stays, emptied of what we wrote
    # a sweep with finished cells is never touched
    two = load_spec({**spec.to_dict(), "grid": {"eta": [0.05, 0.1]}})
    run(two, tmp_path / "done", progress=False)
    next((tmp_path / "done" / "cells").glob("*.json")).unlink()
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "done").rglob("*"))
    with pytest.raises(FedsdeInputError, match="cannot connect"):
        run(two, tmp_path / "done", resume=True, scheduler="tcp://127.0.0.1:1", progress=False)
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "done").rglob("*")) == before


def test_failed_cells_are_a_warning_and_strict_makes_them_exit_2(tmp_path, capsys):
    from fedsde.cli import main

    spec = tmp_path / "s.toml"
    spec.write_text(spec_text("eta = [0.05, -1.0]"))  # η = -1 passes the parser, the command rejects it
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--json"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert (summary["done"], summary["failed"]) == (1, 1) and "eta" in summary["failures"][0]["error"]
    assert len(summary["warnings"]) == 1 and summary["warnings"][0].startswith("1 of 2 cells failed")
    assert captured.err.strip().splitlines()[-1].startswith("warning: 1 of 2 cells failed")
    assert list(load(tmp_path / "o").status.values) == ["done", "failed"]
    nolocal = tmp_path / "n.toml"
    nolocal.write_text(spec_text("eta = [0.05]", base=""))  # --local-steps missing: every cell fails
    assert main(["sweep", str(nolocal), "--out", str(tmp_path / "n")]) == 0
    assert "--local-steps: required" in capsys.readouterr().out
    # under --strict the failures make exit status 2 with one line; the cells are stored all the same
    assert main(["sweep", str(spec), "--out", str(tmp_path / "strict"), "--json", "--strict"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "1 of 2 cells failed" in captured.err
    assert list(load(tmp_path / "strict").status.values) == ["done", "failed"]
    ok = tmp_path / "ok.toml"
    ok.write_text(spec_text("eta = [0.05]"))
    assert main(["sweep", str(ok), "--out", str(tmp_path / "ok"), "--json"]) == 0
