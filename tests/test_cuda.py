"""The GPU as a first-class device (skipped without CUDA): every run on CUDA agrees with the CPU in law (means within
5 standard errors; the generators differ, so the numbers do), is reproducible, and keeps the chunk invariance and
prefix property of docs/determinism.md on the device (grouped random streams); moments and metrics are reduced
on the device."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsde.problems import federated_classification, paper_table_problem, random_quadratic_problem
from fedsde.problems.metrics import evaluate_metrics, evaluate_metrics_torch
from fedsde.sde import simulate_sde, svag_chain
from fedsde.sde.brownian import GridBrownian
from fedsde.sde.svag import default_oracle_factory
from fedsde.sim import simulate
from fedsde.sim.moments import StreamingMoments
from fedsde.validity import validity_test

pytestmark = pytest.mark.cuda
CUDA = "cuda"


def agree(a: np.ndarray, b: np.ndarray, se: np.ndarray, nsigma: float = 5.0) -> None:
    """``|a − b| <= nsigma·se`` elementwise, with a non-vacuous standard error."""
    a, b, se = (np.asarray(x, dtype=np.float64) for x in (a, b, se))
    assert np.all(np.isfinite(se) & (se > 0))
    assert np.all(np.abs(a - b) <= nsigma * se), f"off by {np.max(np.abs(a - b) / se):.2f} s.e."


def samples_agree(x: np.ndarray, y: np.ndarray) -> None:
    """Means of the samples x (R, d) and y (R', d) agree within 5 s.e. of their difference."""
    agree(x.mean(0), y.mean(0), np.sqrt(x.var(0, ddof=1) / len(x) + y.var(0, ddof=1) / len(y)))


@pytest.fixture(scope="module")
def digits():
    return federated_classification("digits", n_clients=10, partition="dirichlet", alpha=0.5, seed=0).replace(
        batch_size=8)


def assert_rounding(a, b, ulps: int = 256):
    """``a`` equals ``b`` up to rounding: within ``ulps`` float64 units of the larger magnitude (the SDE's matrix
    products on CUDA differ in their last bits with the chunk's size; everything else is bit-identical)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    scale = np.maximum(np.abs(a), np.abs(b)).max()
    np.testing.assert_allclose(a, b, rtol=0, atol=ulps * np.finfo(np.float64).eps * scale)


def test_validity_chains_and_device_metrics_on_cuda_match_the_cpu(digits):
    kw = dict(eta=0.05, local_steps=2, rounds=3, replicates=96, seed=0, ells=(1, 2, 4))
    cpu, gpu = validity_test(digits, **kw), validity_test(digits, device=CUDA, **kw)
    assert gpu.config["device"].startswith("cuda")
    for m, s in cpu.metrics.items():
        agree(gpu.metrics[m]["mean"][:, -1], s["mean"][:, -1],
              np.hypot(gpu.metrics[m]["se"][:, -1], s["se"][:, -1]) + 1e-12)
    again = validity_test(digits, device=CUDA, **kw)
    np.testing.assert_array_equal(again.final_mean, gpu.final_mean)  # reproducible on the device


def test_svag_chain_metrics_stay_on_the_device(digits):
    seen = []

    def on_grid(n, start, w):
        seen.append(w.device.type)
        got = evaluate_metrics_torch(digits, w, names=["train_loss"])
        assert got["train_loss"].device.type == "cuda"

    svag_chain(digits, eta=0.05, local_steps=2, rounds=2, ell=2, replicates=16, seed=1, on_grid=on_grid,
               oracle_factory=default_oracle_factory(digits), device=CUDA)
    assert seen and set(seen) == {"cuda"}


def test_device_metrics_equal_the_cpu_metrics(digits):
    w = digits.initial_weights() + 0.1 * np.random.default_rng(0).standard_normal((5, digits.d))
    host = evaluate_metrics(digits, w)
    dev = evaluate_metrics_torch(digits, torch.as_tensor(w, device=CUDA))
    for m, v in host.items():
        np.testing.assert_allclose(dev[m].cpu().numpy(), v, rtol=1e-10, atol=1e-12)


def test_general_sde_on_cuda_matches_the_cpu_and_is_chunk_invariant():
    pb = random_quadratic_problem(4, 3, seed=1)
    kw = dict(eta=0.05, local_steps=3, rounds=4, paths=3000, seed=2, variant="general", inner_samples=4,
              record=[4])
    cpu, gpu = simulate_sde(pb, **kw), simulate_sde(pb, device=CUDA, **kw)
    samples_agree(gpu.weights[-1], cpu.weights[-1])
    np.testing.assert_array_equal(simulate_sde(pb, device=CUDA, **kw).weights, gpu.weights)  # across runs: bits
    # across chunkings: the same draws, products to rounding (cuBLAS picks its kernel by the chunk's rows)
    assert_rounding(simulate_sde(pb, device=CUDA, chunk_size=1024, **kw).weights, gpu.weights)


def test_linear_sde_on_cuda_streams_moments_on_the_device_and_keeps_chunk_and_prefix():
    pb = random_quadratic_problem(5, 10, seed=0)
    kw = dict(eta=0.05, local_steps=5, server_lr=0.05, h=0.01, rounds=40, paths=20000, seed=1, record=[40])
    gpu = simulate_sde(pb, device=CUDA, **kw)
    cpu = simulate_sde(pb, **kw)
    samples_agree(gpu.weights[-1], cpu.weights[-1])
    np.testing.assert_array_equal(simulate_sde(pb, device=CUDA, **kw).weights, gpu.weights)  # across runs: bits
    assert_rounding(simulate_sde(pb, device=CUDA, chunk_size=128 * 70, **kw).weights, gpu.weights)
    prefix = simulate_sde(pb, device=CUDA, **(kw | {"paths": 9000})).weights
    assert_rounding(prefix, gpu.weights[:, :9000])
    streamed = simulate_sde(pb, device=CUDA, moments_only=True, **kw)
    np.testing.assert_allclose(streamed.mean()[-1], gpu.weights[-1].mean(0), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(streamed.cov()[-1], np.cov(gpu.weights[-1], rowvar=False), rtol=1e-9, atol=1e-15)
    again = simulate_sde(pb, device=CUDA, moments_only=True, **kw)
    np.testing.assert_array_equal(again.mean(), streamed.mean())
    np.testing.assert_array_equal(again.cov(), streamed.cov())
    chunked = simulate_sde(pb, device=CUDA, moments_only=True, chunk_size=128 * 33, **kw)
    assert_rounding(chunked.mean(), streamed.mean())
    assert_rounding(chunked.cov(), streamed.cov())


def test_streaming_moments_reduce_on_the_device_like_the_host():
    x = 2.0 + torch.randn(1000, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    host, dev = StreamingMoments(1, 4, 128), StreamingMoments(1, 4, 128)
    for a in range(0, 1000, 256):
        host.add(0, a, x[a:a + 256])
        dev.add(0, a, x[a:a + 256].to(CUDA))
    np.testing.assert_allclose(dev.mean(), host.mean(), rtol=1e-13)
    np.testing.assert_allclose(dev.cov(), host.cov(), rtol=1e-11)


@pytest.mark.parametrize("model", ["softmax", "mlp"])
def test_data_simulator_on_cuda_matches_the_cpu(digits, model):
    pb = digits if model == "softmax" else digits.replace(model="mlp", hidden=8, init_seed=0)
    kw = dict(eta=0.05, local_steps=3, rounds=3, replicates=512, seed=1, record=[3])
    gpu = simulate(pb, device=CUDA, **kw).final
    cpu = simulate(pb, **kw).final
    moving = cpu.std(0) > 1e-6 * (1.0 + np.abs(cpu.mean(0)))
    samples_agree(gpu[:, moving], cpu[:, moving])
    g32 = simulate(pb, device=CUDA, dtype=torch.float32, **kw).final
    samples_agree(g32[:, moving], cpu[:, moving])
    chunked = simulate(pb, device=CUDA, chunk_size=128, **kw).final
    np.testing.assert_array_equal(chunked, gpu)


def test_quadratic_simulator_on_cuda_is_chunk_invariant_and_matches_the_cpu():
    pb = paper_table_problem()
    kw = dict(eta=0.05, local_steps=5, rounds=20, replicates=20000, seed=0, participation=2, record=[20])
    gpu = simulate(pb, device=CUDA, **kw).final
    samples_agree(gpu, simulate(pb, **kw).final)
    np.testing.assert_array_equal(simulate(pb, device=CUDA, chunk_size=128 * 7, **kw).final, gpu)
    np.testing.assert_array_equal(simulate(pb, device=CUDA, **(kw | {"replicates": 5000})).final, gpu[:5000])


def test_grid_brownian_groups_are_chunk_invariant_on_cuda():
    full = GridBrownian(0.0, 0.1, (128 * 70, 3), seed=4, steps=40, device=CUDA)
    part = GridBrownian(0.0, 0.1, (128 * 10, 3), seed=4, steps=40, device=CUDA, first_block=60)
    for j in (0, 33, 39):
        torch.testing.assert_close(part.increment(j), full.increment(j)[128 * 60:], rtol=0, atol=0)


def test_cross_device_regime_on_cuda_matches_the_cpu():
    from fedsde.problems import QuadraticProblem
    from fedsde.sim.participation import CROSS_DEVICE_Q

    rng = np.random.default_rng(0)
    Q, d = CROSS_DEVICE_Q, 2
    pb = QuadraticProblem.from_arrays(np.eye(d) * rng.uniform(0.5, 2.0, (Q, 1, d)), rng.standard_normal((Q, d)),
                                      np.full((Q, d), 0.2), np.ones(Q))
    kw = dict(eta=0.1, local_steps=3, rounds=3, replicates=8000, seed=2, participation=4, record=[3])
    samples_agree(simulate(pb, device=CUDA, **kw).final, simulate(pb, **kw).final)
