"""CLT diagnostics of the server update (seed 002, Thm 5.4)."""

from __future__ import annotations

import numpy as np
from helpers import (
    assert_within_se,
    excess_kurtosis_se,
    lyapunov_ratio_se,
    lyapunov_slope_se,
    record_lyapunov_se,
    skewness_se,
)
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
    # Q i.i.d. N(0,1): Σ E X⁴ / (Σ Var)² = 3Q/Q² = 3/Q; s.e. by the delta method from the sample (≈ 0.0014)
    assert_within_se(lyapunov_ratio(X), 3 / Q, lyapunov_ratio_se(X), what="N(0,1) ratio", resolution=0.03 * 3 / Q)
    Y = rng.exponential(size=(R, Q, 1))
    # centred Exp(1): 4th central moment 9 → 9/Q (s.e. ≈ 0.023: the 8th moment of Exp is large)
    assert_within_se(lyapunov_ratio(Y), 9 / Q, lyapunov_ratio_se(Y), what="Exp(1) ratio", resolution=0.06 * 9 / Q)


def test_mardia_and_diagnostics():
    rng = np.random.default_rng(1)
    g = rng.standard_normal((20000, 3)) @ np.array([[1.0, 0.5, 0.0], [0.0, 1.0, 0.2], [0.0, 0.0, 1.0]])
    m = mardia(g)
    assert m["skew_p"] > 1e-4 and m["kurt_p"] > 1e-4
    e = rng.exponential(size=(80000, 3))
    assert mardia(e)["skew_p"] < 1e-10
    d = normality_diagnostics(e)
    # Exp(1): skewness 2, excess kurtosis 6.  Their s.e. (delta method, from the sample) are √(72/R) ≈ 0.03 and
    # √(8064/R) ≈ 0.32 for this law, not the normal-theory √(6/R), √(24/R); R is large enough for 5 s.e. to stay
    # well inside what separates the law from a normal one.
    assert_within_se(d["skewness"], 2.0, skewness_se(e), what="skewness", resolution=0.3)
    assert_within_se(d["excess_kurtosis"], 6.0, excess_kurtosis_se(e), what="excess kurtosis", resolution=3.0)
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
    var = eta**2 * np.array([0.5, 2.0])
    xc = x - x.mean(0)
    se_var = (xc**2).std(0, ddof=1) / np.sqrt(x.shape[0])  # s.e. of the variance: sd of the squared deviations/√R
    assert_within_se(x.var(0), var, se_var, what="variance", resolution=0.1 * var)
    # s.e. of the skewness from the sample (delta method; ≈ √(72/R) = 0.042 for a scaled exponential)
    assert_within_se(stats.skew(x, axis=0), -2.0, skewness_se(x), what="skewness", resolution=0.3)


def test_lyapunov_ratio_falls_like_one_over_Q(monkeypatch):
    """The documented quadratic case: 3 skewed-noise clients replicated; slope of log ratio vs log Q is −1.

    Replicating fixed clients with weights 1/Q makes the population ratio exactly c/Q, so the slope is −1 up to
    sampling error: its s.e. propagates the delta-method s.e. of each point (independent seeds per Q).
    """
    seen = record_lyapunov_se(monkeypatch)
    base = QuadraticProblem.from_arrays([[1.0, 2.0], [2.0, 1.0], [4.0, 0.5]], [[-1.0, 0.0], [0.0, 1.0], [2.0, -1.0]],
                                        [[0.5, 1.0], [1.0, 0.5], [2.0, 1.0]])
    st = clt_study(lambda Q: base.replicated(Q // 3), [3, 12, 48], eta=0.1, local_steps=5, replicates=6400, seed=5,
                   oracle_factory=SkewedQuadraticOracle)
    lyap, skew, ks = st.column("lyapunov"), st.column("skewness"), st.column("ks")
    assert_within_se(st.lyapunov_slope, -1.0, lyapunov_slope_se(st.Q, lyap, seen), what="Lyapunov slope",
                     resolution=0.15)
    assert np.all(np.diff(lyap) < 0) and np.all(np.diff(skew) < 0) and ks[-1] < ks[0]
