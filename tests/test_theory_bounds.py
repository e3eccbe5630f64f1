"""Seed 002's bounds (Thm 4.5, Cor 4.6, Cor 4.7, Thm 4.9, Cor 4.10, Lemma A.1) against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedsde.errors import FedsdeInputError
from fedsde.theory import bounds_002 as b
from fedsde.theory.schedules import PowerSchedule

E_ = math.e


def tiny(**kw) -> b.BoundInputs:
    """L=2, μ=3, Tr Σ = (1, 4), p = (½, ½), V* = 0.5, d = 2, E = 3, h = 0.5, ΔF₀ = 1, R₀ = 3, τ = 2."""
    base = dict(L=2.0, mu=3.0, trace_sigma=[1.0, 4.0], p=[0.5, 0.5], V_star=0.5, d=2, E=3, h=0.5, F0_gap=1.0,
                dist0=3.0, tau=2.0, eta0=1.0, L_inf=1.5)
    base.update(kw)
    return b.BoundInputs(**base)


def test_constants_by_hand():
    inp = tiny()
    # Σ p_k (L + √TrΣ_k) = ½(2 + 1) + ½(2 + 2) = 3.5
    assert inp.noise_gradient_sum == pytest.approx(3.5)
    # C1 = E² L μ · 3.5 / 2 = 9·2·3·3.5/2 = 94.5 ; tight: E(E−1) = 6 → 6·2·3·3.5/2 = 63
    assert b.C1(inp) == pytest.approx(94.5)
    assert b.C1(inp, tight=True) == pytest.approx(63.0)
    # C2 = μ E² · 3.5 = 3·9·3.5 = 94.5 ; C3 = d h η0² V*/2 + η0 C2 R0 = 2·0.5·0.5/2 + 94.5·3 = 0.25 + 283.5
    assert b.C2(inp) == pytest.approx(94.5)
    assert b.C3(inp) == pytest.approx(283.75)


def test_thm_4_5_by_hand():
    inp = tiny()
    s = PowerSchedule(1.0, 1.0)
    t = E_ - 1.0  # φ = log(1+t) = 1, ∫η² = t/(t+1) = 1 − 1/e
    i2 = 1.0 - 1.0 / E_
    # paper: ΔF0/(Eφ) + (C1 + h V* L/2) I2/(Eφ) = 1/3 + (94.5 + 0.5·0.5·2/2) i2/3
    assert b.thm_4_5(inp, s, t, variant="paper").value == pytest.approx(1 / 3 + (94.5 + 0.25) * i2 / 3)
    # corrected: Itô term d h V* μ/2 = 2·0.5·0.5·3/2 = 0.75
    bc = b.thm_4_5(inp, s, t, variant="corrected")
    assert bc.value == pytest.approx(1 / 3 + (94.5 + 0.75) * i2 / 3)
    assert sum(bc.terms.values()) == pytest.approx(bc.value)
    # tighter trace version: h μ TrV̂1/2 with TrV̂1 = 0.6 → 0.5·3·0.6/2 = 0.45
    bt = b.thm_4_5(tiny(trace_V_star=0.6), s, t, use_trace=True)
    assert bt.value == pytest.approx(1 / 3 + (94.5 + 0.45) * i2 / 3)


def test_cor_4_6_matches_thm_4_5():
    inp = tiny()
    t = np.array([3.0, 50.0, 1e4])
    for variant in ("paper", "corrected"):
        # b = 1 uses ∫η² <= 1 in place of t/(t+1)
        c = b.cor_4_6(inp, t, b=1.0, variant=variant).value
        th = b.thm_4_5(inp, PowerSchedule(1.0, 1.0), t, variant=variant)
        assert np.all(c >= th.value)
        expected = th.terms["initial"] + (th.terms["local_drift"] + th.terms["ito"]) * (t + 1) / t
        np.testing.assert_allclose(c, expected, rtol=1e-12)
        # b = ½: exact
        np.testing.assert_allclose(b.cor_4_6(inp, t, b=0.5, variant=variant).value,
                                   b.thm_4_5(inp, PowerSchedule(1.0, 0.5), t, variant=variant).value, rtol=1e-12)
    assert b.cor_4_6_rate(0.25)[1] == -0.25 and b.cor_4_6_rate(0.75)[1] == pytest.approx(-0.25)
    assert b.cor_4_6_rate(1.0)[2] == -1.0


def test_cor_4_7_by_hand():
    inp = tiny()
    t = E_ - 1.0  # log(t+1) = 1
    eta_c = 0.1
    den = 3 * eta_c
    paper = (1.0 + 0.5 * eta_c**2 * 0.5 * 0.5 * 2.0) / den + eta_c * 94.5
    assert b.cor_4_7(inp, t, eta_c=eta_c, variant="paper").value == pytest.approx(paper)
    corr = (1.0 + 0.5 * eta_c**2 * 2 * 0.5 * 0.5 * 3.0 * (1 - 1 / E_)) / den + eta_c * 94.5 / 3
    assert b.cor_4_7(inp, t, eta_c=eta_c, variant="corrected").value == pytest.approx(corr)


def test_thm_4_9_by_hand():
    inp = tiny(eta0=2.0)
    s = PowerSchedule(1.0, 1.0)
    t = E_ - 1.0
    phi, i2 = 1.0, 1.0 - 1.0 / E_
    J = (t - 1.0) / (t + 1.0)  # (t − log(1+t))/(t+1)
    K = 2.0 / 3.0 * (t / (t + 1.0)) ** 1.5
    c2 = 94.5
    c3 = 2 * 0.5 * 4 * 0.5 / 2 + 2 * c2 * 3  # d h η0² V*/2 + η0 C2 R0 = 1 + 567
    paper = 3 / (2 * phi) + c2 / (2 * phi) * (2 * 3 * J + math.sqrt(0.5) * 0.5 * K) + c3 * i2 / (2 * phi)
    assert b.thm_4_9(inp, s, t, variant="paper").value == pytest.approx(paper)
    corr = (9 / (2 * 2 * 2 * phi) + 2 * c2 / (2 * phi) * (2 * 3 * J + math.sqrt(0.5) * math.sqrt(2 * 0.5) * K)
            + c3 * i2 / (2 * 2 * phi))
    assert b.thm_4_9(inp, s, t, variant="corrected").value == pytest.approx(corr)
    # tight: denominators gain E, C2 uses E(E−1)/2 = 3 → C2 = 3·3·3.5 = 31.5
    c2t = 31.5
    c3t = 2 * 0.5 * 4 * 0.5 / 2 + 2 * c2t * 3  # = 1 + 189
    tight = (9 / (8 * 3) + 2 * c2t / (2 * 3) * (2 * 3 * J + math.sqrt(0.5) * 1.0 * K) + c3t * i2 / (4 * 3))
    assert b.thm_4_9(inp, s, t, variant="corrected", tight=True).value == pytest.approx(tight)


def test_thm_4_9_first_term_is_invalid_far_from_the_optimum():
    """Printed ‖w₀ − w*‖/(τφ) vs corrected ‖w₀ − w*‖²/(2τη₀φ): smaller exactly when ‖w₀ − w*‖ > 2 (η₀ = 1)."""
    s = PowerSchedule(1.0, 1.0)
    for r0, smaller in ((1.0, False), (3.0, True), (10.0, True)):
        inp = tiny(dist0=r0)
        p = b.thm_4_9(inp, s, 10.0, variant="paper").terms["initial"]
        c = b.thm_4_9(inp, s, 10.0, variant="corrected").terms["initial"]
        assert (p < c) == smaller


def test_cor_4_10():
    inp = tiny()
    t = np.array([E_ - 1.0, 100.0])
    np.testing.assert_allclose(b.cor_4_10(inp, t, variant="corrected").value,
                               b.thm_4_9(inp, PowerSchedule(1.0, 1.0), t, variant="corrected").value)
    t0 = E_ - 1.0  # log(t+1) = 1
    c2, c3 = 94.5, 283.75
    paper = c2 * 2 * 3 / 2 * (t0 - 1.0) / t0 + (3.0 + c3 + c2 * math.sqrt(0.5) * 0.5) / 2
    assert b.cor_4_10(inp, t0, variant="paper").value == pytest.approx(paper)
    # the printed corollary uses looser integrals than Thm 4.9 printed: it is never smaller
    assert b.cor_4_10(inp, 50.0, variant="paper").value >= b.thm_4_9(inp, PowerSchedule(1.0, 1.0), 50.0,
                                                                      variant="paper").value


def test_lemma_a_1_by_hand():
    inp = tiny()
    v = b.lemma_a_1(inp, 0.1, [1, 2, 3], variant="corrected").value
    # i·η·(L + √TrΣ_k): client 0: i·0.1·3, client 1: i·0.1·4
    np.testing.assert_allclose(v, [[0.3, 0.4], [0.6, 0.8], [0.9, 1.2]])
    vp = b.lemma_a_1(inp, 0.1, [1], variant="paper").value  # L_inf = 1.5
    np.testing.assert_allclose(vp, [[0.25, 0.35]])


def test_validation():
    with pytest.raises(FedsdeInputError, match="variant"):
        b.thm_4_5(tiny(), PowerSchedule(), 1.0, variant="printed")
    with pytest.raises(FedsdeInputError, match="t:"):
        b.thm_4_5(tiny(), PowerSchedule(), 0.0)
    with pytest.raises(FedsdeInputError, match="h="):
        tiny(h=0.0)
    with pytest.raises(FedsdeInputError):
        tiny(p=[0.3, 0.3])
