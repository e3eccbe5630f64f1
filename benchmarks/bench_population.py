"""Time and peak memory of a cross-device run against the population size, at fixed participants: flat in the
population (clients produced on demand, :mod:`fedsde.problems.populations.base`).

For each population size Q (default 10³, 10⁴, 10⁵, 10⁶) a fresh process builds FedProx's synthetic(1, 1) with Q
clients (default sizes; a population produced on demand) and simulates FedAvg with ``--participation`` clients a
round (10), ``--rounds`` (20), ``--replicates`` (8), 20 local steps of batch 10, then evaluates the metrics at every
recorded round (what ``fedsde simulate`` does).  Printed per size: building the population, the simulation, the
metrics (wall seconds), the process's CPU time, its peak resident memory (``ru_maxrss``), the clients produced and
the Python heap's peak during the run (``tracemalloc``; numpy's arrays included, torch's tensors not).  The machine
may be shared: compare CPU times, and the load average printed before and after.  Threads pinned
(``--threads``, default 1).

Usage: python benchmarks/bench_population.py [--sizes 1000,10000,100000,1000000] [--participation 10]
       [--rounds 20] [--replicates 8] [--threads 1]
"""

from __future__ import annotations

import argparse
import os

from _child import run_child

CHILD = r"""
import json, resource, sys, time, tracemalloc
import numpy as np, torch
torch.set_num_threads(int(sys.argv[5]))
from fedsde.problems.metrics import evaluate_metrics
from fedsde.problems.populations.synthetic import synthetic_population_problem
from fedsde.sim import simulate
Q, m, rounds, R = (int(v) for v in sys.argv[1:5])
c0 = time.process_time()
tracemalloc.start()
t = time.perf_counter()
pb = synthetic_population_problem(1.0, 1.0, seed=0, n_clients=Q, batch_size=10)
t_build = time.perf_counter() - t
t = time.perf_counter()
res = simulate(pb, eta=0.01, local_steps=20, rounds=rounds, replicates=R, seed=1, participation=m)
t_sim = time.perf_counter() - t
t = time.perf_counter()
vals = evaluate_metrics(pb, np.swapaxes(res.weights, 0, 1), pb.initial_weights())
t_met = time.perf_counter() - t
heap = tracemalloc.get_traced_memory()[1]
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"Q": Q, "build_s": t_build, "simulate_s": t_sim, "metrics_s": t_met,
                  "cpu_s": time.process_time() - c0, "maxrss_mib": rss,
                  "heap_mib": heap / 2**20, "produced": pb.rows_cache.misses,
                  "final_loss": float(vals["train_loss"][-1].mean())}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--participation", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--replicates", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    print(f"synthetic(1, 1), default sizes; m = {args.participation} a round, {args.rounds} rounds, "
          f"R = {args.replicates}, E = 20, batch 10; torch threads {args.threads}; load before "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'Q':>9} {'build s':>8} {'sim s':>7} {'metrics s':>9} {'CPU s':>7} {'peak RSS MiB':>12} "
          f"{'py heap MiB':>11} {'produced':>8}")
    for Q in (int(v) for v in args.sizes.split(",")):
        r = run_child(CHILD, Q, args.participation, args.rounds, args.replicates, args.threads, threads=args.threads)
        print(f"{Q:>9} {r['build_s']:>8.3f} {r['simulate_s']:>7.2f} {r['metrics_s']:>9.2f} {r['cpu_s']:>7.2f} "
              f"{r['maxrss_mib']:>12.0f} {r['heap_mib']:>11.0f} {r['produced']:>8d}")
    print(f"load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
