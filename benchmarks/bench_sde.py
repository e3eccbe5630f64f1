"""Euler–Maruyama of an OU-type FedAvg SDE: fedsde (torchsde + GridBrownian) vs torchsde's default vs a hand loop.

Same SDE (the corrected quadratic FedAvg SDE of a random problem, d = 10, full matrices), 10⁴ paths, 500 steps:

(a)  fedsde: ``torchsde.sdeint(..., method="euler", bm=GridBrownian)`` through
     :func:`fedsde.sde.segments.sdeint_rounds` (float64 draws; also (a32) with ``float32_draws=True``);
(e)  fedsde's integrator, :func:`fedsde.sde.simulate_sde` with ``moments_only=True`` (its Euler loop,
     :func:`fedsde.sde.euler.euler_rounds`, gives (a)'s paths bit for bit without torchsde's per-step machinery;
     chunks of paths in ``--threads`` threads, :mod:`fedsde.sim.workers`);
(b)  torchsde's default Brownian motion: ``torchsde.sdeint(..., method="euler", dt=h)`` (BrownianInterval);
(c)  a hand-written fused loop: ``y ← y(I − A dt)ᵀ + A c dt + (√dt z) bᵀ`` with ``z = torch.randn`` in float64;
(c') the same loop fed with GridBrownian's increments (isolates torchsde's per-step overhead from the RNG).

Also the general SDE (Monte-Carlo coefficients, eq. (2)): cost per step and per stochastic gradient; and the SVAG
chain (``ℓ = 2``, two client rounds per step) with unequal local steps: cost per step.
All ratios come from one run of this script (each timing the best of ``--repeats`` calls, as the machine may be
shared); the thread count is pinned and printed.

Usage: ``python benchmarks/bench_sde.py [--device cuda] [--quick] [--threads 1]``
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
import torchsde

from fedsde.problems import random_quadratic_problem
from fedsde.sde import quadratic_sde_coefficients
from fedsde.sde.brownian import GridBrownian
from fedsde.sde.integrate import simulate_sde
from fedsde.sde.models import FedAvgSDE, QuadraticSDE
from fedsde.sde.segments import sdeint_rounds
from fedsde.sde.svag import svag_chain


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(fn, dev: torch.device, repeats: int = 1) -> tuple[float, torch.Tensor]:
    """Best wall time of ``repeats`` calls (the machine may be shared) and the last result."""
    best = float("inf")
    for _ in range(repeats):
        _sync(dev)
        t0 = time.perf_counter()
        out = fn()
        _sync(dev)
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true", help="2000 paths, 100 steps (smoke run)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--paths", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=None, help="best of this many runs each (default 3; quick 1)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    R = args.paths or (2000 if args.quick else 10_000)
    n = args.steps or (100 if args.quick else 500)
    d = args.d
    dtype = torch.float64
    reps = args.repeats or (1 if args.quick else 3)
    print(f"device={dev}  torch threads={torch.get_num_threads()}  paths={R}  d={d}  steps={n}  dtype=float64  "
          f"best of {reps}")

    problem = random_quadratic_problem(5, d, seed=0)
    # h = 0.01: torchsde 0.2.6's default BrownianInterval runs out of memory for some step sizes (e.g. dt = 0.1 over
    # 100 steps: its interval tree deepens on accumulated-time round-off), so (b) uses one that it handles
    eta, E, s, h = 0.05, 5, 0.05, 0.01
    lin = quadratic_sde_coefficients(problem, eta, E, s, h, "corrected")
    sde = QuadraticSDE(problem, eta, E, s, h, "corrected", device=dev, dtype=dtype)
    y0 = torch.zeros(R, d, dtype=dtype, device=dev)

    def run_a(f32: bool = False):
        bm = GridBrownian(0.0, h, (R, d), seed=1, steps=n, dtype=dtype, device=dev, float32_draws=f32)
        return sdeint_rounds(sde, y0, bm, h=h, rounds=n, record=[n])[-1]

    def run_b():
        ts = torch.tensor([0.0, n * h], dtype=dtype, device=dev)
        return torchsde.sdeint(sde, y0, ts, method="euler", dt=h)[-1]

    kw = {"dtype": dtype, "device": dev}
    T = torch.as_tensor((torch.eye(d, dtype=torch.float64).numpy() - h * lin.A).T.copy(), **kw)
    bias = torch.as_tensor(h * lin.A @ lin.c, **kw)
    Lt = torch.as_tensor((math.sqrt(h) * lin.diffusion_factor()).T.copy(), **kw)
    Lt_unit = torch.as_tensor(lin.diffusion_factor().T.copy(), **kw)

    def run_c():
        g = torch.Generator(device=dev).manual_seed(1)
        y = y0.clone()
        z = torch.empty(R, d, **kw)
        for _ in range(n):
            z.normal_(generator=g)
            y = torch.addmm(bias, y, T).addmm_(z, Lt)
        return y

    def run_c_bm():
        bm = GridBrownian(0.0, h, (R, d), seed=1, steps=n, dtype=dtype, device=dev)
        y = y0.clone()
        for j in range(n):
            y = torch.addmm(bias, y, T).addmm_(bm.increment(j), Lt_unit)
        return y

    def run_e():
        return simulate_sde(problem, eta=eta, local_steps=E, server_lr=s, h=h, rounds=n, replicates=R, seed=1,
                            variant="corrected", device=dev, moments_only=True, record=[n])

    # warm-up (allocator, kernels), then one timed run each
    for fn in (run_a, run_c, run_e):
        fn()
    te, _ = timed(run_e, dev, reps)
    ta, ya = timed(run_a, dev, reps)
    ta32, _ = timed(lambda: run_a(True), dev, reps)
    tc, _ = timed(run_c, dev, reps)
    tcb, yc = timed(run_c_bm, dev, reps)
    try:
        tb, _ = timed(run_b, dev, reps)
    except MemoryError:
        tb = float("nan")
        print("(b) torchsde's default BrownianInterval ran out of memory")
    agree = float((ya - yc).abs().max())
    work = R * d * n
    print(f"(a)   fedsde torchsde+GridBrownian : {ta:8.3f} s  {work / ta:10.3e} path·coord·steps/s")
    print(f"(a32) same, float32 draws          : {ta32:8.3f} s  {work / ta32:10.3e}")
    print(f"(b)   torchsde default (Interval)  : {tb:8.3f} s  {work / tb:10.3e}")
    print(f"(c)   hand loop, torch.randn       : {tc:8.3f} s  {work / tc:10.3e}")
    print(f"(c')  hand loop, GridBrownian      : {tcb:8.3f} s  {work / tcb:10.3e}")
    print(f"(e)   fedsde simulate_sde, moments : {te:8.3f} s  {work / te:10.3e}")
    print(f"(a) and (c') give the same paths: max |Δ| = {agree:.2e}")
    print(f"ratio (b)/(a)   = {tb / ta:6.2f}   (target >= 10)")
    print(f"ratio (b)/(a32) = {tb / ta32:6.2f}")
    print(f"ratio (a)/(c)   = {ta / tc:6.2f}   (target <= 1.5)")
    print(f"ratio (a)/(c')  = {ta / tcb:6.2f}   (torchsde's per-step overhead, same RNG)")
    print(f"ratio (e)/(c)   = {te / tc:6.2f}   (target <= 1.2 on CPU)")

    # general SDE: Monte-Carlo coefficients (Q clients × E local steps × S rollouts per path and step)
    Q, S, Rg, ng = 10, 16, (256 if args.quick else 1024), (3 if args.quick else 10)
    gp = random_quadratic_problem(Q, d, seed=1)
    gen = FedAvgSDE(gp, eta, E, s, h, inner_samples=S, seed=2, device=dev, dtype=dtype)
    yg = torch.zeros(Rg, d, **kw)
    bmg = GridBrownian(0.0, h, (Rg, S), seed=3, steps=ng + 1, dtype=dtype, device=dev)
    sdeint_rounds(gen, yg, bmg, h=h, rounds=1)  # warm-up
    tg, _ = timed(lambda: sdeint_rounds(gen, yg, bmg, h=h, rounds=ng, record=[ng]), dev)
    grads = Rg * S * Q * E
    print(f"general SDE (Q={Q}, E={E}, S={S}, d={d}, {Rg} paths): {tg / ng * 1e3:.2f} ms/step, "
          f"{tg / ng / grads * 1e9:.1f} ns per stochastic gradient ({grads} gradients per step)")

    # SVAG chain: ℓ = 2, local steps 1..E (the stop mask of the local loop)
    steps = 1 + np.arange(Q) % E
    Rs, ns = (1024 if args.quick else 4096), (5 if args.quick else 20)
    ts, _ = timed(lambda: svag_chain(gp, eta=eta, local_steps=steps, rounds=ns, ell=2, replicates=Rs, seed=4,
                                     server_lr=s, h=h, device=dev), dev, reps)
    print(f"SVAG chain (ell=2, Q={Q}, steps 1..{E}, d={d}, {Rs} replicates): {ts / (2 * ns) * 1e3:.2f} ms/step")


if __name__ == "__main__":
    main()
