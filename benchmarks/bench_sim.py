"""Speed of the vectorised simulator and of the exact stationary law, as ratios measured in one run.

(1) vectorised FedAvg (fedsde.sim.simulate) vs a per-client Python loop (one model per client, as common FL
    frameworks simulate clients) on the same quadratic problem: client-local-steps per second and their ratio;
(2) the simulator vs the floor: generating the same number of Gaussian noise draws alone;
(3) the two other paths of the local loop (fedsde.clients.local): unequal local steps (the stop mask) and a
    non-plain local solver (FedProx's proximal step), in client-local-steps per second;
(4) exact stationary law (d = 50, Q = 100): time at E = 1000 over time at E = 10.

Usage: python benchmarks/bench_sim.py [--threads 1] [--quick] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from fedsde.exact import stationary_law
from fedsde.problems import QuadraticProblem, random_quadratic_problem
from fedsde.sim import simulate


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


if __name__ == "__main__":
    main()
