"""Quadratic SDE coefficients (paper / corrected / matched) against the seed's numbers and closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

from fedsde.errors import FedsdeInputError, NoStationaryLawError
from fedsde.exact import round_law, stationary_law
from fedsde.problems import QuadraticProblem, paper_table_problem, random_quadratic_problem
from fedsde.sde import VARIANTS, quadratic_sde_coefficients

# reference/seed-fedsde.md §3c, stationary table (server lr 1, h = eta): paper v0inf, corrected SDE, exact
TABLE = [
    (0.01, 5, 4.6542e-01, 7.8714e-04, 8.3291e-04),
    (0.05, 1, 1.0714e-02, 4.1667e-03, 4.4248e-03),
    (0.05, 5, 2.3650e00, 3.3271e-03, 4.2546e-03),
    (0.10, 20, 1.6788e02, 4.9387e-03, 9.4576e-03),
]


@pytest.mark.parametrize(("eta", "E", "paper", "corrected", "exact"), TABLE)
def test_stationary_variances_match_seed_table(eta, E, paper, corrected, exact):
    pb = paper_table_problem()
    got = {v: quadratic_sde_coefficients(pb, eta, E, variant=v).stationary().cov[0, 0] for v in VARIANTS}
    assert got["paper"] == pytest.approx(paper, rel=1e-4)
    assert got["corrected"] == pytest.approx(corrected, rel=1e-4)
    assert got["matched"] == pytest.approx(exact, rel=1e-4)  # the moment-matched OU has the chain's law


def test_corrected_is_round_law_rescaled():
    pb = random_quadratic_problem(4, 3, seed=3)
    eta, E, s, h = 0.04, 6, 0.3, 0.2
    lin = quadratic_sde_coefficients(pb, eta, E, s, h, "corrected")
    law = round_law(pb, eta, E, s)
    np.testing.assert_allclose(lin.A, s / h * law.B, rtol=1e-13)
    np.testing.assert_allclose(lin.diffusion_cov, s * s / h * law.noise_cov, rtol=1e-12, atol=1e-16)
    np.testing.assert_allclose(lin.c, law.c, rtol=1e-12)
    assert lin.server_rate == pytest.approx(s / h)
    assert lin.h == h and lin.eta == eta and lin.server_lr == s


def test_h_defaults_to_eta():
    lin = quadratic_sde_coefficients(paper_table_problem(), 0.05, 5)
    assert lin.h == 0.05 and lin.variant == "corrected"


def _paper_bracket_scalar(pb, eta, E):
    """E + Σ_k p_k √Σ_k Σ_{j<E} Σ_{i=1..j} (1 − ηU_k)^{j−i} U_k, summed term by term (eq. (4))."""
    total = float(E)
    for k in range(pb.Q):
        U, S = pb.U[k, 0, 0], pb.Sigma[k, 0, 0]
        dbl = sum((1 - eta * U) ** (j - i) * U for j in range(E) for i in range(1, j + 1))
        total += pb.p[k] * np.sqrt(S) * dbl
    return total


def test_paper_diffusion_is_eq4_as_printed():
    pb = paper_table_problem()
    eta, E = 0.05, 5
    lin = quadratic_sde_coefficients(pb, eta, E, variant="paper")  # h = eta, s = 1
    assert lin.diffusion_cov[0, 0] == pytest.approx(eta * _paper_bracket_scalar(pb, eta, E) ** 2, rel=1e-12)
    # drift as printed: Σ_k p_k Σ_j (1 − ηU_k)^j U_k = B/η
    D = sum(pb.p[k] * sum((1 - eta * pb.U[k, 0, 0]) ** j * pb.U[k, 0, 0] for j in range(E)) for k in range(3))
    assert lin.A[0, 0] == pytest.approx(D, rel=1e-12)


def test_paper_diagonal_problem_is_coordinatewise():
    pb = random_quadratic_problem(3, 2, seed=5, diagonal=True)
    eta, E, s, h = 0.05, 4, 0.5, 0.1
    lin = quadratic_sde_coefficients(pb, eta, E, s, h, "paper")
    assert abs(lin.diffusion_cov[0, 1]) < 1e-15
    for i in range(2):
        sub = QuadraticProblem.from_arrays(pb.U[:, i, i], pb.a[:, i], pb.Sigma[:, i, i], pb.p)
        one = quadratic_sde_coefficients(sub, eta, E, s, h, "paper")
        assert lin.diffusion_cov[i, i] == pytest.approx(one.diffusion_cov[0, 0], rel=1e-12)
        assert lin.A[i, i] == pytest.approx(one.A[0, 0], rel=1e-12)


def test_matched_transition_equals_round_law():
    pb = random_quadratic_problem(3, 3, seed=1)
    eta, E, s, h = 0.05, 5, 0.5, 0.1
    lin = quadratic_sde_coefficients(pb, eta, E, s, h, "matched")
    law = round_law(pb, eta, E, s)
    Phi, K = lin.transition(h)
    np.testing.assert_allclose(Phi, law.transition, atol=1e-13)
    np.testing.assert_allclose(K, law.server_noise_cov, rtol=1e-10, atol=1e-16)
    st = stationary_law(pb, eta, E, s)
    np.testing.assert_allclose(lin.stationary().cov, st.cov, rtol=1e-9)
    np.testing.assert_allclose(scipy.linalg.expm(-lin.A * h), law.transition, atol=1e-13)


def test_transition_matches_stationary_identity():
    """K(t) = P − Φ P Φᵀ when a stationary law exists, at short and long times."""
    lin = quadratic_sde_coefficients(random_quadratic_problem(3, 3, seed=1), 0.05, 5, 0.5, 0.1)
    P = lin.stationary().cov
    for t in (0.05, 3.0, 1e4):
        Phi, K = lin.transition(t)
        np.testing.assert_allclose(Phi, scipy.linalg.expm(-lin.A * t), atol=1e-12)
        np.testing.assert_allclose(K, P - Phi @ P @ Phi.T, rtol=1e-8, atol=1e-14)


def test_moments_use_exp_minus_2Dt_not_paper_exp_minus_Dt():
    """Scalar OU variance b²/(2D)(1 − e^{−2Dt}) (Thm 6.3 corrected, reference §3c)."""
    lin = quadratic_sde_coefficients(paper_table_problem(), 0.05, 5, variant="paper")
    D, b2 = lin.A[0, 0], lin.diffusion_cov[0, 0]
    for t in (0.05, 0.5, 5.0):
        law = lin.moments(t, [0.0])
        assert law.cov[0, 0] == pytest.approx(b2 / (2 * D) * (1 - np.exp(-2 * D * t)), rel=1e-10)
        assert law.mean[0] == pytest.approx(lin.c[0] * (1 - np.exp(-D * t)), rel=1e-10)


def test_no_stationary_law_when_local_sgd_expands():
    pb = QuadraticProblem.from_arrays([1.0, 30.0], [0.0, 1.0], [1.0, 1.0])
    lin = quadratic_sde_coefficients(pb, 0.1, 2, variant="corrected")  # 1 − (1 − 3)² = −3 on client 2
    assert np.linalg.eigvals(lin.A).real.min() < 0
    assert lin.stationary() is None


def test_matched_rejects_bad_spectrum():
    pb = paper_table_problem()
    with pytest.raises(FedsdeInputError, match="matched"):
        quadratic_sde_coefficients(pb, 0.05, 5, server_lr=2.5, variant="matched")  # I − sB < 0
    pb2 = QuadraticProblem.from_arrays([1.0, 30.0], [0.0, 1.0], [1.0, 1.0])
    with pytest.raises(NoStationaryLawError):
        quadratic_sde_coefficients(pb2, 0.1, 2, variant="matched")  # I − sB > 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"variant": "exact"}, "variant"),
        ({"eta": -0.1}, "eta"),
        ({"server_lr": 0.0}, "server_lr"),
        ({"h": float("nan")}, "h"),
        ({"variant": "paper", "local_steps": [2, 3, 4]}, "same E"),
    ],
)
def test_input_validation(kwargs, match):
    args = {"eta": 0.05, "local_steps": 5} | kwargs
    with pytest.raises(FedsdeInputError, match=match):
        quadratic_sde_coefficients(paper_table_problem(), **args)


def test_heterogeneous_steps_corrected():
    pb = paper_table_problem()
    lin = quadratic_sde_coefficients(pb, 0.05, [2, 3, 4], 0.5, 0.1)
    law = round_law(pb, 0.05, [2, 3, 4], 0.5)
    np.testing.assert_allclose(lin.A, 5 * law.B)
    assert lin.local_steps.tolist() == [2, 3, 4]


def test_moments_need_a_nonnegative_time():
    from fedsde.errors import FedsdeInputError
    from fedsde.problems import paper_table_problem
    from fedsde.sde import quadratic_sde_coefficients

    lin = quadratic_sde_coefficients(paper_table_problem(), 0.05, 5)
    with pytest.raises(FedsdeInputError, match=r"t=-1.0: must be finite and >= 0"):
        lin.moments(-1.0, [0.0])
