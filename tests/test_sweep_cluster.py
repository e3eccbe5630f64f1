"""Sweeps across processes: a real 2-worker Dask LocalCluster, and a sweep killed with SIGKILL then resumed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fedsde.sweep import load, load_spec, run

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = str(ROOT / "examples" / "problems" / "paper_table.toml")


def _results(out: Path) -> dict:
    return {p.stem: json.loads(p.read_text())["result"] for p in (out / "cells").glob("*.json")}


def test_two_workers_bit_identical_to_in_process(tmp_path):
    spec = {"run": {"command": "simulate", "seed": 11},
            "base": {"problem": PROBLEM, "rounds": 10, "replicates": 64},
            "grid": {"eta": [0.02, 0.05, 0.1], "local_steps": [1, 4]}}
    local = run(spec, tmp_path / "local", progress=False)
    dist = run(spec, tmp_path / "dist", workers=2, progress=False)
    assert (local["done"], dist["done"]) == (6, 6)
    pids = {json.loads(p.read_text())["pid"] for p in (tmp_path / "dist" / "cells").glob("*.json")}
    assert os.getpid() not in pids  # the cells really ran in worker processes
    assert _results(tmp_path / "local") == _results(tmp_path / "dist")
    # a sub-grid run in another order gives the same cells bit for bit
    sub = dict(spec, grid={"local_steps": [4], "eta": [0.1, 0.02]})
    run(sub, tmp_path / "sub", progress=False)
    full = _results(tmp_path / "local")
    assert all(full[k] == v for k, v in _results(tmp_path / "sub").items())
    a, b = load(tmp_path / "local"), load(tmp_path / "dist")
    assert a.drop_vars("wall_s").identical(b.drop_vars("wall_s"))
    assert np.array_equal(a.final_cov.values, b.final_cov.values)


def test_sigkill_then_resume_loses_and_reruns_nothing(tmp_path, capsys):
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(f'[run]\ncommand = "simulate"\nseed = 3\n[base]\nproblem = "{PROBLEM}"\nrounds = 150\n'
                         'replicates = 1500\n[grid]\neta = [0.01, 0.02, 0.03, 0.04]\nlocal_steps = [2, 4, 6, 8]\n')
    out = tmp_path / "sw"
    cmd = [sys.executable, "-m", "fedsde.cli", "sweep", str(spec_file), "--out", str(out), "--json"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 600  # three cells take seconds: the deadline only stops a hung sweep
        while len(list((out / "cells").glob("*.json"))) < 3:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "no cell finished within 600 s"  # hang guard
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes()) for p in (out / "cells").glob("*.json")}
    assert 3 <= len(before) < 16
    half = load(out)  # a killed sweep loads, its unfinished cells marked missing
    assert half.attrs["done"] == len(before) and half.attrs["missing"] == 16 - len(before)
    from fedsde.cli import main

    assert main([*cmd[3:], "--resume"]) == 0  # the same command line, resumed in this process
    summary = json.loads(capsys.readouterr().out)
    assert (summary["skipped"], summary["done"], summary["failed"]) == (len(before), 16 - len(before), 0)
    after = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes()) for p in (out / "cells").glob("*.json")}
    assert len(after) == 16 and all(after[name] == stat for name, stat in before.items())  # none lost, none rerun
    assert not list((out / "cells").glob(".*"))
    assert load(out).attrs["done"] == 16
    assert len(list(load_spec(spec_file).cells())) == 16


@pytest.mark.slow
def test_scheduler_address(tmp_path):
    from dask.distributed import LocalCluster

    spec = {"run": {"command": "simulate", "seed": 1}, "base": {"problem": PROBLEM, "rounds": 3, "replicates": 8,
                                                             "local_steps": 2},
            "grid": {"eta": [0.02, 0.05]}}
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        summary = run(spec, tmp_path / "o", scheduler=cluster.scheduler_address, progress=False)
    assert summary["done"] == 2
    run(spec, tmp_path / "l", progress=False)
    assert _results(tmp_path / "o") == _results(tmp_path / "l")


def test_cells_stream_to_warm_workers_a_few_at_a_time(tmp_path, monkeypatch):
    """One cell per worker in flight (the grid is handed over as results come back), on workers that imported the
    numerical layers as they started; the results are those of an in-process run."""
    import fedsde.sweep.execute as execute

    monkeypatch.setattr(execute, "IN_FLIGHT", 1)
    spec = {"run": {"command": "simulate", "seed": 5}, "base": {"problem": PROBLEM, "rounds": 3, "replicates": 8},
            "grid": {"eta": [0.02, 0.05, 0.1], "local_steps": [1, 2]}}
    with execute._client(2, None) as client:  # the LocalCluster that workers=2 starts
        warm = client.run(lambda: all(m in sys.modules for m in ("torch", "fedsde.sim", "fedsde.exact")))
        summary = run(spec, tmp_path / "dist", scheduler=client.scheduler.address, progress=False)
    assert list(warm.values()) == [True, True] and summary["done"] == 6
    run(spec, tmp_path / "local", progress=False)
    assert _results(tmp_path / "dist") == _results(tmp_path / "local")
