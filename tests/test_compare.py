"""Chain vs SDE: exact moments, distances between laws, weak error and its order in the step."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.stats

from fedsde.compare import (
    compare_moments,
    expected_phi,
    fit_loglog_slope,
    gaussian_w2,
    ks_per_coordinate,
    local_loglog_slopes,
    mc_difference,
    phi_function,
    sde_moments,
    weak_error_exact,
    weak_error_mc_vs_step,
    weak_error_vs_step,
)
from fedsde.errors import FedsdeInputError
from fedsde.exact import transient_moments
from fedsde.problems import paper_table_problem, random_quadratic_problem
from fedsde.sde import quadratic_sde_coefficients

STEPS = [0.2, 0.1, 0.05, 0.025, 0.0125]


def test_gaussian_w2_closed_forms():
    assert gaussian_w2([1.0], [[4.0]], [0.0], [[1.0]]) == pytest.approx(np.sqrt(1 + 1))  # |Δm|² + (σ₁ − σ₂)²
    P = np.array([[2.0, 0.3], [0.3, 1.0]])
    assert gaussian_w2([0, 0], P, [0, 0], P) == pytest.approx(0.0, abs=1e-7)
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(3, 3)), rng.normal(size=(3, 3))
    P1, P2 = X @ X.T, Y @ Y.T
    m1, m2 = rng.normal(size=3), rng.normal(size=3)
    r = scipy.linalg.sqrtm(P1)
    ref = np.sum((m1 - m2) ** 2) + np.trace(P1 + P2 - 2 * np.real(scipy.linalg.sqrtm(r @ P2 @ r)))
    assert gaussian_w2(m1, P1, m2, P2) == pytest.approx(np.sqrt(ref), rel=1e-8)
    assert gaussian_w2(m1, P1, m2, P2) == pytest.approx(gaussian_w2(m2, P2, m1, P1), rel=1e-8)
    with pytest.raises(FedsdeInputError, match="shapes"):
        gaussian_w2([0, 0], P, [0], [[1.0]])


def test_ks_per_coordinate():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4000, 2)) * [1.0, 2.0] + [0.5, -1.0]
    good = ks_per_coordinate(x, ([0.5, -1.0], np.diag([1.0, 4.0])))
    # fully specified law: the statistic follows Kolmogorov's law for n = 4000; critical value at level 1e-4
    # (≈ 2.2/√n = 0.035; 1.63/√n = 0.026 would be level 0.01), the level of the p-value check
    crit = scipy.stats.kstwo.ppf(1 - 1e-4, x.shape[0])
    assert good.statistic.shape == (2,) and np.all(good.statistic < crit) and np.all(good.pvalue > 1e-4)
    bad = ks_per_coordinate(x, ([0.5, -1.0], np.diag([1.0, 1.0])))
    assert bad.statistic[1] > 0.1 and bad.pvalue[1] < 1e-6
    two = ks_per_coordinate(x, rng.normal(size=(3000, 2)) * [1.0, 2.0] + [0.5, -1.0])
    assert np.all(two.pvalue > 1e-4)


def test_sde_moments_solve_the_moment_odes():
    pb = random_quadratic_problem(3, 2, seed=3)
    lin = quadratic_sde_coefficients(pb, 0.05, 4, 0.5, 0.1, "paper")
    mom = sde_moments(pb, 0.05, 4, 30, 0.5, 0.1, "paper", w0=[1.0, -1.0], cov0=0.1, record=[0, 7, 30])
    for i, n in enumerate([0, 7, 30]):
        law = lin.moments(n * 0.1, [1.0, -1.0], 0.1 * np.eye(2))
        np.testing.assert_allclose(mom.mean[i], law.mean, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(mom.cov[i], law.cov, rtol=1e-10, atol=1e-14)
    # the mean obeys m' = −A(m − c): finite-difference residual of the exact solution
    t, dt = 1.3, 1e-6
    m = lambda s: lin.moments(s, [1.0, -1.0]).mean  # noqa: E731
    np.testing.assert_allclose((m(t + dt) - m(t - dt)) / (2 * dt), -lin.A @ (m(t) - lin.c), rtol=1e-6)


def test_matched_moments_equal_chain_at_every_round():
    pb = random_quadratic_problem(3, 3, seed=2)
    etas, lrs = np.linspace(0.05, 0.03, 15), np.linspace(0.8, 0.4, 15)
    chain = transient_moments(pb, etas, 4, 15, lrs, w0=[1.0, 2.0, 0.0])
    sde = sde_moments(pb, etas, 4, 15, lrs, 0.1, "matched", w0=[1.0, 2.0, 0.0])
    cmp = compare_moments(chain, sde, 0.1)
    assert cmp.mean_error.max() < 1e-12 and np.nanmax(cmp.cov_rel_error) < 1e-9
    assert cmp.w2.max() < 1e-6
    _, err = weak_error_exact(pb, chain, sde, "loss")
    assert err.max() < 1e-12


def test_expected_phi_against_samples():
    pb = random_quadratic_problem(2, 2, seed=1)
    m, P = np.array([0.3, -0.4]), np.array([[0.2, 0.05], [0.05, 0.1]])
    x = np.random.default_rng(0).multivariate_normal(m, P, size=200000)
    for phi in ("dist2", "loss"):
        vals = phi_function(pb, phi)(x)
        assert expected_phi(pb, m, P, phi) == pytest.approx(vals.mean(), abs=5 * vals.std() / np.sqrt(x.shape[0]))
    assert expected_phi(pb, pb.optimum, np.zeros((2, 2)), "loss") == pytest.approx(pb.min_loss)


@pytest.mark.parametrize("noise_scaling", ["fixed", "diffusive"])
@pytest.mark.parametrize("phi", ["dist2", "loss"])
def test_corrected_weak_error_is_first_order(phi, noise_scaling):
    """|E φ(w_n) − E φ(w(nh))| → 0 like h at fixed t, η, E, η₀ (exact, no sampling)."""
    for pb in (paper_table_problem(), random_quadratic_problem(3, 3, seed=2)):
        curve = weak_error_vs_step(pb, 0.05, 5, t_end=1.0, steps=STEPS, server_rate=1.0, variant="corrected",
                                   phi=phi, w0=3.0, noise_scaling=noise_scaling)
        assert 0.8 <= curve.slope <= 1.2, curve.errors
        assert np.all(np.diff(curve.errors) < 0)
        assert curve.rounds.tolist() == [5, 10, 20, 40, 80]


@pytest.mark.parametrize("phi", ["dist2", "loss"])
def test_paper_weak_error_does_not_vanish(phi):
    """With the noise per unit time held fixed, the chain is Euler–Maruyama of one SDE; the corrected SDE's
    weak error vanishes like h while the printed eq. (4)'s stays put (its diffusion is wrong)."""
    pb = paper_table_problem()
    kw = {"t_end": 1.0, "steps": STEPS, "server_rate": 1.0, "phi": phi, "w0": 3.0, "noise_scaling": "diffusive"}
    paper = weak_error_vs_step(pb, 0.05, 5, variant="paper", **kw)
    corrected = weak_error_vs_step(pb, 0.05, 5, variant="corrected", **kw)
    assert paper.slope < 0.3
    assert paper.errors[-1] > 0.5 * paper.errors[0]
    assert paper.errors[-1] > 40 * corrected.errors[-1]
    # in the small-noise limit (problem as given) every variant has weak error O(h); paper's stays 5× larger
    fixed = weak_error_vs_step(pb, 0.05, 5, variant="paper", **(kw | {"noise_scaling": "fixed"}))
    fixed_c = weak_error_vs_step(pb, 0.05, 5, variant="corrected", **(kw | {"noise_scaling": "fixed"}))
    assert np.all(fixed.errors > 4 * fixed_c.errors)


def test_matched_weak_error_is_zero():
    curve = weak_error_vs_step(random_quadratic_problem(3, 2, seed=1), 0.05, 5, t_end=1.0, steps=STEPS[:3],
                               variant="matched", w0=1.0)
    assert curve.errors.max() < 1e-10


def test_weak_error_input_validation():
    pb = paper_table_problem()
    with pytest.raises(FedsdeInputError, match="whole number"):
        weak_error_vs_step(pb, 0.05, 5, t_end=1.0, steps=[0.3, 0.1])
    with pytest.raises(FedsdeInputError, match="noise_scaling"):
        weak_error_vs_step(pb, 0.05, 5, t_end=1.0, steps=[0.2, 0.1], noise_scaling="none")
    with pytest.raises(FedsdeInputError, match="phi"):
        weak_error_vs_step(pb, 0.05, 5, t_end=1.0, steps=[0.2, 0.1], phi="norm")
    with pytest.raises(FedsdeInputError, match="two step"):
        weak_error_vs_step(pb, 0.05, 5, t_end=1.0, steps=[0.2])


@pytest.mark.parametrize(("steps", "match"), [
    ([0.1, 0.0], r"steps\[1\]=0\.0: must be finite and > 0"),
    ([0.1, -0.05], r"steps\[1\]=-0\.05: must be finite and > 0"),
    ([0.1, float("inf")], r"steps\[1\]=inf"),
    ([0.1, float("nan")], r"steps\[1\]=nan"),
    ([0.1, 0.05, 0.1], r"steps\[2\]=0\.1: repeats steps\[0\]; the step sizes must be distinct"),
])
def test_weak_error_steps_must_be_positive_and_distinct(steps, match):
    with pytest.raises(FedsdeInputError, match=match):
        weak_error_vs_step(paper_table_problem(), 0.05, 5, t_end=1.0, steps=steps)
    with pytest.raises(FedsdeInputError, match=match):
        weak_error_mc_vs_step(paper_table_problem(), 0.05, 5, t_end=1.0, steps=steps, paths=2, seed=0)


def test_local_loglog_slopes():
    h = np.array([0.025, 0.1, 0.05])  # any order: slopes run from the largest step down
    np.testing.assert_allclose(local_loglog_slopes(h, 3.0 * h**2), [2.0, 2.0])
    err = np.array([1.0, 0.5, 0.0])
    out = local_loglog_slopes([0.4, 0.2, 0.1], err)
    assert out[0] == pytest.approx(1.0) and np.isnan(out[1])


def test_fit_loglog_slope():
    h = np.array([0.1, 0.05, 0.025])
    slope, icpt = fit_loglog_slope(h, 3.0 * h**2)
    assert slope == pytest.approx(2.0) and np.exp(icpt) == pytest.approx(3.0)
    with pytest.raises(FedsdeInputError):
        fit_loglog_slope([0.1], [1.0])


def test_mc_difference_interval_covers_truth():
    rng = np.random.default_rng(3)
    a, b = rng.normal(1.0, 1.0, size=(5000, 1)), rng.normal(0.0, 1.0, size=(4000, 1))
    diff = mc_difference(a, b, lambda w: w[:, 0] ** 2)  # E = 2 vs 1
    assert diff.ci[0] < 1.0 < diff.ci[1] and diff.stderr > 0
    assert diff.value == pytest.approx(1.0, abs=5 * diff.stderr)


def test_monte_carlo_weak_error_of_the_general_sde():
    """The general SDE (compensated, one step per round) has the chain's first two moments each round, so the
    Monte-Carlo difference of a quadratic φ is zero within its error bars."""
    pb = paper_table_problem()
    curve = weak_error_mc_vs_step(pb, 0.05, 5, t_end=0.2, steps=[0.1, 0.05], paths=2048, seed=1, phi="dist2",
                                  inner_samples=4, w0=2.0)
    assert curve.rounds.tolist() == [2, 4] and curve.ci.shape == (2, 2)
    assert np.all(curve.errors < 5 * curve.stderr + 1e-12)
    assert np.all(curve.stderr > 0) and np.isfinite(curve.slope)
