"""Every GPU figure of fedsde, each measured in one run against its baseline (on ``--device cpu`` too, ratios ≈ 1).

Figures (the keys of ``--json``):

* ``sde_vs_fused`` — :func:`fedsde.sde.simulate_sde` (corrected quadratic SDE, Q = 5, d = 10, Euler–Maruyama,
  moments only; full size 10⁶ paths × 200 steps) against :func:`fused_euler_moments`, a hand-written fused torch
  Euler–Maruyama loop on the same device with the same coefficients (:func:`fedsde.sde.quadratic_sde_coefficients`)
  and the moments reduced on the device. ``ratio`` = fedsde time / fused time (target <= 2 on a GPU, <= 1.2 on CPU);
* ``sde_vs_cpu`` — the same :func:`~fedsde.sde.simulate_sde` call on the device and on the CPU (all cores);
  ``ratio`` = CPU time / device time;
* ``quadratic_sim`` — :func:`fedsde.sim.simulate` on quadratic clients (Q = 100, d = 10, E = 10, R = 10⁵, moments
  only), client-steps/s on the device and on the CPU (fewer rounds there; a rate); ``ratio`` = device / CPU;
* ``data_softmax``, ``data_mlp`` — the simulator on digits (softmax; one-hidden-layer MLP, H = 32), Q = 100 IID
  clients, E = 5, minibatches of 16, R = 1024, in float64 and float32: client-steps/s on the device, on the CPU, and
  of :func:`fused_fedavg_data`, a hand-fused batched torch minibatch-SGD FedAvg loop on the device.
  ``vs_cpu`` = device / CPU rate, ``ratio`` = fused / fedsde rate (target <= 3). Each client holds 13–14 training
  samples, so a minibatch of 16 is the client's whole training set: both runs are deterministic;
* ``validity_cli`` — wall time of ``fedsde validity`` on examples/problems/digits_mlp.toml (a subprocess: start-up
  included) with ``--device`` the device and cpu; ``ratio`` = CPU time / device time (target: device <= 5 s and
  ratio >= 10);
* ``module`` — a user's ``nn.Module`` (``kind = "module"``): the digits MLP of ``examples/models/mlp.py`` (H = 32,
  Q = 100, E = 5, minibatches of 16, R = 4096: several replicate blocks per call on a GPU,
  :func:`fedsde.clients.module_oracle.launch_blocks`; target >= 5·10⁶ client-steps/s) and pytorch/examples' MNIST
  ``Net`` (``examples/models/mnist_net.toml``, d = 53,002, Q = 10, E = 2, R = 64), in float64 and float32:
  client-steps/s on the device, on the CPU (fewer replicates: a rate) and of the per-client ``torch.optim.SGD`` loop
  of ``benchmarks/bench_module.py`` on the device; ``ratio`` = device / loop rate (target for the Net: >= 10 on a
  GPU), ``vs_cpu`` = device / CPU rate, and which path ``batching = "auto"`` chose.

Every hand-fused loop is checked against fedsde's law in the same run and the check is printed (``check``): the two
means agree within 5 standard errors plus a rounding allowance of 10³ machine epsilons of the dtype (relative).
Timing (:func:`race`): one smaller warm-up call each, then the best of ``repeats`` calls (fewer once a time budget
is spent), interleaved with the baseline's, CUDA synchronised around the timer. The CPU thread count is pinned
(``--threads``, default every core this process may use), printed, and handed to the validity subprocesses as
``OMP_NUM_THREADS``. ``--quick`` shrinks every size (a smoke run); ``--only`` runs a subset of the figures.

Usage: python benchmarks/bench_gpu.py [--device cuda|cpu] [--quick] [--json] [--dtype float64|float32] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from fedsde.problems import federated_classification, random_quadratic_problem
from fedsde.sde import quadratic_sde_coefficients, simulate_sde
from fedsde.sim import simulate

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ("sde_vs_fused", "sde_vs_cpu", "quadratic_sim", "data_softmax", "data_mlp", "validity_cli", "module")
#: SDE of the figures: client rate η, local steps E, server step s, time step h (as benchmarks/bench_sde.py)
SDE_ARGS = {"eta": 0.05, "local_steps": 5, "server_lr": 0.05, "h": 0.01}
FULL = {"sde_paths": 10**6, "sde_steps": 200, "quad_replicates": 10**5, "quad_rounds": 5, "quad_cpu_rounds": 1,
        "data_replicates": 1024, "data_rounds": 5,
        "validity": ["--rounds", "10", "--ells", "1,2,4", "--replicates", "128"], "repeats": 3, "budget_s": 20.0,
        "module_mlp_replicates": 4096, "module_net_replicates": 64, "module_rounds": 2, "module_cpu_replicates": 64}
QUICK = {"sde_paths": 10_000, "sde_steps": 40, "quad_replicates": 1000, "quad_rounds": 1, "quad_cpu_rounds": 1,
         "data_replicates": 16, "data_rounds": 1,
         "validity": ["--rounds", "1", "--ells", "1,2", "--replicates", "4"], "repeats": 2, "budget_s": 2.0,
         "module_mlp_replicates": 8, "module_net_replicates": 2, "module_rounds": 1, "module_cpu_replicates": 2}


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def race(runs: dict, *, repeats: int, budget: float) -> dict:
    """Interleaved timing of contestants ``{name: (fn, warmup, device)}``: one call of every ``warmup``, then rounds
    of one call of every ``fn`` still running (CUDA synchronised around each call), so that load changes on a shared
    machine hit all alike. A contestant runs at least once and at most ``repeats`` times, and no more once its calls
    took ``budget`` seconds. Returns ``{name: (best wall time in s, last result)}``."""
    for _, warmup, _ in runs.values():
        warmup()
    times: dict[str, list[float]] = {name: [] for name in runs}
    last = {}
    while active := [k for k, t in times.items() if len(t) < repeats and (not t or sum(t) < budget)]:
        for name in active:
            fn, _, dev = runs[name]
            _sync(dev)
            t0 = time.perf_counter()
            last[name] = fn()
            _sync(dev)
            times[name].append(time.perf_counter() - t0)
    return {name: (min(t), last[name]) for name, t in times.items()}


def agreement(mean_a, var_a, n_a, mean_b, var_b, n_b, dtype: torch.dtype) -> dict:
    """Do two sample means of one law agree: ``|m_a − m_b| <= 5·se + 10³·eps·max|m|`` in every coordinate, with
    ``se² = var_a/n_a + var_b/n_b`` (the rounding term covers deterministic runs, whose se is zero)."""
    diff = np.abs(mean_a - mean_b)
    se = np.sqrt(var_a / n_a + var_b / n_b)
    atol = 1e3 * torch.finfo(dtype).eps * float(max(np.max(np.abs(mean_a)), np.max(np.abs(mean_b))))
    return {"max_abs_diff": float(diff.max()), "max_se": float(se.max()), "rounding_allowance": atol,
            "agree": bool(np.all(diff <= 5.0 * se + atol))}


def _moments(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return w.mean(0), (w.var(0, ddof=1) if w.shape[0] > 1 else np.zeros(w.shape[1]))


# ---------------------------------------------------------------------------------------------- (1), (2): the SDE
def fused_euler_moments(lin, *, paths: int, steps: int, seed: int, device, dtype) -> tuple[np.ndarray, np.ndarray]:
    """Hand-fused Euler–Maruyama of ``dw = −A(w − c)dt + b dB`` (:class:`fedsde.sde.LinearSDE`; seed 002, eq. (2))
    from ``w = 0`` with step ``h``: ``y ← y(I − hA)ᵀ + hAc + √h·z bᵀ``, ``z ~ N(0, I)``, for ``paths`` paths at
    once; mean and variances of the final state (reduced on the device), shape (d,) each."""
    kw = {"dtype": dtype, "device": device}
    d, h = lin.d, lin.h
    step_t = torch.as_tensor((np.eye(d) - h * lin.A).T.copy(), **kw)
    bias = torch.as_tensor(h * lin.A @ lin.c, **kw)
    noise_t = torch.as_tensor((math.sqrt(h) * lin.diffusion_factor()).T.copy(), **kw)
    g = torch.Generator(device=device).manual_seed(seed)
    y = torch.zeros(paths, d, **kw)
    z = torch.empty(paths, d, **kw)
    for _ in range(steps):
        z.normal_(generator=g)
        y = torch.addmm(bias, y, step_t).addmm_(z, noise_t)
    mean, var = y.mean(0), y.var(0)
    return mean.double().cpu().numpy(), var.double().cpu().numpy()


def sde_figures(dev: torch.device, cpu: torch.device, dtype: torch.dtype, size: dict, which: set) -> dict:
    problem = random_quadratic_problem(5, 10, seed=0)
    lin = quadratic_sde_coefficients(problem, SDE_ARGS["eta"], SDE_ARGS["local_steps"], SDE_ARGS["server_lr"],
                                     h=SDE_ARGS["h"], variant="corrected")
    R, n = size["sde_paths"], size["sde_steps"]
    reps = {"repeats": size["repeats"], "budget": size["budget_s"]}

    def fedsde_run(device, paths=R, steps=n):
        return simulate_sde(problem, **SDE_ARGS, rounds=steps, replicates=paths, seed=1, variant="corrected",
                            device=device, dtype=dtype, moments_only=True, record=[steps])

    def small(device):
        return lambda: fedsde_run(device, min(R, 4096), min(n, 10))

    def fused(paths=R, steps=n):
        return fused_euler_moments(lin, paths=paths, steps=steps, seed=2, device=dev, dtype=dtype)

    runs = {"fedsde": (lambda: fedsde_run(dev), small(dev), dev)}
    if "sde_vs_fused" in which:
        runs["fused"] = (fused, lambda: fused(min(R, 4096), min(n, 10)), dev)
    if "sde_vs_cpu" in which:
        runs["cpu"] = (lambda: fedsde_run(cpu), small(cpu), cpu)
    got = race(runs, **reps)
    out, sizes = {}, {"paths": R, "steps": n, "Q": problem.Q, "d": problem.d, **SDE_ARGS}
    t_dev, res = got["fedsde"]
    if "sde_vs_fused" in which:
        t_fused, (m_f, v_f) = got["fused"]
        check = agreement(res.mean()[-1], np.diag(res.cov()[-1]), R, m_f, v_f, R, dtype)
        out["sde_vs_fused"] = {"sizes": sizes, "fedsde_s": t_dev, "baseline": "fused torch Euler-Maruyama loop",
                               "baseline_s": t_fused, "ratio": t_dev / t_fused, "check": check}
    if "sde_vs_cpu" in which:
        t_cpu = got["cpu"][0]
        out["sde_vs_cpu"] = {"sizes": sizes, "device_s": t_dev, "baseline": "simulate_sde on the CPU",
                             "cpu_s": t_cpu, "ratio": t_cpu / t_dev}
    return out


# ---------------------------------------------------------------------------------------------- (3): quadratic sim
def quadratic_figure(dev: torch.device, cpu: torch.device, dtype: torch.dtype, size: dict) -> dict:
    problem = random_quadratic_problem(100, 10, seed=0)
    E, R = 10, size["quad_replicates"]
    reps = {"repeats": size["repeats"], "budget": size["budget_s"]}

    def run(device, rounds, replicates=R):
        return simulate(problem, eta=0.01, local_steps=E, rounds=rounds, replicates=replicates, seed=1,
                        record=[rounds], device=device, dtype=dtype, moments_only=True)

    rounds = {"device": size["quad_rounds"], "cpu": size["quad_cpu_rounds"]}
    got = race({"device": (lambda: run(dev, rounds["device"]), lambda: run(dev, 1, min(R, 1024)), dev),
                "cpu": (lambda: run(cpu, rounds["cpu"]), lambda: run(cpu, 1, min(R, 1024)), cpu)}, **reps)
    rates = {key: rounds[key] * E * problem.Q * R / got[key][0] for key in got}
    return {"sizes": {"Q": problem.Q, "d": problem.d, "local_steps": E, "replicates": R,
                      "rounds": size["quad_rounds"], "cpu_rounds": size["quad_cpu_rounds"]},
            "device_rate": rates["device"], "baseline": "simulate on the CPU", "cpu_rate": rates["cpu"],
            "ratio": rates["device"] / rates["cpu"]}


# ---------------------------------------------------------------------------------------------- (4), (5): data
def fused_fedavg_data(problem, *, eta: float, local_steps: int, rounds: int, replicates: int, seed: int, w0,
                      device, dtype, server_lr: float = 1.0) -> torch.Tensor:
    """Hand-fused FedAvg with minibatch SGD on a softmax or MLP ClassificationProblem: every client and replicate
    in one batched tensor; the final server weights, shape (R, d) (fedsde's parameter layout,
    fedsde.problems.classification.mlp).

    Local step ``x ← x − η(Σ_i m_i ∇ℓ_i(x) + λx)`` with ``m_i = 1/b_k`` on a uniform ``b_k``-subset of client
    ``k``'s rows (``b_k = min(batch_size, N_k)``, drawn without replacement: the ``b_k`` smallest of uniform keys);
    server step ``w ← w + s·Σ_k p_k (x_k − w)`` (seed 002, eq. (1)). Weights are kept per client as ``W`` (Q, F,
    R·K) (softmax) or ``W₁`` (Q, F, R·H) and ``W₂`` (Q, R, H + 1, K) (MLP), so that each pass over the rows is one
    batched matmul ``X_k (N × F) @ (F × R·K)``.
    """
    kw = {"dtype": dtype, "device": device}
    Xp, yp = problem.padded()
    X = torch.as_tensor(Xp, **kw)  # (Q, N, F)
    Xt = X.transpose(1, 2).contiguous()
    Q, N, F = X.shape
    K, H, R = problem.n_outputs, int(problem.hidden or 0) if problem.model == "mlp" else 0, replicates
    Y = torch.nn.functional.one_hot(torch.as_tensor(yp, device=device), K).to(dtype).unsqueeze(2)  # (Q, N, 1, K)
    sizes = torch.as_tensor(problem.sizes, device=device)
    pad = torch.arange(N, device=device) >= sizes[:, None]  # (Q, N)
    b = sizes.clamp(max=problem.batch_size)
    whole = bool((b == sizes).all())  # every minibatch is its client's whole training set: no draws needed
    p = torch.as_tensor(problem.p, **kw)
    g = torch.Generator(device=device).manual_seed(seed)
    w0 = torch.as_tensor(w0, **kw)
    cut = F * (H or K)
    w1 = w0[:cut].view(F, 1, H or K).expand(F, R, H or K).reshape(F, R * (H or K))  # W (softmax) or W₁ (MLP)
    w2 = w0[cut:].view(1, H + 1, K).expand(R, H + 1, K).clone() if H else None

    def weights():  # m_i, shape (Q, N, 1|R, 1)
        if whole:
            return ((~pad).to(dtype) / sizes[:, None].to(dtype))[:, :, None, None]
        keys = torch.rand(Q, N, R, generator=g, **kw).masked_fill(pad[:, :, None], 2.0)
        chosen = keys.argsort(1).argsort(1) < b[:, None, None]
        return (chosen.to(dtype) / b[:, None, None].to(dtype))[..., None]

    def softmax_residual(Z, m):  # (softmax(z) − e_y)·m, shape (Q, N, R, K)
        return (torch.softmax(Z, -1) - Y).mul_(m)

    for _ in range(rounds):
        x1 = w1.expand(Q, *w1.shape).clone()
        x2 = w2.expand(Q, *w2.shape).clone() if H else None
        for _ in range(local_steps):
            m = weights()
            if not H:
                E = softmax_residual(torch.bmm(X, x1).view(Q, N, R, K), m)
                x1.sub_(torch.baddbmm(x1, Xt, E.reshape(Q, N, R * K), beta=problem.l2), alpha=eta)
                continue
            A = torch.tanh(torch.bmm(X, x1)).view(Q, N, R, H)
            E = softmax_residual(torch.einsum("qnrh,qrhk->qnrk", A, x2[:, :, :H]) + x2[:, None, :, H], m)
            g2 = torch.cat([torch.einsum("qnrh,qnrk->qrhk", A, E), E.sum(1)[:, :, None]], dim=2)
            D = torch.einsum("qnrk,qrhk->qnrh", E, x2[:, :, :H]) * (1.0 - A * A)
            x1.sub_(torch.baddbmm(x1, Xt, D.reshape(Q, N, R * H), beta=problem.l2), alpha=eta)
            x2.sub_(g2.add_(x2, alpha=problem.l2), alpha=eta)
        w1 = w1 + server_lr * (torch.einsum("q,q...->...", p, x1) - w1)
        w2 = w2 + server_lr * (torch.einsum("q,q...->...", p, x2) - w2) if H else None
    first = w1.view(F, R, H or K).transpose(0, 1).reshape(R, cut)
    return torch.cat([first, w2.reshape(R, -1)], 1) if H else first


def data_figure(model: str, dev: torch.device, cpu: torch.device, size: dict) -> dict:
    problem = federated_classification("digits", n_clients=100, partition="iid", seed=0).replace(batch_size=16)
    if model == "mlp":
        problem = problem.replace(model="mlp", hidden=32, init_seed=0)
    E, R, rounds = 5, size["data_replicates"], size["data_rounds"]
    w0 = problem.initial_weights()
    steps = rounds * E * problem.Q * R
    reps = {"repeats": size["repeats"], "budget": size["budget_s"]}
    out = {"sizes": {"model": problem.model, "Q": problem.Q, "d": problem.d, "local_steps": E, "batch": 16,
                     "replicates": R, "rounds": rounds, "client_sizes": [int(problem.sizes.min()),
                                                                          int(problem.sizes.max())]}}
    for dtype in (torch.float64, torch.float32):
        def sim(device, replicates=R, dtype=dtype):
            return simulate(problem, eta=0.05, local_steps=E, rounds=rounds, replicates=replicates, seed=1, w0=w0,
                            record=[rounds], device=device, dtype=dtype).weights[-1]

        def fused(replicates=R, dtype=dtype):
            return fused_fedavg_data(problem, eta=0.05, local_steps=E, rounds=rounds, replicates=replicates, seed=2,
                                     w0=w0, device=dev, dtype=dtype)

        got = race({"device": (lambda: sim(dev), lambda: sim(dev, min(R, 16)), dev),
                    "cpu": (lambda: sim(cpu), lambda: sim(cpu, min(R, 16)), cpu),
                    "fused": (fused, lambda: fused(min(R, 16)), dev)}, **reps)
        (t_dev, w_sim), (t_cpu, _), (t_fused, w_fused) = got["device"], got["cpu"], got["fused"]
        w_fused = w_fused.double().cpu().numpy()
        check = agreement(*_moments(w_sim), R, *_moments(w_fused), R, dtype)
        name = str(dtype).replace("torch.", "")
        out[name] = {"device_rate": steps / t_dev, "cpu_rate": steps / t_cpu, "fused_rate": steps / t_fused,
                     "vs_cpu": t_cpu / t_dev, "ratio": t_dev / t_fused, "check": check}
    out["baseline"] = "simulate on the CPU (vs_cpu) and a hand-fused batched minibatch-SGD loop (ratio)"
    return out


# ---------------------------------------------------------------------------------------------- (6): validity CLI
def validity_figure(dev: torch.device, dtype: torch.dtype, threads: int, size: dict) -> dict:
    """Wall time of ``fedsde validity`` in a fresh interpreter (start-up included) on the device and on the CPU."""
    base = [sys.executable, "-m", "fedsde.cli", "validity", "--problem", "examples/problems/digits_mlp.toml",
            "--eta", "0.05", "--local-steps", "2", "--server-lr", "1", *size["validity"], "--final-cov", "none",
            "--seed", "0", "--json", *(["--float32"] if dtype == torch.float32 else [])]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    subprocess.run([sys.executable, "-c", "import torch, fedsde.cli"], cwd=ROOT, env=env, check=True,
                   timeout=600)  # warm the file cache; hang guard
    times = {}
    for key, device in (("device", dev), ("cpu", torch.device("cpu"))):
        cmd = [*base, "--device", str(device)]
        t0 = time.perf_counter()
        res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)  # hang guard
        times[key] = time.perf_counter() - t0
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[2:])} failed (exit {res.returncode}): {res.stderr[-2000:]}")
    return {"command": "fedsde " + " ".join(base[3:]), "device_s": times["device"],
            "baseline": "the same command on the CPU", "cpu_s": times["cpu"], "ratio": times["cpu"] / times["device"]}


# ---------------------------------------------------------------------------------------------- (7): module
def _bench_module():
    """``benchmarks/bench_module.py`` (a file, not a package): its per-client loop and model loader."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_bench_module", ROOT / "benchmarks" / "bench_module.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def module_figure(dev: torch.device, cpu: torch.device, size: dict) -> dict:
    """Client-steps/s of two user modules on the device, on the CPU and of the per-client loop on the device."""
    from fedsde.problems import load_problem, module_problem

    bench = _bench_module()
    base = federated_classification("digits", n_clients=100, partition="iid", seed=0)
    MLP = bench.load_model_class("mlp.py", "MLP")
    mlp = module_problem(lambda: MLP(hidden=32), base.X, base.y, np.repeat(np.arange(base.Q), base.sizes),
                         batch_size=16, l2=1e-4, init_seed=0)
    net = load_problem(ROOT / "examples" / "models" / "mnist_net.toml")
    Net = bench.load_model_class("mnist_net.py", "Net")
    cases = {"mlp": (mlp, lambda: MLP(hidden=32), 5, size["module_mlp_replicates"]),
             "mnist_net": (net, lambda: Net(**net.info["model_options"]), 2, size["module_net_replicates"])}
    out: dict = {"baseline": "the per-client torch.optim.SGD loop on the device (ratio) and simulate on the CPU "
                             "(vs_cpu)"}
    for name, (pb, make, E, R) in cases.items():
        out[name] = {"sizes": {"d": pb.d, "Q": pb.Q, "local_steps": E, "batch": pb.batch_size, "replicates": R,
                               "cpu_replicates": min(R, size["module_cpu_replicates"]),
                               "rounds": size["module_rounds"]}}
        for dtype in (torch.float64, torch.float32):
            out[name][str(dtype).replace("torch.", "")] = _module_case(bench, pb, make, E, R, dev, cpu, dtype, size)
    return out


def _module_case(bench, pb, make, E: int, R: int, dev, cpu, dtype, size: dict) -> dict:
    from fedsde.clients.module_oracle import launch_blocks

    rounds, R_cpu = size["module_rounds"], min(R, size["module_cpu_replicates"])
    w0 = np.asarray(pb.initial_weights())

    def sim(device, replicates):
        return simulate(pb, eta=0.05, local_steps=E, rounds=rounds, replicates=replicates, seed=1, w0=w0,
                        record=[rounds], device=device, dtype=dtype)

    model = make().to(device=dev, dtype=dtype)
    clients = bench._client_tensors(pb.X, pb.y, pb.sizes, str(dev), dtype)
    w0t = torch.as_tensor(w0, dtype=dtype, device=dev)

    def loop():
        return bench.per_client_loop(model, clients, pb.p.tolist(), eta=0.05, local_steps=E, rounds=1, replicates=1,
                                     batch=pb.batch_size, l2=pb.l2, seed=1, w0=w0t)

    got = race({"device": (lambda: sim(dev, R), lambda: sim(dev, min(R, 16)), dev),
                "cpu": (lambda: sim(cpu, R_cpu), lambda: sim(cpu, 2), cpu),
                "loop": (loop, loop, dev)}, repeats=size["repeats"], budget=size["budget_s"])
    steps = rounds * E * pb.Q
    rate = {"device": steps * R / got["device"][0], "cpu": steps * R_cpu / got["cpu"][0],
            "loop": E * pb.Q / got["loop"][0]}
    return {"device_rate": rate["device"], "cpu_rate": rate["cpu"], "loop_rate": rate["loop"],
            "ratio": rate["device"] / rate["loop"], "vs_cpu": rate["device"] / rate["cpu"],
            "batching": got["device"][1].config["batching"]["used"],
            "launch_blocks": launch_blocks(pb, pb.Q, min(R, 128), dev, dtype)}


# ---------------------------------------------------------------------------------------------- report
def device_name(dev: torch.device) -> str:
    """``torch.cuda.get_device_name`` or the CPU model of /proc/cpuinfo."""
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _print(report: dict) -> None:
    print(f"device {report['device']}  torch {report['torch']}  {report['dtype']}  CPU threads {report['threads']}"
          f"  {'quick' if report['quick'] else 'full sizes'}")
    if "sde_vs_fused" in report:
        f = report["sde_vs_fused"]
        c = f["check"]
        print(f"(1) SDE {f['sizes']['paths']} paths x {f['sizes']['steps']} steps: fedsde {f['fedsde_s']:.3f} s, "
              f"fused loop {f['baseline_s']:.3f} s, ratio {f['ratio']:.2f} (target <= 2 on a GPU, <= 1.2 on CPU); "
              f"means {'agree' if c['agree'] else 'DISAGREE'} (max |diff| {c['max_abs_diff']:.2e}, "
              f"se {c['max_se']:.2e})")
    if "sde_vs_cpu" in report:
        f = report["sde_vs_cpu"]
        print(f"(2) SDE on the device {f['device_s']:.3f} s, on the CPU {f['cpu_s']:.3f} s: {f['ratio']:.2f}x")
    if "quadratic_sim" in report:
        f = report["quadratic_sim"]
        print(f"(3) quadratic simulator R={f['sizes']['replicates']}: device {f['device_rate']:.3e}, CPU "
              f"{f['cpu_rate']:.3e} client-steps/s: {f['ratio']:.2f}x")
    for i, key in ((4, "data_softmax"), (5, "data_mlp")):
        if key in report:
            f = report[key]
            for dt in ("float64", "float32"):
                r, c = f[dt], f[dt]["check"]
                print(f"({i}) {key} {dt} R={f['sizes']['replicates']}: device {r['device_rate']:.3e}, CPU "
                      f"{r['cpu_rate']:.3e}, fused {r['fused_rate']:.3e} client-steps/s; device/CPU "
                      f"{r['vs_cpu']:.2f}x, fedsde/fused time {r['ratio']:.2f} (target <= 3); final means "
                      f"{'agree' if c['agree'] else 'DISAGREE'} (max |diff| {c['max_abs_diff']:.2e})")
    if "validity_cli" in report:
        f = report["validity_cli"]
        print(f"(6) {f['command']}: device {f['device_s']:.2f} s, CPU {f['cpu_s']:.2f} s, CPU/device "
              f"{f['ratio']:.2f}x (target: device <= 5 s, >= 10x)")
    if "module" in report:
        for name, target in (("mlp", "device >= 5e6 client-steps/s"), ("mnist_net", "ratio >= 10 on a GPU")):
            f = report["module"][name]
            for dt in ("float64", "float32"):
                r = f[dt]
                print(f"(7) module {name} {dt} d={f['sizes']['d']} R={f['sizes']['replicates']}: device "
                      f"{r['device_rate']:.3e}, CPU {r['cpu_rate']:.3e}, per-client loop {r['loop_rate']:.3e} "
                      f"client-steps/s; device/loop {r['ratio']:.2f}x, device/CPU {r['vs_cpu']:.2f}x ({r['batching']}, "
                      f"{r['launch_blocks']} block(s) per call; target: {target})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cuda", "cpu"))
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--json", action="store_true", help="print exactly one JSON object")
    ap.add_argument("--dtype", default="float64", choices=("float64", "float32"),
                    help="precision of the SDE, quadratic and validity figures (data figures run both)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="CPU threads (default all)")
    ap.add_argument("--only", default=",".join(FIGURES), help=f"comma-separated subset of {', '.join(FIGURES)}")
    args = ap.parse_args(argv)
    which = set(args.only.split(","))
    if not which <= set(FIGURES) or args.threads < 1:
        ap.error(f"--only must name some of {', '.join(FIGURES)} and --threads must be >= 1")
    torch.set_num_threads(args.threads)
    dev, cpu = torch.device(args.device), torch.device("cpu")
    dtype = getattr(torch, args.dtype)
    size = QUICK if args.quick else FULL
    report = {"device": device_name(dev), "torch": torch.__version__, "dtype": args.dtype,
              "threads": torch.get_num_threads(), "quick": bool(args.quick)}
    if which & {"sde_vs_fused", "sde_vs_cpu"}:
        report |= sde_figures(dev, cpu, dtype, size, which)
    if "quadratic_sim" in which:
        report["quadratic_sim"] = quadratic_figure(dev, cpu, dtype, size)
    for key, model in (("data_softmax", "softmax"), ("data_mlp", "mlp")):
        if key in which:
            report[key] = data_figure(model, dev, cpu, size)
    if "validity_cli" in which:
        report["validity_cli"] = validity_figure(dev, dtype, args.threads, size)
    if "module" in which:
        report["module"] = module_figure(dev, cpu, size)
    if args.json:
        print(json.dumps(report))
    else:
        _print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
