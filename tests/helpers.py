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
