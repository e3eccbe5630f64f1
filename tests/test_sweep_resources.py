"""Sweep cells that ask for an accelerator run only on Dask workers that declare it (worker resources).

On a CPU machine: a cell on ``cpu:0`` is marked as needing ``GPU`` (the device → resource mapping is patched), so
it runs on the CPU but must be scheduled on the one worker that declares ``GPU=1``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from fedsde.errors import FedsdeInputError
from fedsde.sweep import load_spec, resources, run
from fedsde.sweep.command import command_info
from fedsde.sweep.resources import CellDevices, device_resources, plan_workers

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = str(ROOT / "examples" / "problems" / "paper_table.toml")
BASE = {"problem": PROBLEM, "rounds": 3, "replicates": 8, "local_steps": 2}
ETAS = [0.01, 0.02, 0.03, 0.04, 0.05, 0.06]


def _spec(devices, etas=ETAS) -> dict:
    return {"run": {"command": "simulate", "seed": 3}, "base": BASE, "grid": {"device": devices, "eta": etas}}


def _records(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "cells").glob("*.json"))]


def _fake_gpu(device):
    """``cpu:0`` needs a GPU (it runs on the CPU): the cells that must go to the worker declaring one."""
    return {"GPU": 1} if device == "cpu:0" else {}


@pytest.fixture(scope="module")
def cpu_cluster():
    """A LocalCluster of one worker that declares no resource."""
    from dask.distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster:
        yield cluster


def test_device_to_resource():
    assert device_resources("cuda") == device_resources("cuda:1") == {"GPU": 1}
    assert device_resources("mps") == {"MPS": 1}
    assert device_resources("cpu") == device_resources("cpu:0") == device_resources(None) == {}
    assert device_resources("gpu") == device_resources("CUDA") == {}  # not torch devices: the cell's own error


def test_devices_read_from_the_spec():
    info = command_info("simulate")
    spec = load_spec(_spec(["cpu", "cuda:1"]))
    devices = CellDevices(spec, info)
    assert devices.needs() == {"GPU": "grid.device='cuda:1'"}
    assert [devices.resources(c.coords) for c in spec.cells()][::6] == [{}, {"GPU": 1}]
    base = load_spec({"run": {"command": "simulate", "seed": 1}, "base": {**BASE, "device": "mps"},
                      "zip": {"eta": [0.01, 0.02], "server_lr": [1.0, 0.5]}})
    assert CellDevices(base, info).needs() == {"MPS": "base.device='mps'"}
    zipped = load_spec({"run": {"command": "simulate", "seed": 1}, "base": BASE,
                        "zip": {"pair": {"eta": [0.01, 0.02], "device": ["cpu", "cuda"]}}})
    assert CellDevices(zipped, info).needs() == {"GPU": "zip.pair.device='cuda'"}
    default = load_spec({"run": {"command": "simulate", "seed": 1}, "base": BASE, "grid": {"eta": [0.01]}})
    assert CellDevices(default, info).needs() == {}  # --device defaults to cpu
    exact = load_spec({"run": {"command": "exact"}, "base": {"problem": PROBLEM, "eta": 0.02, "local_steps": 2}})
    assert CellDevices(exact, command_info("exact")).needs() == {}  # a command without --device


def test_plan_one_worker_per_gpu_then_cpu_workers(monkeypatch):
    monkeypatch.setattr(resources, "visible_accelerator", lambda: ("GPU", ["2", "5", "7"]))
    plan = plan_workers(5, None, {"GPU": "grid.device='cuda'"})
    assert [name for name, _ in plan] == ["gpu-0", "gpu-1", "gpu-2", "cpu-0", "cpu-1"]
    assert [o.get("env", {}).get("CUDA_VISIBLE_DEVICES") for _, o in plan] == ["2,5,7", "5,7,2", "7,2,5", None, None]
    assert all(o["resources"] == {"GPU": 1} for _, o in plan[:3]) and plan[3][1] == plan[4][1] == {}
    assert [n for n, _ in plan_workers(2, None, {"GPU": "x"})] == ["gpu-0", "gpu-1"]  # at most --workers
    shared = plan_workers(4, 4, {})  # more GPU workers than GPUs: they take the GPUs in turn
    assert [o["env"]["CUDA_VISIBLE_DEVICES"].split(",")[0] for _, o in shared] == ["2", "5", "7", "2"]
    monkeypatch.setattr(resources, "visible_accelerator", lambda: ("MPS", [""]))
    assert plan_workers(3, None, {"MPS": "x"}) == [("mps-0", {"resources": {"MPS": 1}}), ("cpu-0", {}), ("cpu-1", {})]


def test_plan_refusals(monkeypatch):
    def boom():
        raise AssertionError("the accelerator is looked up only when a cell or --gpu-workers asks for one")

    monkeypatch.setattr(resources, "visible_accelerator", boom)
    assert plan_workers(2, None, {}) == [("cpu-0", {}), ("cpu-1", {})]
    with pytest.raises(FedsdeInputError, match=r"^grid.device='cuda': its cells need a worker that declares the "
                                               r"Dask resource GPU, and none of the --workers=2 workers does "
                                               r"\(--gpu-workers=0 starts none\)"):
        plan_workers(2, 0, {"GPU": "grid.device='cuda'"})
    monkeypatch.setattr(resources, "visible_accelerator", lambda: None)
    with pytest.raises(FedsdeInputError, match=r"\(no CUDA device is visible here\); run in-process"):
        plan_workers(2, None, {"GPU": "grid.device='cuda'"})
    with pytest.raises(FedsdeInputError, match=r"^--gpu-workers=1: no CUDA or MPS device is visible here"):
        plan_workers(2, 1, {})
    monkeypatch.setattr(resources, "visible_accelerator", lambda: ("MPS", [""]))
    with pytest.raises(FedsdeInputError, match=r"Dask resource GPU.*\(no CUDA device is visible here\)"):
        plan_workers(2, None, {"GPU": "base.device='cuda'"})


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"workers": 2, "gpu_workers": -1}, r"--gpu-workers=-1: must be an integer >= 0"),
    ({"workers": 2, "gpu_workers": True}, r"--gpu-workers=True: must be an integer >= 0"),
    ({"workers": 2, "gpu_workers": 3}, r"--gpu-workers=3: must be at most --workers=2"),
    ({"gpu_workers": 1}, r"--gpu-workers=1: must be at most --workers=1, and given with --workers N > 1"),
    ({"scheduler": "tcp://127.0.0.1:1", "gpu_workers": 0}, r"--gpu-workers=0: only with --workers N"),
])
def test_gpu_workers_checked(tmp_path, kwargs, message):
    with pytest.raises(FedsdeInputError, match=message):
        run(_spec(["cpu"], [0.01]), tmp_path / "o", progress=False, **kwargs)
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="refused only on a machine without CUDA")
def test_cuda_cells_without_gpu_workers_refused_before_anything_runs(tmp_path, capsys):
    from fedsde.cli import main

    spec = tmp_path / "spec.toml"
    spec.write_text(f'[run]\ncommand = "simulate"\nseed = 1\n[base]\nproblem = "{PROBLEM}"\nrounds = 3\n'
                    'replicates = 8\nlocal_steps = 2\n[grid]\neta = [0.01, 0.02]\ndevice = ["cpu", "cuda"]\n')
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--workers", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "grid.device='cuda': its cells need a worker that declares the Dask " \
        "resource GPU, and none of the --workers=2 workers does (no CUDA device is visible here)" in err
    assert not (tmp_path / "o").exists()
    # in-process the cell fails with the command's own one-line error, as it always did
    assert main(["sweep", str(spec), "--out", str(tmp_path / "local"), "--json"]) == 0
    failed = [r for r in _records(tmp_path / "local") if r["status"] == "failed"]
    assert len(failed) == 2 and all("device='cuda': not available" in r["error"] for r in failed)


def test_resource_cells_run_only_on_the_resource_worker(tmp_path, monkeypatch, capsys):
    """--workers 2 --gpu-workers 1 on a machine that has no GPU: the worker ``gpu-0`` declares GPU=1 (its
    CUDA_VISIBLE_DEVICES is harmless here); every ``cpu:0`` cell, marked as needing a GPU, runs there."""
    from fedsde.cli import main

    monkeypatch.setattr(resources, "visible_accelerator", lambda: ("GPU", ["0"]))
    monkeypatch.setattr(resources, "device_resources", _fake_gpu)
    spec = tmp_path / "spec.toml"
    spec.write_text(f'[run]\ncommand = "simulate"\nseed = 3\n[base]\nproblem = "{PROBLEM}"\nrounds = 3\n'
                    f'replicates = 8\nlocal_steps = 2\n[grid]\ndevice = ["cpu", "cpu:0"]\neta = {ETAS}\n')
    assert main(["sweep", str(spec), "--out", str(tmp_path / "dist"), "--workers", "2", "--gpu-workers", "1",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["done"], summary["failed"], summary["gpu_workers"]) == (12, 0, 1)
    recs = _records(tmp_path / "dist")
    marked = [r for r in recs if r["coords"]["device"] == "cpu:0"]
    assert len(marked) == 6 and all(r["resources"] == {"GPU": 1} for r in marked)
    assert {r["worker_name"] for r in marked} == {"gpu-0"}  # 6 of 6: 1 chance in 64 if placed at random
    assert len({r["worker"] for r in marked}) == 1
    plain = [r for r in recs if r["coords"]["device"] == "cpu"]
    assert all("resources" not in r for r in plain) and {r["worker_name"] for r in plain} <= {"gpu-0", "cpu-0"}
    # the same cells in-process: bit for bit the same results
    run(str(spec), tmp_path / "local", progress=False)
    local = {r["id"]: r["result"] for r in _records(tmp_path / "local")}
    assert {r["id"]: r["result"] for r in recs} == local


def test_cluster_without_the_resource_refused_up_front(tmp_path, cpu_cluster):
    addr = cpu_cluster.scheduler_address
    with pytest.raises(FedsdeInputError, match=r"^grid.device='cuda': its cells need a worker that declares the "
                                               r"Dask resource GPU, and none of the 1 workers at --scheduler="
                                               rf"{addr} does; start such workers with `dask worker ADDRESS "
                                               r"--nthreads 1 --resources \"GPU=1\"`"):
        run(_spec(["cpu", "cuda"]), tmp_path / "o", scheduler=addr, progress=False)
    assert not (tmp_path / "o").exists()  # nothing left behind
    assert run(_spec(["cpu"], [0.01]), tmp_path / "cpu", scheduler=addr, progress=False)["done"] == 1


def test_cells_waiting_for_a_lost_resource_fail_with_one_line(tmp_path, monkeypatch, cpu_cluster):
    """The resource is there when the sweep starts (the check is told so) and then no worker declares it: the
    cells that wait for it fail after the grace period, the others run."""
    monkeypatch.setattr(resources, "device_resources", _fake_gpu)
    monkeypatch.setattr(resources, "check_cluster", lambda client, needs, where: None)
    monkeypatch.setattr(resources, "GRACE_S", 0.0)
    monkeypatch.setattr(resources, "CHECK_S", 0.0)
    summary = run(_spec(["cpu", "cpu:0"]), tmp_path / "o", scheduler=cpu_cluster.scheduler_address, progress=False)
    assert (summary["done"], summary["failed"]) == (6, 6)
    for rec in _records(tmp_path / "o"):
        if rec["coords"]["device"] == "cpu:0":
            assert rec["status"] == "failed" and rec["resources"] == {"GPU": 1}
            assert rec["error"].startswith("no worker of the cluster has declared the Dask resource GPU that this "
                                           "cell's --device needs for 0 s") and "\n" not in rec["error"]
        else:
            assert rec["status"] == "done"


@pytest.mark.cuda
def test_cuda_cells_on_gpu_workers(tmp_path):
    """On a machine with CUDA: --workers 2 gives (at least) one GPU worker; every cuda cell runs on one."""
    summary = run(_spec(["cpu", "cuda"], [0.01, 0.02]), tmp_path / "o", workers=2, progress=False)
    assert summary["done"] == 4 and summary["gpu_workers"] >= 1
    for rec in _records(tmp_path / "o"):
        if rec["coords"]["device"] == "cuda":
            assert rec["worker_name"].startswith("gpu-") and rec["result"]["config"]["device"].startswith("cuda")


def test_shipped_gpu_example_spec():
    """examples/sweep_gpu.toml, which docs/sweeps.md runs with --gpu-workers: every cell needs a GPU."""
    spec = load_spec(Path(__file__).resolve().parents[1] / "examples" / "sweep_gpu.toml")
    assert spec.n_cells == 4 and CellDevices(spec, command_info("simulate")).needs() == {"GPU": "base.device='cuda'"}
