"""Test helpers: tolerances from standard errors, brute-force references."""

from __future__ import annotations

import itertools

import numpy as np


def assert_moments_within(samples: np.ndarray, mean: np.ndarray, cov: np.ndarray, nsigma: float = 5.0) -> None:
    """Assert sample mean and covariance (samples (R, d)) agree with (mean, cov) within ``nsigma`` s.e.

    Standard errors come from the sample itself: s.e.(mean_i) = sd_i/√R and s.e.(cov_ij) = sd of
    (x_i − m_i)(x_j − m_j) over √R, which holds for non-Gaussian laws too.
    """
    R = samples.shape[0]
    m = samples.mean(0)
    se_m = samples.std(0, ddof=1) / np.sqrt(R)
    z_m = np.abs(m - mean) / se_m
    assert np.all(z_m < nsigma), f"mean off by {z_m.max():.2f} s.e.: {m} vs {mean}"
    xc = samples - m
    prod = xc[:, :, None] * xc[:, None, :]
    c = prod.sum(0) / (R - 1)
    se_c = prod.std(0, ddof=1) / np.sqrt(R)
    z_c = np.abs(c - cov) / se_c
    assert np.all(z_c < nsigma), f"cov off by {z_c.max():.2f} s.e.:\n{c}\nvs\n{cov}"


def assert_within_se(estimate, expected, se, nsigma: float = 5.0, what: str = "estimate",
                     resolution: float | None = None) -> np.ndarray:
    """Assert ``|estimate − expected| < nsigma·se`` elementwise and return the z-scores.

    ``resolution`` (optional) guards against a vacuous pass: it also asserts ``nsigma·se <= resolution``, i.e.
    that the sample is large enough for the check to resolve a deviation of that size.
    """
    est, exp, se = (np.asarray(a, dtype=np.float64) for a in (estimate, expected, se))
    assert np.all(np.isfinite(se) & (se > 0)), f"{what}: standard error {se} must be finite and positive"
    z = np.abs(est - exp) / se
    assert np.all(z < nsigma), f"{what} off by {z.max():.2f} s.e. (s.e. {se}): {est} vs {exp}"
    if resolution is not None:
        assert np.all(nsigma * se <= resolution), f"{what}: {nsigma}·s.e. = {nsigma * se} > {resolution}, vacuous"
    return z


def influence_se(psi: np.ndarray) -> np.ndarray:
    """Standard error of a smooth statistic from its per-sample influence terms ``psi`` (R, ...): sd/√R.

    The delta method: a statistic ``T`` of ``R`` i.i.d. rows has ``T − T∞ ≈ mean_i psi_i``, so its s.e. is that of
    a sample mean; like :func:`assert_moments_within` this holds for non-Gaussian laws too.
    """
    return psi.std(0, ddof=1) / np.sqrt(psi.shape[0])


def _central(x: np.ndarray):
    """Deviations ``c``, ``c²``, ``c³``, ``c⁴`` and the central moments ``m₂``, ``m₃``, ``m₄`` along axis 0."""
    c = np.asarray(x, dtype=np.float64)
    c = c - c.mean(0)
    c2 = c * c
    c3, c4 = c2 * c, c2 * c2  # products, not **: numpy's general power is slow
    return c, c2, c3, c4, c2.mean(0), c3.mean(0), c4.mean(0)


def skewness_se(x: np.ndarray) -> np.ndarray:
    """s.e. of the sample skewness ``m₃/m₂^{3/2}`` per column of ``x`` (R, d); ``√(6/R)`` for normal data."""
    c, c2, c3, _, m2, m3, _ = _central(x)
    psi = (c3 - 3 * m2 * c) / m2**1.5 - 1.5 * m3 * c2 / m2**2.5  # constants drop out of the sd
    return influence_se(psi)


def excess_kurtosis_se(x: np.ndarray) -> np.ndarray:
    """s.e. of the sample excess kurtosis ``m₄/m₂² − 3`` per column of ``x`` (R, d); ``√(24/R)`` for normal data."""
    c, c2, _, c4, m2, m3, m4 = _central(x)
    psi = (c4 - 4 * m3 * c) / m2**2 - 2 * m4 * c2 / m2**3
    return influence_se(psi)


def lyapunov_ratio_se(terms: np.ndarray) -> np.ndarray:
    """s.e. of ``lyapunov_ratio(terms)`` (δ = 2: ``Σ_k m₄,k / (Σ_k m₂,k)²``) per coordinate; terms (R, Q, d)."""
    c, c2, _, c4, m2, m3, m4 = _central(terms)
    S, N = m2.sum(0), m4.sum(0)
    psi = (c4 - 4 * m3 * c).sum(1) / S**2 - 2 * N * c2.sum(1) / S**3
    return influence_se(psi)


def slope_se(x, se_y) -> float:
    """s.e. of the least-squares slope of ``y`` on ``x`` when the ``y_i`` are independent with s.e. ``se_y``.

    The slope is ``Σ w_i y_i`` with ``w_i = (x_i − x̄)/Σ_j (x_j − x̄)²``, so its s.e. is ``√(Σ w_i² se_i²)``.
    """
    x = np.asarray(x, dtype=np.float64)
    w = (x - x.mean()) / np.sum((x - x.mean()) ** 2)
    return float(np.sqrt(np.sum(w**2 * np.asarray(se_y, dtype=np.float64) ** 2)))


def record_lyapunov_se(monkeypatch) -> dict[float, float]:
    """Make :func:`fedsde.theory.clt.clt_study` record the s.e. of every Lyapunov ratio it reports.

    ``clt_study`` reports the largest coordinate of ``lyapunov_ratio(terms)``; while the patch is active, the
    returned dict maps each such value to the s.e. (:func:`lyapunov_ratio_se`) of that coordinate.  The wrapper
    returns the library's value unchanged, so the checks see exactly what they would without it.
    """
    import fedsde.theory.clt as clt

    seen: dict[float, float] = {}
    original = clt.lyapunov_ratio

    def recording(terms, delta=2.0):
        r = original(terms, delta)
        assert delta == 2.0, "lyapunov_ratio_se covers δ = 2 only"
        j = int(np.argmax(r))
        seen[float(r[j])] = float(lyapunov_ratio_se(terms)[j])
        return r

    monkeypatch.setattr(clt, "lyapunov_ratio", recording)
    return seen


def lyapunov_slope_se(Q, ratios, seen: dict[float, float]) -> float:
    """s.e. of the log–log slope of reported Lyapunov ratios against ``Q`` (independent runs per ``Q``).

    Each ``log ratio`` has s.e. ``se/ratio`` (delta method); ``seen`` comes from :func:`record_lyapunov_se`.
    """
    missing = [r for r in ratios if float(r) not in seen]
    assert not missing, f"ratios {missing} were not computed while record_lyapunov_se was active"
    return slope_se(np.log(np.asarray(Q, dtype=np.float64)), [seen[float(r)] / r for r in ratios])


def brute_round(problem, eta, steps, server_lr, weights=None):
    """One-round affine-Gaussian law by stepping the E local updates one at a time (no eigendecomposition).

    Returns per-client (F_k, g_k, C_k) with ``w_k^{(τ_k)} = F_k w + g_k + noise``, ``Cov noise = C_k``.
    """
    Q, d = problem.Q, problem.d
    steps = np.broadcast_to(np.asarray(steps), (Q,))
    out = []
    for k in range(Q):
        F, g, C = np.eye(d), np.zeros(d), np.zeros((d, d))
        J = np.eye(d) - eta * problem.U[k]
        for _ in range(int(steps[k])):
            F = J @ F
            g = J @ g + eta * problem.U[k] @ problem.a[k]
            C = J @ C @ J.T + eta**2 * problem.Sigma[k]
        out.append((F, g, C))
    return out


def brute_step(problem, clients, server_lr, mean, cov, participation=None, weights=None):
    """Exact moments after one round by enumerating every participating subset (mixture of Gaussians)."""
    Q, d = problem.Q, problem.d
    p = problem.p if weights is None else np.asarray(weights)
    m = Q if participation is None else participation
    subsets = list(itertools.combinations(range(Q), m))
    means, covs = [], []
    for S in subsets:
        alpha = np.zeros(Q)
        alpha[list(S)] = p[list(S)] * Q / m
        Fs = np.eye(d) + server_lr * sum(alpha[k] * (clients[k][0] - np.eye(d)) for k in range(Q))
        gs = server_lr * sum(alpha[k] * clients[k][1] for k in range(Q))
        Ns = server_lr**2 * sum(alpha[k] ** 2 * clients[k][2] for k in range(Q))
        means.append(Fs @ mean + gs)
        covs.append(Fs @ cov @ Fs.T + Ns)
    means = np.array(means)
    mu = means.mean(0)
    between = (means - mu).T @ (means - mu) / len(subsets)
    return mu, np.mean(covs, 0) + between


def run_cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    """Run ``fedsde ARGV`` in-process: (exit status, stdout, stderr)."""
    from fedsde.cli import main

    code = main(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def one_line_error(code: int, out: str, err: str, *needles: str) -> None:
    """Exit status 2, nothing on stdout, exactly one line on stderr (no traceback) containing every needle."""
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, (code, out, err)
    for n in needles:
        assert n in err, err
