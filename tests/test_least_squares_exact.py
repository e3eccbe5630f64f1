"""Exact moments of minibatch FedAvg on least-squares clients: brute-force enumeration of every sampling path,
the stationary law as the limit of the transient one, the simulator on Grunfeld, the constant-noise surrogate and
the SDE's moments (the quadratic OU law where the noise is constant, Euler–Maruyama where it is not)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from fedsde.errors import FedsdeInputError, NoStationaryLawError
from fedsde.exact import stationary_law, transient_moments
from fedsde.exact.least_squares import least_squares_round_law, least_squares_stationary_law
from fedsde.exact.least_squares_sde import least_squares_sde, least_squares_sde_moments
from fedsde.exact.least_squares_surrogate import constant_noise_surrogate, surrogate_gap
from fedsde.exact.least_squares_transient import least_squares_transient_moments
from fedsde.problems import load_problem, random_quadratic_problem
from fedsde.problems.regression.problem import RegressionProblem
from fedsde.sde.coefficients import quadratic_sde_coefficients
from fedsde.sim import simulate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "problems"
SCHEMES = ("without-replacement", "with-replacement")


# ---------------------------------------------------------------------------------------------- brute force
def _step_outcomes(X, y, b, sampling, l2):
    """Every minibatch of one step with its probability: (A_S, c_S, prob)."""
    n, d = X.shape
    if sampling == "with-replacement":
        batches, prob = list(itertools.product(range(n), repeat=b)), 1.0 / n**b
    else:
        batches = list(itertools.combinations(range(n), b))
        prob = 1.0 / len(batches)
    return [(X[list(S)].T @ X[list(S)] / b + l2 * np.eye(d), X[list(S)].T @ y[list(S)] / b, prob) for S in batches]


def _client_paths(X, y, b, sampling, l2, eta, steps):
    """Every path of ``steps`` local steps as the affine map w ↦ T w + u, with its probability."""
    d = X.shape[1]
    T, u, pr = np.eye(d)[None], np.zeros((1, d)), np.ones(1)
    for _ in range(steps):
        parts = [(np.einsum("ab,nbc->nac", np.eye(d) - eta * A, T), u @ (np.eye(d) - eta * A).T + eta * c, pr * q)
                 for A, c, q in _step_outcomes(X, y, b, sampling, l2)]
        T, u, pr = (np.concatenate(z) for z in zip(*parts, strict=True))
    return T, u, pr


def _round_maps(pb, eta, steps, s, subsets):
    """The round's random affine map w ↦ M w + v over all client paths and participation outcomes."""
    Xs, ys = pb.client_data()
    tau = np.broadcast_to(steps, (pb.Q,))
    paths = [_client_paths(X, y, pb.batch_size, pb.sampling, pb.l2, eta, int(t))
             for X, y, t in zip(Xs, ys, tau, strict=True)]
    d = pb.d
    out = []
    for prob, om in subsets:
        M, v, p = (np.eye(d) * (1.0 - s * om.sum()))[None], np.zeros((1, d)), np.array([prob])
        for k, (T, u, pr) in enumerate(paths):
            M = (M[:, None] + s * om[k] * T[None]).reshape(-1, d, d)
            v = (v[:, None] + s * om[k] * u[None]).reshape(-1, d)
            p = (p[:, None] * pr[None]).reshape(-1)
        out.append((M, v, p))
    return (np.concatenate(z) for z in zip(*out, strict=True))


def _brute_moments(pb, eta, steps, s, rounds, subsets, w0):
    """Mean and covariance after every round: rounds are i.i.d. random affine maps, enumerated exactly."""
    M, v, p = _round_maps(pb, eta, steps, s, subsets)
    assert abs(p.sum() - 1.0) < 1e-12
    m, P = np.asarray(w0, dtype=np.float64), np.zeros((pb.d, pb.d))
    out = [(m, P)]
    for _ in range(rounds):
        mean_v = p @ v
        Mm = M @ m
        new_m = p @ Mm + mean_v
        dev = Mm + v - new_m  # deviation of the conditional means
        P = np.einsum("n,nab,bc,ndc->ad", p, M, P, M) + np.einsum("n,na,nb->ab", p, dev, dev)
        m = new_m
        out.append((m, P))
    return out


def _subsets(pb, m, weighting):
    Q = pb.Q
    if m is None:
        return [(1.0, pb.p)]
    if weighting == "multinomial":
        out = []
        for draw in itertools.product(range(Q), repeat=m):
            om = np.bincount(draw, minlength=Q) / m
            out.append((float(np.prod(pb.p[list(draw)])), om))
        return out
    out = []
    for S in itertools.combinations(range(Q), m):
        om = np.zeros(Q)
        om[list(S)] = pb.p[list(S)]
        om = om * Q / m if weighting == "unbiased" else om / om.sum()
        out.append((1.0 / math.comb(Q, m), om))
    return out


def _tiny(sampling, l2=0.0, Q=2, seed=1):
    rng = np.random.default_rng(seed)
    sizes = (3, 4, 3)[:Q]
    X = [rng.normal(size=(n, 2)) for n in sizes]
    y = [rng.normal(size=n) + k for k, n in enumerate(sizes)]
    return RegressionProblem.from_clients(X, y, batch_size=2, sampling=sampling, l2=l2, w0=[0.5, -1.0])


def _rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / max(np.abs(np.asarray(b)).max(), 1e-300))


# ---------------------------------------------------------------------------------------------- transient law
@pytest.mark.parametrize("sampling", SCHEMES)
@pytest.mark.parametrize(("l2", "steps", "s"), [(0.0, 2, 1.0), (0.3, 2, 0.7), (0.1, (1, 2), 1.3)])
def test_transient_moments_equal_enumeration_of_every_sampling_path(sampling, l2, steps, s):
    pb = _tiny(sampling, l2)
    eta, rounds = 0.3, 3
    brute = _brute_moments(pb, eta, steps, s, rounds, _subsets(pb, None, ""), pb.w0)
    ex = least_squares_transient_moments(pb, eta, steps, rounds, s)
    assert np.array_equal(ex.rounds, np.arange(rounds + 1))
    for n in range(1, rounds + 1):
        assert _rel(ex.mean[n], brute[n][0]) < 1e-10
        assert _rel(ex.cov[n], brute[n][1]) < 1e-10
        assert np.abs(brute[n][1]).max() > 1e-3  # the minibatch noise is resolved, not zero


@pytest.mark.parametrize("sampling", SCHEMES)
@pytest.mark.parametrize("weighting", ["unbiased", "renormalised", "multinomial"])
def test_partial_participation_equals_enumeration(sampling, weighting):
    pb = _tiny(sampling, 0.1, Q=3).with_weights([1.0, 2.0, 3.0])
    brute = _brute_moments(pb, 0.25, 1, 1.0, 2, _subsets(pb, 2, weighting), pb.w0)
    ex = least_squares_transient_moments(pb, 0.25, 1, 2, participation=2, weighting=weighting)
    for n in (1, 2):
        assert _rel(ex.mean[n], brute[n][0]) < 1e-10 and _rel(ex.cov[n], brute[n][1]) < 1e-10


def test_linear_aggregator_weights_equal_enumeration():
    pb = _tiny("with-replacement", 0.2)
    omega = np.array([0.9, 0.35])  # e.g. FedNova's p_k τ_eff / τ_k; need not sum to one
    brute = _brute_moments(pb, 0.3, (2, 1), 0.8, 2, [(1.0, omega)], pb.w0)
    ex = least_squares_transient_moments(pb, 0.3, (2, 1), 2, 0.8, weights=omega)
    assert _rel(ex.mean[2], brute[2][0]) < 1e-10 and _rel(ex.cov[2], brute[2][1]) < 1e-10


def test_conditional_moments_of_one_round_equal_enumeration():
    pb = _tiny("without-replacement", 0.1)
    law = least_squares_round_law(pb, 0.3, 2, 0.9)
    M, v, p = _round_maps(pb, 0.3, 2, 0.9, [(1.0, pb.p)])
    ws = np.array([[0.5, -1.0], [2.0, 1.0], [-3.0, 0.2]])
    for w in ws:
        out = M @ w + v
        mean = p @ out
        cov = np.einsum("n,na,nb->ab", p, out - mean, out - mean)
        assert _rel(law.conditional_mean(w), mean) < 1e-12
        assert _rel(law.conditional_cov(w), cov) < 1e-10
    assert law.conditional_cov(ws).shape == (3, 2, 2)
    # the noise is quadratic in w: it grows away from the clients' fits
    assert np.trace(law.conditional_cov(ws[1] * 10)) > 10 * np.trace(law.conditional_cov(ws[1]))


# ---------------------------------------------------------------------------------------------- stationary law
@pytest.mark.parametrize("sampling", SCHEMES)
@pytest.mark.parametrize("participation", [None, 2])
def test_stationary_law_is_the_limit_of_the_transient_moments(sampling, participation):
    pb = _tiny(sampling, 0.1, Q=3)
    st = least_squares_stationary_law(pb, 0.1, 3, 0.8, participation=participation)
    tr = least_squares_transient_moments(pb, 0.1, 3, 600, 0.8, participation=participation, record=[600])
    assert st.spectral_radius < 1
    assert _rel(tr.mean[-1], st.mean) < 1e-9 and _rel(tr.cov[-1], st.cov) < 1e-9
    # a fixed point of one round
    m1, P1 = st.law.step(st.mean, st.cov)
    assert _rel(m1, st.mean) < 1e-12 and _rel(P1, st.cov) < 1e-10


def test_no_stationary_law_is_refused_with_the_spectral_radius():
    pb = _tiny("with-replacement", 0.0)
    with pytest.raises(NoStationaryLawError, match=r"spectral radius \d") as info:
        least_squares_stationary_law(pb, 3.0 / pb.max_curvature().max(), 2)
    assert "\n" not in str(info.value)


def test_second_moment_divergence_is_refused_where_the_mean_still_contracts():
    rng = np.random.default_rng(4)
    X = [rng.normal(size=(6, 2)) * np.array([1.0, 6.0])]
    pb = RegressionProblem.from_clients(X, [rng.normal(size=6)], batch_size=1, sampling="with-replacement")
    eta = 1.9 / pb.max_curvature()[0]  # the mean contracts, the minibatch noise does not
    assert least_squares_round_law(pb, eta, 1).spectral_radius < 1
    with pytest.raises(NoStationaryLawError, match=r"second-moment operator has spectral radius"):
        least_squares_stationary_law(pb, eta, 1)


def test_memory_is_checked_up_front():
    pb = _tiny("with-replacement", 0.1)
    with pytest.raises(FedsdeInputError, match=r"needs about .* of memory but about .* is available"):
        least_squares_stationary_law(pb, 0.1, 2, memory_limit=100)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"eta": 0.0}, r"eta=0.0: must be finite and > 0"),
    ({"participation": 4}, r"participation=4: cannot exceed the number of clients Q=3"),
    ({"weighting": "fair"}, r"weighting='fair': must be one of unbiased, renormalised, multinomial"),
    ({"weights": [1.0, 2.0]}, r"weights: shape \(2,\) must be \(3,\)"),
    ({"weights": [1.0, -1.0, 1.0]}, r"weights\[1\]=-1.0: must be finite and >= 0"),
    ({"weights": [1.0, 1.0, 1.0], "participation": 2, "weighting": "multinomial"}, r"weights: not used by"),
    ({"local_steps": 0}, r"local_steps=0: must be an integer >= 1"),
])
def test_bad_arguments_give_one_line_errors(kwargs, match):
    pb = _tiny("with-replacement", 0.1, Q=3)
    args = {"eta": 0.1, "local_steps": 2} | kwargs
    with pytest.raises(FedsdeInputError, match=match):
        least_squares_round_law(pb, args.pop("eta"), args.pop("local_steps"), **args)


def test_refusals_name_the_problem_batch_size_and_subset_count():
    with pytest.raises(FedsdeInputError, match=r"not a least-squares RegressionProblem"):
        least_squares_round_law(random_quadratic_problem(2, 2, seed=0), 0.1, 1)
    with pytest.raises(FedsdeInputError, match=r"batch_size: the problem has none"):
        least_squares_round_law(_tiny("with-replacement").replace(batch_size=None), 0.1, 1)
    rng = np.random.default_rng(0)
    many = RegressionProblem.from_clients([rng.normal(size=(2, 1)) for _ in range(40)],
                                          [rng.normal(size=2) for _ in range(40)], batch_size=1,
                                          p=np.arange(1.0, 41.0))
    with pytest.raises(FedsdeInputError, match=r"C\(40, 20\) = 1.38e\+11 client subsets"):
        least_squares_round_law(many, 0.1, 1, participation=20, weighting="renormalised")
    equal = many.with_weights(np.ones(40))  # closed form: every participant weighs 1/m
    law = least_squares_round_law(equal, 0.1, 1, participation=20, weighting="renormalised")
    assert np.allclose(law.mu, 1 / 40) and np.isclose(law.C[0, 0], (1 / 20) ** 2 * 0.5)


# ---------------------------------------------------------------------------------------------- the simulator
@pytest.mark.parametrize(("sampling", "participation", "weighting"), [
    ("without-replacement", None, "unbiased"),
    ("with-replacement", 4, "renormalised"),
])
def test_simulated_moments_on_grunfeld_agree_with_the_exact_ones(sampling, participation, weighting):
    pb = load_problem(EXAMPLES / "grunfeld.toml").replace(sampling=sampling)
    eta, E, rounds, R = 0.05, 5, 30, 2000
    ex = least_squares_transient_moments(pb, eta, E, rounds, participation=participation, weighting=weighting)
    sim = simulate(pb, eta=eta, local_steps=E, rounds=rounds, replicates=R, seed=11,
                   participation=participation, weighting=weighting)
    W = sim.weights[1:]  # (T, R, d)
    m = W.mean(1)
    z_m = np.abs(m - ex.mean[1:]) / (W.std(1, ddof=1) / np.sqrt(R))
    dev = W - m[:, None]
    prod = np.einsum("tri,trj->trij", dev, dev)
    c = prod.sum(1) / (R - 1)
    se_c = prod.std(1, ddof=1) / np.sqrt(R)
    z_c = np.abs(c - ex.cov[1:]) / se_c
    assert z_m.max() < 5 and z_c.max() < 5, (z_m.max(), z_c.max())
    # not vacuous: 5 s.e. resolve a fifth of the variance and a twentieth of the mean's movement, and the
    # constant-noise surrogate's covariance (off by 33-53% on the diagonal here) is rejected
    assert np.all(5 * se_c[-1].diagonal() < 0.2 * ex.cov[-1].diagonal())
    assert np.all(5 * W.std(1, ddof=1)[-1] / np.sqrt(R) < 0.05 * np.abs(ex.mean[-1] - ex.mean[0]))
    if participation is None:
        sur = transient_moments(constant_noise_surrogate(pb), eta, E, rounds, record=[rounds])
        assert np.max(np.abs(c[-1] - sur.cov[-1]) / se_c[-1]) > 5


def test_fednova_on_a_csv_problem_agrees_with_the_exact_law_of_its_weights():
    from fedsde.exact import aggregator_round_weights

    pb = load_problem(EXAMPLES / "my_data.toml")
    tau, rounds, R = [2, 3, 1], 5, 4000
    omega = aggregator_round_weights(pb, "fednova", tau)
    ex = least_squares_transient_moments(pb, 0.05, tau, rounds, weights=omega)
    sim = simulate(pb, eta=0.05, local_steps=tau, rounds=rounds, replicates=R, seed=2, aggregator="fednova",
                   record=[rounds])
    W = sim.weights[-1]
    dev = W - W.mean(0)
    prod = dev[:, :, None] * dev[:, None, :]
    assert np.all(np.abs(W.mean(0) - ex.mean[-1]) < 5 * W.std(0, ddof=1) / np.sqrt(R))
    assert np.all(np.abs(prod.sum(0) / (R - 1) - ex.cov[-1]) < 5 * prod.std(0, ddof=1) / np.sqrt(R))
    fedavg = least_squares_transient_moments(pb, 0.05, tau, rounds)  # resolved: FedAvg's law is another
    assert np.any(np.abs(W.mean(0) - fedavg.mean[-1]) > 5 * W.std(0, ddof=1) / np.sqrt(R))


# ---------------------------------------------------------------------------------------------- surrogate
def _constant_noise_problem(sampling="with-replacement"):
    """Rows x_i = ±v_k: every A_S = v_k v_kᵀ + λI is the same, so the minibatch noise does not depend on w."""
    rng = np.random.default_rng(7)
    X, y = [], []
    for n in (4, 5, 3):
        v = rng.normal(size=2)
        X.append(rng.choice([-1.0, 1.0], size=n)[:, None] * v[None])
        y.append(rng.normal(size=n))
    return RegressionProblem.from_clients(X, y, batch_size=2, sampling=sampling, l2=0.5)


@pytest.mark.parametrize("sampling", SCHEMES)
@pytest.mark.parametrize("participation", [None, 2])
def test_surrogate_equals_the_exact_law_when_the_noise_is_constant(sampling, participation):
    pb = _constant_noise_problem(sampling)
    sur = constant_noise_surrogate(pb)
    assert np.allclose(sur.Sigma, pb.minibatch_covariance(pb.optimum + 3.0), rtol=1e-12, atol=0)
    ex = least_squares_stationary_law(pb, 0.3, 3, 0.9, participation=participation)
    q = stationary_law(sur, 0.3, 3, 0.9, participation=participation)
    assert _rel(ex.mean, q.mean) < 1e-12 and _rel(ex.cov, q.cov) < 1e-10
    et = least_squares_transient_moments(pb, 0.3, 3, 6, 0.9, w0=[1.0, -2.0], participation=participation)
    qt = transient_moments(sur, 0.3, 3, 6, 0.9, w0=[1.0, -2.0], participation=participation)
    assert _rel(et.mean, qt.mean) < 1e-12 and _rel(et.cov, qt.cov) < 1e-10
    gap = surrogate_gap(pb, 0.3, 3, 0.9, participation=participation)
    assert gap.cov_rel_error < 1e-9 and abs(gap.variance_ratio - 1) < 1e-9


def test_surrogate_shares_the_mean_and_misses_the_covariance_on_grunfeld():
    pb = load_problem(EXAMPLES / "grunfeld.toml")
    sur = constant_noise_surrogate(pb)
    assert np.allclose(sur.optimum, pb.optimum, rtol=1e-12) and np.allclose(sur.hessian, pb.hessian(), rtol=1e-12)
    gap = surrogate_gap(pb, 0.05, 5)
    assert gap.mean_error < 1e-9  # the mean recursions are the same
    assert gap.cov_rel_error > 0.2  # the state-dependent noise matters here (measured: 0.56)
    lo, hi = gap.worst_direction_ratio
    assert lo <= gap.variance_ratio <= hi


# ---------------------------------------------------------------------------------------------- the SDE
@pytest.mark.parametrize("h", [None, 0.05])
def test_sde_moments_equal_the_quadratic_ou_law_when_the_noise_is_constant(h):
    pb = _constant_noise_problem()
    ou = quadratic_sde_coefficients(constant_noise_surrogate(pb), 0.3, 2, 0.9, h)
    sde = least_squares_sde(pb, 0.3, 2, 0.9, h)
    w0 = [1.0, -2.0]
    mo = least_squares_sde_moments(pb, 0.3, 2, [0.0, 0.2, 1.5, 40.0], 0.9, h, w0=w0)
    for i, t in enumerate(mo.times):
        law = ou.moments(t, w0)
        assert _rel(mo.mean[i], law.mean) < 1e-10
        assert np.abs(mo.cov[i] - law.cov).max() < 1e-10 * np.abs(ou.stationary().cov).max()
    m, P = sde.stationary()
    assert _rel(m, ou.stationary().mean) < 1e-12 and _rel(P, ou.stationary().cov) < 1e-10
    w = np.array([[0.3, 0.1], [5.0, -4.0]])
    assert np.allclose(sde.diffusion_cov(w), ou.diffusion_cov, rtol=1e-10, atol=0)
    assert np.allclose(sde.drift(w), -(w - ou.c) @ ou.A.T, rtol=1e-10, atol=1e-14)


def test_sde_stationary_law_is_the_limit_of_its_moments():
    pb = _tiny("without-replacement", 0.1, Q=3)
    sde = least_squares_sde(pb, 0.1, 3, 0.8, participation=2)
    m, P = sde.stationary()
    late = sde.moments([400.0], w0=[2.0, 2.0], cov0=0.5)
    assert _rel(late.mean[0], m) < 1e-9 and _rel(late.cov[0], P) < 1e-9
    assert np.allclose(m, least_squares_stationary_law(pb, 0.1, 3, 0.8, participation=2).mean, rtol=1e-12)


def test_sde_moments_agree_with_a_fine_euler_maruyama_monte_carlo():
    """State-dependent diffusion σσᵀ(w) = Cov[Δ|w]/h, integrated with 20 steps per round (exponential Euler: the
    linear drift exactly, the noise frozen over a step) from a point far from the fixed point, where the quadratic
    noise changes along the way."""
    import scipy.linalg

    pb = _tiny("with-replacement", 0.1)
    eta, E, s = 0.2, 2, 1.0
    sde = least_squares_sde(pb, eta, E, s)
    w0, T, sub, R = np.array([3.0, -3.0]), 1.0, 20, 10000  # T = 5 rounds of h = η
    n = round(T / sde.h) * sub
    dt = T / n
    Phi, c = scipy.linalg.expm(sde.drift_matrix * dt), sde.centre
    rng = np.random.default_rng(5)
    w = np.repeat(w0[None], R, axis=0)
    for _ in range(n):
        root = np.linalg.cholesky(sde.diffusion_cov(w))
        w = c + (w - c) @ Phi.T + np.einsum("rij,rj->ri", root, rng.standard_normal((R, 2))) * np.sqrt(dt)
    mo = sde.moments([T], w0=w0)
    mean, cov = mo.mean[0], mo.cov[0]
    z_m = np.abs(w.mean(0) - mean) / (w.std(0, ddof=1) / np.sqrt(R))
    dev = w - w.mean(0)
    prod = dev[:, :, None] * dev[:, None, :]
    se_c = prod.std(0, ddof=1) / np.sqrt(R)
    z_c = np.abs(prod.sum(0) / (R - 1) - cov) / se_c
    assert z_m.max() < 5 and z_c.max() < 5, (z_m, z_c)
    # not vacuous: the diffusion at the start is far from the one at the fixed point, 5 s.e. resolve a tenth of
    # the variance, and the OU law with the noise frozen at w* (the constant-noise surrogate) is rejected
    assert np.trace(sde.diffusion_cov(w0)) > 2 * np.trace(sde.diffusion_cov(c))
    assert np.all(5 * se_c.diagonal() < 0.1 * cov.diagonal())
    ou = quadratic_sde_coefficients(constant_noise_surrogate(pb), eta, E, s).moments(T, w0)
    assert np.max(np.abs(prod.sum(0) / (R - 1) - ou.cov) / se_c) > 5
