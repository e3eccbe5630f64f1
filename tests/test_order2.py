"""The order-2 SDE in numbers: one-step orders against the exact round laws, the order refinement's slopes, the
Hessian-vector-product drift, the weak-order-2 scheme and its coupling with FedAvg, the log–log interval."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsde._stats import loglog_slope_interval
from fedsde.compare.order2 import order_refinement
from fedsde.exact import round_law
from fedsde.exact.least_squares import least_squares_round_law
from fedsde.problems import QuadraticProblem, load_problem, paper_table_problem, random_quadratic_problem
from fedsde.sde import quadratic_sde_coefficients
from fedsde.sde.order2 import least_squares_order2_sde, order2_sde_coefficients
from fedsde.sde.order2_general import Order2Drift, client_loss

GRUNFELD = "examples/problems/grunfeld.toml"


def _orders(errs) -> np.ndarray:
    errs = np.asarray(errs)
    return np.log2(errs[:-1] / errs[1:])


# ---------------------------------------------------------------------------------------------- one round
@pytest.mark.parametrize("variant", ["corrected", "order2", "order2-centred", "order2-series"])
def test_one_step_orders_against_the_round_law(variant):
    # halving η: the mean transition's error falls like η² (order 1) or η³ (order 2), the step covariance's like
    # η³ or η⁴ (full matrices, heterogeneous τ_k, s ≠ 1)
    pb = random_quadratic_problem(Q=3, d=3, seed=1)
    steps, s = np.array([2, 3, 4]), 0.7
    rows = []
    for eta in (0.02, 0.01, 0.005):
        lin = quadratic_sde_coefficients(pb, eta, steps, s, None, variant)
        Phi, K = lin.transition(lin.h)
        law = round_law(pb, eta, steps, s, warn=False)
        w = np.ones(pb.d)
        mean_sde = lin.c + Phi @ (w - lin.c)
        mean_chain = law.c + (np.eye(pb.d) - s * law.B) @ (w - law.c)
        rows.append((np.linalg.norm(mean_sde - mean_chain), np.linalg.norm(K - s * s * law.noise_cov)))
    mean_order, cov_order = _orders(np.array(rows)).T
    want = (2, 3) if variant == "corrected" else (3, 4)
    assert np.all(mean_order > want[0] - 0.25) and np.all(cov_order > want[1] - 0.25), (mean_order, cov_order)


@pytest.mark.parametrize("form", ["centred", "round-law"])
def test_least_squares_one_step_orders(form):
    pb = load_problem(GRUNFELD)
    w = pb.optimum + np.array([1.0, -0.5])
    rows = []
    for eta in (0.01, 0.005, 0.0025):
        sde = least_squares_order2_sde(pb, eta, 3, 1.0, form=form)
        m = sde.moments([sde.h], w)
        law = least_squares_round_law(pb, eta, 3, 1.0)
        rows.append((np.linalg.norm(m.mean[0] - law.conditional_mean(w)),
                     np.linalg.norm(m.cov[0] - law.conditional_cov(w))))
    mean_order, cov_order = _orders(np.array(rows)).T
    assert np.all(mean_order > 2.75) and np.all(cov_order > 3.75), (mean_order, cov_order)


def test_centred_form_keeps_the_chain_stationary_mean():
    pb = random_quadratic_problem(Q=4, d=3, seed=0)
    law = round_law(pb, 0.05, 5, 1.0, warn=False)
    centred = order2_sde_coefficients(pb, 0.05, 5, 1.0, form="centred")
    series = order2_sde_coefficients(pb, 0.05, 5, 1.0, form="series")
    assert np.allclose(centred.c, law.c, rtol=1e-12, atol=1e-12)
    assert np.allclose(centred.A, series.A) and np.allclose(centred.diffusion_cov, series.diffusion_cov)
    assert np.linalg.norm(series.c - law.c) > 1e-6  # the truncated series' centre is off by O(η²)


# ---------------------------------------------------------------------------------------------- refinement
def test_order_refinement_slopes_few_rounds_E1():
    # the setting: a horizon of a few rounds, E = 1: order 2 about 2, order 1 about 1, for the mean, the
    # second moment and the covariance separately (exact moments; the intervals are least-squares ones)
    pb = paper_table_problem()
    w0 = np.full(pb.d, 2.0)
    two = order_refinement(pb, eta=0.05, local_steps=1, rounds=5, order=2, w0=w0)
    one = order_refinement(pb, eta=0.05, local_steps=1, rounds=5, order=1, w0=w0)
    for name in ("mean", "second_moment", "covariance"):
        lo, hi = two.slopes[name]["slope_ci95"]
        assert two.slopes[name]["slope"] >= 1.85 and lo <= two.slopes[name]["slope"] <= hi
        assert 0.9 <= one.slopes[name]["slope"] <= 1.1
    assert two.etas[0] / two.etas[-1] >= 10**1.5  # at least 1.5 decades


def test_near_stationarity_order1_second_moment_is_already_about_two():
    # E = 3 over 40 rounds at η = 0.05: order 1's second-moment error is its covariance's (its mean is exact at
    # stationarity), so its slope is about 2; the mean still separates the orders
    pb = paper_table_problem()
    one = order_refinement(pb, eta=0.05, local_steps=3, rounds=40, order=1, w0=np.full(pb.d, 2.0))
    assert 1.8 <= one.slopes["second_moment"]["slope"] <= 2.2
    assert one.slopes["covariance"]["slope"] < 1.2


def test_least_squares_refinement():
    pb = load_problem(GRUNFELD)
    two = order_refinement(pb, eta=0.02, local_steps=2, rounds=5, order=2, levels=4)
    assert all(two.slopes[k]["slope"] >= 1.85 for k in ("mean", "second_moment", "covariance"))


# ---------------------------------------------------------------------------------------------- general drift
def test_hvp_drift_is_the_series_form_on_quadratics():
    pb = random_quadratic_problem(Q=3, d=4, seed=3)
    steps, eta, s, h = np.array([2, 3, 5]), 0.05, 0.8, 0.05
    drift = Order2Drift(client_loss(pb), pb.p, steps, eta=eta, server_lr=s, h=h)
    lin = order2_sde_coefficients(pb, eta, steps, s, h, "series")
    W = torch.as_tensor(np.random.default_rng(0).normal(size=(5, pb.d)))
    b, G = drift(W)
    ref = -(W.numpy() - lin.c) @ lin.A.T
    assert np.allclose(b.numpy(), ref, rtol=1e-10, atol=1e-12)
    grads = np.einsum("qij,rqj->rqi", pb.U, W.numpy()[:, None, :] - pb.a[None])  # U_k (w − a_k)
    assert np.allclose(G.numpy(), grads, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("model", ["softmax", "mlp"])
def test_hvp_drift_is_minus_the_gradient_of_the_modified_loss(model):
    # two independent torch paths: forward-over-reverse products against reverse-over-reverse of F̃
    from fedsde.problems import federated_classification

    pb = federated_classification("digits", n_clients=3, partition="dirichlet", seed=0, model="softmax", l2=1e-3)
    if model == "mlp":
        pb = pb.replace(model="mlp", hidden=4)
    drift = Order2Drift(client_loss(pb), pb.p, np.array([1, 2, 3]), eta=0.1, server_lr=0.9, h=0.1)
    w = torch.as_tensor(pb.initial_weights(0) + 0.05 * np.random.default_rng(1).normal(size=pb.d))
    b, G = drift(w[None])
    ref = -(0.9 * 0.1 / 0.1) * torch.func.grad(drift.modified_loss)(w)
    assert torch.allclose(b[0], ref, rtol=1e-9, atol=1e-12)
    assert np.allclose(G[0].numpy(), pb.client_grad(w.numpy()), rtol=1e-10, atol=1e-12)


def test_least_squares_drift_gradients_match_the_problem():
    pb = load_problem(GRUNFELD)
    drift = Order2Drift(client_loss(pb), pb.p, 2, eta=0.02, server_lr=1.0, h=0.02)
    lin = least_squares_order2_sde(pb, 0.02, 2, 1.0, form="centred")
    W = torch.as_tensor(pb.optimum + np.random.default_rng(2).normal(size=(3, pb.d)))
    _b, G = drift(W)
    assert np.allclose(G.numpy(), pb.client_grad(W.numpy()), rtol=1e-10, atol=1e-12)
    # the same drift matrix as the least-squares centred form (their centres differ by O(η²))
    J = torch.func.jacrev(lambda w: drift(w[None])[0][0])(W[0]).numpy()
    assert np.allclose(J, lin.drift_matrix, rtol=1e-10, atol=1e-12)


def test_module_drift_and_the_dropout_refusal():
    # a small network of one's own: the drift is −(sη/h)∇F̃ (torch.func, two independent paths); with dropout the
    # local steps follow the dropout-averaged loss, so the order-2 drift is refused in one line
    from torch import nn

    from fedsde.errors import FedsdeInputError
    from fedsde.problems.module import module_problem

    rng = np.random.default_rng(0)
    x, y, c = rng.standard_normal((30, 4)), rng.integers(0, 3, 30), np.arange(30) % 3
    torch.manual_seed(0)
    pb = module_problem(nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3)), x, y, c, l2=1e-3)
    drift = Order2Drift(client_loss(pb), pb.p, 2, eta=0.1, server_lr=1.0, h=0.1)
    w = torch.as_tensor(pb.initial_weights())
    b, G = drift(w[None])
    assert torch.allclose(b[0], -torch.func.grad(drift.modified_loss)(w), rtol=1e-9, atol=1e-12)
    assert np.allclose(G[0].numpy(), pb.client_grad(w.numpy()), rtol=1e-10, atol=1e-12)
    dropped = module_problem(nn.Sequential(nn.Linear(4, 5), nn.Dropout(0.2), nn.Linear(5, 3)), x, y, c)
    with pytest.raises(FedsdeInputError, match="dropout") as err:
        client_loss(dropped)
    assert "\n" not in str(err.value)


# ---------------------------------------------------------------------------------------------- scheme, coupling
def test_coupled_fedavg_is_the_simulator():
    from fedsde.sde.order2_paths import coupled_paths
    from fedsde.sim import simulate

    pb = random_quadratic_problem(Q=3, d=2, seed=1)
    out = coupled_paths(pb, eta=0.05, local_steps=np.array([1, 2, 3]), rounds=4, replicates=40, seed=3,
                        w0=np.ones(2), orders=(2,))
    sim = simulate(pb, eta=0.05, local_steps=np.array([1, 2, 3]), rounds=4, replicates=40, seed=3, w0=np.ones(2),
                   record=[4])
    assert np.allclose(out["chain"], sim.weights[-1], rtol=1e-12, atol=1e-12)


def test_scheme_converges_to_the_exact_sde_mean():
    # noiseless clients: the scheme's drift is classical Runge–Kutta, so its error against the exact series SDE is
    # small at one substep per round and falls like δ⁴ (a factor near 16 per doubling of the substeps)
    from fedsde.sde.order2_paths import coupled_paths

    base = random_quadratic_problem(Q=3, d=2, seed=1)
    pb = QuadraticProblem.from_arrays(base.U, base.a, base.Sigma * 0.0, base.p)
    w0, eta, n = np.full(2, 2.0), 0.05, 4
    lin = order2_sde_coefficients(pb, eta, 2, 1.0, form="series")
    exact = lin.moments(n * eta, w0).mean
    errs = [np.linalg.norm(coupled_paths(pb, eta=eta, local_steps=2, rounds=n, replicates=2, seed=0, w0=w0,
                                         orders=(2,), chain=False, substeps=k)["order2"][0] - exact)
            for k in (1, 2)]
    assert errs[0] < 1e-3 * np.linalg.norm(exact - w0) and errs[1] < errs[0] / 10, errs


@pytest.mark.slow
def test_coupled_monte_carlo_slopes_on_a_quadratic():
    from fedsde.compare.order2_mc import coupled_order_study

    pb = random_quadratic_problem(Q=3, d=2, seed=1)
    st = coupled_order_study(pb, eta=0.05, local_steps=2, rounds=4, replicates=2000, seed=0, levels=4,
                             w0=np.full(2, 2.0))
    for phi in ("mean", "second_moment", "loss"):
        assert st["order2"][phi]["resolved"] and st["order1"][phi]["resolved"]
        lo, _hi = st["order2"][phi]["slope_ci95"]
        assert 1.85 <= st["order2"][phi]["slope"] <= 2.3 and lo > 1.5, (phi, st["order2"][phi]["slope_ci95"])
        assert abs(st["order1"][phi]["slope"] - 1.0) < 0.25


# ---------------------------------------------------------------------------------------------- slope interval
def test_loglog_slope_interval():
    x = np.array([1.0, 0.5, 0.25, 0.125])
    exact = loglog_slope_interval(x, 3 * x**2)
    assert exact["slope"] == pytest.approx(2.0) and exact["ci"][1] - exact["ci"][0] < 1e-9
    curved = loglog_slope_interval(x, x**2 + 0.3 * x**3)
    assert curved["ci"][0] < curved["slope"] < curved["ci"][1] and curved["ci"][1] - curved["ci"][0] > 1e-3
    rng = np.random.default_rng(0)
    covered = 0
    for _ in range(200):  # Monte-Carlo estimates y ± se: the 95 % interval covers the true slope about 95 % of the time
        se = 0.05 * x**2
        fit = loglog_slope_interval(x, x**2 + se * rng.normal(size=x.size), se)
        covered += fit["ci"][0] <= 2.0 <= fit["ci"][1]
    assert 180 <= covered <= 200
