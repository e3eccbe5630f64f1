"""Symbolic derivations (fedsde.symbolic) against fedsde.exact, the reference numbers and each other.

Reference numbers: reference/seed-fedsde.md §3a–3d (printed to 4–5 significant digits; compared to print
precision).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import scipy.linalg
import sympy as sp

from fedsde.errors import FedsdeInputError, NoStationaryLawError
from fedsde.exact import round_law, stationary_law, transient_moments
from fedsde.problems import QuadraticProblem, paper_table_problem, random_quadratic_problem
from fedsde.sde import coefficients
from fedsde.symbolic import local_sgd as L
from fedsde.symbolic import moments as M
from fedsde.symbolic import symbols as S
from fedsde.symbolic.numeric import (
    _matrix,
    aggregates,
    client_functions,
    moment_functions,
    sde_coefficients_numeric,
)
from fedsde.symbolic.sde import VARIANTS, eq4_printed, euler_maruyama_step, sde_coefficients


def _close_to_print(value: float, printed: str) -> bool:
    """``value`` rounds to ``printed`` (half a unit in the last printed digit, plus a hair)."""
    mant = printed.lower().split("e")[0]
    decimals = len(mant.split(".")[1]) if "." in mant else 0
    exp = int(printed.lower().split("e")[1]) if "e" in printed.lower() else 0
    return abs(value - float(printed)) <= 0.5001 * 10.0 ** (exp - decimals)


# ---------------------------------------------------------------------------------------------- laziness
def test_import_runs_no_derivation():
    code = (
        "import sys, fedsde, fedsde.symbolic as fs; "
        "assert 'fedsde.symbolic.moments' not in sys.modules, 'moments imported eagerly'; "
        "from fedsde.symbolic import local_sgd; "
        "assert local_sgd.server_law.cache_info().currsize == 0; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "sympy" not in subprocess.run(
        [sys.executable, "-c", "import sys, fedsde; print(' '.join(sys.modules))"], capture_output=True, text=True
    ).stdout.split()


def test_all_derivations_run_in_a_fresh_process():
    # every derivation, erratum and lambdified function builds from a cold start; their cost is measured in
    # benchmarks/bench_symbolic.py (speed is not asserted here)
    code = (
        "from fedsde.symbolic.render import derivation\n"
        "from fedsde.symbolic.errata import errata_entries\n"
        "from fedsde.symbolic import moments as M, numeric as N\n"
        "for v in ('paper', 'corrected', 'matched'):\n"
        "    derivation(v); derivation(v, 5); N.variant_functions(v)\n"
        "M.rescaling_ratios(); M.ode_residuals(); N.client_functions('numpy'); N.moment_functions('numpy')\n"
        "print(len(errata_entries()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)  # hang guard
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip().splitlines()[-1]) > 0


# ---------------------------------------------------------------------------------------------- local SGD
def test_geometric_sum_equals_sympy_summation():
    x = sp.Symbol("x")
    closed = L.geometric_sum(x, S.E)
    assert sp.simplify(closed - sp.Sum(x**S.m, (S.m, 0, S.E - 1)).doit()) == 0
    for E in range(1, 13):
        assert sp.simplify(closed.subs(S.E, E) - sum(x**q for q in range(E))) == 0
        assert closed.subs({S.E: E, x: 1}) == E


@pytest.mark.parametrize("E", range(1, 7))
def test_closed_forms_equal_unrolled_recursion(E):
    law = L.client_law("corrected")
    assert sp.simplify(L.mean_from_unrolled(E) - law.mean.subs(S.E, E)) == 0
    assert sp.simplify(L.noise_variance_from_unrolled(E) - L.generic(law.variance).subs(S.E, E)) == 0
    # closed-form weights and Thm 6.2's corrected layout equal the unrolled iterate
    assert sp.expand(L.expand_sums(L.closed_form_weights(E)) - L.unrolled(E)) == 0
    assert sp.expand(L.expand_sums(L.mean_sum(E) + L.paper_layout_noise(E)) - L.unrolled(E)) == 0
    # the printed mean part (sum over j) is the closed form
    assert sp.simplify(L.expand_sums(L.mean_sum(E)) - law.mean.subs(S.E, E)) == 0


def test_contraction_and_paper_double_sum_closed_forms():
    beta_sum = S.eta * sp.Sum(S.r**S.j * S.U, (S.j, 0, S.E - 1)).doit()
    assert sp.simplify(L.generic(beta_sum) - L.contraction()) == 0
    for E in range(1, 9):
        dbl = sum(S.r ** (j - i) * S.U for j in range(E) for i in range(1, j + 1))
        assert sp.simplify(L.generic(L.paper_double_sum()).subs(S.E, E) - dbl) == 0
        assert L.paper_double_sum().subs({S.E: E, S.U: 0}) == 0


def test_printed_thm62_readings_reproduce_reference_3a():
    f = client_functions("numpy")
    # eta, U, Sigma, E | exact, same-draw, 2 indep, eq4-style (reference §3a)
    rows = [
        (0.01, 1, 0.5, 5, "2.4025e-04", "1.2007e-03", "6.1510e-03", "1.4402e-02"),
        (0.01, 1, 0.5, 20, "8.3173e-04", "1.2652e+00", "1.6233e+00", "2.1498e+00"),
        (0.10, 4, 2.0, 1, "2.0000e-02", "2.0000e-02", "2.0000e-02", "1.0000e-02"),
        (0.10, 4, 2.0, 5, "3.1061e-02", "9.6308e+00", "1.5020e+01", "1.8580e+01"),
        (0.10, 4, 2.0, 20, "3.1250e-02", "4.8051e+02", "6.2051e+02", "7.1550e+02"),
    ]
    for eta, U, Sig, E, exact, same, indep, eq4 in rows:
        assert _close_to_print(float(f.var(eta, U, Sig, E)), exact)
        assert _close_to_print(float(f.var_printed["same_draw"](eta, U, Sig, E)), same)
        assert _close_to_print(float(f.var_printed["independent"](eta, U, Sig, E)), indep)
        assert _close_to_print(float(f.var_printed["eq4"](eta, U, Sig, E)), eq4)


@pytest.mark.parametrize("E", range(1, 13))
def test_one_round_law_equals_exact_numeric_law(E):
    rng = np.random.default_rng(100 + E)
    f = client_functions("numpy")
    Q = 4
    U = rng.uniform(0.2, 3.0, Q)
    eta = float(rng.uniform(0.01, 0.6))  # includes ηU > 1 (negative r)
    Sig, a, p = rng.uniform(0.1, 2.0, Q), rng.normal(size=Q), rng.dirichlet(np.ones(Q))
    s = float(rng.uniform(0.1, 1.0))
    pr = QuadraticProblem.from_arrays(U, a, Sig, p)
    law = round_law(pr, eta, E, s, warn=False)
    # per client: variance of the client weights after E steps
    client_var = f.var(eta, U, Sig, E)
    np.testing.assert_allclose(client_var, eta**2 * law.Gamma[:, 0, 0], rtol=1e-12)
    # server: one-round variance s² σ_ε², contraction β and fixed point C4
    ag = aggregates(pr, eta, E)
    np.testing.assert_allclose(s**2 * ag["sigma2"], np.diag(law.server_noise_cov), rtol=1e-12)
    np.testing.assert_allclose(ag["beta"], np.diag(law.B), rtol=1e-12)
    np.testing.assert_allclose(ag["C4"], law.c, rtol=1e-12)
    # diagonal d-dim problem, coordinate-wise
    dp = random_quadratic_problem(3, 4, seed=E, diagonal=True, weights="random")
    dlaw = round_law(dp, eta, E, s, warn=False)
    dag = aggregates(dp, eta, E)
    np.testing.assert_allclose(s**2 * dag["sigma2"], np.diag(dlaw.server_noise_cov), rtol=1e-12)
    np.testing.assert_allclose(dag["beta"], np.diag(dlaw.B), rtol=1e-12)
    np.testing.assert_allclose(dag["C4"], dlaw.c, rtol=1e-12)


def test_server_law_mean_update_is_affine_in_w():
    sl = L.server_law()
    expr, _ = L.explicit_clients(L.generic(sl.mean_update - (S.w - S.s * sl.beta * (S.w - sl.c))), 3)
    assert sp.simplify(expr) == 0


def test_diagonal_client_law_matches_matrix_recursion():
    d = 2
    mean, cov, syms = L.diagonal_client_law(d)
    w, a, U, Sig = syms[:d], syms[d:2 * d], syms[2 * d:3 * d], syms[3 * d:]
    R = sp.diag(*[1 - S.eta * u for u in U])
    for E in range(1, 5):
        # brute force: mean and covariance propagated step by step with matrices
        m, C = sp.Matrix(w), sp.zeros(d, d)
        for _ in range(E):
            m = m - S.eta * sp.diag(*U) * (m - sp.Matrix(a))
            C = R * C * R.T + S.eta**2 * sp.diag(*Sig)
        assert sp.simplify(mean.subs(S.E, E) - m) == sp.zeros(d, 1)
        assert sp.simplify(L.generic(cov).subs(S.E, E) - C) == sp.zeros(d, d)
    # per coordinate it is the scalar law
    scal = L.client_law("corrected").variance
    assert sp.simplify(cov[1, 1] - scal.subs({S.U: U[1], S.Sigma: Sig[1]})) == 0


# ---------------------------------------------------------------------------------------------- units
def test_rescaling_corrected_scales_by_lambda_squared_and_paper_does_not():
    ratios = M.rescaling_ratios()
    for key in ("stationary_corrected", "stationary_matched", "stationary_chain", "round_corrected", "round_matched"):
        assert sp.simplify(ratios[key] - S.lam**2) == 0, key
    assert sp.simplify(ratios["C4"] - S.lam) == 0
    for key in ("stationary_paper", "round_paper"):
        assert sp.simplify(ratios[key] - S.lam**2) != 0, key
        assert sp.simplify(ratios[key].subs(S.lam, 1) - 1) == 0
    # numerically (reference §3b rescaling table, eta = 0.05, E = 5)
    pr = paper_table_problem()
    printed = {1.0: "2.36499e+00", 2.0: "7.27549e-01", 10.0: "7.23533e+00", 0.1: "1.61392e+04"}
    for lam, paper_ref in printed.items():
        big = QuadraticProblem.from_arrays(pr.U / lam**2, pr.a * lam, pr.Sigma / lam**2, pr.p)
        eta = lam**2 * 0.05
        exact = stationary_law(big, eta, 5).cov[0, 0] / lam**2
        corr = sde_coefficients_numeric(big, eta, 5).stationary()[1][0, 0] / lam**2
        paper = sde_coefficients_numeric(big, eta, 5, variant="paper").stationary()[1][0, 0] / lam**2
        assert _close_to_print(exact, "4.25464e-03")
        assert abs(corr / 3.3270922689992e-03 - 1) < 1e-9  # covariant: the λ = 1 value
        assert _close_to_print(paper, paper_ref)


# ---------------------------------------------------------------------------------------------- ODEs
def test_moment_odes_and_residuals():
    sol = M.ou_solution()
    assert sol.mean_residual == 0 and sol.var_residual == 0
    res = M.ode_residuals()
    assert res["paper_mean"] == 0 and res["paper_C4"] == 0
    assert res["paper_mean_initial"] == 0 and res["paper_var_initial"] == 0
    assert sp.simplify(res["paper_var"] + S.eta * S.b_paper**2 * sp.exp(-S.D * S.t) / 2) == 0
    assert sp.simplify(res["paper_var_generic"] + S.b2 * sp.exp(-S.D * S.t) / 2) == 0
    assert res["corrected_var"] == 0
    # the corrected v(t) satisfies v' = −2Dv + b² in the paper's notation (A = D at h = η, s = 1)
    v = M.variant_moments("corrected").var.subs({S.v0: 0, S.s: 1, S.h: S.eta, S.beta: S.eta * S.D})
    b2 = S.sigma2 / S.eta
    assert sp.simplify(sp.diff(v, S.t) + 2 * S.D * v - b2) == 0
    # the paper's printed v0(t) does not
    th = M.thm63_printed()
    assert sp.simplify(sp.diff(th.var, S.t) + 2 * S.D * th.var - S.eta * S.b_paper**2) != 0


def test_paper_variant_drift_and_diffusion_are_eq4_as_printed():
    """The paper variant at h = η, s = 1 (closed forms) equals eq. (4) with its sums written out (Q = 2)."""
    drift, diffusion = eq4_printed()
    co = sde_coefficients("paper").section6().expanded()
    rng = np.random.default_rng(7)

    def value(expr, E, vals):
        out, _ = L.explicit_clients(L.expand_sums(L.generic(expr.subs(S.E, E))), 2)
        return float(out.subs(vals))

    _, syms = L.explicit_clients(S.U_[1], 2)
    for E in (1, 4, 7):
        vals = {S.eta: 0.13, S.w: 0.7}
        for key in ("U", "Sigma", "p", "a"):
            vals.update({sym: float(rng.uniform(0.2, 2.0)) for sym in syms[key]})
        assert value(drift, E, vals) == pytest.approx(value(co.drift, E, vals), rel=1e-12)
        assert value(diffusion, E, vals) ** 2 == pytest.approx(value(co.b2, E, vals), rel=1e-12)


def test_euler_maruyama_of_corrected_is_the_round_law():
    mean, var = euler_maruyama_step(sde_coefficients("corrected"))
    assert sp.simplify(mean - (S.w - S.s * S.beta * (S.w - S.C4))) == 0
    assert sp.simplify(var - S.s**2 * S.sigma2) == 0


# ---------------------------------------------------------------------------------------------- matched
def test_matched_symbolic_grid_residuals_vanish():
    assert M.matched_grid_residuals() == (0, 0)
    ch = M.chain_moments()
    assert ch.mean_residual == 0 and ch.var_residual == 0


@pytest.mark.parametrize("s", [1.0, 0.5])
def test_matched_reproduces_chain_at_grid_times(s):
    mf = moment_functions("numpy")
    for pr, E, eta in ((paper_table_problem(), 5, 0.05),
                       (random_quadratic_problem(3, 3, seed=4, diagonal=True, weights="random"), 3, 0.1)):
        co = sde_coefficients_numeric(pr, eta, E, s, h=0.3, variant="matched")
        w0 = np.linspace(-1.0, 2.0, pr.d)
        rounds = 25
        ex = transient_moments(pr, eta, E, rounds, s, w0=w0)
        t = 0.3 * np.arange(rounds + 1)[:, None]
        A, b2 = np.diag(co.A), np.diag(co.diffusion_cov)
        np.testing.assert_allclose(mf.mean(t, A, co.c, w0), ex.mean, rtol=1e-12, atol=1e-14)
        var = np.einsum("tii->ti", ex.cov)
        np.testing.assert_allclose(mf.var(t, A, b2, 0.0), var, rtol=1e-10, atol=1e-16)


def test_matched_full_matrix_path_reproduces_chain():
    pr = random_quadratic_problem(3, 3, seed=11)
    co = sde_coefficients_numeric(pr, 0.1, 4, 0.7, h=0.2, variant="matched")
    assert co.path == "exact-matrix"
    ex = transient_moments(pr, 0.1, 4, 10, 0.7, w0=np.ones(3))
    P = co.stationary()[1]
    np.testing.assert_allclose(P, stationary_law(pr, 0.1, 4, 0.7).cov, rtol=1e-10, atol=1e-15)
    for n in range(11):
        Phi = scipy.linalg.expm(-co.A * 0.2 * n)
        np.testing.assert_allclose(co.c + Phi @ (np.ones(3) - co.c), ex.mean[n], rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(P - Phi @ P @ Phi.T, ex.cov[n], rtol=1e-9, atol=1e-14)


# ---------------------------------------------------------------------------------------------- stationary
def test_corrected_stationary_ratio_is_one_minus_s_beta_over_two():
    assert sp.simplify(M.stationary_ratio("corrected") - (1 - S.s * S.beta / 2)) == 0
    assert M.stationary_ratio("matched") == 1
    pr = paper_table_problem()
    ref = {1.0: ("4.2546e-03", "3.3271e-03", "0.7820"), 0.5: ("1.8671e-03", "1.6635e-03", "0.8910"),
           0.1: ("3.4012e-04", "3.3271e-04", "0.9782")}
    beta = aggregates(pr, 0.05, 5)["beta"][0]
    for s, (exact_ref, sde_ref, ratio_ref) in ref.items():
        exact = stationary_law(pr, 0.05, 5, s).cov[0, 0]
        corr = sde_coefficients_numeric(pr, 0.05, 5, s).stationary()[1][0, 0]
        assert _close_to_print(exact, exact_ref) and _close_to_print(corr, sde_ref)
        assert _close_to_print(corr / exact, ratio_ref)
        assert abs(corr / exact - (1 - s * beta / 2)) < 1e-12


# eta, E | C4, exact var, paper v0inf, corr. SDE, lead. ord.   (reference §3c)
TABLE = [
    (0.01, 1, "1.000000", "8.4317e-04", "2.1429e-03", "8.3333e-04", "8.3333e-04"),
    (0.01, 2, "0.992748", "8.4040e-04", "2.4936e-02", "8.2108e-04", "8.3333e-04"),
    (0.01, 5, "0.971273", "8.3291e-04", "4.6542e-01", "7.8714e-04", "8.3333e-04"),
    (0.01, 10, "0.936459", "8.2295e-04", "3.8305e+00", "7.3877e-04", "8.3333e-04"),
    (0.01, 20, "0.870785", "8.1067e-04", "2.9606e+01", "6.6576e-04", "8.3333e-04"),
    (0.05, 1, "1.000000", "4.4248e-03", "1.0714e-02", "4.1667e-03", "4.1667e-03"),
    (0.05, 2, "0.961390", "4.3578e-03", "1.3277e-01", "3.8875e-03", "4.1667e-03"),
    (0.05, 5, "0.855030", "4.2546e-03", "2.3650e+00", "3.3271e-03", "4.1667e-03"),
    (0.05, 10, "0.711485", "4.2487e-03", "1.7309e+01", "2.8713e-03", "4.1667e-03"),
    (0.05, 20, "0.532380", "4.3414e-03", "1.0942e+02", "2.5264e-03", "4.1667e-03"),
    (0.10, 1, "1.000000", "9.4340e-03", "2.1429e-02", "8.3333e-03", "8.3333e-03"),
    (0.10, 2, "0.915966", "9.1983e-03", "2.8897e-01", "7.3739e-03", "8.3333e-03"),
    (0.10, 5, "0.716028", "9.1153e-03", "4.7893e+00", "6.0707e-03", "8.3333e-03"),
    (0.10, 10, "0.526650", "9.3124e-03", "3.0726e+01", "5.3734e-03", "8.3333e-03"),
    (0.10, 20, "0.391196", "9.4576e-03", "1.6788e+02", "4.9387e-03", "8.3333e-03"),
]


def test_stationary_table_of_reference_3c():
    pr = paper_table_problem()
    lead = sp.lambdify((S.eta, S.s), L.explicit_clients(M.eta_series().stationary_var["chain"], 3)[0].subs(
        {**dict(zip(L.explicit_clients(S.U_[1], 3)[1]["U"], [1, 2, 4], strict=True)),
         **dict(zip(L.explicit_clients(S.U_[1], 3)[1]["Sigma"], [0.5, 1, 2], strict=True)),
         **dict.fromkeys(L.explicit_clients(S.U_[1], 3)[1]["p"], sp.Rational(1, 3))}))
    for eta, E, c4, exact, paper, corr, lo in TABLE:
        st = {v: sde_coefficients_numeric(pr, eta, E, variant=v).stationary() for v in VARIANTS}
        assert _close_to_print(st["corrected"][0][0], c4)
        assert _close_to_print(stationary_law(pr, eta, E).cov[0, 0], exact)
        assert _close_to_print(st["matched"][1][0, 0], exact)
        assert _close_to_print(st["paper"][1][0, 0], paper), (eta, E)
        assert _close_to_print(st["corrected"][1][0, 0], corr), (eta, E)
        assert _close_to_print(float(lead(eta, 1)), lo)


def test_eta_series_and_limits():
    ser = M.eta_series()
    sumU = sp.Sum(S.U_[S.k] * S.p_[S.k], (S.k, 1, S.Q))
    sumS = sp.Sum(S.Sigma_[S.k] * S.p_[S.k] ** 2, (S.k, 1, S.Q))
    lead = S.eta * S.s * sumS / (2 * sumU)
    for key in ("chain", "corrected", "matched"):
        assert sp.simplify(ser.stationary_var[key] - lead) == 0
    assert not ser.stationary_var["paper"].has(S.Sigma_[S.k] * S.p_[S.k] ** 2)
    assert sp.simplify(ser.C4_limit - sp.Sum(S.U_[S.k] * S.a_[S.k] * S.p_[S.k], (S.k, 1, S.Q)) / sumU) == 0
    # η → 0 numerically (reference §3d): exact var/η → Σp²Σ/(2ΣpU) = 0.0833 at η = 1e-4, E = 5
    pr = paper_table_problem()
    assert abs(stationary_law(pr, 1e-4, 5).cov[0, 0] / 1e-4 - 1 / 12) < 1e-4
    assert _close_to_print(sde_coefficients_numeric(pr, 1e-4, 5, variant="paper").stationary()[1][0, 0],
                           "4.633e-03")
    # E → ∞ (reference §3c): exact var at E = 2000 equals the limit; C4 → Σ p a; the paper grows like E²
    big = M.large_E_limits()
    assert sp.simplify(big.C4 - sp.Sum(S.a_[S.k] * S.p_[S.k], (S.k, 1, S.Q))) == 0
    lim, syms = L.explicit_clients(big.stationary_var["chain"], 3)
    num = {S.eta: 0.05, S.s: 1, **dict(zip(syms["U"], [1, 2, 4], strict=True)),
           **dict(zip(syms["Sigma"], [0.5, 1, 2], strict=True)), **dict.fromkeys(syms["p"], sp.Rational(1, 3))}
    limit_value = float(lim.subs(num))
    assert _close_to_print(limit_value, "4.42970e-03")
    assert abs(stationary_law(pr, 0.05, 2000).cov[0, 0] / limit_value - 1) < 1e-10
    coef, syms = L.explicit_clients(big.paper_E2_coefficient, 3)
    c2 = float(coef.subs({S.eta: 0.05, S.s: 1, **dict(zip(syms["Sigma"], [0.5, 1, 2], strict=True)),
                          **dict.fromkeys(syms["p"], sp.Rational(1, 3))}))
    paper_big = sde_coefficients_numeric(pr, 0.05, 20000, variant="paper").stationary()[1][0, 0]
    assert abs(paper_big / 20000**2 / c2 - 1) < 2e-3


# ---------------------------------------------------------------------------------------------- numerics
def test_torch_callables_match_numpy():
    import torch

    fn, ft = client_functions("numpy"), client_functions("torch")
    eta = torch.tensor([0.05, 0.3, 0.9], dtype=torch.float64)
    U = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64)
    Sig = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    for E in (1, 4, 7):
        np.testing.assert_allclose(ft.gamma(eta, U, Sig, E).numpy(), fn.gamma(eta.numpy(), U.numpy(), Sig.numpy(), E),
                                   rtol=1e-13)
        np.testing.assert_allclose(ft.beta(eta, U, E).numpy(), fn.beta(eta.numpy(), U.numpy(), E), rtol=1e-13)
        np.testing.assert_allclose(ft.S(eta, U, E).numpy(), fn.S(eta.numpy(), U.numpy(), E), rtol=1e-13)
    mt, mn = moment_functions("torch"), moment_functions("numpy")
    t = torch.linspace(0, 2, 5, dtype=torch.float64)
    np.testing.assert_allclose(mt.var(t, 3.0, 0.2, 0.1).numpy(), mn.var(t.numpy(), 3.0, 0.2, 0.1), rtol=1e-13)


def test_degenerate_branches_are_finite():
    f = client_functions("numpy")
    with np.errstate(all="ignore"):
        U = np.array([0.0, 1.0, 2.0])
        g = f.gamma(1.0, U, np.ones(3), 4)  # r² = 1 at U = 0 and ηU = 2
        S_ = f.S(1.0, U, 4)
    np.testing.assert_allclose(g, [4.0, 1.0, 4.0])
    assert np.isfinite(S_).all() and S_[0] == 0.0


@pytest.mark.parametrize("variant", VARIANTS)
def test_diagonal_path_equals_matrix_path(variant):
    pr = random_quadratic_problem(4, 3, seed=5, diagonal=True)
    sym = sde_coefficients_numeric(pr, 0.07, 6, 0.8, h=0.1, variant=variant)
    mat = _matrix(pr, 0.07, 6, 0.8, 0.1, variant)
    assert sym.path == "symbolic-diagonal" and mat.path == "exact-matrix"
    for x, y in ((sym.A, mat.A), (sym.c, mat.c), (sym.diffusion_cov, mat.diffusion_cov),
                 (sym.stationary()[1], mat.stationary()[1])):
        np.testing.assert_allclose(x, y, rtol=1e-11, atol=1e-15)


@pytest.mark.parametrize("variant", VARIANTS)
def test_full_matrix_path_equals_rotated_symbolic_diagonal_path(variant):
    # full matrices with a common eigenbasis V: the SDE of U_k = V D_k Vᵀ, Σ_k = V S_k Vᵀ, a_k = V b_k is the
    # rotation V(·)Vᵀ of the diagonal problem's SDE, which the lambdified sympy formulas compute independently
    diag = random_quadratic_problem(4, 3, seed=8, diagonal=True)
    V, _ = np.linalg.qr(np.random.default_rng(3).standard_normal((3, 3)))
    rot = QuadraticProblem.from_arrays(V @ diag.U @ V.T, diag.a @ V.T, V @ diag.Sigma @ V.T, diag.p)
    assert not rot.is_diagonal
    sym = sde_coefficients_numeric(diag, 0.07, 6, 0.8, h=0.1, variant=variant)
    mat = sde_coefficients_numeric(rot, 0.07, 6, 0.8, h=0.1, variant=variant)
    assert sym.path == "symbolic-diagonal" and mat.path == "exact-matrix"
    np.testing.assert_allclose(mat.A, V @ sym.A @ V.T, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(mat.c, V @ sym.c, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(mat.diffusion_cov, V @ sym.diffusion_cov @ V.T, rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize("variant", VARIANTS)
def test_symbolic_callables_equal_sde_coefficients_module(variant):
    for pr in (paper_table_problem(), random_quadratic_problem(3, 4, seed=2, diagonal=True, weights="random"),
               random_quadratic_problem(3, 3, seed=3)):
        for eta, E, s, h in ((0.05, 5, 1.0, None), (0.1, 3, 0.5, 0.2)):
            ours = sde_coefficients_numeric(pr, eta, E, s, h, variant=variant)
            theirs = coefficients.quadratic_sde_coefficients(pr, eta, E, s, h, variant=variant)
            assert ours.h == theirs.h
            np.testing.assert_allclose(ours.A, theirs.A, rtol=1e-10, atol=1e-14)
            np.testing.assert_allclose(ours.c, theirs.c, rtol=1e-10, atol=1e-14)
            np.testing.assert_allclose(ours.diffusion_cov, theirs.diffusion_cov, rtol=1e-9, atol=1e-15)
            np.testing.assert_allclose(ours.stationary()[1], theirs.stationary().cov, rtol=1e-9, atol=1e-15)


def test_bad_inputs_raise_input_errors():
    pr = paper_table_problem()
    with pytest.raises(FedsdeInputError, match="eta"):
        sde_coefficients_numeric(pr, -0.1, 5)
    with pytest.raises(FedsdeInputError, match="local_steps"):
        sde_coefficients_numeric(pr, 0.1, 0)
    with pytest.raises(FedsdeInputError, match="variant"):
        sde_coefficients_numeric(pr, 0.1, 5, variant="wrong")
    with pytest.raises(FedsdeInputError, match="matched"):  # 1 − β < 0: the chain oscillates
        sde_coefficients_numeric(pr, 0.6, 1, variant="matched")
    # ηU = 2 and E even: r = −1, r^E = 1, so β = 0 and I − sB has the eigenvalue 1 (no stationary law)
    flat = QuadraticProblem.from_arrays([2.0, 1.0], [0.0, 1.0], [1.0, 1.0], p=[1.0, 0.0])
    with pytest.raises(NoStationaryLawError):
        sde_coefficients_numeric(flat, 1.0, 2, variant="matched")


# ---------------------------------------------------------------------------------------------- errata
def test_errata_entries_are_computed_and_consistent():
    from fedsde.symbolic.errata import errata_entries

    entries = {e.id: e for e in errata_entries()}
    assert set(entries) == {"thm6.2-noise", "eq4-diffusion", "eq4-units", "eq4-clients", "thm6.3-v0",
                            "sec6-variance-E2"}
    e = entries["thm6.2-noise"]
    assert _close_to_print(e.printed_value, "9.6308e+00") and abs(e.corrected_value / e.exact_value - 1) < 1e-12
    e = entries["eq4-diffusion"]  # the corrected SDE's EM step has the round's variance exactly
    assert abs(e.corrected_value / e.exact_value - 1) < 1e-12 and e.printed_value > 100 * e.exact_value
    e = entries["eq4-units"]
    assert _close_to_print(e.printed_value, "7.23533e+00") and _close_to_print(e.exact_value, "4.25464e-03")
    e = entries["eq4-clients"]
    assert _close_to_print(e.printed_value, "2.3650") and _close_to_print(e.exact_value, "2.6591e-04")
    e = entries["thm6.3-v0"]
    assert _close_to_print(e.corrected_value, "1.9360e-03") and _close_to_print(e.exact_value, "2.9013e-03")
    assert _close_to_print(e.extra["printed_exponent_with_corrected_b"], "1.1758e-03")
    assert abs(e.extra["matched_ou"] / e.exact_value - 1) < 1e-12
    e = entries["sec6-variance-E2"]
    assert _close_to_print(e.printed_value, "2.872") and _close_to_print(e.exact_value, "-0.002")
    for e in entries.values():
        d = json.loads(json.dumps(e.to_dict()))
        assert d["printed_latex"] and d["corrected_latex"] and d["printed"] != d["corrected"]


def test_diagonal_server_law_equals_exact_round_step():
    d, Q, E, s = 2, 2, 3, 0.7
    mean, cov, bases = L.diagonal_server_law(d)
    pr = random_quadratic_problem(Q, d, seed=9, diagonal=True, weights="random")
    w = np.array([0.3, -0.4])
    vals = {S.eta: 0.2, S.s: s}
    for k in range(Q):
        vals[S.p_[k + 1]] = pr.p[k]
        for q in range(d):
            vals[bases["U"][k + 1, q + 1]] = pr.U[k, q, q]
            vals[bases["Sigma"][k + 1, q + 1]] = pr.Sigma[k, q, q]
            vals[bases["a"][k + 1, q + 1]] = pr.a[k, q]
    vals.update({bases["w"][q + 1]: w[q] for q in range(d)})

    def num(M_):
        out = L.expand_sums(L.generic(M_.subs({S.Q: Q, S.E: E})))
        return np.array(out.subs(vals).evalf(), dtype=np.float64)

    m_ex, c_ex = round_law(pr, 0.2, E, s).step(w, np.zeros((d, d)))
    np.testing.assert_allclose(num(mean).ravel(), m_ex, rtol=1e-12)
    np.testing.assert_allclose(num(cov), c_ex, rtol=1e-12, atol=1e-16)
