"""Distances between laws: Wasserstein-2 between Gaussians, per-coordinate Kolmogorov–Smirnov."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.stats

from fedsde.errors import FedsdeInputError
from fedsde.sde.coefficients import psd_sqrt


def gaussian_w2(mean1, cov1, mean2, cov2) -> float:
    """Wasserstein-2 distance between ``N(m₁, P₁)`` and ``N(m₂, P₂)``.

    ``W₂² = ‖m₁ − m₂‖² + Tr(P₁ + P₂ − 2 (P₂^{1/2} P₁ P₂^{1/2})^{1/2})`` (Dowson & Landau 1982; Givens & Shortt
    1984).  Covariances must be symmetric positive semi-definite, shape (d, d); means shape (d,).
    """
    m1, m2 = np.atleast_1d(np.asarray(mean1, dtype=np.float64)), np.atleast_1d(np.asarray(mean2, dtype=np.float64))
    P1, P2 = np.atleast_2d(np.asarray(cov1, dtype=np.float64)), np.atleast_2d(np.asarray(cov2, dtype=np.float64))
    if m1.shape != m2.shape or P1.shape != P2.shape or P1.shape != (m1.size, m1.size):
        raise FedsdeInputError(
            f"gaussian_w2: shapes mean {m1.shape}/{m2.shape}, cov {P1.shape}/{P2.shape} must be (d,) and (d, d)"
        )
    r2 = psd_sqrt(P2, name="cov2")
    cross = psd_sqrt(r2 @ P1 @ r2, name="P2^1/2 P1 P2^1/2")
    w2sq = float(np.sum((m1 - m2) ** 2) + np.trace(P1) + np.trace(P2) - 2.0 * np.trace(cross))
    return float(np.sqrt(max(w2sq, 0.0)))


@dataclass(frozen=True)
class KSResult:
    """Per-coordinate Kolmogorov–Smirnov statistics and p-values, each of shape (d,)."""

    statistic: np.ndarray
    pvalue: np.ndarray


def ks_per_coordinate(samples, reference) -> KSResult:
    """Kolmogorov–Smirnov distance of each coordinate of ``samples`` (R, d) to ``reference``.

    ``reference`` is either samples of shape (R', d) (two-sample test, ``scipy.stats.ks_2samp``) or a Gaussian
    law ``(mean (d,), cov (d, d))`` (one-sample test against ``N(mean_i, cov_ii)``, ``scipy.stats.kstest``).
    """
    x = np.asarray(samples, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2:
        raise FedsdeInputError(f"samples: shape {x.shape} must be (R, d)")
    d = x.shape[1]
    stats, pvals = np.empty(d), np.empty(d)
    if isinstance(reference, tuple) and len(reference) == 2:
        m = np.atleast_1d(np.asarray(reference[0], dtype=np.float64))
        P = np.atleast_2d(np.asarray(reference[1], dtype=np.float64))
        if m.shape != (d,) or P.shape != (d, d):
            raise FedsdeInputError(f"reference law: shapes {m.shape}, {P.shape} must be ({d},), ({d}, {d})")
        for i in range(d):
            res = scipy.stats.kstest(x[:, i], "norm", args=(m[i], np.sqrt(max(P[i, i], 0.0))))
            stats[i], pvals[i] = res.statistic, res.pvalue
        return KSResult(stats, pvals)
    y = np.asarray(reference, dtype=np.float64)
    if y.ndim == 1:
        y = y[:, None]
    if y.ndim != 2 or y.shape[1] != d:
        raise FedsdeInputError(f"reference samples: shape {y.shape} must be (R', {d})")
    for i in range(d):
        res = scipy.stats.ks_2samp(x[:, i], y[:, i])
        stats[i], pvals[i] = res.statistic, res.pvalue
    return KSResult(stats, pvals)
