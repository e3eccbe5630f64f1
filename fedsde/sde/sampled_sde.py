"""A rule's first-order SDE under client sampling, and the exact moments of its chain and of its SDE.

Under client sampling the round's covariance is ``N₀ + Σ_kl C_kl M_k (w − a_k)(w − a_l)ᵀ M_lᵀ``
(:mod:`fedsde.sde.sampled`), so the rule's first-order SDE (seed 002 eq. (2) with the round's exact moments, clock
``t = n·h``, step ``s_eff``: ``s``, or ``s·g/(1 − β)`` with server momentum) is

    dw = −A(w − c) dt + σ(w) dB,   A = (s_eff/h) B,   σσᵀ(w) = κ [N₀ + Σ_kl C_kl y_k(w) y_l(w)ᵀ],   κ = s_eff²/h,

with ``y_k(w) = M_k(w − a_k)``: a linear drift and a diffusion quadratic in ``w`` (:class:`SampledSDE`).  Its law is
not Gaussian, but its first two moments close: with ``δ = E w − c``, ``S = E (w − c)(w − c)ᵀ``, ``f_k = M_k(c − a_k)``
and ``F = [f_k]``,

    dδ/dt = −Aδ,
    dS/dt = −AS − SAᵀ + κ [N₀ + Σ_kl C_kl M_k S M_lᵀ + X(δ) + X(δ)ᵀ + F C Fᵀ],   X(δ) = Σ_kl C_kl M_k δ f_lᵀ,

one linear ODE for ``(S, δ, 1)`` (``d² + d + 1`` numbers), solved by a matrix exponential
(:meth:`SampledSDE.moments`); its stationary point is :meth:`SampledSDE.stationary`.  The chain's moments
(:func:`chain_moments`) follow ``z' = Tz + Lε`` on ``z = w − c`` (``T = I − sB``, ``L = sI``) or ``(w − c, v)``
(server momentum, :func:`fedsde.sde.rules.momentum_transition`) with ``E Cov ε`` evaluated on the law of ``w``.
Paths: Euler–Maruyama with the factor ``[κ^{1/2} N₀^{1/2}, κ^{1/2} Y(w) C^{1/2}]`` (:func:`euler_paths`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import scipy.linalg

from fedsde._tolerances import SINGULAR_TOL
from fedsde.errors import FedsdeInputError
from fedsde.exact.moments import Moments
from fedsde.sde.coefficients import psd_sqrt
from fedsde.sde.sampled import SamplingTerm

#: largest dimension whose (d² + d + 1)-dimensional moment ODE is solved densely
MAX_DENSE_D = 40


class SecondMoments(NamedTuple):
    """Mean (d,) and covariance (d, d) of a law (not necessarily Gaussian)."""

    mean: np.ndarray
    cov: np.ndarray


@dataclass(frozen=True)
class SampledSDE:
    """``dw = −A(w − c) dt + σ(w) dB`` with ``σσᵀ(w) = diffusion_cov + scale·sampling.at(w)`` (module docstring).

    Attributes
    ----------
    A : ndarray, shape (d, d)
    c : ndarray, shape (d,)
    diffusion_cov : ndarray, shape (d, d)
        ``κ N₀``: the part that does not depend on ``w``.
    sampling : SamplingTerm
    scale : float
        ``κ = s_eff²/h``.
    h, server_lr, eta : float
    local_steps : ndarray of int, shape (Q,)
    variant : str
    """

    A: np.ndarray
    c: np.ndarray
    diffusion_cov: np.ndarray
    sampling: SamplingTerm = field(repr=False)
    scale: float = 1.0
    h: float = 1.0
    server_lr: float = 1.0
    eta: float = 0.0
    local_steps: np.ndarray | None = None
    variant: str = "rule:sampled"

    @property
    def d(self) -> int:
        return int(self.c.shape[0])

    def drift(self, w: np.ndarray) -> np.ndarray:
        """``−A(w − c)`` at points ``w`` (..., d)."""
        return -(np.asarray(w, dtype=np.float64) - self.c) @ self.A.T

    def diffusion_at(self, w: np.ndarray) -> np.ndarray:
        """``σσᵀ(w)`` at points ``w`` (..., d), shape (..., d, d)."""
        return self.diffusion_cov + self.scale * self.sampling.at(w)

    def _check_size(self) -> None:
        if self.d > MAX_DENSE_D:
            raise FedsdeInputError(f"d={self.d}: the exact moments of the SDE under client sampling solve a dense "
                                   f"linear ODE of size d² + d + 1; supported up to d = {MAX_DENSE_D}")

    def generator(self) -> np.ndarray:
        """The matrix of the moment ODE on ``(vec S, δ, 1)`` (row-major ``vec``), shape (d² + d + 1,)²."""
        self._check_size()
        d, k = self.d, self.scale
        sm = self.sampling
        eye = np.eye(d)
        F = np.einsum("kab,kb->ak", sm.M, self.c[None, :] - sm.a)  # f_k as columns
        g = F @ sm.C  # g_k = Σ_l C_kl f_l, columns
        X = np.einsum("kaj,bk->abj", sm.M, g).reshape(d * d, d)  # vec X(δ) = X δ
        XT = np.swapaxes(X.reshape(d, d, d), 0, 1).reshape(d * d, d)
        n = d * d + d + 1
        G = np.zeros((n, n))
        G[:d * d, :d * d] = -(np.kron(self.A, eye) + np.kron(eye, self.A)) + k * sm.operator()
        G[:d * d, d * d:d * d + d] = k * (X + XT)
        const = self.diffusion_cov + k * (F @ sm.C @ F.T)
        G[:d * d, -1] = (0.5 * (const + const.T)).reshape(-1)
        G[d * d:d * d + d, d * d:d * d + d] = -self.A
        return G

    def moments(self, t: float, mean0, cov0=None) -> SecondMoments:
        """Mean and covariance at time ``t >= 0`` (clock ``t = n·h``) from a law with ``mean0``, ``cov0`` (default a
        point) at time 0 (module docstring)."""
        if not np.isfinite(t) or t < 0:
            raise FedsdeInputError(f"t={t!r}: must be finite and >= 0")
        d = self.d
        delta = np.asarray(mean0, dtype=np.float64).reshape(d) - self.c
        P0 = np.zeros((d, d)) if cov0 is None else np.asarray(cov0, dtype=np.float64)
        y = np.concatenate([(P0 + np.outer(delta, delta)).reshape(-1), delta, [1.0]])
        y = scipy.linalg.expm(self.generator() * float(t)) @ y
        dl = y[d * d:d * d + d]
        S = y[:d * d].reshape(d, d)
        P = S - np.outer(dl, dl)
        return SecondMoments(self.c + dl, 0.5 * (P + P.T))

    def stationary(self) -> SecondMoments | None:
        """The stationary mean ``c`` and covariance, or ``None`` when the moment ODE is not stable (some eigenvalue
        of its ``S`` block with real part ``>= 0``, up to :data:`~fedsde._tolerances.SINGULAR_TOL`)."""
        d = self.d
        G = self.generator()
        Gs = G[:d * d, :d * d]
        eig = np.concatenate([np.linalg.eigvals(Gs), np.linalg.eigvals(-self.A)])
        if eig.real.max() >= -SINGULAR_TOL * max(1.0, float(np.abs(eig).max())):
            return None
        S = np.linalg.solve(Gs, -G[:d * d, -1]).reshape(d, d)
        return SecondMoments(self.c.copy(), 0.5 * (S + S.T))


def chain_moments(T: np.ndarray, L: np.ndarray, law, rounds: int, w0, *, record=None) -> Moments:
    """Exact moments of the ``w`` block of ``z' = Tz + Lε`` (``z = (w − c, …)``, the rest starting at zero) with
    ``E[εεᵀ | w] = law.noise_at(w)`` (:class:`fedsde.sde.sampled.SampledRoundLaw`), from the point ``w0``."""
    d, n_z = law.d, T.shape[0]
    c = law.c
    z = np.zeros(n_z)
    z[:d] = np.asarray(w0, dtype=np.float64).reshape(d) - c
    P = np.zeros((n_z, n_z))
    keep = np.arange(rounds + 1) if record is None else np.asarray(record, dtype=np.int64)
    means, covs = [], []
    for n in range(rounds + 1):
        if n in keep:
            means.append(z[:d] + c)
            covs.append(P[:d, :d].copy())
        noise = law.noise_at(z[:d] + c, P[:d, :d])
        z, P = T @ z, T @ P @ T.T + L @ noise @ L.T
        P = 0.5 * (P + P.T)
    return Moments(keep, np.array(means), np.array(covs))


def chain_stationary(T: np.ndarray, L: np.ndarray, law) -> tuple[np.ndarray, np.ndarray] | None:
    """The stationary mean ``c`` and covariance of ``w`` for :func:`chain_moments`' chain: ``vec P = (T⊗T) vec P +
    (L⊗L) vec(N₀ + 𝓛(P_ww) + F C Fᵀ)``, or ``None`` when that map (or ``T``) does not contract."""
    d, n_z = law.d, T.shape[0]
    if np.max(np.abs(np.linalg.eigvals(T))) >= 1.0:
        return None
    E = np.zeros((d, n_z))
    E[:, :d] = np.eye(d)
    op = np.kron(T, T) + np.kron(L, L) @ law.sampling.operator() @ np.kron(E, E)
    if np.max(np.abs(np.linalg.eigvals(op))) >= 1.0:
        return None
    rhs = L @ law.noise_at(law.c) @ L.T
    P = np.linalg.solve(np.eye(n_z * n_z) - op, rhs.reshape(-1)).reshape(n_z, n_z)[:d, :d]
    return law.c.copy(), 0.5 * (P + P.T)


def euler_paths(sde: SampledSDE, rounds: int, replicates: int, seed: int, w0=None, *, substeps: int = 1,
                record=None) -> tuple[np.ndarray, np.ndarray]:
    """Euler–Maruyama paths of a :class:`SampledSDE` on the round grid (step ``h/substeps``; numpy
    ``default_rng(seed)``): rounds (T,) and paths (T, R, d) at the recorded rounds (default every round)."""
    d, dt = sde.d, sde.h / substeps
    rng = np.random.default_rng(seed)
    root0 = psd_sqrt(sde.diffusion_cov, name="the diffusion's constant part")
    gain = np.sqrt(sde.scale)
    w = np.broadcast_to(np.zeros(d) if w0 is None else np.asarray(w0, dtype=np.float64), (replicates, d)).copy()
    keep = set(range(rounds + 1)) if record is None else {int(k) for k in record}
    Qn = sde.sampling.C.shape[0]
    out, at = [], []
    for n in range(rounds + 1):
        if n in keep:
            out.append(w.copy())
            at.append(n)
        if n == rounds:
            break
        for _ in range(substeps):
            fac = sde.sampling.factor(w)  # (R, d, Q)
            noise = rng.standard_normal((replicates, d)) @ root0.T
            noise += gain * np.einsum("rak,rk->ra", fac, rng.standard_normal((replicates, Qn)))
            w = w + dt * sde.drift(w) + np.sqrt(dt) * noise
    return np.asarray(at), np.stack(out)


__all__ = ["MAX_DENSE_D", "SampledSDE", "SecondMoments", "chain_moments", "chain_stationary", "euler_paths"]
