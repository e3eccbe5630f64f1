"""Learning rates that vary along the SDE clock ``t = n·h``: client rate ``η(t)`` and server step ``s(t) = h·η₀(t)``.

A rate is given as

* a number (constant);
* an array with one value per round (piecewise constant: round ``n`` covers ``[n·h, (n+1)·h)``), matching the
  per-round schedules of :func:`fedsde.sim.simulate` and :func:`fedsde.exact.transient_moments`;
* a callable ``t -> rate`` on the clock ``t`` (e.g. ``lambda t: 1 / (t + 1)`` for seed 002, Cor. 4.6).

Euler–Maruyama evaluates a rate at the left end of each step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from fedsde._tolerances import INT_TOL
from fedsde._validate import positive_float
from fedsde.errors import FedsdeInputError

RateLike = float | Sequence[float] | np.ndarray | Callable[[float], float]


class RateSchedule:
    """A positive rate on the clock ``t`` (see the module docstring).

    Parameters
    ----------
    name : str
        Argument name used in error messages (``"eta"``, ``"server_lr"``).
    value : float, array of shape (rounds,), or callable ``t -> float``
    h : float
        Time step (one round lasts ``h``); needed to map ``t`` to a round for per-round arrays.

    Attributes
    ----------
    constant : float or None
        The value when the rate is constant.
    """

    def __init__(self, name: str, value: RateLike, h: float):
        self.name = name
        self.h = float(h)
        self.constant: float | None = None
        self._fn: Callable[[float], float] | None = None
        self._arr: np.ndarray | None = None
        if callable(value):
            self._fn = value
            return
        arr = np.asarray(value, dtype=np.float64)
        if arr.ndim == 0:
            self.constant = positive_float(name, float(arr))
            return
        if arr.ndim != 1 or arr.size == 0:
            raise FedsdeInputError(f"{name}: schedule of shape {arr.shape} must be a number, one value per round, "
                                   "or a callable of t")
        bad = ~np.isfinite(arr) | (arr <= 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise FedsdeInputError(f"{name}[{i}]={arr[i]!r}: learning rates must be finite and > 0")
        if np.all(arr == arr[0]):
            self.constant = float(arr[0])
        self._arr = arr

    @property
    def rounds(self) -> int | None:
        """Number of rounds a per-round array covers (``None`` for constants and callables)."""
        return None if self._arr is None else int(self._arr.size)

    def __call__(self, t: float) -> float:
        """The rate at time ``t`` (clock ``t = n·h``)."""
        if self.constant is not None:
            return self.constant
        if self._arr is not None:
            n = math.floor(t / self.h + INT_TOL)  # accumulated grid times may fall just short of n·h
            if n >= self._arr.size:
                raise FedsdeInputError(
                    f"{self.name}: per-round schedule has {self._arr.size} values but time t={t:.6g} is in round {n}"
                )
            return float(self._arr[max(n, 0)])
        v = float(self._fn(t))
        if not math.isfinite(v) or v <= 0:
            raise FedsdeInputError(f"{self.name}(t={t:.6g})={v!r}: learning rates must be finite and > 0")
        return v

    def describe(self) -> float | list[float] | str:
        """A JSON-able description (number, list, or ``"callable"``)."""
        if self.constant is not None:
            return self.constant
        if self._arr is not None:
            return self._arr.tolist()
        return "callable"


def as_schedule(name: str, value: RateLike | RateSchedule, h: float) -> RateSchedule:
    """``value`` as a :class:`RateSchedule` on time step ``h`` (returned unchanged if it already is one)."""
    if isinstance(value, RateSchedule):
        return value
    return RateSchedule(name, value, h)
