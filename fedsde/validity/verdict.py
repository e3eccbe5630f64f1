"""The verdict of the validity test: do successive SVAG chains agree on ``[0, T]``?

For every metric ``φ`` (train loss, test accuracy, …), every pair of successive ``ℓ_j < ℓ_{j+1}`` and every grid
time ``t``, the gap ``|Ê_{ℓ_{j+1}} φ(t) − Ê_{ℓ_j} φ(t)|`` of the Monte-Carlo means is compared with what the
user tolerates plus what noise explains:

    allowed = tol · scale + z · √(se_j² + se_{j+1}²),     margin = (allowed − gap) / scale,

with ``scale = max(|Ê_{ℓ_j} φ(t)|, |Ê_{ℓ_{j+1}} φ(t)|)`` (so ``tol`` is a relative error at each time) and ``z`` the
two-sided Bonferroni quantile at family level ``alpha`` over all comparisons.  The SDE tracks FedAvg on ``[0, T]``
when the smallest margin is ``>= 0``.  Since the SVAG chains converge to the SDE at rate ``1/ℓ`` (Li, Malladi &
Arora 2021), the gap between ``ℓ = 1`` (FedAvg) and ``ℓ = 2`` is about half of FedAvg's distance from
the SDE; :func:`richardson_limit` extrapolates the SDE's value.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import norm

from fedsde._validate import positive_float
from fedsde.errors import FedsdeInputError


@dataclass(frozen=True)
class ValidityVerdict:
    """Outcome of :func:`validity_verdict`.

    Attributes
    ----------
    tracks : bool
        Every gap within its allowance on ``[0, T]``.
    margin : float
        Smallest signed margin (relative to the metric's scale); ``>= 0`` exactly when ``tracks``.
    horizon : float
        Largest grid time ``t*`` with every margin ``>= 0`` on ``[0, t*]`` (``T`` when ``tracks``).
    worst : dict
        The comparison with the smallest margin: metric, ells, time, gap, se, allowed, scale.
    tolerance, alpha, z : float
    metrics : list of str
        Metrics that entered the verdict.
    comparisons : int
    """

    tracks: bool
    margin: float
    horizon: float
    worst: dict
    tolerance: float
    alpha: float
    z: float
    metrics: list
    comparisons: int

    def to_dict(self) -> dict:
        return asdict(self)

    def sentence(self, base: str = "FedAvg") -> str:
        """One line: the verdict, its worst comparison and margin; ``base`` names the smallest ℓ's chain (FedAvg
        when ℓ = 1 is among the values, else e.g. "the ℓ = 2 chain")."""
        w = self.worst
        what = "tracks" if self.tracks else "does not track"
        return (f"the SDE {what} {base} on [0, T] (worst: {w['metric']} at t={w['time']:.4g}, ℓ={w['ells'][0]} vs "
                f"{w['ells'][1]}: gap {w['gap']:.3g} vs allowed {w['allowed']:.3g} = "
                f"{self.tolerance:g}·{w['scale']:.3g} + {self.z:.2f}·{w['se']:.2g}; margin {self.margin:+.3g}); "
                f"holds up to t = {self.horizon:.4g}")


def bonferroni_z(alpha: float, comparisons: int) -> float:
    """Two-sided normal quantile ``Φ⁻¹(1 − α/(2K))`` for ``K`` comparisons."""
    return float(norm.ppf(1.0 - alpha / (2.0 * max(1, comparisons))))


def validity_verdict(
    ells: list[int],
    times: np.ndarray,
    metrics: dict[str, dict[str, np.ndarray]],
    *,
    tolerance: float = 0.05,
    alpha: float = 0.05,
    names: list[str] | None = None,
) -> ValidityVerdict:
    """Verdict from the means and standard errors of metrics over ``ℓ`` and time (see the module docstring).

    Parameters
    ----------
    ells : list of int, length L >= 2
    times : ndarray, shape (T,)
    metrics : dict
        name → ``{"mean": (L, T), "se": (L, T)}``.
    tolerance : float
        Relative tolerance ``tol >= 0``.
    alpha : float
        Family level of the noise allowance, in (0, 1).
    names : list of str, optional
        Metrics to judge (default all).
    """
    tolerance = positive_float("tolerance", tolerance, allow_zero=True)
    alpha = float(alpha)
    if not 0.0 < alpha < 1.0:
        raise FedsdeInputError(f"alpha={alpha!r}: must lie in (0, 1)")
    if len(ells) < 2:
        raise FedsdeInputError(f"ells={list(ells)}: need at least two values of ℓ for a verdict")
    names = list(metrics) if names is None else list(names)
    unknown = [n for n in names if n not in metrics]
    if unknown:
        raise FedsdeInputError(f"metrics {unknown}: not recorded (recorded: {', '.join(metrics)})")
    times = np.asarray(times, dtype=np.float64)
    active = times > 0  # at t = 0 every chain sits at w0
    K = len(names) * (len(ells) - 1) * int(active.sum())
    z = bonferroni_z(alpha, K)
    worst, best_margin = None, np.inf
    min_over_time = np.full(times.size, np.inf)
    for name in names:
        mean = np.asarray(metrics[name]["mean"], dtype=np.float64)
        se = np.asarray(metrics[name]["se"], dtype=np.float64)
        # pointwise magnitude of the pair (1 where both vanish, e.g. a distance at t = 0)
        scale = np.maximum(np.abs(mean[1:]), np.abs(mean[:-1]))
        scale = np.where(scale > 0, scale, 1.0)
        gap = np.abs(np.diff(mean, axis=0))  # (L-1, T)
        se_gap = np.sqrt(se[1:] ** 2 + se[:-1] ** 2)
        allowed = tolerance * scale + z * se_gap
        margin = np.where(active, (allowed - gap) / scale, np.inf)
        margin = np.where(np.isnan(margin), -np.inf, margin)  # a diverged metric never tracks
        min_over_time = np.minimum(min_over_time, margin.min(0))
        j, t = np.unravel_index(int(np.argmin(margin)), margin.shape)
        if margin[j, t] < best_margin:
            best_margin = float(margin[j, t])
            worst = {"metric": name, "ells": [int(ells[j]), int(ells[j + 1])], "time": float(times[t]),
                     "gap": float(gap[j, t]), "se": float(se_gap[j, t]), "allowed": float(allowed[j, t]),
                     "scale": float(scale[j, t])}
    bad = np.flatnonzero(min_over_time < 0)
    horizon = float(times[-1]) if bad.size == 0 else float(times[bad[0] - 1]) if bad[0] > 0 else 0.0
    return ValidityVerdict(tracks=bool(best_margin >= 0), margin=best_margin, horizon=horizon, worst=worst,
                           tolerance=tolerance, alpha=alpha, z=z, metrics=names, comparisons=K)


def richardson_limit(ells: list[int], mean: np.ndarray, se: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Order-1 extrapolation of ``E_ℓ = E_∞ + C/ℓ + o(1/ℓ)`` from the two largest ``ℓ``.

    ``E_∞ ≈ (ℓ_b E_b − ℓ_a E_a)/(ℓ_b − ℓ_a)``; its s.e. from independent runs.  Shapes: mean, se (L, T) → (T,).
    """
    a, b = float(ells[-2]), float(ells[-1])
    wa, wb = -a / (b - a), b / (b - a)
    m = wb * np.asarray(mean)[-1] + wa * np.asarray(mean)[-2]
    s = np.sqrt((wb * np.asarray(se)[-1]) ** 2 + (wa * np.asarray(se)[-2]) ** 2)
    return m, s
