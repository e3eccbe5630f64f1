"""Scaling rules on data problems: client splitting, the temperature, the τ grid and the separation test."""

from __future__ import annotations

import numpy as np
import pytest

from fedsde.errors import FedsdeInputError
from fedsde.problems.data_files import data_problem_from_dict
from fedsde.scaling import FedAvgConfig, compare_data, split_clients, temperature_trace
from fedsde.scaling.data import TEMPERATURE_TOL, MetricCurves, paired_difference, separation, tau_grid


@pytest.fixture(scope="module")
def cancer():
    return data_problem_from_dict({"kind": "classification", "dataset": "breast_cancer", "clients": 4,
                                   "partition": "iid", "batch_size": 8, "seed": 0})


def test_split_clients_keeps_data_and_divides_weights(cancer):
    sp = split_clients(cancer, 3, seed=1)
    assert sp.Q == 3 * cancer.Q
    np.testing.assert_allclose(sp.p, np.repeat(cancer.p, 3) / 3, rtol=1e-12)
    np.testing.assert_array_equal(sp.sizes.reshape(cancer.Q, 3).sum(1), cancer.sizes)
    # same training samples per original client (as multisets of rows), same global test set
    for k in range(cancer.Q):
        a = np.sort(cancer.client_data()[0][k], axis=0)
        b = np.sort(np.concatenate(sp.client_data()[0][3 * k:3 * k + 3]), axis=0)
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.sort(sp.y_test), np.sort(cancer.y_test))
    w = np.linspace(-0.1, 0.1, cancer.d)
    # the objective of the split problem is that of the original up to the unequal sizes of the parts
    assert sp.loss(w) == pytest.approx(cancer.loss(w), rel=0.02)
    with pytest.raises(FedsdeInputError, match="cannot be split"):
        split_clients(cancer, 10_000)


def test_temperature_trace_matches_minibatch_covariance(cancer):
    """Tr(s·η·Σ p_k² Σ_k(w)) from per-sample gradients equals the trace of the (d, d) covariances."""
    cfg = FedAvgConfig(eta=0.05, local_steps=2, server_lr=0.5, rounds=4)
    w = np.linspace(-0.2, 0.3, cancer.d)
    cov = cancer.minibatch_covariance(w, cancer.batch_size)
    ref = cfg.server_lr * cfg.eta * float(np.einsum("q,qii->", cancer.p**2, cov))
    assert temperature_trace(cancer, cfg, w) == pytest.approx(ref, rel=1e-10)
    # the batch rule keeps the temperature only up to the finite-population factor (1/b − 1/N_k)
    doubled = cancer.replace(batch_size=16)
    cfg2 = FedAvgConfig(eta=0.05, local_steps=2, server_lr=1.0, rounds=2)
    ratio = temperature_trace(doubled, cfg2, w) / temperature_trace(cancer, cfg, w)
    N = cancer.sizes.mean()
    assert ratio == pytest.approx(2 * (1 / 16 - 1 / N) / (1 / 8 - 1 / N), rel=0.05)
    assert ratio < 1.0


def test_tau_grid_common_points():
    a = FedAvgConfig(eta=0.1, local_steps=2, server_lr=1.0, rounds=12)
    b = FedAvgConfig(eta=0.1, local_steps=4, server_lr=1.0, rounds=6)
    tau, ra, rb = tau_grid(a, b, 4)
    np.testing.assert_allclose(tau, ra * a.tau_per_round)
    np.testing.assert_allclose(tau, rb * b.tau_per_round)
    assert len(tau) == 4 and ra[-1] == 12 and rb[-1] == 6  # K = 3, the largest divisor of gcd = 6 not above 4


def _curves(tau, mean, se):
    return MetricCurves(FedAvgConfig(eta=0.1, local_steps=1, server_lr=1.0, rounds=len(tau) - 1), np.asarray(tau),
                        np.arange(len(tau)), {"m": np.asarray(mean, float)}, {"m": np.asarray(se, float)}, 0.0)


def test_separation_uses_combined_standard_errors():
    base = _curves([0, 1, 2, 3], [1.0, 0.8, 0.6, 0.5], [0.0, 0.01, 0.01, 0.01])
    other = _curves([0, 1, 2, 3], [1.0, 0.81, 0.66, 0.56], [0.0, 0.01, 0.01, 0.01])
    # z at τ = 2: 0.06 / (0.01·√2) = 4.2 > 3.5; at τ = 1: 0.7
    assert separation(base, other, z=3.5) == {"m": 2.0}
    assert separation(base, other, z=5.0) == {"m": None}
    coarse = _curves([0, 2], [1.0, 0.6], [0.0, 0.01])  # only the common τ values are compared
    assert separation(base, coarse, z=3.5) == {"m": None}


def test_compare_data_small_run(cancer):
    cfg = FedAvgConfig(eta=0.05, local_steps=1, server_lr=1.0, rounds=4)
    res = compare_data(cancer, cfg, "clients", 2, replicates=4, seed=0, points=2)
    assert res.scaled.config.clients == 8 and res.scaled.config.rounds == 2
    np.testing.assert_allclose(res.base.tau, res.scaled.tau)
    assert set(res.separation) == set(res.base.mean)
    with pytest.raises(FedsdeInputError, match="whole number"):
        compare_data(cancer, cfg, "clients", 0.5)
    with pytest.raises(FedsdeInputError, match=">= 2: local SGD diverges"):
        compare_data(cancer, FedAvgConfig(eta=50.0, local_steps=1, server_lr=1.0, rounds=4), "batch", 2)


def test_kappa_one_is_the_base_exactly(cancer):
    """Common random numbers: both ends use the same seed and per-replicate streams, so κ = 1 changes nothing."""
    cfg = FedAvgConfig(eta=0.05, local_steps=2, server_lr=1.0, rounds=4)
    for rule in ("batch", "clients", "local-steps"):
        res = compare_data(cancer, cfg, rule, 1, replicates=3, seed=5, points=2)
        _, diff, se = paired_difference(res.base, res.scaled)
        for name in res.base.mean:
            np.testing.assert_array_equal(res.base.values[name], res.scaled.values[name])
            assert np.all(diff[name] == 0) and np.all(se[name] == 0)
        assert set(res.separation.values()) == {None} and res.notes == []


def test_paired_standard_error_is_that_of_the_differences():
    rng = np.random.default_rng(0)
    common = rng.normal(size=(3, 50))  # shared by both ends: cancels in the paired difference
    vb = 1.0 + common + 0.01 * rng.normal(size=(3, 50))
    vs = 1.0 + common + 0.01 * rng.normal(size=(3, 50)) + np.array([[0.0], [0.02], [0.04]])

    def curves(v):
        c = _curves([0, 1, 2], v.mean(1), v.std(1, ddof=1) / np.sqrt(50))
        return MetricCurves(c.config, c.tau, c.rounds, c.mean, c.se, 0.0, [], {"m": v})

    b, s = curves(vb), curves(vs)
    _, diff, se = paired_difference(b, s)
    D = vs - vb
    np.testing.assert_allclose(diff["m"], D.mean(1), rtol=1e-12)
    np.testing.assert_allclose(se["m"], D.std(1, ddof=1) / np.sqrt(50), rtol=1e-12)
    # paired: the shift of 0.02 is ≈ 14 standard errors of the difference; unpaired it hides in the common noise
    assert separation(b, s, z=3.5) == {"m": 1.0}
    unpaired = MetricCurves(s.config, s.tau, s.rounds, s.mean, s.se, 0.0)
    assert separation(b, unpaired, z=3.5) == {"m": None}


def test_temperature_change_beyond_tolerance_is_noted(cancer):
    cfg = FedAvgConfig(eta=0.05, local_steps=1, server_lr=1.0, rounds=2)
    res = compare_data(cancer, cfg, "batch-linear", 2, replicates=2, seed=0, points=1)
    rel = res.scaled.temperature_trace / res.base.temperature_trace - 1
    assert abs(rel) > TEMPERATURE_TOL and len(res.notes) == 1
    note = res.notes[0]
    assert f"{rel:+.1%}" in note and "1/b − 1/N_k, not 1/b" in note and "b = 8 → 16" in note
    N = cancer.sizes.mean()
    assert f"{(1 - 16 / N) / (1 - 8 / N) - 1:+.1%}" in note  # the finite-population prediction


def test_device_cpu_is_the_default_and_a_bad_device_is_named(cancer):
    cfg = FedAvgConfig(eta=0.05, local_steps=2, server_lr=1.0, rounds=4)
    plain = compare_data(cancer, cfg, "batch", 2, replicates=3, seed=1, points=2)
    cpu = compare_data(cancer, cfg, "batch", 2, replicates=3, seed=1, points=2, device="cpu")
    for name in plain.base.mean:
        np.testing.assert_array_equal(cpu.base.values[name], plain.base.values[name])
        np.testing.assert_array_equal(cpu.scaled.values[name], plain.scaled.values[name])
    with pytest.raises(FedsdeInputError, match="device='bogus'"):
        compare_data(cancer, cfg, "batch", 2, replicates=3, seed=1, points=2, device="bogus")


@pytest.mark.cuda
def test_both_ends_on_cuda_agree_with_the_cpu_in_law(cancer):
    """Other generators on the GPU, same law: each end's metrics at the last grid point agree with the CPU's within
    5 standard errors (plus a rounding allowance of 1e-9 relative, and one test sample for the accuracy, whose ties
    may round differently)."""
    cfg = FedAvgConfig(eta=0.05, local_steps=2, server_lr=1.0, rounds=6)
    kw = {"replicates": 64, "seed": 3, "points": 2}
    cpu = compare_data(cancer, cfg, "clients", 2, **kw)
    gpu = compare_data(cancer, cfg, "clients", 2, device="cuda", **kw)
    for end in ("base", "scaled"):
        a, b = getattr(cpu, end), getattr(gpu, end)
        for name in a.mean:
            ma, mb = a.mean[name][-1], b.mean[name][-1]
            se = np.hypot(a.se[name][-1], b.se[name][-1])
            tie = 1.0 / float(np.sum(cancer.test_sizes)) if "accuracy" in name else 0.0
            assert abs(ma - mb) <= 5 * se + 1e-9 * abs(ma) + tie, (end, name, ma, mb, se)
