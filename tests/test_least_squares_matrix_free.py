"""The matrix-free exact least-squares laws against the dense d²×d² path and the round-by-round recursion: the
stationary law (preconditioned CG) and its fixed-point residual, the spectral radius (Lanczos), the transient at
many rounds (repeated squaring, or the proven tail bound) and memory that grows with the rows."""

from __future__ import annotations

import numpy as np
import pytest

from fedsde.errors import FedsdeInputError
from fedsde.exact.least_squares import least_squares_round_law, least_squares_stationary_law
from fedsde.exact.least_squares_transient import least_squares_transient_moments
from fedsde.problems.regression.problem import RegressionProblem


def _problem(d, Q=4, n=12, seed=0, sampling="without-replacement", b=3, l2=0.0, big=None):
    rng = np.random.default_rng(seed)
    sizes = [n + k for k in range(Q)] if big is None else [big] + [1] * (Q - 1)
    X = [rng.normal(size=(m, d)) / np.sqrt(d) + 0.2 * rng.normal(size=d) for m in sizes]
    w = rng.normal(size=d)
    y = [x @ w + 0.5 * rng.normal(size=x.shape[0]) + 0.3 * k for k, x in enumerate(X)]
    return RegressionProblem.from_clients(X, y, batch_size=b, sampling=sampling, l2=l2)


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize(("sampling", "participation", "steps"), [
    ("without-replacement", None, 3), ("with-replacement", 2, [1, 2, 3, 4])])
def test_matrix_free_stationary_law_equals_the_dense_solve(sampling, participation, steps):
    pb = _problem(10, sampling=sampling)
    kw = {"participation": participation}
    dense = least_squares_stationary_law(pb, 0.3, steps, **kw, method="dense")
    free = least_squares_stationary_law(pb, 0.3, steps, **kw, method="matrix-free")
    assert free.method == "matrix-free" and dense.method == "dense"
    assert _rel(free.cov, dense.cov) < 1e-10
    np.testing.assert_allclose(free.mean, dense.mean, rtol=0, atol=1e-13)
    assert abs(free.spectral_radius - dense.spectral_radius) < 1e-8
    assert free.residual < 1e-11


def test_second_moment_map_equals_the_dense_operator():
    pb = _problem(7, sampling="with-replacement")
    law = least_squares_round_law(pb, 0.2, [2, 3, 1, 2], participation=3, weighting="renormalised")
    rng = np.random.default_rng(1)
    P = rng.normal(size=(7, 7))
    P = P + P.T
    T = law.second_moment_operator()
    np.testing.assert_allclose(law.second_moment_map(P), (T @ P.reshape(-1)).reshape(7, 7), rtol=0, atol=1e-13)


def test_stationary_law_at_d_40_is_a_fixed_point_of_the_round():
    pb = _problem(40, Q=3, n=60)
    st = least_squares_stationary_law(pb, 0.2, 2)
    assert st.method == "matrix-free"
    m, P = st.law.step(st.mean, st.cov)
    assert _rel(P, st.cov) < 1e-10 and np.abs(m - st.mean).max() < 1e-12
    assert np.linalg.eigvalsh(st.cov)[0] > -1e-12 * np.abs(st.cov).max()


@pytest.mark.parametrize("method", ["dense", "matrix-free"])
def test_long_transients_equal_the_round_by_round_recursion(method, monkeypatch):
    import fedsde.exact.least_squares_transient as ls

    pb = _problem(6, sampling="with-replacement")
    kw = {"w0": np.ones(6), "cov0": 0.1, "record": [100, 400], "participation": 2}
    fast = least_squares_transient_moments(pb, 0.3, 3, 400, method=method, **kw)
    monkeypatch.setattr(ls, "DIRECT_ROUNDS", 10**9)
    slow = least_squares_transient_moments(pb, 0.3, 3, 400, **kw)
    assert _rel(fast.cov, slow.cov) < 1e-11
    np.testing.assert_allclose(fast.mean, slow.mean, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("d", "method"), [(3, "auto"), (10, "matrix-free")])
def test_a_hundred_million_rounds_give_the_stationary_law(d, method):
    pb = _problem(d)
    tr = least_squares_transient_moments(pb, 0.3, 2, 10**8, record=[10**8], method=method, w0=np.ones(d))
    st = least_squares_stationary_law(pb, 0.3, 2)
    assert _rel(tr.final_cov, st.cov) < 1e-9
    np.testing.assert_allclose(tr.final_mean, st.mean, rtol=0, atol=1e-12)


def test_memory_grows_with_the_rows_not_with_the_largest_client():
    pb = _problem(3, Q=200, big=5000, b=1, l2=0.1)
    law = least_squares_round_law(pb, 0.01, 1)
    held = sum(g.X.size for g in law.data.groups)
    assert held <= 1.25 * pb.sizes.sum() * pb.d
    small = _problem(3, Q=200, big=5000, b=1, l2=0.1)
    st = least_squares_stationary_law(small, 0.01, 1, method="matrix-free")
    dense = least_squares_stationary_law(small, 0.01, 1, method="dense")
    assert _rel(st.cov, dense.cov) < 1e-10


def test_the_memory_refusal_names_the_rows():
    pb = _problem(3, Q=3)
    with pytest.raises(FedsdeInputError, match=r"\d+ rows × d=3.*grows with the rows times the features"):
        least_squares_stationary_law(pb, 0.1, 2, memory_limit=100)


def test_quadratic_partial_participation_stationary_law_matrix_free_equals_dense(monkeypatch):
    import fedsde.exact.moments as moments
    from fedsde.problems import random_quadratic_problem

    pb = random_quadratic_problem(Q=6, d=9, seed=1)
    dense = moments.stationary_law(pb, 0.05, 3, participation=2)
    monkeypatch.setattr(moments, "MATRIX_FREE_D", 2)
    free = moments.stationary_law(pb, 0.05, 3, participation=2)
    assert _rel(free.cov, dense.cov) < 1e-10


@pytest.mark.parametrize("rounds", [300, 10**8])
def test_quadratic_partial_participation_long_transients(rounds):
    from fedsde.exact import stationary_law, transient_moments
    from fedsde.problems import random_quadratic_problem

    pb = random_quadratic_problem(Q=5, d=4, seed=2)
    kw = {"participation": 2, "w0": np.ones(4)}
    fast = transient_moments(pb, 0.05, 3, rounds, record=[rounds], **kw)
    if rounds == 10**8:
        st = stationary_law(pb, 0.05, 3, participation=2)
        ref_mean, ref_cov = st.mean, st.cov
    else:
        slow = transient_moments(pb, 0.05, 3, rounds, record=[*range(0, rounds + 1, 10), rounds], **kw)
        ref_mean, ref_cov = slow.final_mean, slow.final_cov
    assert _rel(fast.final_cov, ref_cov) < 1e-10
    np.testing.assert_allclose(fast.final_mean, ref_mean, rtol=0, atol=1e-12)
