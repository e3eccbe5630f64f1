"""CLT diagnostics of the server update (seed 002, Thm 5.4)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedsde.problems import QuadraticProblem
from fedsde.theory.clt import (
    SkewedQuadraticOracle,
    client_update_samples,
    clt_study,
    lyapunov_ratio,
    mardia,
    normality_diagnostics,
)


def test_lyapunov_ratio_of_known_laws():
    rng = np.random.default_rng(0)
    R, Q = 200000, 4
    X = rng.standard_normal((R, Q, 1))
    # Q i.i.d. N(0,1): Σ E X⁴ / (Σ Var)² = 3Q/Q² = 3/Q
    assert lyapunov_ratio(X)[0] == pytest.approx(3 / Q, rel=0.03)
    Y = rng.exponential(size=(R, Q, 1))
    # centred Exp(1): 4th central moment 9 → 9/Q
    assert lyapunov_ratio(Y)[0] == pytest.approx(9 / Q, rel=0.05)


def test_mardia_and_diagnostics():
    rng = np.random.default_rng(1)
    g = rng.standard_normal((20000, 3)) @ np.array([[1.0, 0.5, 0.0], [0.0, 1.0, 0.2], [0.0, 0.0, 1.0]])
    m = mardia(g)
    assert m["skew_p"] > 1e-4 and m["kurt_p"] > 1e-4
    e = rng.exponential(size=(20000, 3))
    assert mardia(e)["skew_p"] < 1e-10
    d = normality_diagnostics(e)
    np.testing.assert_allclose(d["skewness"], 2.0, atol=0.15)
    np.testing.assert_allclose(d["excess_kurtosis"], 6.0, atol=1.5)
    assert np.all(d["ks"] > 5 * d["ks_reference"])


def test_skewed_oracle_noise_law():
    """One local step from w = a_k: Δ = −η ξ with ξ = L(e − 1), so mean 0, Cov η²Σ, skewness −2 per coordinate."""
    pr = QuadraticProblem.from_arrays([[1.0, 2.0]], [[0.5, -0.5]], [[0.5, 2.0]])
    eta = 0.1
    terms = client_update_samples(pr, eta=eta, local_steps=1, replicates=40000, seed=3, w=pr.a[0],
                                  oracle_factory=SkewedQuadraticOracle)
    x = terms[:, 0, :]
    se = x.std(0, ddof=1) / np.sqrt(x.shape[0])
    assert np.all(np.abs(x.mean(0)) < 5 * se)
    np.testing.assert_allclose(x.var(0), eta**2 * np.array([0.5, 2.0]), rtol=0.05)
    np.testing.assert_allclose(stats.skew(x, axis=0), -2.0, atol=0.15)


def test_lyapunov_ratio_falls_like_one_over_Q():
    """The documented quadratic case: 3 skewed-noise clients replicated; slope of log ratio vs log Q near −1."""
    base = QuadraticProblem.from_arrays([[1.0, 2.0], [2.0, 1.0], [4.0, 0.5]], [[-1.0, 0.0], [0.0, 1.0], [2.0, -1.0]],
                                        [[0.5, 1.0], [1.0, 0.5], [2.0, 1.0]])
    st = clt_study(lambda Q: base.replicated(Q // 3), [3, 12, 48], eta=0.1, local_steps=5, replicates=6400, seed=5,
                   oracle_factory=SkewedQuadraticOracle)
    assert abs(st.lyapunov_slope + 1.0) < 0.15
    lyap, skew, ks = st.column("lyapunov"), st.column("skewness"), st.column("ks")
    assert np.all(np.diff(lyap) < 0) and np.all(np.diff(skew) < 0) and ks[-1] < ks[0]
