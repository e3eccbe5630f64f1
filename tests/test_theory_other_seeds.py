"""FedNova (seed 003), FedDisco (seed 004) and FedAWARE (seed 000) bound evaluators against reference values."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize

from fedsde.errors import FedsdeInputError
from fedsde.problems import QuadraticProblem
from fedsde.theory import fedaware as fa
from fedsde.theory import feddisco as fd
from fedsde.theory import fednova as fn
from fedsde.theory.problems import fednova_quadratic

P4, TAU4 = [0.1, 0.2, 0.3, 0.4], [2, 4, 8, 16]


# ---------------------------------------------------------------------------------------------- FedNova
def test_fednova_quantities_reference_values():
    """reference/seed-fednova.md §2.6 (C6)."""
    q = fn.fednova_quantities(P4, [fn.accumulation_vector(t) for t in TAU4])
    assert q.tau_eff == pytest.approx(9.8)
    np.testing.assert_allclose(q.w, [0.020408, 0.081633, 0.244898, 0.653061], atol=1e-6)
    assert (q.chi2, q.slowdown, q.A, q.B, q.C) == pytest.approx((0.5925, 0.765306, 1.412245, 11.775510, 240), rel=1e-5)
    q = fn.fednova_quantities(P4, [fn.accumulation_vector(t) for t in TAU4], aggregator="fednova")
    assert (q.A, q.B, q.C, q.chi2) == pytest.approx((1.421, 8.8, 240, 0.0))
    q = fn.fednova_quantities(P4, [fn.accumulation_vector(t, "prox", alpha=0.1) for t in TAU4])
    np.testing.assert_allclose(q.a1, [1.9, 3.439, 5.695328, 8.146980], atol=1e-6)
    np.testing.assert_allclose(q.a2sq, [1.81, 2.997541, 4.287884, 5.082438], atol=1e-6)
    assert (q.tau_eff, q.chi2) == pytest.approx((5.845190, 0.242458), abs=1e-6)
    q = fn.fednova_quantities(P4, [fn.accumulation_vector(t, "momentum", rho=0.9) for t in TAU4])
    np.testing.assert_allclose(q.a1, [2.9, 9.049, 28.742049, 86.677182], atol=1e-6)
    assert q.tau_eff == pytest.approx(45.393287, abs=1e-6)
    assert q.Lambda == pytest.approx((1 - 0.9**16) / 0.1)  # not 1 (reference §5 item 9)


def test_fixed_points_and_gap():
    pr = fednova_quadratic()
    tau = [1, 2, 5, 10, 50]
    np.testing.assert_allclose(fn.fixed_point(pr, 0.01, tau), [0.278281, 0.213827], atol=1e-6)
    np.testing.assert_allclose(fn.fixed_point(pr, 0.001, tau), [0.305778, 0.246351], atol=1e-6)
    np.testing.assert_allclose(fn.fixed_point(pr, 0.01, tau, aggregator="fednova"), [0.087855, 0.091883], atol=1e-6)
    np.testing.assert_allclose(fn.fixed_point(pr, 0.001, tau, aggregator="fednova"), [0.098602, 0.099002], atol=1e-6)
    g = fn.objective_inconsistency_gap(pr, 0.001, tau)
    np.testing.assert_allclose(g["small_eta_limit"], [0.308824, 0.25], atol=1e-6)
    assert g["grad_sq"] == pytest.approx(g["distance"] ** 2)  # H = I


@pytest.mark.parametrize(("t1", "t2", "g2", "k2", "c2"), [(1, 2, 1 / 9, 8 / 9, 1 / 8), (1, 10, 0.669421, 0.330579,
                                                                                          2.025), (3, 5, 0.0625, 0.9375,
                                                                                                   1 / 15)])
def test_lemma5_golden(t1, t2, g2, k2, c2):
    c = fn.lemma5_constants(t1, t2)
    assert (c["grad_sq_limit"], c["kappa2"], c["chi2"]) == pytest.approx((g2, k2, c2), abs=1e-6)
    p = fn.lemma5_constants(t1, t2, variant="paper")
    assert p["product"] == pytest.approx(c["product"]) and p["kappa2"] == pytest.approx(k2 / 2, rel=1e-5)


def test_thm1_and_thm4_by_hand():
    q = fn.fednova_quantities([0.5, 0.5], [np.ones(1), np.ones(3)])
    # τ_eff = 2, w = (1/4, 3/4), A = 2·2·(1/16·1/1 + 9/16·3/9) = 4·(1/16 + 3/16) = 1, B = 3/4·2·3/3 = 1.5, C = 6
    assert (q.tau_eff, q.A, q.B, q.C) == pytest.approx((2.0, 1.0, 1.5, 6.0))
    bv = fn.thm1_bound(q, eta=0.01, T=100, L=2.0, sigma2=0.5, beta2=1.0, kappa2=0.3, F0_gap=1.0)
    hand = 4 * 1 / (0.01 * 2 * 100) + 4 * 0.01 * 2 * 0.5 * 1 / 2 + 6 * 1e-4 * 4 * 0.5 * 1.5 + 12 * 1e-4 * 4 * 0.3 * 6
    assert bv.value == pytest.approx(hand) and bv.valid
    assert not fn.thm1_bound(q, eta=0.3, T=100, L=2.0, sigma2=0.5, beta2=1.0, kappa2=0.3, F0_gap=1.0).valid
    # Thm 4: s = τ_eff/τ̄ = 1, γ = L/(cν) = 2/(1·0.1) = 20
    b4 = fn.thm4_bound(q, T=10, c=1.0, L=2.0, nu=0.1, sigma2=0.5, kappa2=0.3, beta2=1.0, F0_gap=1.0)
    hand4 = 36 * 2 * 0.5 * 1 / (1 * 1 * 30 * 2 * 2) + 216 / (1 * 1 * 900 * 4) * (1.5 * 4 * 0.5 * 1.5 + 3 * 4 * 0.3 * 6)
    assert b4.value == pytest.approx(hand4)
    # here cΔF̃ − 36νσ² = 1 − 1.8 < 0, so both τ_eff conditions hold trivially; but ν = 0.1 > 1/12 breaks
    # η⁽⁰⁾τ_eff L <= ½ (6ν = 0.6), which only the corrected variant checks
    assert "tau_eff_printed_(19): True" in b4.notes and "tau_eff_corrected_(81): True" in b4.notes
    assert not b4.valid and "condition eta0_tau_eff_L<=1/2 fails" in b4.notes
    assert fn.thm4_bound(q, T=10, c=1.0, L=2.0, nu=0.1, sigma2=0.5, kappa2=0.3, beta2=1.0, F0_gap=1.0,
                         variant="paper").valid
    # printed (19) has L² in the denominator only: with L = 2 it is 4× stricter than the corrected (81)
    kw = dict(T=10, c=1.0, L=2.0, nu=0.01, sigma2=0.5, kappa2=0.3, beta2=1.0)
    num = 648 * 0.01**2 * (0.5 * 1.5 + 0.3 * 6)  # = 0.165 ; τ_eff² = 4
    # corrected: 4 <= 0.165/(ΔF − 0.18) ⇔ ΔF <= 0.221 ; printed: 4 <= 0.165/(4(ΔF − 0.18)) ⇔ ΔF <= 0.190
    for F0, ok_p, ok_c in ((0.2, False, True), (0.185, True, True), (0.3, False, False)):
        notes = fn.thm4_bound(q, F0_gap=F0, **kw).notes
        assert (f"tau_eff_printed_(19): {ok_p}" in notes) and (f"tau_eff_corrected_(81): {ok_c}" in notes), num


def test_isotropic_dissimilarity():
    pr = fednova_quadratic(curvature=2.0)
    beta2, kappa2 = fn.isotropic_dissimilarity(pr)
    # A3 with β² = 1 holds with equality-type identity: Σw‖∇F_i‖² − ‖Σw∇F_i‖² = λ² Var_w(e) <= κ²
    rng = np.random.default_rng(0)
    for _ in range(50):
        w = rng.dirichlet(np.ones(5))
        x = rng.standard_normal(2) * 3
        g = 2.0 * (x - pr.a)
        lhs = w @ np.sum(g**2, 1)
        assert lhs <= beta2.value * np.sum((w @ g) ** 2) + kappa2.value + 1e-9
    assert kappa2.method == "optimisation"


# ---------------------------------------------------------------------------------------------- FedDisco
N, D = np.array([0.4, 0.3, 0.2, 0.1]), np.array([0.1, 0.5, 0.2, 0.9])
TV = {"tau": 5, "eta": 0.02, "L": 2.0, "sigma2": 1.0, "B": 1.0, "T": 100, "F0_gap": 2.0}


def test_disco_bound_test_vector():
    """reference/seed-feddisco.md §2.6."""
    b = fd.disco_bound(N, D, N, **TV)
    assert b.terms["A"] == pytest.approx(0.064)
    assert (b.terms["T1"], b.terms["T4"], b.terms["T3"], b.terms["T5"]) == pytest.approx((0.3744, 0.0128, 0.022464,
                                                                                          0.04096))
    assert b.value == pytest.approx(0.557703, abs=1e-6)
    assert fd.disco_bound(N, D, np.full(4, 0.25), **TV).value == pytest.approx(1.428598, abs=1e-6)
    assert fd.disco_bound(N, D, [0.4878, 0.2622, 0.25, 0.0], **TV).value == pytest.approx(0.794364, abs=5e-4)
    # main-text W_D (factor 2) is smaller than the appendix's (2K): a smaller bound away from p = n
    assert fd.disco_bound(N, D, np.full(4, 0.25), wd_scale="2", **TV).value < 1.428598
    big = dict(TV, eta=0.2)
    assert not fd.disco_bound(N, D, N, **big).valid and np.isinf(fd.disco_bound(N, D, N, **big).value)


def test_simplex_projection_and_bound_optimal_weights():
    rng = np.random.default_rng(0)
    for _ in range(20):
        v = rng.standard_normal(6)
        p = fd.project_simplex(v)
        res = optimize.minimize(lambda x, v=v: np.sum((x - v) ** 2), np.full(6, 1 / 6), method="SLSQP",
                                bounds=[(0, 1)] * 6, constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1}],
                                options={"ftol": 1e-14})
        np.testing.assert_allclose(p, res.x, atol=1e-6)
        assert p.sum() == pytest.approx(1.0) and p.min() >= 0
    kw = {k: TV[k] for k in ("tau", "eta", "L", "sigma2", "B")}
    p = fd.bound_optimal_weights(N, D, lam=0.05, **kw)
    np.testing.assert_allclose(p, [0.40263, 0.29765, 0.20500, 0.09472], atol=1e-5)
    assert fd.disco_bound(N, D, p, **TV).value == pytest.approx(0.557717, abs=1e-6)
    pm = fd.minimise_bound(N, D, **TV)
    np.testing.assert_allclose(pm, [0.40129, 0.29885, 0.20244, 0.09742], atol=2e-5)
    assert fd.disco_bound(N, D, pm, **TV).value == pytest.approx(0.557560, abs=1e-6)


# ---------------------------------------------------------------------------------------------- FedAWARE
def test_fedaware_quantities_and_validity():
    lam = np.full(4, 0.25)
    dense = np.array([[0.25, 0.25, 0.25, 0.25], [0.3, 0.2, 0.25, 0.25]])
    cq = fa.chi_quantities(dense, lam)
    # A_t = Σ(1 − λ̃/λ)²: 0 and (0.2² + 0.2²) = 0.08 ; χ² = Σ(λ̃/λ)²
    np.testing.assert_allclose(cq["A"], [0.0, 0.08])
    np.testing.assert_allclose(cq["chi2"], [4.0, 1.44 + 0.64 + 2.0])
    sparse = np.array([[0.5, 0.5, 0.0, 0.0]])
    assert fa.chi_quantities(sparse, lam)["A"][0] == pytest.approx(1 + 1 + 1 + 1)  # two zeros + two doubled
    grads = np.array([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -0.5]]])
    kw = dict(L=1.0, eta=1.0, eta_l=0.05, K=[2, 2, 3, 3], alpha=0.5, p=1.0, sigma_l2=0.0, sigma_g2=1.0)
    bv = fa.thm_4_1(sparse, lam, grads, [1.0, 0.9], **kw)
    assert not bv.valid and np.isnan(bv.value) and "ρ^t <= 0" in bv.notes[0]


def test_lemma_b2_printed_fails_where_the_gradient_vanishes():
    pr = QuadraticProblem.from_arrays(np.ones((4, 2)), [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]],
                                      np.zeros((4, 2)))
    x = pr.optimum  # ∇f(x*) = 0 but ∇f_i(x*) ≠ 0
    g = (x - pr.a)[None]
    lt = np.array([[1.0, 0.0, 0.0, 0.0]])
    lhs, rhs = fa.lemma_b_2(lt, pr.p, g, sigma_g2=1.0, variant="paper")
    assert lhs[0] == pytest.approx(1.0) and rhs[0] == pytest.approx(0.0, abs=1e-24)
    rng = np.random.default_rng(0)
    for _ in range(100):
        lt = rng.dirichlet(np.full(4, 0.3))[None]
        x = rng.standard_normal(2) * 2
        g = (x - pr.a)[None]
        sg = float(pr.p @ np.sum((g[0] - pr.p @ g[0]) ** 2, 1))  # σ_g² at x (here constant 1)
        lhs, rhs = fa.lemma_b_2(lt, pr.p, g, sigma_g2=sg, variant="corrected")
        assert lhs[0] <= rhs[0] + 1e-12


def test_fedaware_thm_4_1_by_hand_when_valid():
    """λ̃ = λ (A = 0), two clients with gradients e₁, e₂, β = 0.001: every piece of (9) by hand."""
    lam = np.array([0.5, 0.5])
    g = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    kw = dict(L=1.0, eta=1.0, eta_l=0.1, K=[1, 1], alpha=0.999, p=1.0, sigma_l2=0.0, sigma_g2=0.5)
    bv = fa.thm_4_1(lam[None], lam, g, [1.0, 0.8], **kw)
    beta, chi2, D, G = 0.001, 2.0, np.sqrt(2.0), 1.0
    rho = 1 - 6 * 1 * beta * 1 * G * np.sqrt(chi2) / D  # 0.994
    sigma2 = 5 * 0.1 * (0 + 6 * 1 * 0.5)  # 1.5, Φ = 0 (equal K)
    delta = sigma2 + 5 * 0.1 * 6 * 1 * 0.5  # + 5η_l·6K̃‖∇f‖², ‖∇f‖² = ½
    eps = ((1.0 - 0.8) / 1.0 + 1.0 * chi2 * beta**2 * 1 * delta) / rho
    het = beta * 1 * G * np.sqrt(chi2) * np.sqrt(sigma2) / (1 * rho * D)
    assert bv.terms["rho"][0] == pytest.approx(rho)
    assert bv.value == pytest.approx(eps + het)
    # the momentum condition (1−β)²(1 + 2L²η²χ²) <= 1 fails here: the number is reported but flagged
    assert not bv.valid and any("momentum" in n for n in bv.notes)


def test_fedaware_thm_4_1_takes_its_symbols_as_two_values_or_as_keywords():
    lam = np.array([0.5, 0.5])
    g = np.array([[[1.0, 0.0], [0.0, 1.0]], [[0.5, 0.0], [0.0, 0.5]]])
    lt = np.array([[0.6, 0.4], [0.5, 0.5]])
    kw = dict(L=1.0, eta=1.0, eta_l=0.1, K=[1, 2], alpha=0.999, p=1.0, sigma_l2=0.1, sigma_g2=0.5)
    old = fa.thm_4_1(lt, lam, g, [1.0, 0.8, 0.7], variant="corrected", **kw)
    settings = fa.FedAwareSettings(eta=1.0, eta_l=0.1, K=[1, 2], alpha=0.999, p=1.0)
    new = fa.thm_4_1(lt, lam, g, [1.0, 0.8, 0.7], settings, fa.FedAwareConstants(1.0, 0.1, 0.5),
                     variant="corrected")
    assert old.value == new.value and old.valid == new.valid
    np.testing.assert_array_equal(old.terms["rho"], new.terms["rho"])
    assert settings.beta == pytest.approx(0.001) and not settings.K.flags.writeable
    for bad, named in [(dict(alpha=1.0), "alpha=1.0"), (dict(p=0.0), "p=0.0"), (dict(K=[1, 0]), "K=\\[1, 0\\]"),
                       (dict(eta_l=-1.0), "eta_l=-1.0"), (dict(sigma_g2=-0.5), "sigma_g2=-0.5")]:
        with pytest.raises(FedsdeInputError, match=named):
            fa.thm_4_1(lt, lam, g, [1.0, 0.8, 0.7], **{**kw, **bad})
    with pytest.raises(FedsdeInputError, match="K: 3 values for 2 clients"):
        fa.thm_4_1(lt, lam, g, [1.0, 0.8, 0.7], **{**kw, "K": [1, 2, 3]})
    with pytest.raises(FedsdeInputError, match="both given"):
        fa.thm_4_1(lt, lam, g, [1.0, 0.8, 0.7], settings, eta=1.0, **{k: kw[k] for k in ("L", "sigma_l2", "sigma_g2")})
