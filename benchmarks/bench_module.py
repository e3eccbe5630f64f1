"""Speed of a user's ``nn.Module`` in fedsde (``kind = "module"``: one batched ``torch.func`` pass over replicates ×
clients) against the built-in model of the same shape and against the per-client loop of FL frameworks, as ratios
measured in one run.

Problem: a one-hidden-layer tanh MLP (H = 32, d = 2410) on scikit-learn's digits, Q = 100 IID clients (13–14
training samples each), E = 5 local steps, minibatches of 16 (the client's whole training set), float64.

* (a) the MLP as a user module (``examples/models/mlp.py`` through :func:`fedsde.problems.module_problem`) against
  fedsde's built-in MLP (``model = "mlp"``, hand-written batched passes), same data, same shape, R = 16: the price
  of generality (goal: at most 2× slower on the CPU);
* (b) the same module problem against the per-client loop of FL frameworks (:func:`per_client_loop`: Python loops
  over replicates, rounds and clients, the module loaded with the server weights, ``torch.optim.SGD`` steps with
  ``weight_decay = l2``, the weights averaged), R = 16 (goal: at least 5× on the CPU); (a) and (b) in float64 and
  float32, ratios of wall time and of the thread's CPU time;
* (c) with ``--device cuda``: client-steps/s of the module MLP at R = 128 and 1024 replicates, the ratio to the
  per-client loop on the same device, and the same for the digits CNN (``examples/models/digits_cnn.py``, 1×8×8
  images, GroupNorm, dropout).  Skipped on the CPU.
* (d) pytorch/examples' MNIST ``Net`` (``examples/models/mnist_net.toml``: two convolutions, dropout, d = 53,002,
  Q = 10 clients split by Dirichlet(0.3), minibatches of 16 without replacement), R = 8, E = 2, float32 and
  float64: fedsde with ``batching = "auto"`` (the choice timed on its first step, then kept: the warm-up run
  decides), ``"vmap"`` and ``"loop"`` against the per-client ``torch.optim.SGD`` loop (goal: auto >= 1x the loop's
  client-steps/s); and the share of a ``fedsde simulate`` run (the recorded rounds' metrics on the subsample that
  the command's budget picks, :func:`fedsde.problems.module.metrics.metric_budget`) spent in its metrics (goal <=
  1/4).  Ratios of wall time and of the thread's CPU time (one thread: the CPU time leaves out the other processes
  of a shared machine).

Every contestant runs ``--repeats`` times, interleaved (load changes hit all alike); ratios are formed within each
repeat and reported as the median with the [min, max] spread.  The loop's rate does not depend on R: it runs one
replicate at a time (it is timed on ``loop_R`` replicates and fewer rounds).

(c) also takes ``--float32`` (the simulation in float32; the loop keeps float64) and ``--cuda-only`` (skip (a), (b)).

Usage: python benchmarks/bench_module.py [--threads 1] [--quick] [--device cpu] [--repeats 5] [--float32] [--cuda-only]
       [--only mlp,conv]
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import statistics
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def load_model_class(file: str, name: str):
    """``NAME`` of ``examples/models/FILE`` (the examples are files, not a package)."""
    spec = importlib.util.spec_from_file_location(f"_bench_{Path(file).stem}", ROOT / "examples" / "models" / file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def per_client_loop(model: torch.nn.Module, clients, p, *, eta: float, local_steps: int, rounds: int,
                    replicates: int, batch: int | None, l2: float, seed: int, server_lr: float = 1.0,
                    w0: torch.Tensor | None = None) -> torch.Tensor:
    """FedAvg the way FL frameworks train clients: one after the other, each a module with the server weights and
    ``torch.optim.SGD(lr=η, weight_decay=l2)``, cross-entropy averaged over a minibatch drawn with ``randperm``
    (``batch=None``: the client's whole data, in order).  Final server weights, shape ``(replicates, d)``.

    ``clients`` is a list of ``(x_k, y_k)`` tensors on the model's device and dtype, ``p`` the client weights;
    server step ``w ← w + s·Σ_k p_k (w_k − w)``.
    """
    vec = torch.nn.utils.parameters_to_vector
    g = torch.Generator(device="cpu").manual_seed(seed)
    start = vec(model.parameters()).detach().clone() if w0 is None else w0
    out = []
    for _ in range(replicates):
        w = start.clone()
        for _ in range(rounds):
            delta = torch.zeros_like(w)
            for pk, (xk, yk) in zip(p, clients, strict=True):
                torch.nn.utils.vector_to_parameters(w.clone(), model.parameters())  # views of its argument
                model.train()
                opt = torch.optim.SGD(model.parameters(), lr=eta, weight_decay=l2)
                n = len(yk)
                for _ in range(local_steps):
                    if batch is None:
                        xb, yb = xk, yk
                    else:
                        idx = torch.randperm(n, generator=g)[:min(batch, n)].to(yk.device)
                        xb, yb = xk[idx], yk[idx]
                    opt.zero_grad(set_to_none=True)
                    torch.nn.functional.cross_entropy(model(xb), yb).backward()
                    opt.step()
                delta += pk * (vec(model.parameters()).detach() - w)
            w = w + server_lr * delta
        out.append(w)
    return torch.stack(out)


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def race_cpu(runs: dict, repeats: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall seconds and the calling thread's CPU seconds of every contestant in each of ``repeats`` interleaved
    rounds (one warm-up round first)."""
    for fn in runs.values():
        fn()
    wall, cpu = {k: [] for k in runs}, {k: [] for k in runs}
    for _ in range(repeats):
        for k, fn in runs.items():
            t0, c0 = time.perf_counter(), time.thread_time()
            fn()
            wall[k].append(time.perf_counter() - t0)
            cpu[k].append(time.thread_time() - c0)
    return wall, cpu


def race(runs: dict, repeats: int) -> dict[str, list[float]]:
    """Seconds of every contestant in each of ``repeats`` interleaved rounds (one warm-up round first)."""
    for fn in runs.values():
        fn()
    times = {k: [] for k in runs}
    for _ in range(repeats):
        for k, fn in runs.items():
            times[k].append(_timed(fn))
    return times


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):7.3g}x  [{min(values):.3g}, {max(values):.3g}]"


def digits_problems(Q: int, hidden: int, batch: int, l2: float):
    """The digits MLP twice on the same clients: fedsde's built-in model and ``examples/models/mlp.py`` as a user
    module; and the clients' data as tensors for the loop."""
    from fedsde.problems import federated_classification, module_problem

    base = federated_classification("digits", n_clients=Q, partition="iid", seed=0)
    builtin = base.replace(model="mlp", hidden=hidden, init_seed=0, batch_size=batch, l2=l2)
    MLP = load_model_class("mlp.py", "MLP")
    client = np.repeat(np.arange(base.Q), base.sizes)
    module = module_problem(lambda: MLP(hidden=hidden), x=base.X, y=base.y, client=client, x_test=base.X_test,
                            y_test=base.y_test, loss="cross-entropy", batch_size=batch, l2=l2, init_seed=0)
    return builtin, module, MLP(hidden=hidden)


def _client_tensors(X: np.ndarray, y: np.ndarray, sizes, device: str, dtype=torch.float64):
    cuts = np.cumsum(sizes)[:-1]
    return [(torch.as_tensor(x, dtype=dtype, device=device), torch.as_tensor(t, device=device))
            for x, t in zip(np.split(X, cuts), np.split(y, cuts), strict=True)]


def conv_net(args) -> dict:
    """(d): the MNIST ``Net`` in fedsde (auto, vmap, loop) against the per-client loop, and the metrics' share of a
    simulate run, in float32 and float64; printed, and returned as ``{dtype: {"wall": {...}, "cpu": {...}, "used",
    "metric_samples", "metric_groups"}}`` with one value per repeat (client-steps/s, ratios, shares)."""
    from fedsde.problems import load_problem

    pb = load_problem(ROOT / "examples" / "models" / "mnist_net.toml")
    return {str(dtype).removeprefix("torch."): _conv_net_one(args, pb, dtype) for dtype in (torch.float32,
                                                                                            torch.float64)}


def _conv_net_one(args, pb, dtype) -> dict:
    from fedsde.problems.metrics import evaluate_metrics_torch
    from fedsde.problems.module.metrics import metric_budget
    from fedsde.sim import simulate
    from fedsde.sim.metric_budget import training_work

    R, E, eta = 8, 2, 0.05
    rounds, loop_R = (1, 2) if args.quick else (3, 4)
    w0 = np.asarray(pb.initial_weights())
    model = load_model_class("mnist_net.py", "Net")(**pb.info["model_options"]).to(dtype)
    clients = _client_tensors(pb.X, pb.y, pb.sizes, "cpu", dtype)
    w0t = torch.as_tensor(w0, dtype=dtype)
    rows, steps = training_work(pb, E, rounds, None)
    m, groups = metric_budget(pb, train_rows=rows, train_steps=steps, records=rounds + 1)
    spent = {"wall": [], "cpu": []}

    def sim(batching, record=(rounds,)):
        return simulate(pb.replace(batching=batching), eta=eta, local_steps=E, rounds=rounds, replicates=R, seed=1,
                        w0=w0, record=list(record), dtype=dtype)

    def cli_like():  # simulate's default records (every round up to 20) and its metrics on the budget's rows
        res = sim("auto", range(rounds + 1))
        t0, c0 = time.perf_counter(), time.thread_time()
        evaluate_metrics_torch(pb, torch.as_tensor(np.swapaxes(res.weights, 0, 1)).to(dtype), w0, metric_samples=m,
                               metric_groups=groups)
        spent["wall"].append(time.perf_counter() - t0)
        spent["cpu"].append(time.thread_time() - c0)

    runs = {"auto": lambda: sim("auto"), "vmap": lambda: sim("vmap"), "loop": lambda: sim("loop"),
            "plain": lambda: per_client_loop(model, clients, pb.p.tolist(), eta=eta, local_steps=E, rounds=rounds,
                                             replicates=loop_R, batch=16, l2=pb.l2, seed=1, w0=w0t),
            "cli": cli_like}
    wall, cpu = race_cpu(runs, args.repeats)
    work = {"auto": rounds * E * pb.Q * R, "vmap": rounds * E * pb.Q * R, "loop": rounds * E * pb.Q * R,
            "plain": rounds * E * pb.Q * loop_R}
    out = {}
    for clock, t in (("wall", wall), ("cpu", cpu)):
        rate = {k: [work[k] / v for v in t[k]] for k in work}
        out[clock] = {"rate": rate, "metric_share": [a / b for a, b in zip(spent[clock][1:], t["cli"], strict=True)],
                      "vs_plain": {k: [a / b for a, b in zip(rate[k], rate["plain"], strict=True)]
                                   for k in ("auto", "vmap", "loop")}}
    used = sim("auto").config["batching"]["used"]
    print(f"(d) MNIST Net (d={pb.d}), Q={pb.Q}, E={E}, batch 16, R={R}, {rounds} round(s), "
          f"{str(dtype).removeprefix('torch.')}, threads={torch.get_num_threads()}; auto chose {used}; metrics on "
          f"{m or 'all'} rows ({groups or 1} groups) per record:")
    for clock in ("wall", "cpu"):
        r = out[clock]
        print(f"  {clock:4s} client-steps/s: " + "  ".join(f"{k} {statistics.median(r['rate'][k]):.3g}" for k in work))
        for k in ("auto", "vmap", "loop"):
            goal = "   (goal >= 1x)" if k == "auto" else ""
            print(f"  {clock:4s} {k:4s} / plain loop {spread(r['vs_plain'][k])}{goal}")
        print(f"  {clock:4s} metrics' share of a simulate run {spread(r['metric_share'])}   (goal <= 0.25)")
    return out | {"used": used, "metric_samples": m, "metric_groups": groups}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="fewer rounds")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--float32", action="store_true", help="(c): simulate in float32")
    ap.add_argument("--cuda-only", action="store_true", help="only (c)")
    ap.add_argument("--only", default="mlp,conv", help="mlp: (a), (b) and (c); conv: (d)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if "conv" in args.only.split(",") and not args.cuda_only:
        conv_net(args)
    if "mlp" not in args.only.split(","):
        return

    Q, E, H, batch, l2, eta = 100, 5, 32, 16, 1e-4, 0.05
    rounds, loop_rounds = (2, 1) if args.quick else (5, 1)
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, device={args.device}, "
          f"repeats={args.repeats} (median [min, max] of the per-repeat ratios)")
    builtin, module, model = digits_problems(Q, H, batch, l2)
    clients = _client_tensors(builtin.X, builtin.y, builtin.sizes, args.device)
    model = model.double().to(args.device)
    if args.cuda_only:
        _cuda(args, module, model, clients, eta, E, l2, batch)
        return
    for dtype in (torch.float64, torch.float32):
        _mlp(args, builtin, module, copy.deepcopy(model).to(dtype),
             _client_tensors(builtin.X, builtin.y, builtin.sizes, args.device, dtype), dtype, rounds, loop_rounds)
    if not args.device.startswith("cuda"):
        print("(c) CUDA figures: skipped (run with --device cuda where a GPU is present)")
        return
    _cuda(args, module, model, clients, eta, E, l2, batch)


def _mlp(args, builtin, module, model, clients, dtype, rounds: int, loop_rounds: int) -> dict:
    """(a), (b) in ``dtype``: wall and CPU-time rates of the built-in MLP, the module MLP and the per-client loop."""
    from fedsde.sim import simulate

    Q, E, batch, l2, eta, R = builtin.Q, 5, 16, builtin.l2, 0.05, 16
    w0 = torch.as_tensor(np.asarray(module.initial_weights()), device=args.device, dtype=dtype)

    def sim(pb):
        return lambda: simulate(pb, eta=eta, local_steps=E, rounds=rounds, replicates=R, seed=1, record=[rounds],
                                device=args.device, dtype=dtype)

    runs = {"builtin": sim(builtin), "module": sim(module),
            "loop": lambda: per_client_loop(model, clients, builtin.p.tolist(), eta=eta, local_steps=E,
                                            rounds=loop_rounds, replicates=1, batch=batch, l2=l2, seed=1, w0=w0)}
    wall, cpu = race_cpu(runs, args.repeats)
    steps = {"builtin": rounds * E * Q * R, "module": rounds * E * Q * R, "loop": loop_rounds * E * Q}
    print(f"digits MLP (d={builtin.d}), Q={Q}, E={E}, batch={batch}, R={R}, {str(dtype).removeprefix('torch.')}:")
    out = {}
    for clock, t in (("wall", wall), ("cpu", cpu)):
        rate = {k: [steps[k] / s for s in v] for k, v in t.items()}
        print(f"  {clock:4s} client-steps/s: " + "  ".join(f"{k} {statistics.median(rate[k]):.3g}" for k in rate))
        slower = [m / b for m, b in zip(t["module"], t["builtin"], strict=True)]
        speedup = [m / lo for m, lo in zip(rate["module"], rate["loop"], strict=True)]
        print(f"  {clock:4s} (a) module / built-in time   {spread(slower)}   (goal <= 2x)")
        print(f"  {clock:4s} (b) module / per-client loop {spread(speedup)}   speed-up (goal >= 5x)")
        out[clock] = {"rate": rate, "module_vs_builtin_time": slower, "module_vs_loop": speedup}
    return out


def _cuda(args, module, model, clients, eta, E, l2, batch) -> None:
    """(c): client-steps/s of the module MLP and of the CNN at R = 128 and 1024 against the loop on the GPU."""
    for label, (pb, mdl, cl) in (("digits MLP (module)", (module, model, clients)), ("digits CNN", _cnn(args.device))):
        _cuda_one(args, label, pb, mdl, cl, eta=eta, E=E, l2=l2, batch=batch)


def _cuda_one(args, label, pb, mdl, cl, *, eta, E, l2, batch, replicates=(128, 1024, 4096)) -> dict:
    """Client-steps/s of ``pb`` at each ``replicates`` and of the per-client loop on ``args.device`` (printed and
    returned: ``{R: rates, "loop": rates}``, one rate per repeat)."""
    from fedsde.sim import simulate

    rounds = 2 if args.quick else 5
    w0 = torch.as_tensor(np.asarray(pb.initial_weights()), device=args.device)
    dtype = torch.float32 if getattr(args, "float32", False) else torch.float64
    runs = {R: (lambda R=R: simulate(pb, eta=eta, local_steps=E, rounds=rounds, replicates=R, seed=1,
                                     record=[rounds], device=args.device, dtype=dtype)) for R in replicates}
    runs["loop"] = lambda: per_client_loop(mdl, cl, pb.p.tolist(), eta=eta, local_steps=E, rounds=1, replicates=1,
                                           batch=batch, l2=l2, seed=1, w0=w0)
    t = race(runs, args.repeats)
    loop = [E * pb.Q / s for s in t["loop"]]
    kind = str(dtype).removeprefix("torch.")
    print(f"{label} on {args.device} ({kind}): d={pb.d}, Q={pb.Q}; "
          f"per-client loop {statistics.median(loop):.3g} client-steps/s")
    rates = {"loop": loop}
    for R in replicates:
        rates[R] = rate = [rounds * E * pb.Q * R / s for s in t[R]]
        print(f"  R={R:<5d} {statistics.median(rate):10.3g} client-steps/s  [{min(rate):.3g}, {max(rate):.3g}]"
              f"   vs loop {spread([a / b for a, b in zip(rate, loop, strict=True)])}")
    return rates


def _cnn(device: str):
    """The CNN problem of ``examples/models/digits_cnn.toml``, a copy of its module and its clients' data on
    ``device``."""
    from fedsde.problems import load_problem

    pb = load_problem(ROOT / "examples" / "models" / "digits_cnn.toml")
    model = load_model_class("digits_cnn.py", "DigitsCNN")(**pb.info["model_options"]).double().to(device)
    return pb, model, _client_tensors(pb.X, pb.y, pb.sizes, device)


if __name__ == "__main__":
    main()
