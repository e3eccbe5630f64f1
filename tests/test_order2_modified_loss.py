"""The modified loss of fedsde.symbolic.order2 against the algorithms themselves: one deterministic FedAvg (and
SCAFFOLD) round on non-quadratic clients, written out step by step here, against the gradient flow of F̃ over the
round's time sηE, solved to 1e-12 by scipy.  The flow of F̃ must match the round to O(η³) (local error falling 8-fold
per halving of η); the flow of F only to O(η²) — the control that makes the test able to fail.  The clients'
derivatives are written by hand and checked against central differences."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from scipy.integrate import solve_ivp

from fedsde.symbolic import order2 as O
from fedsde.symbolic import symbols as S

A = np.array([[[1.0, 0.3], [0.3, 0.5]], [[0.4, -0.2], [-0.2, 1.2]], [[0.8, 0.0], [0.0, 0.3]]])
CENTRES = np.array([[1.0, -0.5], [-0.7, 0.9], [0.2, 0.4]])
P = np.array([0.5, 0.3, 0.2])
SWAP = np.array([[0.0, 1.0], [1.0, 0.0]])


def _grads_hessians(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Client gradients (3, 2) and Hessians (3, 2, 2), client k at x[k] (x of shape (3, 2)), by hand."""
    d = x - CENTRES
    u = d[:, 0] * d[:, 1] + np.arange(3.0)
    v = d[:, ::-1]  # ∂u/∂w
    g = np.einsum("kij,kj->ki", A, d) + 0.4 * d**3 + 0.2 * np.cos(u)[:, None] * v
    H = (A + 1.2 * np.einsum("ki,ij->kij", d**2, np.eye(2))
         + 0.2 * (-np.sin(u)[:, None, None] * np.einsum("ki,kj->kij", v, v) + np.cos(u)[:, None, None] * SWAP))
    return g, H


def _losses(x: np.ndarray) -> np.ndarray:
    # f_k = ½dᵀA_kd + 0.1Σd⁴ + 0.2 sin(d₁d₂ + k), d = x_k − a_k: every third derivative non-zero
    d = x - CENTRES
    quad = 0.5 * np.einsum("ki,kij,kj->k", d, A, d)
    return quad + 0.1 * (d**4).sum(1) + 0.2 * np.sin(d[:, 0] * d[:, 1] + np.arange(3.0))


def test_hand_derivatives_are_finite_differences():
    x, step = np.array([[0.3, -0.8], [1.1, 0.2], [-0.4, 0.5]]), 1e-5
    g, H = _grads_hessians(x)
    for i in range(2):
        e = np.zeros(2)
        e[i] = step
        # central differences: error O(step²) times the third derivatives, about 1e-10 here
        assert np.allclose((_losses(x + e) - _losses(x - e)) / (2 * step), g[:, i], rtol=0, atol=1e-8)
        assert np.allclose((_grads_hessians(x + e)[0] - _grads_hessians(x - e)[0]) / (2 * step), H[:, :, i],
                           rtol=0, atol=1e-8)


def _modified_gradient(local_step: str, eta: float, E: int, s: float):
    """∇F̃ for F̃ = F + η·(c₁‖∇F‖² + c₂ Σ_k p_k‖∇f_k‖²), (c₁, c₂) read off the symbolic derivation."""
    corr = sp.expand(O.modified_loss(local_step).correction.subs({S.E: E, S.s: s}))
    c1, c2 = (float(corr.coeff(x)) for x in (O.grad2, O.client_grad2))

    def grad(w):
        g, H = _grads_hessians(np.tile(w, (3, 1)))
        gF, HF = P @ g, np.einsum("k,kij->ij", P, H)
        return gF + eta * (2 * c1 * HF @ gF + 2 * c2 * np.einsum("k,kij,kj->i", P, H, g))

    return grad


def _flow_end(grad, w0: np.ndarray, duration: float) -> np.ndarray:
    sol = solve_ivp(lambda _t, y: -grad(y), (0.0, duration), w0, method="DOP853", rtol=1e-12, atol=1e-14)
    return sol.y[:, -1]


def _round(w: np.ndarray, eta: float, E: int, s: float, scaffold: bool) -> np.ndarray:
    x = np.tile(w, (3, 1))
    G0 = _grads_hessians(x)[0]
    gF = P @ G0
    for _ in range(E):
        G = _grads_hessians(x)[0]
        x = x - eta * ((G - G0 + gF) if scaffold else G)
    return w + s * P @ (x - w)


@pytest.mark.parametrize("local_step,E,s", [("plain", 3, 1.0), ("plain", 4, 0.7), ("control_variate", 3, 1.0),
                                            ("control_variate", 4, 0.7)])
def test_one_round_follows_the_flow_of_the_modified_loss_to_third_order(local_step, E, s):
    w0, etas = np.array([0.3, -0.8]), (0.02, 0.01, 0.005)
    scaffold = local_step == "control_variate"
    err_mod, err_F = [], []
    for eta in etas:
        end = _round(w0, eta, E, s, scaffold)
        err_mod.append(np.linalg.norm(end - _flow_end(_modified_gradient(local_step, eta, E, s), w0, s * eta * E)))
        err_F.append(np.linalg.norm(end - _flow_end(_modified_gradient(local_step, 0.0, E, s), w0, s * eta * E)))
    orders_mod, orders_F = np.log2(np.divide(err_mod[:-1], err_mod[1:])), np.log2(np.divide(err_F[:-1], err_F[1:]))
    assert np.all(orders_mod > 2.8), (err_mod, orders_mod)
    assert np.all(orders_F < 2.3), (err_F, orders_F)
