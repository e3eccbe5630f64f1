"""The order-2 SDE's derivation (fedsde.symbolic.order2): closed forms against hand-written ones, the Li–Tai–E
reduction, the modified loss, the matrix orderings, and the symbolic coefficients against the numeric module."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from fedsde.problems import paper_table_problem, random_quadratic_problem
from fedsde.sde.order2 import ORDER2_FORMS, order2_sde_coefficients
from fedsde.symbolic import order2 as O
from fedsde.symbolic import order2_checks as C
from fedsde.symbolic import symbols as S


def test_one_client_expansion_is_the_hand_derivation():
    # w_i − w = −ηig − ηΣ_{j<i}σz_j + η²(HΣ_{j<i}(jg + Σ_{l<j}σz_l) + σ'Σ_{j<i}(jg + …)z_j): mean and variance to
    # O(η²), O(η³) written out by hand (Σ_{i<E} i = E(E−1)/2, E[z_l z_j] = δ_lj)
    cm = O.client_moments()
    E, g, H, Sg, dS = S.E, O.g, O.H, O.S, O.dS
    assert sp.simplify(cm.m1 + E * g) == 0
    assert sp.simplify(cm.m2 - E * (E - 1) / 2 * H * g) == 0
    assert sp.simplify(cm.v2 - E * Sg) == 0
    assert sp.simplify(cm.v3 + E * (E - 1) / 2 * (2 * H * Sg + g * dS)) == 0
    # one unrolled value independently of the interpolation: E = 3 gives −3ηg + 3η²Hg
    mean, _var = O.local_expansion(3)
    assert sp.expand(mean - (-3 * S.eta * g + 3 * S.eta**2 * H * g)) == 0


def test_order2_sde_matches_the_round_and_has_the_closed_form():
    sde = O.order2_sde()
    assert sde.residual_mean == 0 and sde.residual_var == 0
    s, eta, h, E = S.s, S.eta, S.h, S.E
    b = -(s * eta * E / h) * (O.Fg + (eta / 2) * (s * E * O.FH * O.Fg - (E - 1) * O.chi))
    D = (s**2 * eta**2 / h) * (E * O.Sb - eta * E * (E - 1) / 2 * O.psi
                               + s * eta * E**2 / 2 * (2 * O.FH * O.Sb + O.Fg * O.dSb))
    assert sp.simplify(sde.drift - b) == 0
    assert sp.simplify(sde.diffusion - D) == 0
    assert sp.simplify(sde.drift_order1 + s * eta * E * O.Fg / h) == 0


def test_li_tai_e_reduction():
    # E = 1, one client, s = 1, h = η: Li, Tai & E (JMLR 2019, Thm 3): b = −∇(f + (η/4)‖∇f‖²), D = ηΣ + O(η²)
    b, D = O.lte_reduction()
    f1, f2 = O.Fg, O.FH  # f', f''
    assert sp.simplify(b - (-(f1 + S.eta / 4 * 2 * f1 * f2))) == 0
    assert sp.simplify(D.coeff(S.eta, 1) - O.Sb) == 0 and D.coeff(S.eta, 0) == 0


def test_modified_loss_is_the_expected_form():
    # with s = 1: F + (ηE/4)‖∇F‖² − (η(E−1)/4)Σ_k p_k‖∇f_k‖² (the drift is −(η/h)E∇F̃)
    ml = O.modified_loss("plain")
    expected = S.E * S.s / 4 * O.grad2 - (S.E - 1) / 4 * O.client_grad2
    assert sp.simplify(ml.correction - expected) == 0
    assert sp.simplify(ml.correction.subs(S.s, 1) - (S.E / 4 * O.grad2 - (S.E - 1) / 4 * O.client_grad2)) == 0
    # dispersion form: F + (η/4)(sE − E + 1)‖∇F‖² − (η(E−1)/4)Σ p_k‖∇f_k − ∇F‖²
    assert sp.simplify(ml.dispersion_form - ((S.s * S.E - S.E + 1) / 4 * O.grad2 - (S.E - 1) / 4 * O.dispersion)) == 0
    # SCAFFOLD's local step (exact control variates): no dispersion term
    cv = O.modified_loss("control_variate")
    assert sp.simplify(cv.correction - (S.s * S.E - S.E + 1) / 4 * O.grad2) == 0


def test_drift_is_the_gradient_of_the_modified_loss_in_two_dimensions():
    # generic f_1, f_2 of (w1, w2): the matrix drift minus −(sη/h)E∇F̃ simplifies to zero
    assert C.modified_loss_residual("plain") == sp.zeros(2, 1)


@pytest.mark.slow
def test_control_variate_drift_is_a_gradient_too():
    assert C.modified_loss_residual("control_variate") == sp.zeros(2, 1)


def test_matrix_orderings_from_a_two_dimensional_unrolling():
    mean, cov = C.matrix_client_moments(2)
    assert mean == sp.zeros(2, 1) and cov == sp.zeros(2, 2)


@pytest.mark.slow
@pytest.mark.parametrize("steps,local_step", [(3, "plain"), (3, "control_variate")])
def test_matrix_orderings_three_steps(steps, local_step):
    mean, cov = C.matrix_client_moments(steps, local_step)
    assert mean == sp.zeros(2, 1) and cov == sp.zeros(2, 2)


def test_round_law_truncation_errors():
    # e^{−Ah} − (1 − x) = x³/3 + O(x⁴) and the OU step's variance s²σ_ε²(1 − 5x²/6 + …), x = sβ
    x = sp.Symbol("x", positive=True)
    mean_gap, var_gap = C.round_law_matches_chain()
    assert sp.simplify(mean_gap - x**3 / 3) == 0
    assert sp.simplify(var_gap + sp.Rational(5, 6) * x**2) == 0


@pytest.mark.parametrize("form", list(ORDER2_FORMS))
def test_symbolic_coefficients_equal_the_numeric_module(form):
    # the lambdified one-coordinate forms against fedsde.sde.order2's matrices on diagonal problems, to 1e-10
    for pb in (paper_table_problem(), random_quadratic_problem(Q=4, d=3, seed=2, diagonal=True)):
        for eta, E, s, h in ((0.05, 3, 1.0, 0.05), (0.1, 5, 0.7, 0.02), (0.02, 1, 1.3, 0.02)):
            A, c, D = C.diagonal_order2(pb, eta, E, s, h, form)
            lin = order2_sde_coefficients(pb, eta, E, s, h, form)
            assert np.allclose(np.diag(lin.A), A, rtol=1e-10, atol=0)
            assert np.allclose(lin.c, c, rtol=1e-10, atol=1e-12)
            assert np.allclose(np.diag(lin.diffusion_cov), D, rtol=1e-10, atol=0)
            assert np.all(lin.A == np.diag(np.diag(lin.A)))
