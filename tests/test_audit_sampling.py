"""Client sampling and non-FedAvg server rules: exact moments by enumeration against independent computations and
against the simulator (tolerances from standard errors)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_moments_within, brute_round, brute_step

from fedsde.errors import FedsdeInputError
from fedsde.exact import transient_moments
from fedsde.problems import QuadraticProblem, random_quadratic_problem
from fedsde.sim import simulate
from fedsde.theory.sampling import sampled_moments, weighting_distribution


def _problem():
    return QuadraticProblem.from_arrays([[1.0, 2.0], [0.5, 1.5], [3.0, 1.0], [2.0, 0.7]],
                                        [[1.0, -1.0], [-2.0, 0.5], [0.5, 2.0], [0.0, 1.0]],
                                        [[0.3, 0.1], [0.2, 0.4], [0.5, 0.2], [0.1, 0.3]], [0.4, 0.3, 0.2, 0.1])


@pytest.mark.parametrize(("m", "weighting"), [(2, "renormalised"), (3, "renormalised"), (2, "multinomial"),
                                              (3, "multinomial"), (2, "unbiased")])
def test_weighting_distribution_moments(m, weighting):
    """Probabilities sum to 1; E[ω] = p for the unbiased and multinomial weightings; renormalised weights sum to 1;
    multinomial: Cov ω = (diag p − ppᵀ)/m."""
    p = np.array([0.4, 0.3, 0.2, 0.1])
    om, pr = weighting_distribution(p, m, weighting)
    assert pr.sum() == pytest.approx(1.0, abs=1e-14) and np.all(pr > 0)
    Ew = pr @ om
    if weighting != "renormalised":
        np.testing.assert_allclose(Ew, p, atol=1e-14)
    else:
        np.testing.assert_allclose(om.sum(1), 1.0, atol=1e-14)
    if weighting == "multinomial":
        cov = np.einsum("k,ki,kj->ij", pr, om, om) - np.outer(Ew, Ew)
        np.testing.assert_allclose(cov, (np.diag(p) - np.outer(p, p)) / m, atol=1e-14)


def test_unbiased_enumeration_equals_exact_participation_law():
    """Independent implementations: this module's enumeration and fedsde.exact's closed form (participation=m)."""
    pb = random_quadratic_problem(4, 2, seed=7, weights="random")
    w0 = np.array([2.0, -1.0])
    ex = transient_moments(pb, 0.2, [2, 3, 1, 5], 6, 0.9, w0=w0, participation=2)
    en = sampled_moments(pb, 0.2, [2, 3, 1, 5], 6, participation=2, weighting="unbiased", w0=w0, server_lr=0.9)
    np.testing.assert_allclose(en.mean, ex.mean, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(en.cov, ex.cov, rtol=1e-10, atol=1e-12)


def _brute_mixture_step(pb, clients, s, mean, cov, omega, prob):
    """Moments after one round for a finite law of weights (mixture of Gaussians), stepping local updates."""
    d = pb.d
    means, covs = [], []
    for w in omega:
        F = np.eye(d) + s * sum(w[k] * (clients[k][0] - np.eye(d)) for k in range(pb.Q))
        g = s * sum(w[k] * clients[k][1] for k in range(pb.Q))
        N = s**2 * sum(w[k] ** 2 * clients[k][2] for k in range(pb.Q))
        means.append(F @ mean + g)
        covs.append(F @ cov @ F.T + N)
    means = np.array(means)
    mu = prob @ means
    between = np.einsum("k,ki,kj->ij", prob, means - mu, means - mu)
    return mu, np.einsum("k,kij->ij", prob, np.array(covs)) + between


@pytest.mark.parametrize("weighting", ["renormalised", "multinomial"])
def test_sampled_moments_equal_brute_force_enumeration(weighting):
    pb = _problem()
    steps, s, eta = [1, 3, 2, 4], 0.8, 0.1
    en = sampled_moments(pb, eta, steps, 4, participation=2, weighting=weighting, w0=[1.0, 1.0], server_lr=s)
    clients = brute_round(pb, eta, steps, s)
    om, pr = weighting_distribution(pb.p, 2, weighting)
    m, P = np.array([1.0, 1.0]), np.zeros((2, 2))
    for n in range(4):
        m, P = _brute_mixture_step(pb, clients, s, m, P, om, pr)
        np.testing.assert_allclose(en.mean[n + 1], m, rtol=1e-11, atol=1e-13)
        np.testing.assert_allclose(en.cov[n + 1], P, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize(("weighting", "seed"), [("renormalised", 3), ("multinomial", 4)])
def test_sampled_moments_match_the_simulator(weighting, seed):
    """Three rounds of the simulator (R = 20000) against the exact moments, 5 s.e. (mean and covariance)."""
    pb = _problem()
    steps, eta = [1, 3, 2, 4], 0.1
    res = simulate(pb, eta=eta, local_steps=steps, rounds=3, replicates=20000, seed=seed, w0=[1.0, 1.0],
                   participation=2, weighting=weighting, record=[3])
    en = sampled_moments(pb, eta, steps, 3, participation=2, weighting=weighting, w0=[1.0, 1.0])
    assert_moments_within(np.asarray(res.final), en.mean[-1], en.cov[-1])
    # the check resolves the sampling term: the covariance differs from full participation's by many s.e.
    full = transient_moments(pb, eta, steps, 3, w0=[1.0, 1.0])
    x = np.asarray(res.final)
    se = x.std(0, ddof=1) ** 2 * np.sqrt(2.0 / x.shape[0])
    assert np.max(np.abs(np.diag(en.cov[-1] - full.cov[-1])) / se) > 10


def test_weighting_errors():
    with pytest.raises(FedsdeInputError, match="weighting='x'"):
        weighting_distribution([0.5, 0.5], 1, "x")
    with pytest.raises(FedsdeInputError, match="participation=3: cannot exceed"):
        weighting_distribution([0.5, 0.5], 3, "renormalised")


def test_fednova_exact_covariance_matches_simulation():
    """FedNova's round is FedAvg's with weights p_iτ_eff/τ_i (seed 003, eq. (20)): exact covariance vs simulator."""
    from fedsde.aggregators import FedNova
    from fedsde.theory.fednova import aggregation_weights

    pb = _problem()
    tau = [1, 3, 2, 6]
    w = aggregation_weights(pb, tau, "fednova")
    ex = transient_moments(pb, 0.1, tau, 3, w0=[1.0, 1.0], weights=w)
    res = simulate(pb, eta=0.1, local_steps=tau, rounds=3, replicates=20000, seed=5, w0=[1.0, 1.0],
                   aggregator=FedNova(), record=[3])
    assert_moments_within(np.asarray(res.final), ex.mean[-1], ex.cov[-1])
    fedavg = transient_moments(pb, 0.1, tau, 3, w0=[1.0, 1.0])
    assert np.max(np.abs(fedavg.mean[-1] - ex.mean[-1])) > 0.05  # the rules differ visibly


def test_feddisco_exact_covariance_matches_simulation():
    """FedDisco replaces p by ReLU(n − a·d + b)-weights (seed 004, eq. (3)): exact covariance vs simulator."""
    from fedsde.aggregators import FedDisco
    from fedsde.aggregators.feddisco import feddisco_weights

    pb = _problem()
    labels = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4], [0.05, 0.05, 0.9]])
    sizes = np.array([40.0, 30.0, 20.0, 10.0])
    w = feddisco_weights(sizes, labels, a=0.5, b=0.1)
    ex = transient_moments(pb, 0.1, 3, 3, w0=[1.0, 1.0], weights=w)
    res = simulate(pb, eta=0.1, local_steps=3, rounds=3, replicates=20000, seed=6, w0=[1.0, 1.0],
                   aggregator=FedDisco(label_distributions=labels, sizes=sizes), record=[3])
    assert_moments_within(np.asarray(res.final), ex.mean[-1], ex.cov[-1])
    assert np.max(np.abs(w - sizes / sizes.sum())) > 0.05


def test_round_law_step_equals_brute_force_at_server_lr_not_one():
    """The one-round law's step (mean and covariance) with s ≠ 1 against stepping every local update."""
    from fedsde.exact import round_law, stationary_law

    pb = random_quadratic_problem(4, 3, seed=11, curvature=(0.3, 3.0), weights="random")
    steps = np.array([1, 4, 7, 12])
    m0, P0 = np.array([1.0, -0.5, 2.0]), np.diag([0.3, 0.1, 0.2])
    for s in (0.3, 0.7, 1.6):
        law = round_law(pb, 0.15, steps, s)
        m, P = law.step(m0, P0)
        bm, bP = brute_step(pb, brute_round(pb, 0.15, steps, s), s, m0, P0)
        np.testing.assert_allclose(m, bm, rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(P, bP, rtol=1e-10, atol=1e-12)
        st = stationary_law(pb, 0.15, steps, s)
        fm, fP = brute_step(pb, brute_round(pb, 0.15, steps, s), s, st.mean, st.cov)
        np.testing.assert_allclose(fm, st.mean, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(fP, st.cov, rtol=1e-9, atol=1e-13)


@pytest.mark.parametrize("weighting", ["unbiased", "renormalised", "multinomial"])
def test_weighting_distribution_normalises_the_client_weights(weighting):
    from fedsde.theory.sampling import weighting_distribution

    omega, prob = weighting_distribution([1.0, 1.0, 2.0], 2, weighting)
    ref_omega, ref_prob = weighting_distribution([0.25, 0.25, 0.5], 2, weighting)
    assert prob.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(prob, ref_prob)
    np.testing.assert_allclose(omega, ref_omega)
    with pytest.raises(FedsdeInputError, match="client weights"):
        weighting_distribution([1.0, -1.0, 2.0], 2, weighting)
