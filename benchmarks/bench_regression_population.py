"""Load time, simulation time and peak memory of a least-squares population read from a CSV file, against the
number of clients, at fixed participants (:mod:`fedsde.problems.regression.population`), beside the materialised
problem where it fits.

For each client count Q (default 10³, 10⁴, 10⁵, 10⁶) the parent writes a CSV file (in the system's temporary
folder, removed after) of Q clients with LogNormal row counts (median 4, at least 2; about 5 rows a client), 3
features and a target, the rows of all clients shuffled; then a fresh process per size and path loads the problem
file (``population = true``: read by participants, or the materialised problem from the same file), simulates FedAvg
with ``--participation`` clients a round (10), ``--rounds`` (20), ``--replicates`` (8), 5 local steps of batch 2
without replacement, and evaluates the metrics at every recorded round (what ``fedsde simulate`` does).  Printed per
size: load, simulation and metrics (wall seconds), the process's CPU time, its peak resident memory
(``ru_maxrss``; the store's pages read through the memory map count while they are mapped), the store's size on
disk, and the ratios to the smallest size of the same path.  The machine may be shared: the load average is printed
before and after.  Threads pinned (``--threads``, default 1).

Usage: python benchmarks/bench_regression_population.py [--sizes 1000,10000,100000,1000000] [--participation 10]
       [--rounds 20] [--replicates 8] [--threads 1] [--materialised-up-to 100000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
from _child import run_child

CHILD = r"""
import json, resource, sys, time
import numpy as np, torch
torch.set_num_threads(int(sys.argv[6]))
from fedsde.problems import load_problem
from fedsde.problems.metrics import evaluate_metrics
from fedsde.sim import simulate
path, population, m, rounds, R = sys.argv[1], sys.argv[2] == "1", *(int(v) for v in sys.argv[3:6])
c0 = time.process_time()
t = time.perf_counter()
pb = load_problem(path, population=population)
t_load = time.perf_counter() - t
t = time.perf_counter()
res = simulate(pb, eta=0.05, local_steps=5, rounds=rounds, replicates=R, seed=1, participation=m)
t_sim = time.perf_counter() - t
t = time.perf_counter()
vals = evaluate_metrics(pb, np.swapaxes(res.weights, 0, 1), pb.initial_weights())
t_met = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
store = getattr(getattr(pb, "store", None), "disk_bytes", 0)
print(json.dumps({"N": int(np.sum(pb.sizes)), "load_s": t_load, "simulate_s": t_sim, "metrics_s": t_met,
                  "cpu_s": time.process_time() - c0, "maxrss_mib": rss, "store_mib": store / 2**20,
                  "final_loss": float(vals["train_loss"][-1].mean()), "final_w": res.weights[-1].tolist()}))
"""


def write_csv(path: Path, Q: int, seed: int = 0) -> int:
    """Q clients of LogNormal row counts (median 4, at least 2), 3 features, a linear target with noise; rows
    shuffled.  Returns the number of rows."""
    rng = np.random.default_rng(seed)
    sizes = np.maximum(2, np.round(rng.lognormal(np.log(4.0), 0.6, Q))).astype(np.int64)
    client = np.repeat(np.arange(Q), sizes)[rng.permutation(int(sizes.sum()))]
    X = rng.normal(size=(client.size, 3)) + rng.normal(size=(Q, 3))[client]
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.3 * rng.normal(size=client.size)
    with open(path, "w") as fh:
        fh.write("site,x1,x2,x3,y\n")
        for a in range(0, client.size, 1 << 18):
            b = min(a + (1 << 18), client.size)
            cols = [np.char.add("c", client[a:b].astype(str))] + [np.char.mod("%.6g", v) for v in
                                                                  (*X[a:b].T, y[a:b])]
            fh.write("\n".join(",".join(r) for r in zip(*cols, strict=True)) + "\n")
    return int(client.size)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--participation", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--replicates", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--materialised-up-to", type=int, default=100_000, metavar="Q",
                    help="also run the materialised problem for client counts up to this (default 100000)")
    args = ap.parse_args()
    print(f"CSV of Q clients, ~5 rows each, 3 features; m = {args.participation} a round, {args.rounds} rounds, "
          f"R = {args.replicates}, 5 local steps of batch 2; torch threads {args.threads}; load before "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'Q':>9} {'rows':>9} {'path':>12} {'load s':>7} {'sim s':>7} {'metrics s':>9} {'CPU s':>7} "
          f"{'peak RSS MiB':>12} {'store MiB':>9} {'load ×':>7} {'sim ×':>6} {'RSS ×':>6}")
    first: dict[str, dict] = {}
    finals: dict[int, list] = {}
    with tempfile.TemporaryDirectory(prefix="fedsde-bench-") as tmp:
        for Q in (int(v) for v in args.sizes.split(",")):
            csv = Path(tmp) / f"q{Q}.csv"
            N = write_csv(csv, Q)
            for population in (True, False):
                if not population and Q > args.materialised_up_to:
                    continue
                toml = Path(tmp) / f"q{Q}.toml"
                toml.write_text(f'kind = "regression"\ndata = "{csv.name}"\nfeatures = ["x1", "x2", "x3"]\n'
                                f'target = "y"\nclient_column = "site"\nbatch_size = 2\nl2 = 0.01\n'
                                f'population = true\n')
                r = run_child(CHILD, toml, int(population), args.participation, args.rounds, args.replicates,
                              args.threads, threads=args.threads)
                path = "on demand" if population else "materialised"
                base = first.setdefault(path, r)
                finals.setdefault(Q, []).append(r.pop("final_w"))
                print(f"{Q:>9} {N:>9} {path:>12} {r['load_s']:>7.2f} {r['simulate_s']:>7.2f} {r['metrics_s']:>9.2f} "
                      f"{r['cpu_s']:>7.2f} {r['maxrss_mib']:>12.0f} {r['store_mib']:>9.1f} "
                      f"{r['load_s'] / base['load_s']:>7.1f} {r['simulate_s'] / base['simulate_s']:>6.2f} "
                      f"{r['maxrss_mib'] / base['maxrss_mib']:>6.2f}", flush=True)
            csv.unlink()
    same = [Q for Q, w in finals.items() if len(w) == 2]
    print(f"final weights equal bit for bit (on demand vs materialised) for Q in {same}: "
          f"{all(np.array_equal(*finals[Q]) for Q in same)}")
    print(f"load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
