"""Server rules: one-step updates against hand arithmetic, FedNova/FedAvg fixed points against closed forms,
FedDisco against the worked examples, FedAWARE against a generic QP solver, and the exact laws' scope."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.optimize
import torch

from fedsde.aggregators import (
    AGGREGATORS,
    FedAdagrad,
    FedAdam,
    FedAvg,
    FedAvgM,
    FedAWARE,
    FedDisco,
    FedNova,
    FedYogi,
    RoundContext,
    Scaffold,
    disco_weights_from_discrepancy,
    feddisco_weights,
    get_aggregator,
    min_norm_weights,
)
from fedsde.errors import FedsdeInputError
from fedsde.exact import (
    NoExactLawError,
    aggregator_round_law,
    aggregator_round_weights,
    aggregator_stationary_law,
    surrogate_optimum,
)
from fedsde.problems import QuadraticProblem, paper_table_problem
from fedsde.sim import LocalSolver, simulate

D = torch.float64

# three clients, d = 2, unequal weights: Σ ω_k Δ_k = 0.5·(1, 2) + 0.3·(3, −1) + 0.2·(−2, 4) = (1.0, 1.5)
UPDATES = torch.tensor([[[1.0, 2.0], [3.0, -1.0], [-2.0, 4.0]]], dtype=D)
WEIGHTS = torch.tensor([[0.5, 0.3, 0.2]], dtype=D)


def ctx(server_lr=0.5, **kw):
    base = dict(round=0, server_lr=server_lr, eta=0.1, local_steps=torch.tensor([[1, 1, 1]]),
                participating=torch.ones((1, 3), dtype=torch.bool), p=torch.tensor([0.5, 0.3, 0.2], dtype=D))
    base.update(kw)
    return RoundContext(**base)


def two_rounds(agg, second_scale=1.0):
    """Apply ``agg`` twice from w = 0: round 1 with UPDATES, round 2 with ``second_scale · UPDATES``."""
    w = torch.zeros((1, 2), dtype=D)
    st = agg.init(w)
    w1, st = agg.apply(w, UPDATES, WEIGHTS, st, ctx())
    w2, st = agg.apply(w1, second_scale * UPDATES, WEIGHTS, st, ctx(round=1))
    return w1[0].numpy(), w2[0].numpy()


def test_registry_complete():
    assert set(AGGREGATORS) >= {"fedavg", "fedavgm", "fedadam", "fedyogi", "fedadagrad", "fedprox", "scaffold",
                                "fednova", "feddisco", "fedaware"}
    for name in AGGREGATORS:
        agg = get_aggregator(name)
        assert agg.name == name
    with pytest.raises(FedsdeInputError, match="unknown"):
        get_aggregator("fedfoo")


def test_fedavg_weighted_mean():
    w1, w2 = two_rounds(FedAvg())
    np.testing.assert_allclose(w1, [0.5, 0.75])  # 0.5 · (1.0, 1.5)
    np.testing.assert_allclose(w2, [1.0, 1.5])


def test_fedavgm_heavy_ball_and_nesterov():
    # heavy ball, β = 0.9, s = 0.5: v1 = (1, 1.5), w1 = 0.5·v1 = (0.5, 0.75);
    # v2 = 0.9·(1, 1.5) + (1, 1.5) = (1.9, 2.85), w2 = w1 + 0.5·v2 = (1.45, 2.175)
    w1, w2 = two_rounds(FedAvgM(0.9))
    np.testing.assert_allclose(w1, [0.5, 0.75])
    np.testing.assert_allclose(w2, [1.45, 2.175])
    # Nesterov: move1 = 0.9·v1 + Δ = (1.9, 2.85) → w1 = (0.95, 1.425);
    # v2 = (1.9, 2.85), move2 = 0.9·(1.9, 2.85) + (1, 1.5) = (2.71, 4.065) → w2 = w1 + (1.355, 2.0325)
    w1, w2 = two_rounds(FedAvgM(0.9, variant="nesterov"))
    np.testing.assert_allclose(w1, [0.95, 1.425])
    np.testing.assert_allclose(w2, [0.95 + 1.355, 1.425 + 2.0325])
    # dampening δ = β = 0.9 (EMA): v1 = 0.1·(1, 1.5) → w1 = (0.05, 0.075)
    w1, _ = two_rounds(FedAvgM(0.9, dampening=0.9))
    np.testing.assert_allclose(w1, [0.05, 0.075])


# adaptive rules: β1 = 0.9, β2 = 0.99, τ = 0.1, s = 0.5; Δ1 = (1, 1.5), Δ2 = 0.1·Δ1 = (0.1, 0.15)
# m1 = 0.1·Δ1 = (0.1, 0.15); m2 = 0.9·m1 + 0.1·Δ2 = (0.1, 0.15)
M1 = M2 = np.array([0.1, 0.15])


def _adaptive_expected(v1, v2, m_hat1=M1, m_hat2=M2, v_hat1=None, v_hat2=None):
    v_hat1 = v1 if v_hat1 is None else v_hat1
    v_hat2 = v2 if v_hat2 is None else v_hat2
    w1 = 0.5 * m_hat1 / (np.sqrt(v_hat1) + 0.1)
    return w1, w1 + 0.5 * m_hat2 / (np.sqrt(v_hat2) + 0.1)


@pytest.mark.parametrize("cls, v1, v2", [
    # Adam, v0 = τ² = 0.01: v1 = 0.99·0.01 + 0.01·(1, 2.25) = (0.0199, 0.0324)
    #                       v2 = 0.99·v1 + 0.01·(0.01, 0.0225) = (0.019801, 0.032301)
    (FedAdam, [0.0199, 0.0324], [0.019801, 0.032301]),
    # Yogi: v1 = 0.01 − 0.01·Δ1²·sign(0.01 − Δ1²) = 0.01 + 0.01·(1, 2.25) = (0.02, 0.0325);
    #       v1 − Δ2² = (0.01, 0.01) > 0, so v2 = v1 − 0.01·(0.01, 0.0225) = (0.0199, 0.032275)
    (FedYogi, [0.02, 0.0325], [0.0199, 0.032275]),
    # Adagrad: v1 = 0.01 + (1, 2.25) = (1.01, 2.26); v2 = v1 + (0.01, 0.0225) = (1.02, 2.2825)
    (FedAdagrad, [1.01, 2.26], [1.02, 2.2825]),
])
def test_adaptive_paper_variant(cls, v1, v2):
    w1, w2 = two_rounds(cls(tau=0.1), second_scale=0.1)
    e1, e2 = _adaptive_expected(np.array(v1), np.array(v2))
    np.testing.assert_allclose(w1, e1, rtol=1e-12)
    np.testing.assert_allclose(w2, e2, rtol=1e-12)


def test_adaptive_bias_corrected_variant():
    # v0 = 0.  Adam: v1 = 0.01·(1, 2.25); m̂1 = m1/0.1 = (1, 1.5), v̂1 = v1/0.01 = (1, 2.25)
    #              v2 = 0.99·v1 + 0.01·(0.01, 0.0225) = (0.01, 0.0225); m̂2 = m2/(1 − 0.81); v̂2 = v2/(1 − 0.9801)
    v1 = np.array([0.01, 0.0225])
    v2 = 0.99 * v1 + 0.01 * np.array([0.01, 0.0225])
    e1, e2 = _adaptive_expected(v1, v2, M1 / 0.1, M2 / 0.19, v1 / 0.01, v2 / (1 - 0.99**2))
    w1, w2 = two_rounds(FedAdam(tau=0.1, variant="bias_corrected"), second_scale=0.1)
    np.testing.assert_allclose(w1, e1, rtol=1e-12)
    np.testing.assert_allclose(w2, e2, rtol=1e-12)
    np.testing.assert_allclose(w1, [0.5 * 1 / 1.1, 0.5 * 1.5 / 1.6])
    # Yogi with Δ2 = 0.2·Δ1 = (0.2, 0.3): v1 = 0.01·Δ1² = (0.01, 0.0225); v1 − Δ2² < 0, so
    # v2 = v1 + 0.01·(0.04, 0.09) = (0.0104, 0.0234); m2 = 0.9·m1 + 0.1·(0.2, 0.3) = (0.11, 0.165)
    w1, w2 = two_rounds(FedYogi(tau=0.1, variant="bias_corrected"), second_scale=0.2)
    yv2, ym2 = np.array([0.0104, 0.0234]), np.array([0.11, 0.165])
    e1, e2 = _adaptive_expected(v1, yv2, M1 / 0.1, ym2 / 0.19, v1 / 0.01, yv2 / (1 - 0.99**2))
    np.testing.assert_allclose(w1, e1, rtol=1e-12)
    np.testing.assert_allclose(w2, e2, rtol=1e-12)
    # Adagrad: v1 = Δ1² = (1, 2.25), v2 = v1 + Δ2²; only m is corrected
    w1, w2 = two_rounds(FedAdagrad(tau=0.1, variant="bias_corrected"), second_scale=0.1)
    vv1, vv2 = np.array([1.0, 2.25]), np.array([1.01, 2.2725])
    e1, e2 = _adaptive_expected(vv1, vv2, M1 / 0.1, M2 / 0.19)
    np.testing.assert_allclose(w1, e1, rtol=1e-12)
    np.testing.assert_allclose(w2, e2, rtol=1e-12)


def _scaffold_round(agg, state, part=(True, True), first=None):
    # two clients, d = 1: Δ = (−0.4, 0.2), τ = (2, 4), η = 0.1, ω = (0.25, 0.75), p = (0.4, 0.6), s = 1
    c = RoundContext(round=0, server_lr=1.0, eta=0.1, local_steps=torch.tensor([[2, 4]]),
                     participating=torch.tensor([part]), p=torch.tensor([0.4, 0.6], dtype=D),
                     norms=torch.tensor([[2.0, 4.0]], dtype=D), first_grads=first)
    up = torch.tensor([[[-0.4], [0.2]]], dtype=D) * torch.tensor(part, dtype=D).view(1, 2, 1)
    return agg.apply(torch.zeros((1, 1), dtype=D), up, torch.tensor([[0.25, 0.75]], dtype=D), state, c)


def test_scaffold_option_ii_hand_computed():
    agg = Scaffold("II")
    w1, st = _scaffold_round(agg, agg.init(torch.zeros((1, 1), dtype=D)))
    assert w1.item() == pytest.approx(0.25 * -0.4 + 0.75 * 0.2)  # 0.05
    # c_k⁺ = c_k − c − Δ_k/(τ_k η) = −(−0.4/0.2, 0.2/0.4) = (2, −0.5); c = (2 − 0.5)/2 = 0.75
    np.testing.assert_allclose(st.c_clients[0, :, 0].numpy(), [2.0, -0.5])
    assert st.c.item() == pytest.approx(0.75)
    np.testing.assert_allclose(agg.correction(st)[0, :, 0].numpy(), [0.75 - 2.0, 0.75 + 0.5])
    # control="weighted": c = 0.4·2 + 0.6·(−0.5) = 0.5
    _, st = _scaffold_round(Scaffold("II", control="weighted"), Scaffold().init(torch.zeros((1, 1), dtype=D)))
    assert st.c.item() == pytest.approx(0.5)
    # client 1 idle: its control stays 0, c = (2 + 0)/2 = 1
    _, st = _scaffold_round(agg, agg.init(torch.zeros((1, 1), dtype=D)), part=(True, False))
    np.testing.assert_allclose(st.c_clients[0, :, 0].numpy(), [2.0, 0.0])
    assert st.c.item() == pytest.approx(1.0)


def test_scaffold_option_i_uses_gradient_at_server_weights():
    agg = Scaffold("I")
    assert agg.needs_first_grads
    g = torch.tensor([[[3.0], [-1.0]]], dtype=D)
    _, st = _scaffold_round(agg, agg.init(torch.zeros((1, 1), dtype=D)), first=g)
    np.testing.assert_allclose(st.c_clients[0, :, 0].numpy(), [3.0, -1.0])
    assert st.c.item() == pytest.approx(1.0)  # (3 − 1)/2


def hetero_quadratic(noise=0.0):
    # F_k = ½(w − a_k)ᵀ U_k (w − a_k), three clients with different curvature and optima
    U = np.array([[1.0, 0.5], [2.0, 1.0], [0.5, 3.0]])
    a = np.array([[1.0, -1.0], [-2.0, 0.5], [0.5, 2.0]])
    return QuadraticProblem.from_arrays(U, a, noise * np.ones((3, 2)))


def test_scaffold_is_consistent_fedavg_is_not():
    # deterministic local GD, heterogeneous τ: SCAFFOLD's fixed point is the optimum, FedAvg's is not
    pr = hetero_quadratic()
    kw = dict(eta=0.05, local_steps=[2, 5, 9], rounds=600, replicates=1, seed=0, record=[600], block_size=1)
    sc = simulate(pr, aggregator=Scaffold("II"), **kw).final[0]
    fa = simulate(pr, aggregator="fedavg", **kw).final[0]
    np.testing.assert_allclose(sc, pr.optimum, atol=1e-9)
    assert np.linalg.norm(fa - pr.optimum) > 1e-2
    np.testing.assert_allclose(fa, aggregator_round_law(pr, "fedavg", 0.05, [2, 5, 9]).c, atol=1e-9)


# ------------------------------------------------------------------ FedNova (reference/seed-fednova.md)
def test_accumulation_norms_closed_forms_and_worked_numbers():
    tau = np.array([2, 4, 8, 16])
    # §2.6: prox α = ημ = 0.1 and momentum ρ = 0.9
    prox = LocalSolver(prox=1.0).norm_table(16, 0.1)[tau]
    np.testing.assert_allclose(prox, [1.9, 3.439, 5.695328, 8.146980], atol=1e-6)
    np.testing.assert_allclose(prox, (1 - 0.9**tau) / 0.1)
    mom = LocalSolver(momentum=0.9).norm_table(16, 0.1)[tau]
    np.testing.assert_allclose(mom, [2.9, 9.049, 28.742049, 86.677182], atol=1e-6)
    np.testing.assert_allclose(mom, (tau - 0.9 * (1 - 0.9**tau) / 0.1) / 0.1)
    # §1.10 C1: τ = 7, η = 0.1, μ = 2, ρ = 0.9 → 15.34 (the reference code's recursion gives 16.22)
    both = LocalSolver(momentum=0.9, prox=2.0)
    assert both.norm_table(7, 0.1)[7] == pytest.approx(15.34, abs=5e-3)
    assert both.accumulation_vector(7, 0.1).sum() == pytest.approx(both.norm_table(7, 0.1)[7], rel=1e-12)


class _ConstantOracle:
    def sample(self, x, streams):
        return torch.ones_like(x)


@pytest.mark.parametrize("solver", [LocalSolver(), LocalSolver(prox=2.0), LocalSolver(momentum=0.9),
                                    LocalSolver(momentum=0.9, prox=2.0),
                                    LocalSolver(momentum=0.9, prox=2.0, prox_in_buffer=True)])
def test_local_loop_displacement_equals_accumulation_norm(solver):
    # the actual local loop with every gradient equal to 1 moves by −η‖a‖₁ (the "shadow" identity, §1.4)
    x = torch.zeros((1, 1, 1, 1), dtype=D)
    solver.run(x, torch.zeros((1, 1, 1, 1), dtype=D), _ConstantOracle(), None, 0.1, 7, None)
    assert -x.item() / 0.1 == pytest.approx(solver.norm_table(7, 0.1)[7], rel=1e-12)


def test_fedavg_implicit_weights_worked_numbers():
    # §2.6: p = (.1, .2, .3, .4), τ = (2, 4, 8, 16): τ_eff = 9.8, w = p τ / τ_eff
    p, tau = np.array([0.1, 0.2, 0.3, 0.4]), np.array([2, 4, 8, 16])
    assert p @ tau == pytest.approx(9.8)
    np.testing.assert_allclose(p * tau / (p @ tau), [0.020408, 0.081633, 0.244898, 0.653061], atol=1e-6)
    pr = QuadraticProblem.from_arrays(np.ones(4), np.arange(4.0), np.zeros(4), p)
    # FedNova's linear weights: ω_k = p_k τ_eff / τ_k
    np.testing.assert_allclose(aggregator_round_weights(pr, "fednova", tau), p * 9.8 / tau)


E_TARGETS = np.array([(1, 0), (0, 1), (-1, 0), (0, -1), (0.5, 0.5)], dtype=float)
TAU = np.array([1, 2, 5, 10, 50])


def nova_problem(noise=0.0):
    # §2.6: H_i = I, e = targets, uniform p, x* = (0.1, 0.1)
    return QuadraticProblem.from_arrays(np.ones((5, 2)), E_TARGETS, noise * np.ones((5, 2)))


@pytest.mark.parametrize("eta, fedavg, fednova", [
    (0.01, (0.278281, 0.213827), (0.087855, 0.091883)),
    (0.001, (0.305778, 0.246351), (0.098602, 0.099002)),
])
def test_fixed_points_match_reference_table(eta, fedavg, fednova):
    pr = nova_problem()
    # closed forms (§2.2 eq. (32) and §2.3): weights p_k K_k for FedAvg, p_k K_k / τ_k for FedNova,
    # K_k = 1 − (1 − η)^τ_k
    K = 1 - (1 - eta) ** TAU
    avg = (K[:, None] * E_TARGETS).sum(0) / K.sum()
    nova = ((K / TAU)[:, None] * E_TARGETS).sum(0) / (K / TAU).sum()
    np.testing.assert_allclose(aggregator_round_law(pr, "fedavg", eta, TAU).c, avg, rtol=1e-10)
    np.testing.assert_allclose(aggregator_round_law(pr, "fednova", eta, TAU).c, nova, rtol=1e-10)
    np.testing.assert_allclose(avg, fedavg, atol=1e-6)
    np.testing.assert_allclose(nova, fednova, atol=1e-6)


def test_fednova_simulation_reaches_exact_fixed_point():
    pr = nova_problem()
    res = simulate(pr, eta=0.01, local_steps=TAU, rounds=500, replicates=1, seed=0, aggregator="fednova",
                   record=[500], block_size=1)
    np.testing.assert_allclose(res.final[0], aggregator_round_law(pr, "fednova", 0.01, TAU).c, atol=1e-12)


def test_fedavg_objective_inconsistency_limit():
    # η → 0: FedAvg → argmin Σ p_k τ_k F_k = (0.308824, 0.25) (§2.6), FedNova → x* = (0.1, 0.1)
    pr = nova_problem()
    surrogate = surrogate_optimum(pr, pr.p * TAU)
    np.testing.assert_allclose(surrogate, [0.308824, 0.25], atol=1e-6)
    gaps = [np.linalg.norm(aggregator_round_law(pr, "fedavg", eta, TAU).c - surrogate) for eta in (1e-2, 1e-3, 1e-4)]
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 5e-4
    assert np.linalg.norm(aggregator_round_law(pr, "fednova", 1e-4, TAU).c - pr.optimum) < 2e-4


def test_fednova_stationary_law_matches_simulation():
    pr = paper_table_problem()
    tau = [1, 2, 5]
    st = aggregator_stationary_law(pr, "fednova", 0.1, tau)
    res = simulate(pr, eta=0.1, local_steps=tau, rounds=60, replicates=4096, seed=1, aggregator="fednova",
                   record=[60])
    x = res.final[:, 0]
    se_mean = math.sqrt(st.cov[0, 0] / x.size)
    assert abs(x.mean() - st.mean[0]) < 5 * se_mean
    se_var = st.cov[0, 0] * math.sqrt(2 / (x.size - 1))
    assert abs(x.var(ddof=1) - st.cov[0, 0]) < 5 * se_var


def test_fednova_one_step_hand_computed():
    # Δ = (1, 2), (3, −1), (−2, 4) with ω = (0.5, 0.3, 0.2), τ = (1, 2, 4) (plain SGD: ‖a‖₁ = τ), s = 0.5
    # Σ ω Δ/τ = 0.5·(1, 2) + 0.15·(3, −1) + 0.05·(−2, 4) = (0.85, 1.05); τ_eff = Σ ω τ = 0.5 + 0.6 + 0.8 = 1.9
    tau = torch.tensor([[1, 2, 4]])
    c = ctx(local_steps=tau, norms=tau.to(D))
    w = torch.zeros((1, 2), dtype=D)
    for agg, te in ((FedNova(), 1.9), (FedNova(tau_eff="steps"), 1.9), (FedNova(tau_eff=3.0), 3.0),
                    (FedNova(tau_eff="full"), 1.9)):
        w1, _ = agg.apply(w, UPDATES, WEIGHTS, agg.init(w), c)
        np.testing.assert_allclose(w1[0].numpy(), 0.5 * te * np.array([0.85, 1.05]), rtol=1e-12)
    # server momentum γ = 0.5 (code convention, η = 0.1): b1 = U/η, w1 = s·η·b1 = s·U;
    # b2 = 0.5·b1 + U/η, w2 = w1 + s·η·b2 = w1 + 1.5·s·U, with U = 1.9·(0.85, 1.05)
    agg = FedNova(server_momentum=0.5)
    st = agg.init(w)
    w1, st = agg.apply(w, UPDATES, WEIGHTS, st, c)
    w2, st = agg.apply(w1, UPDATES, WEIGHTS, st, c)
    U = 1.9 * np.array([0.85, 1.05])
    np.testing.assert_allclose(w1[0].numpy(), 0.5 * U, rtol=1e-12)
    np.testing.assert_allclose(w2[0].numpy(), 0.5 * U + 1.5 * 0.5 * U, rtol=1e-12)


def test_fednova_variants():
    assert FedNova(mu=0.1).tau_eff == "steps" and FedNova().tau_eff == "solver"
    with pytest.raises(FedsdeInputError, match="tau_eff"):
        FedNova(tau_eff="median")
    # fixed τ_eff: ω_k = p_k τ_eff / τ_k
    pr = nova_problem()
    np.testing.assert_allclose(aggregator_round_weights(pr, FedNova(tau_eff=3.0), TAU), pr.p * 3.0 / TAU)


def test_exact_law_scope_errors():
    pr = nova_problem()
    for name in ("fedavgm", "fedadam", "fedyogi", "fedadagrad", "scaffold", "fedaware"):
        with pytest.raises(NoExactLawError, match="state"):
            aggregator_round_weights(pr, name, TAU)
    with pytest.raises(NoExactLawError, match="prox"):
        aggregator_round_weights(pr, "fedprox", TAU)
    with pytest.raises(NoExactLawError, match="sampled"):
        aggregator_round_weights(pr, "fednova", TAU, participation=2)
    with pytest.raises(FedsdeInputError, match="label_distributions"):
        aggregator_round_weights(pr, "feddisco", TAU)


# ------------------------------------------------------------------ FedDisco (reference/seed-feddisco.md §1.7)
def test_feddisco_worked_example_a_niid2():
    counts = np.zeros((6, 10))
    for i in range(5):
        counts[i, [2 * i, 2 * i + 1]] = 4165
    counts[5] = 833
    p = feddisco_weights(np.full(6, 8330), counts)
    np.testing.assert_allclose(p, [0.15152] * 5 + [0.24242], atol=1e-5)
    assert p[5] == pytest.approx(8 / 33)
    # raw L2 / L1 / cosine discrepancies with the same a, b clip every biased client
    for metric in ("l2", "l1", "cosine"):
        np.testing.assert_allclose(feddisco_weights(np.full(6, 8330), counts, metric=metric), [0] * 5 + [1])


def test_feddisco_worked_example_b_and_fallback():
    counts = np.array([[100, 0, 0, 0], [25, 25, 25, 25], [50, 50, 0, 0]])
    np.testing.assert_allclose(feddisco_weights([100, 100, 100], counts), [0.125, 0.54167, 0.33333], atol=1e-5)
    # (c) every bracket ≤ 0: n = (0.5, 0.5), d = (2, 2) → fall back to n
    np.testing.assert_allclose(disco_weights_from_discrepancy([0.5, 0.5], [2.0, 2.0]), [0.5, 0.5])
    np.testing.assert_allclose(feddisco_weights([1, 3], [[1, 0], [0, 1]], a=10.0, b=0.0), [0.25, 0.75])


def test_feddisco_round_weights_over_participants():
    counts = np.array([[100, 0, 0, 0], [25, 25, 25, 25], [50, 50, 0, 0]])
    agg = FedDisco(label_distributions=counts, sizes=[100, 200, 300])
    full = agg.round_weights(torch.ones((1, 3), dtype=torch.bool))[0].numpy()
    np.testing.assert_allclose(full, feddisco_weights([100, 200, 300], counts), rtol=1e-12)
    part = agg.round_weights(torch.tensor([[True, False, True]]))[0].numpy()
    sub = feddisco_weights([100, 300], counts[[0, 2]])
    np.testing.assert_allclose(part, [sub[0], 0.0, sub[1]], rtol=1e-12)


def test_feddisco_composes_with_fednova_exactly():
    pr = nova_problem()
    dist = np.array([[1, 0], [0, 1], [1, 1], [3, 1], [1, 3]])
    pd = feddisco_weights(np.ones(5), dist)
    omega = aggregator_round_weights(pr, FedDisco("fednova", label_distributions=dist, sizes=np.ones(5)), TAU)
    np.testing.assert_allclose(omega, pd * (pd @ TAU) / TAU)
    omega = aggregator_round_weights(pr, FedDisco("fedavg", label_distributions=dist, sizes=np.ones(5)), TAU)
    np.testing.assert_allclose(omega, pd)


NAN, INF = float("nan"), float("inf")
COUNTS = [[100, 0, 0], [25, 25, 50], [50, 50, 0]]


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"sizes": [100, -3, 300]}, r"sizes\[1\]=-3\.0: must be >= 0"),
    ({"sizes": [100, NAN, 300]}, r"sizes\[1\]=nan: must be finite"),
    ({"sizes": [100, 200, INF]}, r"sizes\[2\]=inf: must be finite"),
    ({"sizes": [0, 0, 0]}, r"sizes: all zero"),
    ({"sizes": [1, 2]}, r"sizes: shape \(2,\) must be \(3,\)"),
    ({"label_distributions": [[1, 0, 0], [0, -1, 2], [1, 1, 1]]}, r"label_distributions\[1\]\[1\]=-1\.0: .*>= 0"),
    ({"label_distributions": [[1, 0, 0], [0, 1, NAN], [1, 1, 1]]}, r"label_distributions\[1\]\[2\]=nan: .*finite"),
    ({"label_distributions": [[1, 0, 0], [0, 0, 0], [1, 1, 1]]}, r"label_distributions\[1\]: sums to 0"),
    ({"a": NAN}, r"a=nan: must be finite"),
    ({"b": INF}, r"b=inf: must be finite"),
    ({"a": -1.0}, r"a=-1\.0: must be finite and >= 0"),
])
def test_feddisco_rejects_bad_inputs(kwargs, match):
    args = {"sizes": [100, 200, 300], "label_distributions": COUNTS} | kwargs
    with pytest.raises(FedsdeInputError, match=match):
        feddisco_weights(args["sizes"], args["label_distributions"], a=args.get("a", 0.5), b=args.get("b", 0.1))
    with pytest.raises(FedsdeInputError, match=match):
        FedDisco(**args)


@pytest.mark.parametrize(("sizes", "d", "ab", "match"), [
    ([1, -3], [0.1, 0.2], (0.5, 0.1), r"sizes\[1\]=-3\.0: must be >= 0"),
    ([1, NAN], [0.1, 0.2], (0.5, 0.1), r"sizes\[1\]=nan: must be finite"),
    ([1, 2], [0.1, NAN], (0.5, 0.1), r"d\[1\]=nan: discrepancies must be finite and >= 0"),
    ([1, 2], [0.1, -0.2], (0.5, 0.1), r"d\[1\]=-0\.2"),
    ([1, 2], [0.1, 0.2, 0.3], (0.5, 0.1), r"shapes \(2,\) and \(3,\) must match"),
    ([1, 2], [0.1, 0.2], (INF, 0.1), r"a=inf: must be finite"),
    ([1, 2], [0.1, 0.2], (0.5, NAN), r"b=nan: must be finite"),
])
def test_disco_weights_from_discrepancy_rejects_bad_inputs(sizes, d, ab, match):
    with pytest.raises(FedsdeInputError, match=match):
        disco_weights_from_discrepancy(sizes, d, *ab)


# ------------------------------------------------------------------ FedAWARE
def _slsqp_min_norm(V):
    M = V @ V.T
    Q = V.shape[0]
    res = scipy.optimize.minimize(
        lambda lam: lam @ M @ lam, np.full(Q, 1 / Q), jac=lambda lam: 2 * M @ lam, method="SLSQP",
        bounds=[(0, 1)] * Q, constraints=[{"type": "eq", "fun": lambda lam: lam.sum() - 1,
                                           "jac": lambda lam: np.ones(Q)}],
        options={"ftol": 1e-16, "maxiter": 2000})
    return res.x


def test_min_norm_weights_match_generic_qp():
    rng = np.random.default_rng(3)
    for _ in range(20):
        Q = int(rng.integers(2, 9))
        d = int(rng.integers(Q, 20))
        V = rng.standard_normal((Q, d)) + rng.uniform(0, 3) * rng.standard_normal(d)
        np.testing.assert_allclose(min_norm_weights(V), _slsqp_min_norm(V), atol=1e-6)
    np.testing.assert_allclose(min_norm_weights(np.eye(4)), np.full(4, 0.25), atol=1e-12)
    np.testing.assert_allclose(min_norm_weights([[1.0, 0.0], [-1.0, 0.0]]), [0.5, 0.5], atol=1e-12)
    np.testing.assert_allclose(min_norm_weights([[1.0, 0.0], [1.0, 1.0]]), [1.0, 0.0], atol=1e-12)


@pytest.mark.parametrize("variant", ["normalized", "literal"])
def test_fedaware_weights_and_step(variant):
    rng = np.random.default_rng(0)
    agg = FedAWARE(alpha=0.5, variant=variant)
    Q, d = 5, 8
    w = torch.zeros((1, d), dtype=D)
    st = agg.init(w)
    for n in range(4):
        up = torch.as_tensor(rng.standard_normal((1, Q, d)) + 1.0)
        part = torch.as_tensor(rng.random((1, Q)) < 0.6) if n else torch.ones((1, Q), dtype=torch.bool)
        c = RoundContext(round=n, server_lr=1.0, eta=0.1, local_steps=torch.ones((1, Q), dtype=torch.long),
                         participating=part, p=torch.full((Q,), 1 / Q, dtype=D))
        w_new, st = agg.apply(w, up, torch.full((1, Q), 1 / Q, dtype=D), st, c)
        mh = st.m[0].numpy()
        if variant == "normalized":
            mh = mh / np.linalg.norm(mh, axis=1, keepdims=True)
        lam = _slsqp_min_norm(mh)
        np.testing.assert_allclose(st.lam[0].numpy(), lam, atol=1e-6)
        np.testing.assert_allclose((w - w_new)[0].numpy(), st.lam[0].numpy() @ mh, atol=1e-12)
        w = w_new


def test_fedaware_warm_start_avoids_zero_updates():
    # far from the optima every client pulls the same way, so 0 is not in the hull of the momenta unless some
    # momentum is still zero (near a Pareto-stationary point the min-norm step legitimately vanishes)
    pr = hetero_quadratic(noise=0.5).replicated(2)  # six clients
    kw = dict(eta=0.05, local_steps=3, rounds=8, replicates=4, seed=2, participation=2, block_size=1,
              w0=[30.0, 30.0])
    w = simulate(pr, aggregator=FedAWARE(), **kw).weights
    steps = np.linalg.norm(np.diff(w, axis=0), axis=-1)  # (rounds, R)
    assert np.all(steps > 1e-8)
    # without it, the unseen clients' zero momenta put 0 in the hull and the first round does not move
    w = simulate(pr, aggregator=FedAWARE(warm_start=False), **kw).weights
    assert np.all(np.linalg.norm(w[1] - w[0], axis=-1) == 0)
    # the authors' "-startup 0": FedAvg steps until every client has been seen, so no round stalls either
    w = simulate(pr, aggregator=FedAWARE(warm_start="fedavg"), **kw).weights
    assert np.all(np.linalg.norm(np.diff(w, axis=0), axis=-1) > 1e-8)
    with pytest.raises(FedsdeInputError, match="warm_start"):
        FedAWARE(warm_start="sometimes")
