"""Time and peak memory of a cross-device run of one's own ``nn.Module`` against the population size, at fixed
participants: flat in the population (:mod:`fedsde.problems.module.population`).

For each population size Q (default 10³, 10⁵, 10⁶) a fresh process builds FedProx's synthetic(1, 1) with Q clients
(default sizes, 60 features, 10 classes; produced on demand) trained by the example MLP
(``examples/models/mlp.py``: 60 → ``--hidden`` (32) → 10, tanh) and simulates FedAvg with ``--participation``
clients a round (10), ``--rounds`` (20), ``--replicates`` (8), 20 local steps of batch 10, then evaluates the metrics
at every recorded round on the population's subsample (what ``fedsde simulate`` does).  Printed per size: building
the problem, the simulation, the metrics (wall seconds), the process's CPU time, its peak resident memory
(``ru_maxrss``) and the clients produced.  The machine may be shared: compare CPU times, and the load average printed
before and after.  Threads pinned (``--threads``, default 1).

Usage: python benchmarks/bench_module_population.py [--sizes 1000,100000,1000000] [--participation 10]
       [--rounds 20] [--replicates 8] [--hidden 32] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from _child import run_child

CHILD = r"""
import importlib.util, json, resource, sys, time
import numpy as np, torch
torch.set_num_threads(int(sys.argv[5]))
from fedsde.problems.metrics import evaluate_metrics
from fedsde.problems.module.population import module_population_problem
from fedsde.problems.populations.synthetic import SyntheticPopulation
from fedsde.sim import simulate
Q, m, rounds, R, _, hidden = (int(v) for v in sys.argv[1:7])
spec = importlib.util.spec_from_file_location("mlp", sys.argv[7])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
c0 = time.process_time()
t = time.perf_counter()
pop = SyntheticPopulation(1.0, 1.0, seed=0, n_clients=Q)
pb = module_population_problem(lambda: mod.MLP(inputs=60, hidden=hidden, outputs=10), pop, batch_size=10)
t_build = time.perf_counter() - t
t = time.perf_counter()
res = simulate(pb, eta=0.01, local_steps=20, rounds=rounds, replicates=R, seed=1, participation=m)
t_sim = time.perf_counter() - t
t = time.perf_counter()
vals = evaluate_metrics(pb, np.swapaxes(res.weights, 0, 1), pb.initial_weights())
t_met = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"Q": Q, "d": pb.d, "build_s": t_build, "simulate_s": t_sim, "metrics_s": t_met,
                  "cpu_s": time.process_time() - c0, "maxrss_mib": rss, "produced": pb.rows_cache.misses,
                  "final_loss": float(vals["train_loss"][-1].mean())}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,100000,1000000")
    ap.add_argument("--participation", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--replicates", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    model = Path(__file__).resolve().parents[1] / "examples" / "models" / "mlp.py"
    print(f"synthetic(1, 1), default sizes; MLP 60-{args.hidden}-10; m = {args.participation} a round, "
          f"{args.rounds} rounds, R = {args.replicates}, E = 20, batch 10; torch threads {args.threads}; load before "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'Q':>9} {'build s':>8} {'sim s':>7} {'metrics s':>9} {'CPU s':>7} {'peak RSS MiB':>12} {'produced':>8} "
          f"{'final loss':>10}")
    for Q in (int(v) for v in args.sizes.split(",")):
        r = run_child(CHILD, Q, args.participation, args.rounds, args.replicates, args.threads, args.hidden, model,
                      threads=args.threads)
        print(f"{Q:>9} {r['build_s']:>8.3f} {r['simulate_s']:>7.2f} {r['metrics_s']:>9.2f} {r['cpu_s']:>7.2f} "
              f"{r['maxrss_mib']:>12.0f} {r['produced']:>8d} {r['final_loss']:>10.4f}")
    print(f"load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
