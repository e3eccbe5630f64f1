"""Constants of seed 002's bounds: region-restricted gradient bounds, V*, τ, and the logistic recipe."""

from __future__ import annotations

import numpy as np
import pytest

from fedsde.exact import round_law
from fedsde.problems import QuadraticProblem, paper_table_problem
from fedsde.theory.constants import (
    classification_constants,
    quadratic_constants,
    quadratic_region_radius,
    v_hat_1,
)
from fedsde.theory.schedules import PowerSchedule


def _problem():
    return QuadraticProblem.from_arrays([[[1.0, 0.3], [0.3, 0.5]], [[0.4, 0.0], [0.0, 1.2]]],
                                        [[1.0, -1.0], [-0.5, 0.5]], [[0.2, 0.1], [0.3, 0.05]])


def test_gradient_bounds_on_the_ball_by_sampling():
    pr = _problem()
    R = 2.0
    c = quadratic_constants(pr, radius=R, E=3, eta_max=0.2)
    rng = np.random.default_rng(0)
    v = rng.standard_normal((20000, 2))
    w = pr.optimum + R * v / np.linalg.norm(v, axis=1, keepdims=True) * rng.uniform(0, 1, (20000, 1)) ** 0.5
    g = np.einsum("qij,nqj->nqi", pr.U, w[:, None, :] - pr.a[None])
    g2, ginf = np.linalg.norm(g, axis=-1).max(), np.abs(g).max()
    assert g2 <= c["L"] and g2 >= 0.95 * c["L"]  # the bound is attained up to the alignment of the two terms
    assert ginf <= c["L_inf"] + 1e-12 and ginf >= 0.98 * c["L_inf"]  # exact sup, sampled
    assert c["mu"] == pytest.approx(np.linalg.eigvalsh(pr.U)[:, -1].max())
    assert c.constants["L"].method == "closed form"


def test_v_star_and_tau():
    pr = paper_table_problem()
    eta, E = 0.05, 5
    V = v_hat_1(pr, eta, E)
    law = round_law(pr, eta, E)
    np.testing.assert_allclose(V, law.noise_cov / eta**2)
    # decaying schedule: sup over (0, η_max] is at small η, where V̂1 → E Σ p_k² Σ_k
    c = quadratic_constants(pr, radius=1.0, E=E, eta_max=eta)
    assert c["V_star"] == pytest.approx(E * np.sum(pr.p**2 * pr.Sigma[:, 0, 0]), rel=1e-4)
    c_const = quadratic_constants(pr, radius=1.0, E=E, eta_max=eta, eta_min=eta)
    assert c_const["V_star"] == pytest.approx(float(V[0, 0]))
    # τ = 2: ⟨∇F(w), w − w*⟩ = 2(F(w) − F*) for the aggregate quadratic
    q = _problem()
    w = np.random.default_rng(1).standard_normal((50, 2)) * 3
    ratio = np.einsum("ni,ni->n", q.grad(w), w - q.optimum) / (q.loss(w) - q.min_loss)
    np.testing.assert_allclose(ratio, quadratic_constants(q, radius=1.0, E=2, eta_max=0.1)["tau"])


def test_region_radius_covers_the_simulated_chain():
    from fedsde.sim import simulate

    pr = QuadraticProblem.from_arrays([0.25, 0.5, 1.0], [-1.0, 0.0, 2.0], [0.5, 1.0, 2.0])
    s = PowerSchedule(0.5, 1.0)
    h, E, rounds = 0.5, 5, 60
    R = quadratic_region_radius(pr, s, E=E, h=h, rounds=rounds, w0=[3.0])
    res = simulate(pr, eta=s.eta(np.arange(rounds) * h), local_steps=E, rounds=rounds, replicates=256, seed=3,
                   w0=[3.0], server_lr=h, record_drift=True)
    assert np.abs(res.weights - pr.optimum).max() <= R
    # local iterates: ‖w_k^(i) − w*‖ <= ‖w_n − w*‖ + drift
    far = np.abs(res.weights[:-1] - pr.optimum).max(axis=(1, 2))[:, None, None, None] + res.drift
    assert far.max() <= R


def test_classification_constants():
    from fedsde.theory.problems import synthetic_logistic

    pr = synthetic_logistic(3, 30, kind="noniid", seed=5)
    rng = np.random.default_rng(2)
    pts = pr.optimum + rng.standard_normal((6, pr.d))
    c = classification_constants(pr, batch_size=5, E=3, eta_max=0.3, pilot_points=pts, seed=1, replicates=512)
    # gradient bound: every per-sample gradient at any w (λ = 0: the bound is global)
    for w in np.vstack([pts, 10 * rng.standard_normal((5, pr.d))]):
        for k in range(pr.Q):
            assert np.linalg.norm(pr.per_sample_grads(w, k), axis=1).max() <= c["L"] + 1e-12
    # smoothness: the Hessians are below μ everywhere
    for w in pts:
        assert np.linalg.eigvalsh(pr.client_hessian(w))[:, -1].max() <= c["mu"]
    tr = np.array([np.einsum("qii->q", pr.minibatch_covariance(w, 5)) for w in pts]).max(0)
    np.testing.assert_allclose(c["trace_sigma"], tr)
    assert c.constants["V_star"].method == "monte carlo"
    assert 0 < c.constants["V_star"].stderr < 0.2 * c["V_star"]
    assert c["tau"] == 1.0
    np.testing.assert_allclose(pr.grad(c["w_star"]), 0.0, atol=1e-8)


def test_classification_constants_softmax():
    from fedsde.problems.classification.problem import ClassificationProblem

    rng = np.random.default_rng(4)
    Xs = [rng.standard_normal((25, 2)) + m for m in ([1.0, 0.0], [0.0, 1.0], [-1.0, -1.0])]
    ys = [rng.integers(0, 3, 25) for _ in range(3)]
    pr = ClassificationProblem.from_clients(Xs, ys, model="softmax", n_classes=3, l2=0.01)
    pts = pr.optimum + 0.5 * rng.standard_normal((4, pr.d))
    c = classification_constants(pr, batch_size=4, E=2, eta_max=0.2, pilot_points=pts, seed=2, replicates=256)
    for w in pts:
        for k in range(pr.Q):
            assert np.linalg.norm(pr.per_sample_grads(w, k), axis=1).max() <= c["L"] + 1e-12
        assert np.linalg.eigvalsh(pr.client_hessian(w))[:, -1].max() <= c["mu"]
