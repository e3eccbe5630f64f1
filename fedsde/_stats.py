"""Small statistics shared across fedsde (internal): log–log slope fits and their intervals.

Convergence orders (weak error against the step, variance against E or Q, a Lyapunov ratio against Q) are read as
slopes on log–log axes.  These functions are their one home.  Points a logarithm cannot take (``x`` or ``y`` not
finite and positive) are left out by :func:`fit_loglog_slope` (weak errors that vanish at some step) and make
:func:`loglog_slope` NaN (a power law through such a point has no slope).  Every slope the project prints comes with
its interval (:func:`fit_slope_interval`: the estimates' noise and the fit's misfit).
"""

from __future__ import annotations

from dataclasses import dataclass

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


#: level of the intervals of fitted log–log slopes
SLOPE_LEVEL = 0.95
#: draws of the parametric bootstrap of a slope fitted to estimates with standard errors
SLOPE_DRAWS = 4000


@dataclass(frozen=True)
class SlopeFit:
    """A fitted log–log slope with its interval (:func:`fit_slope_interval`)."""

    slope: float
    lower: float
    upper: float
    level: float
    basis: str
    points: int

    def to_dict(self) -> dict:
        return {"slope": self.slope, "lower": self.lower, "upper": self.upper, "level": self.level,
                "basis": self.basis, "points": self.points}

    def text(self, fmt: str = ".3f") -> str:
        """``slope [lower, upper]`` (``not fitted`` when there is no slope)."""
        if not np.isfinite(self.slope):
            return f"not fitted ({self.basis})"
        return f"{self.slope:{fmt}} [{self.lower:{fmt}}, {self.upper:{fmt}}]"


def fit_slope_interval(x, y, se=None, *, level: float = SLOPE_LEVEL, draws: int = SLOPE_DRAWS,
                       seed: int = 0) -> SlopeFit:
    """The least-squares slope of ``log y`` against ``log x`` with a ``level`` interval.

    Two sources of uncertainty, and the interval covers both (the union of the two intervals where both apply):

    * **the estimates** (``se`` given, standard errors of ``y``, e.g. Monte-Carlo weak errors ``|D̂|``): a parametric
      bootstrap, ``y* = |y + se·Z|`` with ``Z`` standard normal (``draws`` draws, seed ``seed``), the slope refitted
      to each and the percentile interval; errors indistinguishable from zero give wide intervals, as they should
      (Efron & Tibshirani 1993, Ch. 6 and 13);
    * **the fit** (three points or more): the residuals of the log–log line, ``se(b) = √(SSR/((J − 2)·Sxx))`` with
      Student's ``t`` on ``J − 2`` degrees of freedom — how far the points are from a power law, which is all the
      uncertainty of exact values.

    Two exact points determine the line: the interval is the slope itself (``basis`` says so).  Points a logarithm
    cannot take (:func:`fit_loglog_slope`) are left out; fewer than two usable points give NaN.
    """
    from scipy.special import stdtrit

    x = np.asarray(x, dtype=np.float64).reshape(-1)
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    s = None if se is None else np.broadcast_to(np.asarray(se, dtype=np.float64).reshape(-1), y.shape)
    ok = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    if s is not None:
        ok &= np.isfinite(s)
    n = int(ok.sum())
    if n < 2:
        return SlopeFit(float("nan"), float("nan"), float("nan"), level, "fewer than two points with x, y > 0", n)
    lx, ly = np.log(x[ok]), np.log(y[ok])
    c = (lx - lx.mean()) / np.sum((lx - lx.mean()) ** 2)  # slope = c · log y
    b = float(c @ ly)
    lo = hi = b
    basis = []
    if n >= 3:
        ssr = float(np.sum((ly - ly.mean() - b * (lx - lx.mean())) ** 2))
        half = float(stdtrit(n - 2, 0.5 + level / 2)) * np.sqrt(ssr / (n - 2) * float(c @ c))
        lo, hi = b - half, b + half
        basis.append(f"fit residuals (Student t, {n - 2} d.f.)")
    if s is not None and np.any(s[ok] > 0):
        z = np.random.default_rng(seed).standard_normal((draws, n))
        with np.errstate(divide="ignore"):
            boot = np.log(np.abs(y[ok] + s[ok] * z)) @ c
        boot = boot[np.isfinite(boot)]
        q = np.quantile(boot, [0.5 - level / 2, 0.5 + level / 2])
        lo, hi = min(lo, float(q[0])), max(hi, float(q[1]))
        basis.append(f"parametric bootstrap of the estimates from their s.e. ({draws} draws)")
    if not basis:
        basis.append("two exact points: the line through them, no misfit to measure")
    return SlopeFit(b, float(lo), float(hi), level, "; ".join(basis), n)


def loglog_slope_interval(x, y, se=None, *, level: float = 0.95) -> dict:
    """Fitted log–log slope with a confidence interval at ``level``.

    * ``se is None`` (errors computed exactly): ordinary least squares of ``log y`` on ``log x``; the interval is
      Student-t with ``J − 2`` degrees of freedom from the residuals, so it measures how far the points are from one
      power law (zero width for an exact power law).  Needs three points.
    * ``se`` given (Monte-Carlo estimates ``y ± se``): weighted least squares with the delta-method variances
      ``(se/y)²`` of ``log y``; the slope's standard error from the weights, inflated by ``√(χ²/(J − 2))`` when the
      points scatter more than their errors (the Birge ratio), normal quantile (Student-t with ``J − 2`` degrees of
      freedom when inflated).  ``resolved`` is false when some point's interval ``y ± z·se`` reaches zero, where
      the logarithm's delta method does not hold.

    Returns
    -------
    dict
        ``slope``, ``intercept``, ``se`` (of the slope), ``ci`` (``[lo, hi]``; ``None`` with fewer than three points),
        ``level``, ``method`` (``"ols"`` or ``"wls"``) and, with ``se``, ``chi2_dof`` and ``resolved``.

    Raises
    ------
    FedsdeInputError
        Fewer than two usable points (``x, y`` finite and > 0; with ``se``: also ``se`` finite and > 0).
    """
    from scipy import stats

    if not 0.0 < level < 1.0:
        raise FedsdeInputError(f"level={level!r}: must lie in (0, 1)")
    x, y = np.asarray(x, dtype=np.float64).reshape(-1), np.asarray(y, dtype=np.float64).reshape(-1)
    s = None if se is None else np.asarray(se, dtype=np.float64).reshape(-1)
    if x.shape != y.shape or (s is not None and s.shape != y.shape):
        raise FedsdeInputError(f"log-log fit: x, y{'' if s is None else ', se'} must have the same number of points")
    ok = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    if s is not None:
        ok &= np.isfinite(s) & (s > 0)
    if ok.sum() < 2:
        raise FedsdeInputError("log-log fit: needs at least two points with x > 0 and y > 0")
    lx, ly = np.log(x[ok]), np.log(y[ok])
    J = lx.size
    w = np.ones(J) if s is None else (y[ok] / s[ok]) ** 2  # 1 / var(log y)
    X = np.stack([lx, np.ones(J)], axis=1)
    cov = np.linalg.inv(X.T @ (X * w[:, None]))
    beta = cov @ (X.T @ (w * ly))
    resid = ly - X @ beta
    out = {"slope": float(beta[0]), "intercept": float(beta[1]), "level": float(level)}
    dof = J - 2
    if s is None:
        out["method"] = "ols"
        if dof < 1:
            return out | {"se": None, "ci": None}
        sigma2 = float(resid @ resid) / dof
        half_se = float(np.sqrt(sigma2 * cov[0, 0]))
        q = float(stats.t.ppf(0.5 + level / 2, dof))
    else:
        z = float(stats.norm.ppf(0.5 + level / 2))
        chi2 = float(np.sum(w * resid**2)) / dof if dof >= 1 else float("nan")
        inflate = dof >= 1 and chi2 > 1.0
        half_se = float(np.sqrt(cov[0, 0] * (chi2 if inflate else 1.0)))
        q = float(stats.t.ppf(0.5 + level / 2, dof)) if inflate else z
        out |= {"method": "wls", "chi2_dof": chi2, "resolved": bool(np.all(y[ok] - z * s[ok] > 0))}
    return out | {"se": half_se, "ci": [out["slope"] - q * half_se, out["slope"] + q * half_se]}


def error_slope_interval(x, estimate, stderr, reference: float = 0.0, reference_se: float = 0.0, *,
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
        raise FedsdeInputError("error_slope_interval: x, estimate and stderr need the same length >= 2, x > 0")
    rng = np.random.default_rng(seed)
    e = (est + rng.standard_normal((draws, x.size)) * se) - (reference + rng.standard_normal((draws, 1)) *
                                                            reference_se)
    lx = np.log(x) - np.log(x).mean()
    ly = np.log(np.maximum(np.abs(e), np.finfo(float).tiny))
    slopes = (ly - ly.mean(1, keepdims=True)) @ lx / (lx @ lx)
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(slopes, [tail, 1.0 - tail])
    return float(lo), float(hi)
