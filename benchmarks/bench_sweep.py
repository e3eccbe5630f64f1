"""Sweeps: throughput of a 2-worker Dask LocalCluster vs in-process, and the per-cell scheduling overhead.

(a)  throughput: a 200-cell grid (η × E, 10 × 20) of small ``simulate`` cells on the seed-002 table problem, run
     in-process (``workers=1``) and on the LocalCluster that ``workers=2`` starts, kept open (its scheduler
     address passed as ``scheduler=``, so cluster start-up is timed separately); ratio = in-process wall time /
     cluster wall time, one ratio per repeat (runs alternate, so both see the same machine load);
(b)  per-cell overhead: the same 200 cells made tiny (1 round, 2 replicates); overhead per cell =
     (wall time × workers − Σ the cells' own run time) / cells: what each cell costs beyond running it
     (scheduling, transfer, the parent writing its file; in-process: spec handling and the file write);
(c)  the cold start of ``workers=2`` (LocalCluster start-up and the workers' imports), once;
(d)  CPU seconds (user + system) of the same sweeps: in-process vs the workers plus this process (which runs the
     scheduler and writes the files); ``cpu in-process / (cpu of the 2-worker run / 2)`` is the speed-up two
     otherwise idle cores would give, a figure that other programs' load on the machine does not move much.

With ``--cli`` (instead of the above), the command line end to end, each run a fresh ``fedsde sweep`` process:

(e)  a 12-cell grid (η × seed, 3 × 4) of ``simulate`` cells of about 1.8 s each (``--cell-replicates``), in-process
     (``--workers 1``) and on ``--workers 2`` (a LocalCluster of warm workers, started and closed by the command),
     runs alternating; wall time of each, the ratio in-process / 2 workers per repeat, the cells' own run times,
     and the CPU seconds of each run (worker processes included) with the speed-up they imply on two idle cores
     (a shared machine that gives each session an equal share of the CPU, as Linux's autogroup scheduling does,
     gives a 2-worker run no more CPU than an in-process one: only the CPU figure is then comparable).
     ``--baseline DIR`` (repeatable) also runs the same with the fedsde source tree at DIR (``PYTHONPATH=DIR``),
     in the same session;

and with ``--startup``, the fixed costs of the command line (each a fresh process, median over ``--repeats``):
(f)  ``fedsde --help``, a parse error (``fedsde simulate --eta abc``) and a tiny command (``fedsde exact`` on the
     seed-002 table problem, ``--json``); ``--baseline DIR`` adds the same for the tree at DIR.

torch is pinned to one thread in this process and in every worker.  Ratios and spreads come from one run of this
script; the load average before and after is printed (the machine may be shared).

Usage: ``python benchmarks/bench_sweep.py [--repeats 3] [--rounds 100] [--replicates 1000]``,
``python benchmarks/bench_sweep.py --cli [--repeats 3] [--cell-replicates 10000] [--baseline DIR]`` or
``python benchmarks/bench_sweep.py --startup [--repeats 7] [--baseline DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from fedsde.sweep import run

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = str(ROOT / "examples" / "problems" / "paper_table.toml")


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


def children_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes of this one, their own children included."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def fedsde_process(argv: list[str], tree: str | None = None, check: bool = True, cpu: list | None = None) -> float:
    """Wall time of ``fedsde ARGV`` in a fresh process (with the source tree ``tree`` first on the path); its CPU
    seconds, worker processes included, are appended to ``cpu``."""
    env = dict(os.environ, OMP_NUM_THREADS="1") | ({"PYTHONPATH": tree} if tree else {})
    cpu0, t0 = children_cpu(), time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "fedsde.cli", *argv], capture_output=True, text=True, env=env,
                         cwd=tree or ROOT)
    wall = time.perf_counter() - t0
    if cpu is not None:
        cpu.append(children_cpu() - cpu0)
    if check and res.returncode != 0:
        raise RuntimeError(f"fedsde {' '.join(argv)}: exit {res.returncode}: {res.stderr[-1000:]}")
    return wall


def cli_section(repeats: int, cell_replicates: int, baselines: list[str]) -> None:
    """(e): a 12-cell ``fedsde sweep`` in-process vs ``--workers 2``, fresh processes, alternating."""
    import tomli_w

    spec = {"run": {"command": "simulate", "seed": 3},
            "base": {"problem": PROBLEM, "rounds": 200, "replicates": cell_replicates, "local_steps": 10},
            "grid": {"eta": [0.01, 0.02, 0.05], "seed": [0, 1, 2, 3]}}
    trees = {"this tree": None} | {f"tree {b}": b for b in baselines}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        (tmp / "spec.toml").write_text(tomli_w.dumps(spec))
        walls: dict = {(t, w): [] for t in trees for w in (1, 2)}
        cpus: dict = {(t, w): [] for t in trees for w in (1, 2)}
        cells: dict = {t: [] for t in trees}
        for r in range(repeats):
            for name, tree in trees.items():
                for workers in (1, 2):
                    out = tmp / f"{r}-{workers}-{len(walls[name, workers])}-{abs(hash(name))}"
                    walls[name, workers].append(fedsde_process(
                        ["sweep", str(tmp / "spec.toml"), "--out", str(out), "--json", "--workers", str(workers)],
                        tree, cpu=cpus[name, workers]))
                    recs = [json.loads(p.read_text()) for p in (out / "cells").glob("*.json")]
                    assert len(recs) == 12 and all(rec["status"] == "done" for rec in recs)
                    cells[name] += [rec["wall_s"] for rec in recs]
    print(f"(e) fedsde sweep, 12 simulate cells (rounds 200, replicates {cell_replicates}, E = 10), fresh processes:")
    for name in trees:
        w1, w2 = walls[name, 1], walls[name, 2]
        print(f"    {name}: cells' own run time {spread(cells[name])} s")
        print(f"      in-process {spread(w1)} s;  --workers 2 {spread(w2)} s")
        print(f"      in-process / 2 workers per repeat: {spread([a / b for a, b in zip(w1, w2, strict=True)])}")
        c1, c2 = cpus[name, 1], cpus[name, 2]
        print(f"      CPU s, in-process {spread(c1)};  --workers 2 (parent and workers) {spread(c2)}")
        print(f"      speed-up on 2 idle cores, cpu in-process / (cpu 2 workers / 2): "
              f"{spread([2 * a / b for a, b in zip(c1, c2, strict=True)])}")


def startup_section(repeats: int, baselines: list[str]) -> None:
    """(f): ``fedsde --help``, a parse error and a tiny command, each a fresh process, median over repeats."""
    cases = {"fedsde --help": (["--help"], True),
             "parse error (simulate --eta abc)": (["simulate", "--eta", "abc"], False),
             "fedsde exact (tiny, --json)": (["exact", "--problem", PROBLEM, "--eta", "0.05", "--local-steps", "5",
                                              "--json"], True)}
    trees = {"this tree": None} | {f"tree {b}": b for b in baselines}
    times: dict = {(t, c): [] for t in trees for c in cases}
    for _ in range(repeats):  # interleaved, so both trees see the same load
        for case, (argv, ok) in cases.items():
            for name, tree in trees.items():
                times[name, case].append(fedsde_process(argv, tree, check=ok))
    print("(f) start-up, fresh processes (s):")
    for case in cases:
        print(f"    {case}: " + ";  ".join(f"{name} {spread(times[name, case])}" for name in trees))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--replicates", type=int, default=1000)
    ap.add_argument("--cli", action="store_true", help="(e): fedsde sweep in-process vs --workers 2, end to end")
    ap.add_argument("--cell-replicates", type=int, default=10000, help="(e): replicates per cell (about 1.8 s)")
    ap.add_argument("--startup", action="store_true", help="(f): fixed costs of the command line")
    ap.add_argument("--baseline", action="append", default=[], metavar="DIR",
                    help="(e), (f): also time the fedsde source tree at DIR (repeatable)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.cli or args.startup:
        print(f"load average before: {os.getloadavg()}; cpus {os.cpu_count()}")
        if args.startup:
            startup_section(args.repeats, args.baseline)
        if args.cli:
            cli_section(args.repeats, args.cell_replicates, args.baseline)
        print(f"load average after: {os.getloadavg()}")
        return
    from fedsde.sweep.execute import _client  # the LocalCluster that workers=2 starts (warm, same environment)

    print(f"load average before: {os.getloadavg()}; cpus {os.cpu_count()}; torch threads {torch.get_num_threads()}")
    small, tiny = grid_spec(args.rounds, args.replicates), grid_spec(1, 2)
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        t0 = time.perf_counter()
        timed_sweep(tiny, tmp, "cold", workers=2)
        print(f"(c) cold workers=2 (cluster start + imports + 200 tiny cells): {time.perf_counter() - t0:.2f} s")
        with _client(2, None) as client:
            addr = client.scheduler.address
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
