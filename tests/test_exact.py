"""Exact laws of the discrete chain: brute-force recursion, the stationary table, participation, errors."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from helpers import brute_round, brute_step

from fedsde.errors import FedsdeInputError, NoStationaryLawError
from fedsde.exact import geometric_sum, round_law, stationary_law, transient_moments
from fedsde.problems import paper_table_problem, random_quadratic_problem


def test_geometric_sum_matches_direct_sum():
    xs = np.array([-1.5, -1.0, -0.3, 0.0, 0.5, 1 - 1e-12, 1.0, 1 + 1e-9, 1.7])
    for n in (1, 2, 7, 30):
        direct = np.array([sum(x**m for m in range(n)) for x in xs])
        np.testing.assert_allclose(geometric_sum(xs, n), direct, rtol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_round_law_equals_brute_force_local_steps(seed):
    pb = random_quadratic_problem(4, 3, seed=seed, curvature=(0.3, 3.0))
    steps = np.array([1, 4, 7, 12])
    eta, s = 0.15, 0.7
    law = round_law(pb, eta, steps, s)
    clients = brute_round(pb, eta, steps, s)
    B = sum(pb.p[k] * (np.eye(3) - clients[k][0]) for k in range(4))
    Ba = sum(pb.p[k] * clients[k][1] for k in range(4))  # g_k = (I − F_k) a_k
    noise = sum(pb.p[k] ** 2 * clients[k][2] for k in range(4))
    np.testing.assert_allclose(law.B, B, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(law.Ba, Ba, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(s**2 * law.noise_cov, s**2 * noise, rtol=1e-10, atol=1e-14)


def test_transient_equals_brute_force_with_schedules_and_gaussian_start():
    pb = random_quadratic_problem(3, 2, seed=5)
    etas = np.array([0.2, 0.1, 0.1, 0.05, 0.3])
    lrs = np.array([1.0, 0.5, 0.8, 1.2, 0.3])
    w0, cov0 = np.array([1.0, -2.0]), np.array([[0.5, 0.1], [0.1, 0.2]])
    tr = transient_moments(pb, etas, 3, 5, lrs, w0=w0, cov0=cov0)
    m, P = w0, cov0
    for n in range(5):
        clients = brute_round(pb, etas[n], 3, lrs[n])
        m, P = brute_step(pb, clients, lrs[n], m, P)
        np.testing.assert_allclose(tr.mean[n + 1], m, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(tr.cov[n + 1], P, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("m", [1, 2, 3])
def test_partial_participation_equals_subset_enumeration(m):
    pb = random_quadratic_problem(4, 2, seed=7, weights="random")
    steps = [2, 3, 1, 5]
    w0 = np.array([2.0, -1.0])
    tr = transient_moments(pb, 0.2, steps, 6, 0.9, w0=w0, participation=m)
    mean, cov = w0, np.zeros((2, 2))
    clients = brute_round(pb, 0.2, steps, 0.9)
    for n in range(6):
        mean, cov = brute_step(pb, clients, 0.9, mean, cov, participation=m)
        np.testing.assert_allclose(tr.mean[n + 1], mean, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(tr.cov[n + 1], cov, rtol=1e-10, atol=1e-12)
    # stationary law is the fixed point of the same recursion
    st = stationary_law(pb, 0.2, steps, 0.9, participation=m)
    mean, cov = brute_step(pb, clients, 0.9, st.mean, st.cov, participation=m)
    np.testing.assert_allclose(mean, st.mean, rtol=1e-10)
    np.testing.assert_allclose(cov, st.cov, rtol=1e-9, atol=1e-14)


# reference/seed-fedsde.md §3c: (eta, E, exact mean C4, exact var)
TABLE_3C = [
    (0.01, 1, 1.000000, 8.4317e-04), (0.01, 2, 0.992748, 8.4040e-04), (0.01, 5, 0.971273, 8.3291e-04),
    (0.01, 10, 0.936459, 8.2295e-04), (0.01, 20, 0.870785, 8.1067e-04), (0.05, 1, 1.000000, 4.4248e-03),
    (0.05, 2, 0.961390, 4.3578e-03), (0.05, 5, 0.855030, 4.2546e-03), (0.05, 10, 0.711485, 4.2487e-03),
    (0.05, 20, 0.532380, 4.3414e-03), (0.10, 1, 1.000000, 9.4340e-03), (0.10, 2, 0.915966, 9.1983e-03),
    (0.10, 5, 0.716028, 9.1153e-03), (0.10, 10, 0.526650, 9.3124e-03), (0.10, 20, 0.391196, 9.4576e-03),
]


@pytest.mark.parametrize(("eta", "E", "mean", "var"), TABLE_3C)
def test_stationary_table_of_reference(eta, E, mean, var):
    """Recomputed independently: the scalar chain w' = (1 − B)w + Ba + ε has fixed point Ba/B and variance
    N/(1 − (1 − B)²), with B, Ba, N from local updates stepped one at a time; stationary_law agrees to 1e-12 and
    the reference prints exactly these values rounded."""
    pb = paper_table_problem()
    cl = brute_round(pb, eta, E, 1.0)
    B = sum(pb.p[k] * (1.0 - cl[k][0][0, 0]) for k in range(3))
    Ba = sum(pb.p[k] * cl[k][1][0] for k in range(3))
    N = sum(pb.p[k] ** 2 * cl[k][2][0, 0] for k in range(3))
    c4, v = Ba / B, N / (1.0 - (1.0 - B) ** 2)
    st = stationary_law(pb, eta, E)
    assert st.mean[0] == pytest.approx(c4, rel=1e-12, abs=1e-15)
    assert st.cov[0, 0] == pytest.approx(v, rel=1e-12)
    assert f"{c4:.6f}" == f"{mean:.6f}" and f"{v:.4e}" == f"{var:.4e}"


def test_stationary_large_E_limit_and_one_over_Q():
    pb = paper_table_problem()
    st = stationary_law(pb, 0.05, 2000)
    limit = 0.05 * np.sum(pb.p**2 * pb.Sigma[:, 0, 0] / (pb.U[:, 0, 0] * (2 - 0.05 * pb.U[:, 0, 0])))
    assert st.cov[0, 0] == pytest.approx(limit, rel=1e-9)  # 4.42970e-03 in §3c
    assert st.cov[0, 0] == pytest.approx(4.42970e-03, rel=1e-5)
    assert st.mean[0] == pytest.approx(pb.p @ pb.a[:, 0], abs=1e-3)  # C4 → Σ p_k a_k
    big = stationary_law(pb.replicated(16), 0.05, 5)
    small = stationary_law(pb, 0.05, 5)
    assert big.cov[0, 0] * 48 == pytest.approx(1.2764e-02, rel=1e-4)
    assert big.cov[0, 0] == pytest.approx(small.cov[0, 0] / 16, rel=1e-12)


def test_stationary_is_fixed_point_and_transient_converges():
    pb = random_quadratic_problem(5, 3, seed=9)
    st = stationary_law(pb, 0.1, [1, 2, 3, 4, 5], 0.8)
    law = st.law
    m, P = law.step(st.mean, st.cov)
    np.testing.assert_allclose(m, st.mean, rtol=1e-12)
    np.testing.assert_allclose(P, st.cov, rtol=1e-10)
    tr = transient_moments(pb, 0.1, [1, 2, 3, 4, 5], 400, 0.8, record=[400])
    np.testing.assert_allclose(tr.final_cov, st.cov, rtol=1e-8)


def test_no_stationary_law_is_a_clear_error():
    pb = paper_table_problem()
    with pytest.raises(NoStationaryLawError, match=r"spectral radius of I - s\*B is .* >= 1"):
        stationary_law(pb, 0.05, 5, server_lr=5.0)


def test_expanding_local_sgd_is_reported():
    pb = paper_table_problem()
    with pytest.warns(RuntimeWarning, match=r"eta\*max_eig\(U_k\) >= 2 for clients \[2\]"):
        law = round_law(pb, 0.55, 1)
    assert law.expanding_clients == (2,)


def _calls(fn) -> int:
    """Python and C function calls made by ``fn()`` (a machine-independent operation count)."""
    n = 0

    def prof(frame, event, arg):
        nonlocal n
        if event in ("call", "c_call"):
            n += 1

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return n


def test_cost_does_not_grow_with_E():
    """The number of operations is the same for E = 10 and E = 10⁵ (a loop over E would need 10⁴× more)."""
    pb = random_quadratic_problem(30, 20, seed=0)
    round_law(pb, 0.01, 10)  # warm the eigendecomposition cache
    n10 = _calls(lambda: stationary_law(pb, 0.01, 10))
    n_big = _calls(lambda: stationary_law(pb, 0.01, 100000))
    assert n10 > 0 and n_big <= n10 + 10


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(eta=-0.1, local_steps=2), "eta=-0.1"),
        (dict(eta=0.1, local_steps=0), "local_steps=0"),
        (dict(eta=0.1, local_steps=[1, 2]), "one value per client"),
        (dict(eta=0.1, local_steps=2, server_lr=0.0), "server_lr=0.0"),
        (dict(eta=0.1, local_steps=2, participation=4), "participation=4"),
        (dict(eta=0.1, local_steps=2.5), r"local_steps=2.5"),
        (dict(eta=0.1, local_steps=2, weights=[0.0, 0.0, 0.0]), "weights: all zero"),
        (dict(eta=0.1, local_steps=2, weights=[0.5, -1.0, 0.5]), r"weights\[1\]=-1.0: must be finite and >= 0"),
    ],
)
def test_round_law_validation(kwargs, match):
    with pytest.raises(FedsdeInputError, match=match):
        round_law(paper_table_problem(), **kwargs)


def test_transient_validation():
    pb = paper_table_problem()
    with pytest.raises(FedsdeInputError, match=r"eta: schedule of shape \(2,\)"):
        transient_moments(pb, [0.1, 0.1], 2, 3)
    with pytest.raises(FedsdeInputError, match="w0"):
        transient_moments(pb, 0.1, 2, 3, w0=[1.0, 2.0])
    with pytest.raises(FedsdeInputError, match="cov0"):
        transient_moments(pb, 0.1, 2, 3, cov0=[[-1.0]])
