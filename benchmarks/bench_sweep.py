"""Sweeps: throughput of a 2-worker Dask LocalCluster vs in-process, and the per-cell scheduling overhead.

(a)  throughput: a 200-cell grid (η × E, 10 × 20) of small ``simulate`` cells on the seed-002 table problem, run
     in-process (``workers=1``) and on a warm LocalCluster of 2 single-threaded worker processes (its scheduler
     address passed as ``scheduler=``, so cluster start-up is timed separately); ratio = in-process wall time /
     cluster wall time, one ratio per repeat (runs alternate, so both see the same machine load);
(b)  per-cell overhead: the same 200 cells made tiny (1 round, 2 replicates); overhead per cell =
     (wall time × workers − Σ the cells' own run time) / cells: what each cell costs beyond running it
     (scheduling, transfer, the parent writing its file; in-process: spec handling and the file write);
(c)  the cold start of ``workers=2`` (LocalCluster start-up and the workers' imports), once;
(d)  CPU seconds (user + system) of the same sweeps: in-process vs the workers plus this process (which runs the
     scheduler and writes the files); ``cpu in-process / (cpu of the 2-worker run / 2)`` is the speed-up two
     otherwise idle cores would give, a figure that other programs' load on the machine does not move much.

torch is pinned to one thread in this process and in every worker.  Ratios and spreads come from one run of this
script; the load average before and after is printed (the machine may be shared).

Usage: ``python benchmarks/bench_sweep.py [--repeats 3] [--rounds 100] [--replicates 1000]``
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

import torch

from fedsde.sweep import run

PROBLEM = str(Path(__file__).resolve().parents[1] / "examples" / "problems" / "paper_table.toml")


def grid_spec(rounds: int, replicates: int, seed: int = 0) -> dict:
    return {"run": {"command": "simulate", "seed": seed},
            "base": {"problem": PROBLEM, "rounds": rounds, "replicates": replicates},
            "grid": {"eta": [round(0.005 * (i + 1), 3) for i in range(10)], "local_steps": list(range(1, 21))}}


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed_sweep(spec: dict, tmp: Path, tag: str, client=None, **kw) -> tuple[float, float, float]:
    """Wall time of one sweep into a fresh folder, the sum of its cells' own run times, and the CPU seconds used
    by this process and (given the client) by the workers."""
    out = tmp / f"{tag}-{time.perf_counter_ns()}"
    cpu0 = cpu_seconds() + (sum(client.run(cpu_seconds).values()) if client else 0.0)
    t0 = time.perf_counter()
    summary = run(spec, out, progress=False, **kw)
    wall = time.perf_counter() - t0
    cpu = cpu_seconds() + (sum(client.run(cpu_seconds).values()) if client else 0.0) - cpu0
    assert summary["done"] == summary["cells"], summary["failures"][:3]
    cells = sum(json.loads(p.read_text())["wall_s"] for p in (out / "cells").glob("*.json"))
    return wall, cells, cpu


def spread(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.3g} (min {min(xs):.3g}, max {max(xs):.3g}, n={len(xs)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--replicates", type=int, default=1000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from dask.distributed import Client, LocalCluster

    print(f"load average before: {os.getloadavg()}; cpus {os.cpu_count()}; torch threads {torch.get_num_threads()}")
    small, tiny = grid_spec(args.rounds, args.replicates), grid_spec(1, 2)
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        t0 = time.perf_counter()
        timed_sweep(tiny, tmp, "cold", workers=2)
        print(f"(c) cold workers=2 (cluster start + imports + 200 tiny cells): {time.perf_counter() - t0:.2f} s")
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                          silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
            addr = cluster.scheduler_address
            timed_sweep(tiny, tmp, "warm", scheduler=addr)  # workers import fedsde and torch
            timed_sweep(tiny, tmp, "warm-local")
            ratios, t_local, t_dist, over_local, over_dist, cpu_ratio = [], [], [], [], [], []
            for _ in range(args.repeats):
                wl, _, cpu_l = timed_sweep(small, tmp, "local")
                wd, _, cpu_d = timed_sweep(small, tmp, "dist", client=client, scheduler=addr)
                ratios.append(wl / wd)
                cpu_ratio.append(cpu_l / (cpu_d / 2))
                t_local.append(wl)
                t_dist.append(wd)
                wl, cl, _ = timed_sweep(tiny, tmp, "tiny-local")
                wd, cd, _ = timed_sweep(tiny, tmp, "tiny-dist", scheduler=addr)
                over_local.append((wl - cl) / 200 * 1e3)
                over_dist.append((wd * 2 - cd) / 200 * 1e3)
    print(f"(a) 200 cells of simulate (rounds {args.rounds}, replicates {args.replicates}):")
    print(f"    in-process wall {spread(t_local)} s;  2 workers wall {spread(t_dist)} s")
    print(f"    throughput 2 workers / in-process: {spread(ratios)}  (target >= 1.7)")
    print(f"(b) per-cell overhead, 2 workers: {spread(over_dist)} ms  (target <= 50 ms);  "
          f"in-process: {spread(over_local)} ms")
    print(f"(d) CPU-bound speed-up on 2 idle cores, cpu in-process / (cpu 2 workers + scheduler / 2): "
          f"{spread(cpu_ratio)}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
