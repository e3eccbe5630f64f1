"""float32 as a documented option (``dtype=torch.float32``): the moments of float32 runs agree with float64's within
their standard errors (5 s.e.) on quadratic clients (simulator and SDE) and on digits (softmax and MLP)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsde.problems import federated_classification, random_quadratic_problem
from fedsde.problems.metrics import evaluate_metrics
from fedsde.sde import simulate_sde
from fedsde.sim import simulate


def assert_same_law(a: np.ndarray, b: np.ndarray, nsigma: float = 5.0, *, variances: bool = True) -> None:
    """Means (and variances) of the samples ``a`` (R, d) and ``b`` (R', d) agree coordinate by coordinate within
    ``nsigma`` standard errors of their difference (s.e. of a variance from the sample's fourth moment)."""
    assert a.dtype == np.float64 and b.dtype == np.float64
    se = np.sqrt(a.var(0, ddof=1) / len(a) + b.var(0, ddof=1) / len(b))
    gap = np.abs(a.mean(0) - b.mean(0))
    assert np.all(se > 0)
    assert np.all(gap <= nsigma * se), f"means off by {np.max(gap / se):.2f} s.e."
    if variances:
        def var_se(x):
            c = x - x.mean(0)
            return np.sqrt(np.maximum(np.mean(c**4, 0) - np.mean(c**2, 0) ** 2, 0.0) / len(x))

        vgap = np.abs(a.var(0, ddof=1) - b.var(0, ddof=1))
        vse = np.sqrt(var_se(a) ** 2 + var_se(b) ** 2)
        assert np.all(vgap <= nsigma * vse), f"variances off by {np.max(vgap / vse):.2f} s.e."


def test_quadratic_simulator_in_float32_has_the_float64_law():
    pb = random_quadratic_problem(5, 3, seed=7)
    kw = {"eta": 0.1, "local_steps": 4, "rounds": 10, "replicates": 20000, "seed": 3, "w0": [1.0, -1.0, 0.5],
          "record": [10], "participation": 3}
    f64 = simulate(pb, **kw).final
    f32 = simulate(pb, dtype=torch.float32, **kw)
    assert f32.config["dtype"] == "float32"
    assert not np.array_equal(f32.final, f64)  # float32 draws: other numbers
    assert_same_law(f32.final, f64)
    streamed = simulate(pb, dtype=torch.float32, moments_only=True, **kw)  # moments accumulated in float64
    np.testing.assert_allclose(streamed.mean()[-1], f32.final.mean(0), rtol=1e-12, atol=1e-12)


def test_quadratic_sde_in_float32_has_the_float64_law():
    pb = random_quadratic_problem(4, 3, seed=2)
    kw = {"eta": 0.05, "local_steps": 3, "rounds": 30, "paths": 20000, "seed": 5, "record": [30]}
    assert_same_law(simulate_sde(pb, dtype=torch.float32, **kw).weights[-1], simulate_sde(pb, **kw).weights[-1])


@pytest.fixture(scope="module")
def digits():
    return federated_classification("digits", n_clients=10, partition="dirichlet", alpha=0.5, seed=0).replace(
        batch_size=8)


@pytest.mark.parametrize("model", ["softmax", "mlp"])
def test_digits_in_float32_have_the_float64_law(digits, model):
    pb = digits if model == "softmax" else digits.replace(model="mlp", hidden=8, init_seed=0)
    kw = {"eta": 0.05, "local_steps": 3, "rounds": 3, "replicates": 256, "seed": 1, "record": [3]}
    f64 = simulate(pb, **kw).final
    f32 = simulate(pb, dtype=torch.float32, **kw).final
    assert not np.array_equal(f32, f64)
    # coordinates the minibatch noise moves (the others are deterministic up to rounding, e.g. pixels that are zero)
    moving = f64.std(0) > 1e-6 * (1.0 + np.abs(f64.mean(0)))
    assert moving.mean() > 0.5
    assert_same_law(f32[:, moving], f64[:, moving], variances=False)
    np.testing.assert_allclose(f32[:, ~moving], f64[:, ~moving], atol=1e-5)
    loss32, loss64 = (evaluate_metrics(pb, w, names=["train_loss"])["train_loss"][:, None] for w in (f32, f64))
    assert_same_law(loss32, loss64)
