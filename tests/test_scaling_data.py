"""Scaling rules on data problems: client splitting, the temperature, the τ grid and the separation test."""

from __future__ import annotations

import numpy as np
import pytest

from fedsde.errors import FedsdeInputError
from fedsde.problems.data_files import data_problem_from_dict
from fedsde.scaling import FedAvgConfig, compare_data, split_clients, temperature_trace
from fedsde.scaling.data import MetricCurves, separation, tau_grid


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
