"""Client learning-rate schedules ``η(t) = c·(1 + t)^(−b)`` and the integrals of seed 002, Thms 4.5 and 4.9.

Clock: continuous time ``t = n·h`` (``n`` rounds, ``h`` the time step of seed 002, Sec. 3).

For each schedule the integrals

* ``φ(t) = ∫₀ᵗ η``,
* ``I₂(t) = ∫₀ᵗ η²``,
* ``J(t) = ∫₀ᵗ η(s)² φ(s) ds``,
* ``K(t) = ∫₀ᵗ η(s)² √(I₂(s)) ds``

are returned in closed form where one exists (b ∈ {0, ½, 1}; φ and I₂ for every b) and by adaptive
quadrature otherwise; :attr:`PowerSchedule.method` says which (reference/seed-fedsde.md §3e, §5).
Closed forms (c = 1):

* b = 1: ``φ = log(1+t)``, ``I₂ = t/(t+1)``, ``J = (t − log(1+t))/(t+1)``, ``K = ⅔ (t/(t+1))^{3/2}``;
* b = ½: ``φ = 2√(1+t) − 2``, ``I₂ = log(1+t)``, ``J = 4(√(1+t) − 1) − 2 log(1+t)``, ``K = ⅔ log(1+t)^{3/2}``;
* b = 0: ``φ = t``, ``I₂ = t``, ``J = t²/2``, ``K = ⅔ t^{3/2}``;

and for scale ``c`` the four integrals carry the factors ``c``, ``c²``, ``c³``, ``c³``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import integrate

from fedsde._tolerances import QUAD_RTOL
from fedsde._validate import positive_float, unit_interval
from fedsde.errors import FedsdeInputError
from fedsde.theory.results import CLOSED_FORM, QUADRATURE, Constant


@dataclass(frozen=True)
class PowerSchedule:
    """``η(t) = scale · (1 + t)^(−b)`` on the clock ``t = n·h``.

    Parameters
    ----------
    scale : float
        ``η(0) > 0``.
    b : float
        Decay exponent, ``0 <= b <= 1`` (``b = 0``: constant; Cor. 4.6 uses b = 1, ½ and general b).
    """

    scale: float = 1.0
    b: float = 1.0

    def __post_init__(self):
        positive_float("scale", self.scale)
        unit_interval("b", self.b, closed_right=True)

    # ------------------------------------------------------------------ values
    @property
    def closed(self) -> bool:
        """True when every integral has a closed form (b ∈ {0, ½, 1})."""
        return float(self.b) in (0.0, 0.5, 1.0)

    @property
    def method(self) -> str:
        """How ``J`` and ``K`` are obtained: ``"closed form"`` or ``"quadrature"``."""
        return CLOSED_FORM if self.closed else QUADRATURE

    def label(self) -> str:
        c = "" if self.scale == 1 else f"{self.scale:g}·"
        if self.b == 0:
            return f"η = {self.scale:g}"
        if self.b == 1:
            return f"η = {c}1/(t+1)"
        if self.b == 0.5:
            return f"η = {c}1/√(t+1)"
        return f"η = {c}(t+1)^(−{self.b:g})"

    def eta(self, t) -> np.ndarray:
        """``η(t)``; ``t`` array-like (continuous time)."""
        return self.scale * (1.0 + np.asarray(t, dtype=np.float64)) ** (-self.b)

    def phi(self, t) -> np.ndarray:
        """``φ(t) = ∫₀ᵗ η`` (closed form for every b)."""
        t = np.asarray(t, dtype=np.float64)
        b = float(self.b)
        if b == 1.0:
            out = np.log1p(t)
        else:
            out = np.expm1((1.0 - b) * np.log1p(t)) / (1.0 - b)
        return self.scale * out

    def int_eta2(self, t) -> np.ndarray:
        """``I₂(t) = ∫₀ᵗ η²`` (closed form for every b)."""
        t = np.asarray(t, dtype=np.float64)
        b = float(self.b)
        if b == 0.5:
            out = np.log1p(t)
        else:
            out = np.expm1((1.0 - 2.0 * b) * np.log1p(t)) / (1.0 - 2.0 * b)
        return self.scale**2 * out

    def int_eta2_phi(self, t) -> np.ndarray:
        """``J(t) = ∫₀ᵗ η(s)² φ(s) ds``."""
        t = np.asarray(t, dtype=np.float64)
        b = float(self.b)
        c3 = self.scale**3
        if b == 1.0:
            return c3 * (t - np.log1p(t)) / (t + 1.0)
        if b == 0.5:
            return c3 * (4.0 * (np.sqrt(1.0 + t) - 1.0) - 2.0 * np.log1p(t))
        if b == 0.0:
            return c3 * t**2 / 2.0
        return self._quad(lambda s: self.eta(s) ** 2 * self.phi(s), t)

    def int_eta2_sqrt_int_eta2(self, t) -> np.ndarray:
        """``K(t) = ∫₀ᵗ η(s)² √(∫₀ˢ η²) ds``."""
        t = np.asarray(t, dtype=np.float64)
        b = float(self.b)
        c3 = self.scale**3
        if b == 1.0:
            return c3 * (2.0 / 3.0) * (t / (t + 1.0)) ** 1.5
        if b == 0.5:
            return c3 * (2.0 / 3.0) * np.log1p(t) ** 1.5
        if b == 0.0:
            return c3 * (2.0 / 3.0) * t**1.5
        return self._quad(lambda s: self.eta(s) ** 2 * np.sqrt(self.int_eta2(s)), t)

    def integrals(self, t) -> dict:
        """``φ``, ``I₂``, ``J``, ``K`` at ``t`` as :class:`~fedsde.theory.results.Constant` (value and method)."""
        note = self.label()
        return {
            "phi": Constant(self.phi(t), CLOSED_FORM, note=f"∫₀ᵗ η, {note}"),
            "int_eta2": Constant(self.int_eta2(t), CLOSED_FORM, note=f"∫₀ᵗ η², {note}"),
            "int_eta2_phi": Constant(self.int_eta2_phi(t), self.method, note=f"∫₀ᵗ η²φ, {note}"),
            "int_eta2_sqrt_int_eta2": Constant(self.int_eta2_sqrt_int_eta2(t), self.method,
                                               note=f"∫₀ᵗ η²√(∫η²), {note}"),
        }

    @staticmethod
    def _quad(f, t: np.ndarray) -> np.ndarray:
        """Cumulative adaptive quadrature of ``f`` from 0 to each entry of ``t`` (sorted pieces, summed)."""
        flat = np.atleast_1d(t).ravel()
        order = np.argsort(flat)
        out = np.empty_like(flat)
        acc, prev = 0.0, 0.0
        for i in order:
            ti = float(flat[i])
            if ti < 0:
                raise FedsdeInputError(f"t={ti!r}: must be >= 0")
            if ti > prev:
                acc += integrate.quad(f, prev, ti, limit=200, epsabs=0.0, epsrel=QUAD_RTOL)[0]
                prev = ti
            out[i] = acc
        return out.reshape(np.shape(t)) if np.ndim(t) else out[0]
