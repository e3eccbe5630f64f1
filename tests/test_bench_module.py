"""benchmarks/bench_module.py times the same computation on both sides: its per-client loop (a module with the
server weights, torch.optim.SGD with weight_decay = l2, one client after the other) is FedAvg as fedsde runs it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from fedsde.clients.data_oracles import full_gradient_oracle
from fedsde.problems import federated_classification
from fedsde.sim import simulate

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_module", ROOT / "benchmarks" / "bench_module.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _to_module_layout(w: np.ndarray, F: int, H: int, K: int) -> np.ndarray:
    """The built-in MLP's ``[vec W₁ ((F+1)×H, bias last row), vec W₂ ((H+1)×K)]`` in ``parameters_to_vector`` order
    of ``examples/models/mlp.py``: weight₁ (H×F), bias₁, weight₂ (K×H), bias₂."""
    W1, W2 = w[:(F + 1) * H].reshape(F + 1, H), w[(F + 1) * H:].reshape(H + 1, K)
    return np.concatenate([W1[:F].T.ravel(), W1[F], W2[:H].T.ravel(), W2[H]])


def test_per_client_loop_is_fedavg_of_the_builtin_mlp_at_full_batch():
    """Independent of the module path: the loop, on the module MLP, gives the built-in MLP's FedAvg weights
    (hand-written gradients, full batch) to rounding, over rounds, local steps and a server step s ≠ 1."""
    bench = _bench()
    H, F, K = 4, 64, 10
    pb = federated_classification("digits", n_clients=3, partition="iid", seed=0).replace(model="mlp", hidden=H,
                                                                                          init_seed=0, l2=1e-3)
    w0 = pb.initial_weights()
    model = bench.load_model_class("mlp.py", "MLP")(hidden=H).double()
    clients = [(torch.as_tensor(x), torch.as_tensor(y)) for x, y in zip(*pb.client_data(), strict=True)]
    kw = {"eta": 0.1, "local_steps": 3, "rounds": 4, "server_lr": 1.5}
    loop = bench.per_client_loop(model, clients, pb.p.tolist(), replicates=2, batch=None, l2=pb.l2, seed=0,
                                   w0=torch.as_tensor(_to_module_layout(w0, F, H, K)), **kw)
    sim = simulate(pb, replicates=1, seed=0, w0=w0, oracle_factory=full_gradient_oracle(), **kw).final[0]
    ref = _to_module_layout(sim, F, H, K)
    assert np.abs(loop.numpy() - ref).max() <= 1e-12 * np.abs(ref).max()
    assert torch.equal(loop[0], loop[1])  # full batch: no randomness


def test_per_client_loop_is_fedsde_on_the_module_problem_at_full_batch():
    """The benchmark's two sides compute the same thing: the loop and fedsde's batched torch.func pass on the same
    user module, full batch (no randomness), give the same final weights."""
    from fedsde.problems import module_problem

    bench = _bench()
    base = federated_classification("digits", n_clients=3, partition="iid", seed=0)
    MLP = bench.load_model_class("mlp.py", "MLP")
    pb = module_problem(lambda: MLP(hidden=4), base.X, base.y, np.repeat(np.arange(base.Q), base.sizes),
                        batch_size="full", l2=1e-3, init_seed=0)
    kw = {"eta": 0.1, "local_steps": 3, "rounds": 4, "server_lr": 1.5}
    sim = simulate(pb, replicates=2, seed=0, **kw).final
    w0 = torch.as_tensor(np.asarray(pb.initial_weights()))
    loop = bench.per_client_loop(MLP(hidden=4).double(), bench._client_tensors(pb.X, pb.y, pb.sizes, "cpu"),
                                 pb.p.tolist(), replicates=1, batch=None, l2=pb.l2, seed=0, w0=w0, **kw)
    assert np.abs(sim - loop.numpy()).max() <= 1e-12 * np.abs(sim).max()


def test_the_cuda_section_runs_on_tiny_sizes():
    """(c)'s code path (the CNN problem, its loop and the rates) on the CPU with two replicates."""
    from types import SimpleNamespace

    bench = _bench()
    pb, model, clients = bench._cnn("cpu")
    rates = bench._cuda_one(SimpleNamespace(device="cpu", quick=True, repeats=1), "digits CNN", pb, model, clients,
                            eta=0.05, E=1, l2=1e-4, batch=16, replicates=(2,))
    assert set(rates) == {"loop", 2} and all(r > 0 for v in rates.values() for r in v)


@pytest.mark.cuda
def test_bench_module_on_cuda():
    import subprocess
    import sys

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    out = subprocess.run([sys.executable, "benchmarks/bench_module.py", "--device", "cuda", "--quick", "--repeats",
                          "1"], cwd=ROOT, capture_output=True, text=True, timeout=900)  # hang guard
    assert out.returncode == 0, out.stderr[-2000:]
    assert "digits CNN on cuda" in out.stdout
