"""Small statistics shared across fedsde (internal): log–log slope fits.

Convergence orders (weak error against the step, variance against E or Q, a Lyapunov ratio against Q) are read as
slopes on log–log axes.  These functions are their one home.  Points a logarithm cannot take (``x`` or ``y`` not
finite and positive) are left out by :func:`fit_loglog_slope` (weak errors that vanish at some step) and make
:func:`loglog_slope` NaN (a power law through such a point has no slope).
"""

from __future__ import annotations

import numpy as np

from fedsde.errors import FedsdeInputError


def _usable(x, y) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(x, dtype=np.float64).reshape(-1), np.asarray(y, dtype=np.float64).reshape(-1)
    if x.shape != y.shape:
        raise FedsdeInputError(f"log-log fit: x has {x.size} points but y has {y.size}")
    ok = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    return x[ok], y[ok]


def fit_loglog_slope(x, y) -> tuple[float, float]:
    """Least-squares fit ``log y = slope·log x + intercept`` over the points with ``x, y`` finite and > 0.

    Returns
    -------
    (slope, intercept) : tuple of float

    Raises
    ------
    FedsdeInputError
        Fewer than two usable points.
    """
    xs, ys = _usable(x, y)
    if xs.size < 2:
        raise FedsdeInputError("fit_loglog_slope: needs at least two points with x > 0 and y > 0")
    slope, intercept = np.polyfit(np.log(xs), np.log(ys), 1)
    return float(slope), float(intercept)


def loglog_slope(x, y) -> float:
    """Least-squares slope of ``log y`` against ``log x``; NaN when a point has ``x`` or ``y`` not finite and
    positive, or there are fewer than two points (tables and claims show a missing slope rather than raise)."""
    x, y = np.asarray(x, dtype=np.float64).reshape(-1), np.asarray(y, dtype=np.float64).reshape(-1)
    xs, ys = _usable(x, y)
    if xs.size < 2 or xs.size < x.size:
        return float("nan")
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def local_loglog_slopes(x, y) -> np.ndarray:
    """Slopes ``Δ log y / Δ log x`` between consecutive points in the order given, shape (J − 1,).

    NaN where either point of a pair has a ``y`` that is not finite and positive.  Compared with the fitted slope
    they show whether a power law holds over the whole range (all local slopes close to the fit) or not.
    """
    x, y = np.asarray(x, dtype=np.float64).reshape(-1), np.asarray(y, dtype=np.float64).reshape(-1)
    if x.shape != y.shape:
        raise FedsdeInputError(f"local log-log slopes: x has {x.size} points but y has {y.size}")
    with np.errstate(divide="ignore", invalid="ignore"):
        ly = np.where((y > 0) & np.isfinite(y), np.log(np.where(y > 0, y, 1.0)), np.nan)
        return np.diff(ly) / np.diff(np.log(x))


def loglog_slope_interval(x, estimate, stderr, reference: float = 0.0, reference_se: float = 0.0, *,
                          level: float = 0.95, draws: int = 4000, seed: int = 0) -> tuple[float, float]:
    """Parametric-bootstrap interval of the log–log slope of ``|estimate − reference|`` against ``x``.

    The errors ``e_j = estimate_j − reference`` are measured with independent normal errors of standard deviation
    ``stderr_j`` around ``estimate_j``, and a shared one ``reference_se`` (one Monte-Carlo reference for every ``x``;
    0 for an exact one).  Each of ``draws`` replays draws those normals, refits the slope of :func:`fit_loglog_slope`
    (least squares of ``log|e|`` on ``log x``) and the interval is the central ``level`` quantile range of the refits
    (seeded ``numpy.random.default_rng(seed)``).  An error not resolved from zero (``|e_j|`` within a few
    ``stderr_j``) makes the interval wide, which is the point: a slope fitted to noise cannot look precise.

    Returns
    -------
    (low, high) : tuple of float
    """
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    est = np.asarray(estimate, dtype=np.float64).reshape(-1)
    se = np.asarray(stderr, dtype=np.float64).reshape(-1)
    if not (x.shape == est.shape == se.shape) or x.size < 2 or np.any(x <= 0):
        raise FedsdeInputError("loglog_slope_interval: x, estimate and stderr need the same length >= 2, x > 0")
    rng = np.random.default_rng(seed)
    e = (est + rng.standard_normal((draws, x.size)) * se) - (reference + rng.standard_normal((draws, 1)) *
                                                            reference_se)
    lx = np.log(x) - np.log(x).mean()
    ly = np.log(np.maximum(np.abs(e), np.finfo(float).tiny))
    slopes = (ly - ly.mean(1, keepdims=True)) @ lx / (lx @ lx)
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(slopes, [tail, 1.0 - tail])
    return float(lo), float(hi)
