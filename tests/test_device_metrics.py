"""Metrics of server weights in torch (fedsde.problems.metrics): equal to a NumPy reference on every model and on
quadratic clients, in float32 within its rounding, on CUDA as on the CPU; the data cached once per device; the
seeded subsample of large problems unbiased with calibrated standard errors; the torch passes of the models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedsde.problems import ClassificationProblem, federated_classification, load_problem, random_quadratic_problem
from fedsde.problems import metrics as M
from fedsde.problems.classification.models import LogisticModel, MLPModel, SoftmaxModel
from fedsde.problems.metrics import evaluate_metrics, evaluate_metrics_torch, metric_names, metric_sample, summarise

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "problems"


def numpy_reference(problem, w, w0):
    """The metrics as the NumPy implementation before torch computed them (one pass over all data per weight)."""
    w = np.asarray(w, dtype=np.float64)
    lead, flat = w.shape[:-1], w.reshape(-1, problem.d)
    out = {"distance_from_start": np.linalg.norm(w - w0, axis=-1)}
    if not hasattr(problem, "classifier"):
        out["train_loss"] = np.asarray(problem.loss(flat)).reshape(lead)
        out["grad_norm_sq"] = np.sum(problem.grad(flat) ** 2, axis=-1).reshape(lead)
        return out
    model = problem.classifier
    Xd = problem.design(problem.X)
    s = np.repeat(problem.p / problem.sizes, problem.sizes)
    A, Z = model.forward(flat, Xd)
    reg = problem.l2 * flat
    out["train_loss"] = (model.losses(Z, problem.y) @ s + 0.5 * np.sum(reg * flat, axis=-1)).reshape(lead)
    g = model.backward(flat, Xd, A, model.residuals(Z, problem.y) * s[:, None]) + reg
    out["grad_norm_sq"] = np.sum(g * g, axis=-1).reshape(lead)
    Zt = model.forward(flat, problem.design(problem.X_test))[1]
    out["test_accuracy"] = np.mean(model.predict(Zt) == problem.y_test, axis=-1).reshape(lead)
    return out


@pytest.fixture(scope="module")
def problems():
    digits = load_problem(EXAMPLES / "digits_softmax.toml")
    return {
        "logistic": federated_classification("breast_cancer", n_clients=4, partition="iid", seed=1),
        "softmax": digits,
        "mlp": digits.replace(model="mlp", hidden=6, init_seed=3),
        "quadratic": random_quadratic_problem(3, 5, seed=0),
    }


def _weights(pb, shape, seed=0, scale=0.3):
    start = pb.initial_weights() if hasattr(pb, "initial_weights") else np.zeros(pb.d)
    return start, start + scale * np.random.default_rng(seed).standard_normal((*shape, pb.d))


@pytest.mark.parametrize("kind", ["logistic", "softmax", "mlp", "quadratic"])
def test_torch_metrics_equal_the_numpy_reference(problems, kind):
    pb = problems[kind]
    start, w = _weights(pb, (2, 70))  # more than one chunk of CHUNK weights
    ref = numpy_reference(pb, w, start)
    vals = evaluate_metrics(pb, w, start)
    tens = evaluate_metrics_torch(pb, torch.from_numpy(w), start)
    assert tuple(vals) == tuple(tens) == metric_names(pb) and not vals.sampled
    for name in vals:
        assert isinstance(vals[name], np.ndarray) and vals[name].shape == (2, 70)
        assert isinstance(tens[name], torch.Tensor) and tens[name].dtype == torch.float64
        np.testing.assert_allclose(vals[name], ref[name], rtol=1e-12, atol=0, err_msg=name)
        np.testing.assert_allclose(tens[name].numpy(), ref[name], rtol=1e-12, atol=0, err_msg=name)
        assert np.all(vals.se[name] == 0)
    if "test_accuracy" in vals:
        np.testing.assert_array_equal(vals["test_accuracy"], ref["test_accuracy"])


@pytest.mark.parametrize("kind", ["logistic", "softmax", "mlp", "quadratic"])
def test_float32_within_its_rounding(problems, kind):
    pb = problems[kind]
    start, w = _weights(pb, (8,), seed=1)
    exact = evaluate_metrics_torch(pb, torch.from_numpy(w), start)
    single = evaluate_metrics_torch(pb, torch.from_numpy(w).to(torch.float32), start)
    eps = float(torch.finfo(torch.float32).eps)
    for name in ("train_loss", "grad_norm_sq", "distance_from_start"):
        assert single[name].dtype == torch.float32
        # float32 rounding of well-conditioned sums (pairwise/blocked: a few eps, not n·eps)
        np.testing.assert_allclose(single[name].double().numpy(), exact[name].numpy(), rtol=16 * eps, err_msg=name)
    if "test_accuracy" in exact:  # a prediction flips only at a near-tie of logits
        assert np.max(np.abs(single["test_accuracy"].double().numpy() - exact["test_accuracy"].numpy())) <= \
            2.0 / pb.y_test.size


def test_the_data_lives_on_the_device_once(problems, monkeypatch):
    pb = problems["mlp"].replace(name="fresh")  # an empty cache
    _, w = _weights(pb, (3,))
    W = torch.from_numpy(w)
    first = evaluate_metrics_torch(pb, W)
    keys = [k for k in pb._cache if k[0] == "metric_data"]
    cached = {k: dict(pb._cache[k]) for k in keys}
    calls = []
    monkeypatch.setattr(ClassificationProblem, "design", lambda self, X: calls.append(1) or X)  # no new copy
    again = evaluate_metrics_torch(pb, W)
    assert len(keys) == 1 and calls == []
    monkeypatch.undo()
    assert all(pb._cache[k][n] is cached[k][n] for k in keys for n in cached[k])
    for name in first:
        assert torch.equal(first[name], again[name])
    evaluate_metrics_torch(pb, W.to(torch.float32))
    assert len([k for k in pb._cache if k[0] == "metric_data"]) == 2  # one copy per device and dtype


@pytest.mark.parametrize("kind", ["logistic", "softmax", "mlp", "mlp-1", "quadratic"])
def test_a_weights_values_do_not_depend_on_the_others(problems, kind, monkeypatch):
    pb = problems[kind] if kind != "mlp-1" else problems["mlp"].replace(hidden=1)  # one-column products
    start, w = _weights(pb, (7,))
    w[3] = w[5] = w[0]  # equal weights at different places of the batch
    full = evaluate_metrics(pb, w, start)
    alone = evaluate_metrics(pb, w[0], start)
    monkeypatch.setattr(M, "CHUNK_BYTES", 1)  # one weight vector per pass
    assert M.chunk_size(10**6, 100, 8) == 1
    one = evaluate_metrics(pb, w, start)
    for name in full:
        # one weight per pass or all together are other matrix shapes, so other BLAS/torch kernels and summation
        # orders (not bitwise, docs/determinism.md): sums of ~10³ rows of ≤ 65-term dot products, N·F·ε ≈ 1e-11
        np.testing.assert_allclose(one[name], full[name], rtol=1e-10, atol=0, err_msg=name)
        np.testing.assert_allclose(full[name][[3, 5]], full[name][0], rtol=1e-10, atol=0, err_msg=name)
        np.testing.assert_allclose(alone[name], full[name][0], rtol=1e-10, atol=0, err_msg=name)


def test_chunk_size_follows_the_data():
    assert M.chunk_size(10, 10, 8) == M.CHUNK
    rows = M.CHUNK_BYTES // (8 * 100 * 8)  # eight weight vectors fit
    assert M.chunk_size(rows, 100, 8) == 8 and M.chunk_size(rows, 100, 4) == 16


@pytest.mark.parametrize("model", [LogisticModel(5, 2), SoftmaxModel(5, 3), MLPModel(5, 3, hidden=4)],
                         ids=["logistic", "softmax", "mlp"])
def test_torch_passes_of_the_models_equal_numpy(model):
    rng = np.random.default_rng(2)
    Xd = np.hstack([rng.standard_normal((9, 4)), np.ones((9, 1))])
    y = rng.integers(0, model.n_classes, 9)
    w = model.init(0) + 0.5 * rng.standard_normal((2, 3, model.d))
    A, Z = model.forward(w, Xd)
    E = model.residuals(Z, y)
    t = {k: torch.from_numpy(v) for k, v in (("w", w), ("Xd", Xd), ("y", y))}
    At, Zt = model.forward(t["w"], t["Xd"])
    Et = model.residuals(Zt, t["y"])
    assert Zt.shape == Z.shape == (2, 3, 9, model.n_outputs)
    np.testing.assert_allclose(Zt.numpy(), Z, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(model.losses(Zt, t["y"]).numpy(), model.losses(Z, y), rtol=1e-13)
    np.testing.assert_allclose(Et.numpy(), E, rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(model.predict(Zt).numpy(), model.predict(Z))
    np.testing.assert_allclose(model.backward(t["w"], t["Xd"], At, Et).numpy(), model.backward(w, Xd, A, E),
                               rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------------------------------ subsampled metrics
@pytest.fixture(scope="module")
def skewed(problems):
    """Digits softmax with client weights far from N_k/N, so that sampling must respect p_k."""
    pb = problems["softmax"]
    p = np.arange(1, pb.Q + 1, dtype=float) ** 2
    return pb.with_weights(p)


def test_the_sample_draws_clients_with_probability_p(skewed):
    plan = metric_sample(skewed, metric_samples=1024, metric_seed=3)
    rows = plan["rows"]
    assert rows.size == 1024 and plan["describe"]["train"] == {"exact": False, "samples": 1024, "of": skewed.y.size}
    counts = np.bincount(skewed.client_ids[rows], minlength=skewed.Q)
    sd = np.sqrt(1024 * skewed.p * (1 - skewed.p))
    assert np.all(np.abs(counts - 1024 * skewed.p) <= 5 * sd)
    again = metric_sample(skewed, metric_samples=1024, metric_seed=3)
    assert again is plan and not np.array_equal(metric_sample(skewed, 1024, 4)["rows"], rows)
    assert metric_sample(skewed)["rows"] is None  # N below METRIC_SAMPLES: exact


def test_subsampled_metrics_are_unbiased_with_calibrated_standard_errors(skewed):
    start, w = _weights(skewed, (2,), seed=5, scale=0.05)
    exact = evaluate_metrics(skewed, w, start)
    seeds = 400
    runs = [evaluate_metrics(skewed, w, start, metric_samples=256, metric_seed=s) for s in range(seeds)]
    assert runs[0].sampled and runs[0].sampling["train"]["samples"] == 256
    assert runs[0].sampling["test"]["exact"] is (skewed.y_test.size <= 256)
    for name in ("train_loss", "grad_norm_sq", "test_accuracy"):
        est = np.stack([r[name] for r in runs])  # (seeds, 2)
        se = np.stack([r.se[name] for r in runs])
        spread = est.std(0, ddof=1)
        # unbiased: the mean over independent samples is within 5 standard errors of the exact value
        assert np.all(np.abs(est.mean(0) - exact[name]) <= 5 * spread / np.sqrt(seeds)), name
        # calibrated: the reported standard error matches the spread over samples (the jackknife errs on the
        # large side)
        ratio = np.sqrt(np.mean(se**2, axis=0)) / spread
        assert np.all((ratio > 0.7) & (ratio < 1.4)), (name, ratio)
    np.testing.assert_array_equal(runs[0]["distance_from_start"], exact["distance_from_start"])
    summ = summarise(runs[0], axis=-1)
    assert "sample_se" in summ["train_loss"] and "sample_se" not in summarise(exact)["train_loss"]


def test_grouped_norm_is_unbiased_for_the_squared_mean():
    gen = torch.Generator().manual_seed(0)
    mu = torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64)
    draws = mu + torch.randn((4000, 16, 3), generator=gen, dtype=torch.float64)  # 4000 replications, G = 16
    U, se, lower, upper = M.grouped_norm_sq(draws.transpose(0, 1))
    truth = float(mu @ mu)
    assert abs(float(U.mean()) - truth) <= 5 * float(U.std()) / np.sqrt(4000)
    # the interval's half-width over 1.96 (its upper side is the longer where the noise dominates: 1.6 here)
    assert 1.0 < float(torch.sqrt((se**2).mean()) / U.std()) < 2.0
    assert torch.all(lower <= U.clamp(min=0)) and torch.all(U <= upper) and torch.all(lower >= 0)


@pytest.mark.parametrize("scale", [3.0, 1.0, 0.0])
def test_grouped_norm_interval_covers(scale):
    """The interval covers ‖μ‖² in 95 % ± 1 % of 20,000 replications of G = 16 Gaussian group means, where the
    signal dominates (0.949; the jackknife's ±1.96·se: 0.934), in between (0.956) and where the noise does (0.954;
    the jackknife's: 0.988)."""
    gen = torch.Generator().manual_seed(1)
    mu = torch.tensor([0.3, -0.2, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64) * scale
    draws = mu + 0.3 * torch.randn((20000, 16, 8), generator=gen, dtype=torch.float64)
    _, _, lower, upper = M.grouped_norm_sq(draws.transpose(0, 1))
    truth = float(mu @ mu)
    cover = float(((lower <= truth) & (truth <= upper)).double().mean())
    assert 0.94 <= cover <= 0.96, cover


@pytest.mark.cuda
@pytest.mark.parametrize("kind", ["logistic", "softmax", "mlp", "quadratic"])
def test_metrics_on_cuda_equal_the_cpu(problems, kind):
    pb = problems[kind]
    start, w = _weights(pb, (3, 40))
    cpu = evaluate_metrics_torch(pb, torch.from_numpy(w), start)
    gpu = evaluate_metrics_torch(pb, torch.from_numpy(w).cuda(), start)
    for name in cpu:
        assert gpu[name].device.type == "cuda"
        np.testing.assert_allclose(gpu[name].cpu().numpy(), cpu[name].numpy(), rtol=1e-10, err_msg=name)
    sub = evaluate_metrics_torch(pb, torch.from_numpy(w).cuda(), start, metric_samples=64) if kind != "quadratic" \
        else None
    if sub is not None:
        ref = evaluate_metrics_torch(pb, torch.from_numpy(w), start, metric_samples=64)
        for name in ref:
            np.testing.assert_allclose(sub[name].cpu().numpy(), ref[name].numpy(), rtol=1e-10, atol=1e-12)
