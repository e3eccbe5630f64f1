"""A weak-error curve of SVAG chains against a reference, with the slope's interval (shared by
:mod:`fedsde.compare.rule_svag_weak` and :func:`fedsde.validity.adaptive.adaptive_weak_error`)."""

from __future__ import annotations

import numpy as np
import scipy.stats

from fedsde._stats import error_slope_interval, fit_loglog_slope
from fedsde.compare.weak_error import WeakErrorCurve


def weak_error_curve(ells: np.ndarray, h: float, rounds: int, means, ses, ref: float, *, ref_se: float = 0.0,
                     level: float = 0.95, config: dict) -> WeakErrorCurve:
    """The :class:`~fedsde.compare.weak_error.WeakErrorCurve` of chains ``ℓ`` (steps ``h/ℓ``, ``rounds·ℓ`` steps) with
    means ``E φ`` and their standard errors against a reference value (its standard error ``ref_se``, shared by every
    ``ℓ``; 0 when exact): errors, normal intervals at ``level``, the log–log slope and its bootstrap interval
    (:func:`fedsde._stats.error_slope_interval`), in ``config``: ``ells``, ``level``, ``slope_interval``,
    ``resolved`` (``|error| > z·se``)."""
    steps = h / ells.astype(np.float64)
    diff = means - ref
    se = np.sqrt(ses**2 + ref_se**2)
    z = float(scipy.stats.norm.ppf(0.5 + level / 2))
    slope, intercept = fit_loglog_slope(steps, np.abs(diff))
    interval = error_slope_interval(steps, means, ses, ref, ref_se, level=level)
    config = {**config, "ells": ells.tolist(), "level": level, "slope_interval": list(interval),
              "resolved": (np.abs(diff) > z * se).tolist()}
    return WeakErrorCurve(steps, rounds * ells, np.abs(diff), slope, intercept, np.asarray(means),
                          np.full(ells.size, ref), se, np.stack([diff - z * se, diff + z * se], 1), config)


__all__ = ["weak_error_curve"]
