"""Speed of the vectorised simulator and of the exact stationary law, as ratios measured in one run.

(1) vectorised FedAvg (fedsde.sim.simulate) vs a per-client Python loop (one model per client, as common FL
    frameworks simulate clients) on the same quadratic problem: client-local-steps per second and their ratio;
(2) the simulator vs the floor: generating the same number of Gaussian noise draws alone;
(3) the two other paths of the local loop (fedsde.clients.local): unequal local steps (the stop mask) and a
    non-plain local solver (FedProx's proximal step), in client-local-steps per second;
(4) exact stationary law (d = 50, Q = 100): time at E = 1000 over time at E = 10;
(5) all the cores (``--scaling``, default on a CPU with several): the quadratic simulator of (1) with 1 thread, with
    ``T`` torch intra-op threads on one chunk (``workers=1``: what the simulator did before chunks ran in threads),
    and with ``T`` chunk threads of one intra-op thread each (``workers=T``, :mod:`fedsde.sim.workers`), ``T`` = the
    cores this process may use (``--max-threads``).  Each configuration pins its threads
    (``torch.set_num_threads``) and runs ``--scaling-repeats`` times, interleaved; printed: the thread counts, the
    median, min and max wall time, the CPU time of the process per run, the load average before and after (the
    machine may be shared: a ratio below the core count with CPU time near wall × threads means the cores were
    busy elsewhere), and the speed-up of the median against 1 thread;
(6) the cross-device regime (``--cross-device``): 10⁵ clients, 10 participants per round, 2 rounds, 4 replicates —
    ``simulate`` on a quadratic problem (in this process), and the whole ``fedsde simulate`` command on FedProx's
    synthetic(α, β) with 10⁵ clients (a fresh process: start-up, building the problem, the run and the metrics);
(7) the command line's fixed costs (``--startup``): ``fedsde --help``, a parse error and a tiny command, each a fresh
    process (the timing of ``benchmarks/bench_sweep.py --startup``).

Usage: python benchmarks/bench_sim.py [--threads 1] [--quick] [--device cpu] [--no-scaling] [--max-threads T]
       [--cross-device] [--startup] [--repeats-cli 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch

from fedsde.exact import stationary_law
from fedsde.problems import QuadraticProblem, random_quadratic_problem
from fedsde.sim import runner, simulate


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def per_client_loop(problem: QuadraticProblem, eta: float, E: int, rounds: int, replicates: int, seed: int):
    """Reference: Python loops over replicates and clients, one small tensor per client model."""
    g = torch.Generator().manual_seed(seed)
    U = torch.as_tensor(problem.U)
    L = torch.as_tensor(problem.noise_factors())
    a = torch.as_tensor(problem.a)
    p = problem.p.tolist()
    out = []
    for _ in range(replicates):
        w = torch.zeros(problem.d, dtype=torch.float64)
        for _ in range(rounds):
            new = torch.zeros_like(w)
            for k in range(problem.Q):
                wk = w.clone()
                for _ in range(E):
                    z = torch.randn(problem.d, generator=g, dtype=torch.float64)
                    wk -= eta * (U[k] @ (wk - a[k]) + L[k] @ z)
                new += p[k] * wk
            w = new
        out.append(w)
    return torch.stack(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="fewer rounds and repeats")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-scaling", action="store_true", help="skip (5), threads 1 vs all cores")
    ap.add_argument("--max-threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--scaling-repeats", type=int, default=None, help="runs per configuration (default 5; quick 3)")
    ap.add_argument("--cross-device", action="store_true", help="(6): 10⁵ clients, 10 participants per round")
    ap.add_argument("--startup", action="store_true", help="(7): fixed costs of the command line")
    ap.add_argument("--repeats-cli", type=int, default=5, help="(6), (7): fresh processes per case (default 5)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    Q, d, R, E = 100, 10, 1000, 10
    rounds = 2 if args.quick else 5
    repeats = 2 if args.quick else 3
    eta = 0.01
    pb = random_quadratic_problem(Q, d, seed=0)
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, device={args.device}")
    print(f"problem: Q={Q}, d={d} (full matrices), R={R}, E={E}, rounds={rounds}")

    steps = rounds * E * Q * R
    t_vec = _best(lambda: simulate(pb, eta=eta, local_steps=E, rounds=rounds, replicates=R, seed=1,
                                   record=[rounds], device=args.device), repeats)
    loop_R = 2
    t_loop = _best(lambda: per_client_loop(pb, eta, E, rounds, loop_R, 1), 1)
    loop_rate = rounds * E * Q * loop_R / t_loop

    gen = torch.Generator(device=args.device).manual_seed(0)
    buf = torch.empty((R, Q, d), dtype=torch.float64, device=args.device)

    def floor():
        for _ in range(rounds * E):
            buf.normal_(generator=gen)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    t_floor = _best(floor, repeats)
    vec_rate = steps / t_vec
    print(f"vectorised simulator : {vec_rate:.3e} client-local-steps/s")
    print(f"per-client loop      : {loop_rate:.3e} client-local-steps/s (measured on {loop_R} replicates)")
    print(f"ratio vectorised/loop: {vec_rate / loop_rate:.1f}x   (target >= 30x)")
    print(f"simulator / noise-only floor: {t_vec / t_floor:.2f}x   (target <= 2x)")
    print(f"target >= 1e6 client-local-steps/s: {'met' if vec_rate >= 1e6 else 'NOT met'}")

    hetero = 1 + np.arange(Q) % E  # τ_k ∈ {1..E}: clients stop early by the mask
    t_mask = _best(lambda: simulate(pb, eta=eta, local_steps=hetero, rounds=rounds, replicates=R, seed=1,
                                    record=[rounds], device=args.device), repeats)
    t_prox = _best(lambda: simulate(pb, eta=eta, local_steps=E, rounds=rounds, replicates=R, seed=1, record=[rounds],
                                    aggregator="fedprox", device=args.device), repeats)
    print(f"unequal local steps  : {steps / t_mask:.3e} client-local-steps/s (counting E per client)")
    print(f"FedProx local solver : {steps / t_prox:.3e} client-local-steps/s")

    big = random_quadratic_problem(100, 50, seed=1)

    def stat(E_):
        fresh = QuadraticProblem.from_arrays(big.U, big.a, big.Sigma, big.p)  # no cached eigendecomposition
        stationary_law(fresh, 0.001, E_)

    t10 = statistics.median(_best(lambda: stat(10), 1) for _ in range(repeats))
    t1000 = statistics.median(_best(lambda: stat(1000), 1) for _ in range(repeats))
    print(f"exact stationary law d=50, Q=100: E=10 {t10 * 1e3:.1f} ms, E=1000 {t1000 * 1e3:.1f} ms, "
          f"ratio {t1000 / t10:.2f}   (target <= 3)")
    if not args.no_scaling and args.device == "cpu" and args.max_threads > 1:
        scaling(pb, eta=eta, E=E, R=R, rounds=rounds, T=args.max_threads,
                repeats=args.scaling_repeats or (3 if args.quick else 5))
    torch.set_num_threads(args.threads)
    if args.cross_device:
        cross_device(args.repeats_cli, device=args.device)
    if args.startup:
        from bench_sweep import startup_section  # the same timing as bench_sweep's section (f)

        startup_section(args.repeats_cli, [])


def cross_device(repeats: int, *, device: str = "cpu") -> None:
    """(6): 10⁵ clients, 10 participants, 2 rounds, 4 replicates (see the module docstring)."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    Q = 100_000
    rng = np.random.default_rng(0)
    U = rng.uniform(0.5, 2.0, (Q, 2))  # diagonal clients, d = 2
    big = QuadraticProblem.from_arrays(U, rng.normal(0.0, 1.0, (Q, 2)), np.ones((Q, 2)))
    times = [_best(lambda: simulate(big, eta=0.05, local_steps=2, rounds=2, replicates=4, seed=0, participation=10,
                                    device=device), 1) for _ in range(repeats)]
    print(f"(6) cross-device, quadratic Q={Q}, d=2, m=10, 2 rounds, R=4: simulate {statistics.median(times):.2f} s "
          f"(min {min(times):.2f}, max {max(times):.2f}, {repeats} runs)")
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "synthetic.toml"
        spec.write_text('kind = "classification"\ndataset = "synthetic"\nclients = 100000\nmax_samples = 50\n'
                        'batch_size = 10\nseed = 0\n')
        argv = [sys.executable, "-m", "fedsde.cli", "simulate", "--problem", str(spec), "--eta", "0.05",
                "--local-steps", "2", "--rounds", "2", "--replicates", "4", "--seed", "0", "--participation", "10",
                "--json"]
        walls = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            subprocess.run(argv, check=True, capture_output=True)
            walls.append(time.perf_counter() - t0)
    print(f"    fedsde simulate, synthetic(1, 1) Q={Q} (≤ 50 samples each, d = 610), m=10, 2 rounds, R=4, start-up "
          f"included: {statistics.median(walls):.2f} s (min {min(walls):.2f}, max {max(walls):.2f}; "
          f"load {os.getloadavg()[0]:.2f})")


def scaling(pb: QuadraticProblem, *, eta: float, E: int, R: int, rounds: int, T: int, repeats: int) -> None:
    """(5): 1 thread, T intra-op threads on one chunk, T chunk threads (see the module docstring)."""
    configs = {"1 thread": (1, 1), f"{T} intra-op threads, workers=1": (T, 1), f"workers={T}, 1 thread each": (T, T)}
    steps = rounds * E * pb.Q * R

    chunk_cpu: list[float] = []  # CPU time of every chunk in its own thread (time.thread_time)
    inner = runner.run_chunk

    def timed_chunk(*a, **k):
        c0 = time.thread_time()
        try:
            return inner(*a, **k)
        finally:
            chunk_cpu.append(time.thread_time() - c0)

    def run(threads: int, workers: int) -> tuple[float, float]:
        torch.set_num_threads(threads)
        chunk_cpu.clear()
        t0, c0 = time.perf_counter(), time.process_time()
        simulate(pb, eta=eta, local_steps=E, rounds=rounds, replicates=R, seed=1, record=[rounds], workers=workers)
        return time.perf_counter() - t0, time.process_time() - c0

    runner.run_chunk = timed_chunk
    critical: list[float] = []  # workers=T: serial CPU time + the longest chunk's: its wall time on free cores

    for threads, workers in configs.values():  # warm-up
        run(threads, workers)
    load0 = os.getloadavg()
    wall: dict[str, list[float]] = {k: [] for k in configs}
    cpu: dict[str, list[float]] = {k: [] for k in configs}
    try:
        for _ in range(repeats):  # interleaved: load changes hit every configuration alike
            for key, (threads, workers) in configs.items():
                w, c = run(threads, workers)
                wall[key].append(w)
                cpu[key].append(c)
                if workers > 1:
                    critical.append(c - sum(chunk_cpu) + max(chunk_cpu))
    finally:
        runner.run_chunk = inner
    load1 = os.getloadavg()
    print(f"(5) all the cores: Q={pb.Q}, d={pb.d}, R={R}, E={E}, rounds={rounds}, {repeats} interleaved runs each; "
          f"{T} cores usable; load average {load0[0]:.2f} before, {load1[0]:.2f} after")
    base = statistics.median(wall["1 thread"])
    for key, (threads, workers) in configs.items():
        med = statistics.median(wall[key])
        print(f"  {key:<34s} torch threads {threads}, workers {workers}: wall median {med:.3f} s "
              f"[{min(wall[key]):.3f}, {max(wall[key]):.3f}], CPU {statistics.median(cpu[key]):.3f} s, "
              f"{steps / med:.3e} client-steps/s, speed-up {base / med:.2f}x")
    cpu1 = statistics.median(cpu["1 thread"])
    print(f"  workers={T} on free cores (CPU time of 1 thread / (serial CPU time + longest chunk's CPU time), which no "
          f"other load changes): speed-up {cpu1 / statistics.median(critical):.2f}x "
          f"[{cpu1 / max(critical):.2f}, {cpu1 / min(critical):.2f}]")
    print(f"  target: workers={T} >= 1.6x on 2 cores, >= 6x on 8 (median against 1 thread)")


if __name__ == "__main__":
    main()
