"""A sweep whose cells ask for CUDA, every cell finished (on a GPU machine), resumed on a machine without one:
nothing is left to run, so nothing needs a GPU and the resume succeeds (in-process, with --workers N, and from
the command line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedsde.errors import FedsdeInputError
from fedsde.sweep import execute, run

PROBLEM = str(Path(__file__).resolve().parents[1] / "examples" / "problems" / "paper_table.toml")


def small_spec(**grid) -> dict:
    return {"run": {"command": "simulate", "seed": 7}, "base": {"problem": PROBLEM, "rounds": 5, "replicates": 50},
            "grid": grid}


def _finished_on_a_gpu(tmp_path, monkeypatch):
    """A sweep folder whose cells (``--device cuda``) all finished: the cells' outcome as a GPU machine stores it."""
    spec = small_spec(eta=[0.01, 0.05])
    spec["base"]["device"] = "cuda"
    out = tmp_path / "sw"
    with monkeypatch.context() as mp:
        mp.setattr(execute, "run_cell", lambda command, argv, commands=None: {
            "status": "done", "result": {"final": {"mean": [0.5], "cov": [[0.1]], "round": 5}}, "wall_s": 0.0})
        summary = run(spec, out, progress=False)
    assert summary["done"] == 2
    return spec, out


@pytest.mark.parametrize("workers", [1, 2])
def test_resume_of_finished_cuda_cells_needs_no_gpu(tmp_path, monkeypatch, workers):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)  # this machine: no GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec, out = _finished_on_a_gpu(tmp_path, monkeypatch)
    summary = run(spec, out, resume=True, workers=workers, progress=False)
    assert (summary["skipped"], summary["done"], summary["failed"]) == (2, 0, 0)
    # a fresh sweep of the same cells is still refused up front with --workers N (its cells need a GPU)
    if workers > 1:
        with pytest.raises(FedsdeInputError, match="need a worker that declares the Dask resource GPU"):
            run(spec, tmp_path / "fresh", workers=workers, progress=False)
        assert not (tmp_path / "fresh").exists()


def test_cli_resume_of_finished_cuda_cells(tmp_path, monkeypatch, capsys):
    import tomli_w
    import torch

    from fedsde.cli import main

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec, out = _finished_on_a_gpu(tmp_path, monkeypatch)
    path = tmp_path / "spec.toml"
    path.write_text(tomli_w.dumps(spec))
    assert main(["sweep", str(path), "--out", str(out), "--resume", "--workers", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["skipped"], summary["done"]) == (2, 0)
