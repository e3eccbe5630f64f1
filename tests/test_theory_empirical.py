"""Empirical left-hand sides: random-time averages, exact chain vs simulation, client drift."""

from __future__ import annotations

import numpy as np

from fedsde.theory.empirical import drift_measurements, quadratic_exact_path, random_time_average, simulated_path
from fedsde.theory.problems import sec4_quadratic
from fedsde.theory.schedules import PowerSchedule


def test_random_time_average_by_hand():
    X = np.array([[1.0, 3.0], [2.0, 5.0], [4.0, 7.0]])  # (T=3, R=2)
    w = np.array([1.0, 0.5, 0.25])
    m, se = random_time_average(X, w, [1, 3])
    # N=1: values 1 and 3 → mean 2 ; N=3: (1 + 1 + 1)/1.75 and (3 + 2.5 + 1.75)/1.75
    per = np.array([3.0 / 1.75, 7.25 / 1.75])
    np.testing.assert_allclose(m, [2.0, per.mean()])
    np.testing.assert_allclose(se, [np.std([1, 3], ddof=1) / np.sqrt(2), per.std(ddof=1) / np.sqrt(2)])
    assert np.all(random_time_average(X, w, [2], exact=True)[1] == 0)


def test_exact_path_agrees_with_simulation():
    pr = sec4_quadratic()
    s = PowerSchedule(0.5, 1.0)
    kw = dict(E=5, h=0.5, rounds=41, w0=[3.0])
    ex = quadratic_exact_path(pr, s, **kw)
    mc = simulated_path(pr, s, replicates=2048, seed=7, **kw)
    for a, b in ((ex.grad_sq, mc.grad_sq), (ex.gap, mc.gap)):
        mean = b.mean(axis=1)
        se = b.std(axis=1, ddof=1) / np.sqrt(b.shape[1])
        assert np.all(np.abs(mean - a[:, 0]) <= 5 * se + 1e-12)
    np.testing.assert_allclose(ex.t, np.arange(41) * 0.5)


def test_drift_measurements_shape_and_first_step():
    pr = sec4_quadratic()
    mean, se = drift_measurements(pr, eta=0.1, E=4, rounds=3, replicates=2048, seed=1, w0=[3.0])
    assert mean.shape == (4, 3) and np.all(se > 0)
    # first local step from the server point: ‖η(∇F_k(w) + ξ)‖ averaged over rounds (w moves little here)
    assert np.all(np.diff(mean, axis=0) > 0)


def test_compare_bound_uses_the_confidence_interval():
    from fedsde.theory.results import Estimate, compare_bound, worst

    assert compare_bound(Estimate(1.0, 0.0), 2.0).margin == 0.5
    assert compare_bound(Estimate(2.2, 0.1), 2.0, z=3).verdict == "holds"  # 2.2 − 0.3 <= 2: not significant
    v = compare_bound(Estimate(2.5, 0.1), 2.0, z=3)
    assert v.verdict == "fails" and v.numbers["tightness_ratio"] == 0.8
    assert compare_bound(1.0, float("inf")).verdict == "not applicable"
    assert compare_bound(1.0, 2.0, valid=False, invalid_reason="x").reason == "x"
    assert worst(compare_bound(1.0, 2.0), v).verdict == "fails"
