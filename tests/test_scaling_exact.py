"""Scaling rules: what is exact (server-client at E = 1 for any loss; local-steps at s = 1 with one Hessian), what is
O(η) (local-steps with different Hessians), the client-lr rule, and the local-steps rule's horizon on a loss with a
third derivative."""

from __future__ import annotations

import numpy as np
import pytest

from fedsde.exact import round_law
from fedsde.problems import QuadraticProblem, paper_table_problem, random_quadratic_problem
from fedsde.problems.data_files import data_problem_from_dict
from fedsde.scaling import NAIVE, RULES, FedAvgConfig, apply_rule, compare_data, compare_quadratic
from fedsde.scaling import first_order_correction as correction
from fedsde.scaling.horizon import geometric_rounds, horizon_discrepancy, noisy_logistic_problem, quadratic_model


@pytest.fixture(scope="module")
def het() -> QuadraticProblem:
    """Different Hessians, optima and noise (d = 2, full matrices)."""
    return random_quadratic_problem(Q=4, d=2, seed=3, spread=0.3)


@pytest.mark.parametrize("kappa", [0.5, 2.0, 4.0])
def test_server_client_at_one_local_step_is_exact_for_quadratics(het, kappa):
    """E = 1: the round w − sη Σ p_k(U_k(w − a_k) + ξ_k) depends on (s, η) through sη only: the one-round law
    (transition, offset, noise) and with it every moment of the chain are those of the base, to rounding."""
    cfg = FedAvgConfig(eta=0.05, local_steps=1, server_lr=1.0, rounds=20)
    new = apply_rule(cfg, "server-client", kappa)
    a, b = round_law(het, cfg.eta, 1, cfg.server_lr), round_law(het, new.eta, 1, new.server_lr)
    for key in ("transition", "c", "server_noise_cov"):
        np.testing.assert_allclose(getattr(b, key), getattr(a, key), rtol=1e-13, atol=1e-16, err_msg=key)
    res = compare_quadratic(het, cfg, "server-client", kappa, w0=[1.0, -1.0])
    assert res.max_rel < 1e-12 and res.stationary["mean_shift_sd"] < 1e-12


def test_server_client_at_one_local_step_is_exact_on_data():
    """Any loss, minibatch noise: with common random numbers the two ends are the same path up to rounding (the
    product s·η), replicate by replicate, at every recorded τ (measured: metrics equal to 1.1e-16)."""
    cancer = data_problem_from_dict({"kind": "classification", "dataset": "breast_cancer", "clients": 4,
                                     "partition": "dirichlet", "batch_size": 4, "seed": 0})
    res = compare_data(cancer, FedAvgConfig(eta=0.1, local_steps=1, server_lr=1.0, rounds=12), "server-client", 4,
                       replicates=4, seed=1, points=6)
    for name in res.base.mean:
        scale = max(1.0, float(np.max(np.abs(res.base.values[name]))))
        assert np.max(np.abs(res.scaled.values[name] - res.base.values[name])) < 1e-10 * scale, name
    # with E = 2 the rule is not exact: the same comparison separates far beyond rounding
    res2 = compare_data(cancer, FedAvgConfig(eta=0.1, local_steps=2, server_lr=1.0, rounds=12), "server-client", 4,
                        replicates=4, seed=1, points=6)
    assert np.max(np.abs(res2.scaled.values["train_loss"] - res2.base.values["train_loss"])) > 1e-4


@pytest.mark.parametrize("kappa", [0.5, 2.0, 3.0])
def test_local_steps_at_unit_server_step_exact_with_one_hessian(kappa):
    """Same Hessian, different optima, noise and weights: exact for every κ (E κ and n/κ integers)."""
    U = np.array([[2.0, 0.3], [0.3, 1.0]])
    Sig = [np.diag([1.0, 2.0]), np.array([[0.5, 0.1], [0.1, 0.3]]), np.eye(2)]
    prob = QuadraticProblem.from_arrays(np.stack([U] * 3), [[0, 1], [1, 0], [2, 2]], Sig, [0.2, 0.3, 0.5])
    res = compare_quadratic(prob, FedAvgConfig(eta=0.1, local_steps=2, server_lr=1.0, rounds=12), "local-steps",
                            kappa, w0=[3.0, -1.0])
    assert res.max_rel < 1e-10 and res.transient["mean_shift_sd"] < 1e-10


def test_local_steps_with_different_hessians_is_first_order_even_with_equal_optima():
    """Scalar clients u_k = 1, 2, 4 with one optimum: c_s − c_b = η(κ − 1)E(ū₂/(2ū) − ũ + ū/2) ≠ 0, so the rule is
    O(η), not O(η²) and not exact.  At η = 1e-4 the relative O(η) correction is η·u_max·κE ≈ 3e-3 (measured 1.2e-3);
    tolerance 3e-3."""
    u, s2, p = np.array([1.0, 2.0, 4.0]), np.array([0.5, 1.0, 2.0]), np.array([0.2, 0.3, 0.5])
    prob = QuadraticProblem.from_arrays(u, [0.3, 0.3, 0.3], s2, p)
    E, kappa = 4, 2
    for eta in (1e-4, 1e-3):
        cfg = FedAvgConfig(eta=eta, local_steps=E, server_lr=1.0, rounds=6)
        pred = abs(correction(u, eta, kappa * E, 1.0, p=p, noise=s2) - correction(u, eta, E, 1.0, p=p, noise=s2))
        res = compare_quadratic(prob, cfg, "local-steps", kappa)
        if eta == 1e-4:
            assert res.stationary["cov_rel"] / pred == pytest.approx(1.0, abs=3e-3)
            assert res.stationary["excess_loss_rel"] / pred == pytest.approx(1.0, abs=3e-3)
        assert res.stationary["mean_shift_sd"] < 1e-9  # equal optima: the mean does not move
        assert res.max_rel > 0.5 * pred > 0  # first order: 2.1e-4 predicted at η = 1e-4, not rounding
    ubar, u2 = p @ u, p @ u**2
    unoise = (p**2 * s2) @ u / (p**2 * s2).sum()
    assert pred == pytest.approx(abs(1e-3 * (kappa - 1) * E * (u2 / (2 * ubar) - unoise + ubar / 2)), rel=1e-12)


def test_first_order_correction_per_client_reduces_to_scalar():
    for s, E in ((1.0, 4), (0.5, 3), (2.0, 1)):
        assert correction(np.full(3, 1.5), 0.01, E, s) == pytest.approx(correction(1.5, 0.01, E, s), rel=1e-13)


def test_client_lr_rule_maps_and_keeps_invariants():
    base = FedAvgConfig(eta=0.01, local_steps=4, server_lr=0.5, rounds=12, clients=3, batch_size=16)
    new = apply_rule(base, "client-lr", 2)
    assert (new.eta, new.clients, new.rounds, new.server_lr, new.local_steps) == (0.02, 6, 6, 0.5, 4)
    assert "client-lr" in RULES and "client-lr" in NAIVE
    assert new.horizon == pytest.approx(base.horizon, rel=1e-14)
    assert NAIVE["client-lr"].apply(base, 2).horizon == pytest.approx(base.horizon, rel=1e-14)


def _homogeneous(problem: QuadraticProblem) -> QuadraticProblem:
    Q = problem.Q
    return QuadraticProblem.from_arrays(np.tile(problem.hessian, (Q, 1, 1)), np.tile(problem.optimum, (Q, 1)),
                                        problem.Sigma, problem.p)


def test_client_lr_against_clients_on_paper_table():
    """Seed 002's table problem, η = 0.005, E = 4, s = 1, n = 256, κ = 2.  Homogeneous clients: client-lr moves the
    client step term only, c_s − c_b = ηū(κ − 1)/2 at s = 1, E times smaller than clients' ηū·sE(κ − 1)/2
    (measured 0.59% against 2.4%).  Heterogeneous clients: client-lr changes ηE, so the drift bias moves (66%,
    mean shift 0.53 sd) while clients keeps the fixed point (2.4%, no shift)."""
    het = paper_table_problem()
    cfg = FedAvgConfig(eta=0.005, local_steps=4, server_lr=1.0, rounds=256)
    hom = _homogeneous(het)
    lr, cl = (compare_quadratic(hom, cfg, r, 2, w0=[2.0]) for r in ("client-lr", "clients"))
    ubar = float(het.hessian[0, 0])
    assert lr.max_rel == pytest.approx(0.005 * ubar / 2, rel=0.02)
    assert cl.max_rel == pytest.approx(0.005 * ubar * 4 / 2, rel=0.05)
    assert cl.max_rel / lr.max_rel == pytest.approx(4.0, rel=0.05)
    lr_h, cl_h = (compare_quadratic(het, cfg, r, 2, w0=[2.0]) for r in ("client-lr", "clients"))
    assert lr_h.max_rel > 0.5 and lr_h.stationary["mean_shift_sd"] > 0.4
    assert cl_h.max_rel < 0.03 and cl_h.stationary["mean_shift_sd"] < 1e-9


def test_client_lr_on_data_splits_clients_and_scales_eta():
    cancer = data_problem_from_dict({"kind": "classification", "dataset": "breast_cancer", "clients": 4,
                                     "partition": "iid", "batch_size": 8, "seed": 0})
    res = compare_data(cancer, FedAvgConfig(eta=0.05, local_steps=1, server_lr=1.0, rounds=4), "client-lr", 2,
                       replicates=3, seed=0, points=2)
    cfg = res.scaled.config
    assert (cfg.clients, cfg.eta, cfg.rounds, cfg.server_lr) == (8, 0.1, 2, 1.0)
    assert len(res.notes) == 1 and "(1 − κb/N_k)/(1 − b/N_k)" in res.notes[0]


def test_geometric_rounds_are_common_points():
    a = FedAvgConfig(eta=0.1, local_steps=2, server_lr=1.0, rounds=64)
    b = apply_rule(a, "local-steps", 2)
    rb, rs = geometric_rounds(a, b, 6)
    np.testing.assert_allclose(rb * a.tau_per_round, rs * b.tau_per_round, rtol=1e-14)
    assert rb[0] == 0 and rb[-1] == 64 and rs[-1] == 32 and np.all(np.diff(rb) > 0)


def test_local_steps_horizon_on_a_loss_with_third_derivative():
    """Identical logistic clients: exact on the problem's quadratic model (one Hessian, no ∇³F), but the two ends'
    mean weights separate on the logistic loss itself.  η = 0.3, E = 4 → 8, τ up to 153.6, 96 paired runs: the
    distance at the last point is measured at 0.047 ± 0.004 (11 standard errors); the test asks for 5, and for
    the distance to grow from the first recorded τ (2.4, measured 0.012 ± 0.005) to the last."""
    problem = noisy_logistic_problem()
    cfg = FedAvgConfig(eta=0.3, local_steps=4, server_lr=1.0, rounds=128)
    exact = compare_quadratic(quadratic_model(problem), cfg, "local-steps", 2, w0=problem.initial_weights())
    assert exact.max_rel < 1e-12
    h = horizon_discrepancy(problem, cfg, "local-steps", 2, replicates=96, seed=0, points=6)
    assert h.tau[0] == 0 and h.distance[0] == 0 and h.tau[-1] == pytest.approx(153.6)
    assert h.distance[-1] > 5 * h.distance_se[-1]
    assert h.distance[-1] - h.distance[1] > 3 * np.hypot(h.distance_se[-1], h.distance_se[1])
    assert np.all(h.spread[1:] > 0) and h.replicates == 96


@pytest.mark.parametrize(("kappa", "s", "E"), [(2, 1.0, 4), (3, 0.75, 2), (2, 2.0, 1)])
def test_client_lr_constant_matches_derivation(kappa, s, E):
    """Scalar homogeneous clients: c_s − c_b = η·u·(sE − E + 1)(κ − 1)/2.  At η = 1e-4 the O(η) relative correction
    is ≈ η·u·κ·(sE + 1) ≲ 3e-3 (measured at most 3e-4); tolerance 3e-3."""
    u, eta = 1.5, 1e-4
    prob = QuadraticProblem.from_arrays([u, u], [0.3, 0.3], [1.0, 2.0])
    res = compare_quadratic(prob, FedAvgConfig(eta=eta, local_steps=E, server_lr=s, rounds=6, clients=2),
                            "client-lr", kappa)
    pred = eta * u * (s * E - E + 1) * (kappa - 1) / 2
    assert pred == pytest.approx(correction(u, kappa * eta, E, s) - correction(u, eta, E, s), rel=1e-12)
    assert res.stationary["cov_rel"] / pred == pytest.approx(1.0, abs=3e-3)
    assert res.stationary["excess_loss_rel"] / pred == pytest.approx(1.0, abs=3e-3)


def test_local_steps_with_iterate_dependent_noise_keeps_the_mean_but_not_the_law():
    """Identical scalar clients with random curvature (the noise least-squares minibatches give):
    ``w ← w − η(u + σζ)(w − a)``, ζ ~ N(0, 1).  After E steps a client's ``w − a`` is ``(w − a)·Π(1 − η(u + σζ_m))``,
    so with m₁ = 1 − ηu and m₂ = m₁² + η²σ² a round at s = 1 over Q clients has ``E[w' − a] = m₁^E (w − a)`` and
    ``E[(w' − a)²] = F_E (w − a)²``, ``F_E = m₂^E/Q + (1 − 1/Q) m₁^{2E}``.  The mean of two rounds of E steps is that of
    one round of 2E steps (m₁^{2E} both), the second moment is not: ``F_E² < F_{2E}`` unless σ = 0 (Cauchy–Schwarz).
    η = 0.1, u = σ = 1, E = 2, Q = 2: relative gap 1.5e-4; a Monte-Carlo run checks F_E itself."""
    eta, u, sig, E, Q = 0.1, 1.0, 1.0, 2, 2
    m1, m2 = 1 - eta * u, (1 - eta * u) ** 2 + (eta * sig) ** 2

    def F(steps):
        return m2**steps / Q + (1 - 1 / Q) * m1 ** (2 * steps)

    gap = (F(2 * E) - F(E) ** 2) / F(2 * E)
    assert gap == pytest.approx(1.505e-4, rel=1e-3) and gap > 0
    rng = np.random.default_rng(0)
    prods = np.prod(1 - eta * (u + sig * rng.standard_normal((400_000, Q, E))), axis=-1)  # (n, Q)
    second = np.mean(prods.mean(-1) ** 2)
    se = np.std(prods.mean(-1) ** 2) / np.sqrt(prods.shape[0])
    assert abs(second - F(E)) < 5 * se
