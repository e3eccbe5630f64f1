"""The exact one-round law of FedAvg on quadratic clients (no sampling).

Local step ``w ← w − η(∇F_k(w) + ξ)``, ``ξ ~ N(0, Σ_k)``, ``τ_k`` local steps on client ``k`` (``τ_k = E`` in
seed 002), then the server step ``w_{n+1} = w_n + s Σ_k p_k (w_k^{(τ_k)} − w_n)``.  Unrolling the local steps
(seed 002, Thm 6.2 corrected; reference/seed-fedsde.md §3a, §3b, erratum 1):

    w_k^{(τ)} − w_n = −M_k (w_n − a_k) − η Σ_{m<τ} (I − ηU_k)^{τ−1−m} ξ_m,   M_k = I − (I − ηU_k)^{τ_k}

so that one round is the affine Gaussian map

    w_{n+1} = w_n − s B (w_n − c) + s ε_n,
    B = Σ_k p_k M_k,   c = B⁻¹ Σ_k p_k M_k a_k,   Cov ε = η² Σ_k p_k² Γ_k,
    Γ_k = Σ_{m<τ_k} (I − ηU_k)^m Σ_k (I − ηU_k)^m.

Powers and the matrix geometric series are evaluated in the eigenbasis of each ``U_k``:
with ``U_k = V diag(λ) Vᵀ`` and ``r = 1 − ηλ``, ``Γ_k = V [(Vᵀ Σ_k V) ∘ G] Vᵀ`` where
``G_ij = Σ_{m<τ} (r_i r_j)^m = (1 − (r_i r_j)^τ)/(1 − r_i r_j)``; the cost does not grow with τ.

Partial participation (``participation=m``): each round ``m`` of ``Q`` clients are drawn uniformly without
replacement and weighted ``p_k Q/m`` (unbiased).  The conditional mean is unchanged; the covariance gains a
between-subset term (see :meth:`RoundLaw.step`), which makes the chain non-Gaussian but keeps its first two
moments exactly computable.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from fedsde._compat import renamed
from fedsde._validate import client_weights, positive_int
from fedsde.errors import FedsdeInputError
from fedsde.params import Schedule, fedavg_rates
from fedsde.problems.quadratic.problem import QuadraticProblem


def geometric_sum(x: np.ndarray, n: np.ndarray | int) -> np.ndarray:
    """``Σ_{m<n} x^m`` elementwise, accurate also for ``x`` close to 1 (returns ``n`` at ``x = 1``).

    Parameters
    ----------
    x : ndarray
        Ratios (any real values).
    n : int or ndarray of int, broadcastable with ``x``
        Number of terms (>= 0).
    """
    x = np.asarray(x, dtype=np.float64)
    n = np.broadcast_to(np.asarray(n, dtype=np.float64), x.shape)
    out = np.empty_like(x)
    one = x == 1.0
    pos = (x > 0) & ~one
    neg = x <= 0
    # 0 < x != 1: -expm1(n log x) / (1 - x) keeps full relative accuracy as x -> 1.
    xp = x[pos]
    out[pos] = -np.expm1(n[pos] * np.log(xp)) / (1.0 - xp)
    # x <= 0: 1 - x >= 1 so the direct formula has no cancellation.
    xn = x[neg]
    out[neg] = (1.0 - np.power(xn, n[neg])) / (1.0 - xn)
    out[one] = n[one]
    return out


def one_minus_power(x: np.ndarray, n: np.ndarray | int) -> np.ndarray:
    """``1 − (1 − x)^n`` elementwise with full relative accuracy, also for tiny ``x = ηλ``.

    ``r = 1 − x`` is never formed (it would round ``x`` to 1e-16 absolute): for ``r > 0`` the value is
    ``−expm1(n·log1p(−x))``; for ``r < 0`` and even ``n`` it is ``−expm1(n·log1p(x − 2))`` (``|r| = x − 1``), for
    odd ``n`` ``1 + |r|^n`` (no cancellation); ``1`` at ``r = 0``.
    """
    x = np.asarray(x, dtype=np.float64)
    n = np.broadcast_to(np.asarray(n, dtype=np.float64), np.broadcast_shapes(x.shape, np.shape(n)))
    x = np.broadcast_to(x, n.shape)
    out = np.ones(n.shape)
    pos = x < 1.0
    out[pos] = -np.expm1(n[pos] * np.log1p(-x[pos]))
    neg = x > 1.0
    logabs = np.log1p(x[neg] - 2.0)
    even = np.mod(n[neg], 2.0) == 0.0
    out[neg] = np.where(even, -np.expm1(n[neg] * logabs), 1.0 + np.exp(n[neg] * logabs))
    return out


def _geometric_sum_products(x: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``Σ_{m<n} (r_i r_j)^m`` with ``r = 1 − x`` (``x`` shape (Q, d), ``n`` shape (Q,)) → shape (Q, d, d).

    Where ``r_i r_j > 0`` the sum is ``−expm1(n·(log|r_i| + log|r_j|))/(x_i + x_j − x_i x_j)`` with the logs from
    ``log1p``, so no digit of ``x`` is lost; elsewhere :func:`geometric_sum` (no cancellation for products <= 0).
    """
    xi, xj = x[:, :, None], x[:, None, :]
    prod = (1.0 - xi) * (1.0 - xj)
    nn = np.broadcast_to(np.asarray(n, dtype=np.float64)[:, None, None], prod.shape)
    out = geometric_sum(prod, nn)
    ok = (prod > 0) & (xi < 2.0) & (xj < 2.0) & (xi != 1.0) & (xj != 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        li = np.where(xi < 1.0, np.log1p(-np.minimum(xi, 1.0)), np.log1p(np.maximum(xi, 1.0) - 2.0))
        lj = np.where(xj < 1.0, np.log1p(-np.minimum(xj, 1.0)), np.log1p(np.maximum(xj, 1.0) - 2.0))
        den = xi + xj - xi * xj
        val = -np.expm1(nn * (li + lj)) / den
    out[ok & (den != 0)] = val[ok & (den != 0)]
    return out


def _eig(problem: QuadraticProblem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eigen-decomposition of every ``U_k`` and ``Σ_k`` rotated into it (cached on the problem)."""
    cache = problem._cache
    if "eigU" not in cache:
        lam, V = np.linalg.eigh(problem.U)
        Vt = np.swapaxes(V, 1, 2)
        S_rot = Vt @ problem.Sigma @ V
        cache["eigU"] = (lam, V, S_rot)
    return cache["eigU"]


@renamed(steps="local_steps")
def client_round_maps(
    problem: QuadraticProblem, eta: float, local_steps: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-client contraction ``M_k = I − (I − ηU_k)^{τ_k}`` and noise ``Γ_k`` (see module docstring).

    Parameters
    ----------
    problem : QuadraticProblem
    eta : float
        Client learning rate.
    local_steps : ndarray of int, shape (Q,)
        Local steps ``τ_k`` (old name: ``steps``).

    Returns
    -------
    M : ndarray, shape (Q, d, d)
    Gamma : ndarray, shape (Q, d, d)
        ``Σ_{m<τ_k} (I − ηU_k)^m Σ_k (I − ηU_k)^m`` (the client displacement has covariance ``η² Γ_k``).
    """
    lam, V, S_rot = _eig(problem)
    x = eta * lam  # (Q, d); r = 1 − x is not formed (see one_minus_power)
    tau = np.asarray(local_steps, dtype=np.float64)[:, None]
    Vt = np.swapaxes(V, 1, 2)
    M = (V * one_minus_power(x, tau)[:, None, :]) @ Vt
    G = _geometric_sum_products(x, np.asarray(local_steps))
    Gamma = V @ (S_rot * G) @ Vt
    Gamma = 0.5 * (Gamma + np.swapaxes(Gamma, 1, 2))
    return M, Gamma


@dataclass(frozen=True)
class RoundLaw:
    """Exact law of one FedAvg round: ``w_{n+1} = w_n − s B (w_n − c) + s ε``, ``Cov ε = noise_cov``.

    Attributes
    ----------
    B : ndarray, shape (d, d)
        ``Σ_k p_k [I − (I − ηU_k)^{τ_k}]``.
    Ba : ndarray, shape (d,)
        ``Σ_k p_k [I − (I − ηU_k)^{τ_k}] a_k`` (so ``c = B⁻¹ Ba``).
    noise_cov : ndarray, shape (d, d)
        ``Cov ε = η² Σ_k p_k² Γ_k`` (full participation).
    eta, server_lr : float
        Client learning rate ``η`` and actual server step ``s`` (= ``h·η₀`` in seed 002's notation).
    local_steps : ndarray of int, shape (Q,)
    participation : int or None
        Clients sampled per round (``None``: all).
    M, Gamma : ndarray, shape (Q, d, d)
        Per-client pieces (see :func:`client_round_maps`).
    p : ndarray, shape (Q,)
        Aggregation weights ``ω_k`` (the problem's ``p_k`` for FedAvg).
    a : ndarray, shape (Q, d)
        Client minimisers.
    expanding_clients : tuple of int
        Clients with ``η·λ_max(U_k) ≥ 2``: their local SGD expands (reported, not an error).
    """

    B: np.ndarray
    Ba: np.ndarray
    noise_cov: np.ndarray
    eta: float
    server_lr: float
    local_steps: np.ndarray
    participation: int | None
    M: np.ndarray = field(repr=False)
    Gamma: np.ndarray = field(repr=False)
    p: np.ndarray = field(repr=False)
    a: np.ndarray = field(repr=False)
    expanding_clients: tuple[int, ...] = ()

    @property
    def d(self) -> int:
        return int(self.B.shape[0])

    @property
    def Q(self) -> int:
        return int(self.p.shape[0])

    @property
    def c(self) -> np.ndarray:
        """Fixed point ``c = B⁻¹ Σ p_k M_k a_k`` (= the paper's ``C4``; the stationary mean)."""
        cond = np.linalg.cond(self.B)
        if not np.isfinite(cond) or cond > 1e14:
            raise FedsdeInputError(
                f"eta={self.eta}, local_steps={_steps_repr(self.local_steps)}: B = Σ p_k[I − (I − ηU_k)^τ_k] "
                "is singular, so the round map has no unique fixed point"
            )
        return np.linalg.solve(self.B, self.Ba)

    @property
    def transition(self) -> np.ndarray:
        """``A = I − sB``, the linear part of the mean recursion, shape (d, d)."""
        return np.eye(self.d) - self.server_lr * self.B

    @property
    def spectral_radius(self) -> float:
        """Spectral radius of ``I − sB`` (< 1 iff the mean recursion contracts)."""
        return float(np.max(np.abs(np.linalg.eigvals(self.transition))))

    @property
    def server_noise_cov(self) -> np.ndarray:
        """Covariance of the server update's noise ``s²·Cov ε`` (full) or its participation analogue."""
        s2 = self.server_lr**2
        if self.participation is None or self.participation == self.Q:
            return s2 * self.noise_cov
        scale = self.Q / self.participation
        return s2 * self.eta**2 * np.einsum("q,qij->ij", scale * self.p**2, self.Gamma)

    def _sampling_coeffs(self) -> tuple[float, float]:
        """``(c1 − c2, c2)``: variance/covariance of the inclusion indicators (uniform without replacement)."""
        Q, m = self.Q, self.participation
        if m is None or m == Q:
            return 0.0, 0.0
        pi = m / Q
        diag_minus_off = pi * (Q - m) / (Q - 1)
        off = -pi * (Q - m) / (Q * (Q - 1))
        return diag_minus_off, off

    def step(self, mean: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and covariance after one round, given those before it.

        With participation ``m < Q``, indicators ``I_k`` (``P(I_k) = π = m/Q``) and
        ``y_k(w) = (Q/m) p_k M_k (w − a_k)``, the update is ``w − s Σ_k I_k [y_k(w) + (Q/m) p_k η ζ_k]`` with
        ``Cov ζ_k = Γ_k``; by total covariance

            P' = A P Aᵀ + s² [ (c₁−c₂) Σ_k (G_k P G_kᵀ + y_k y_kᵀ) + c₂ (G P Gᵀ + y yᵀ) ] + s² η² Σ_k (Q/m) p_k² Γ_k,

        with ``G_k = (Q/m) p_k M_k``, ``G = Σ G_k``, ``y = Σ y_k`` at the current mean, ``c₁ = π(1−π)`` and
        ``c₂ = Cov(I_k, I_j) = m(m−1)/(Q(Q−1)) − π²``.
        """
        s = self.server_lr
        A = self.transition
        new_mean = A @ mean + s * self.Ba
        new_cov = A @ cov @ A.T + self.server_noise_cov
        dmo, off = self._sampling_coeffs()
        if dmo != 0.0:
            alpha = self.Q * self.p / self.participation
            Gk = alpha[:, None, None] * self.M
            yk = np.einsum("qij,qj->qi", Gk, mean[None, :] - self.a)
            Gs, ys = Gk.sum(0), yk.sum(0)
            samp = dmo * (np.einsum("qij,jk,qlk->il", Gk, cov, Gk) + yk.T @ yk)
            samp += off * (Gs @ cov @ Gs.T + np.outer(ys, ys))
            new_cov = new_cov + s**2 * samp
        return new_mean, 0.5 * (new_cov + new_cov.T)

    def second_moment_map(self, P: np.ndarray) -> np.ndarray:
        """The homogeneous map ``P ↦ A P Aᵀ + s² [(c₁−c₂) Σ_k G_k P G_kᵀ + c₂ G P Gᵀ]`` applied to a (d, d) matrix
        (matrix-free: ``O(Q d³)``; :meth:`second_moment_operator` is its d² × d² matrix)."""
        A = self.transition
        out = A @ P @ A.T
        dmo, off = self._sampling_coeffs()
        if dmo != 0.0:
            alpha = self.Q * self.p / self.participation
            Gk = alpha[:, None, None] * self.M
            Gs = Gk.sum(0)
            out = out + self.server_lr**2 * (dmo * np.einsum("qij,jk,qlk->il", Gk, P, Gk) + off * Gs @ P @ Gs.T)
        return out

    def second_moment_operator(self) -> np.ndarray:
        """Matrix of the linear map ``P ↦ P'`` (homogeneous part) on row-major ``vec(P)``, shape (d², d²)."""
        A = self.transition
        T = np.kron(A, A)
        dmo, off = self._sampling_coeffs()
        if dmo != 0.0:
            alpha = self.Q * self.p / self.participation
            Gk = alpha[:, None, None] * self.M
            Gs = Gk.sum(0)
            s2 = self.server_lr**2
            T = T + s2 * (dmo * np.einsum("qij,qkl->ikjl", Gk, Gk).reshape(self.d**2, self.d**2))
            T = T + s2 * off * np.kron(Gs, Gs)
        return T


def _steps_repr(local_steps: np.ndarray) -> str:
    steps = np.asarray(local_steps)
    return str(int(steps[0])) if np.all(steps == steps[0]) else ",".join(map(str, steps.tolist()))


def round_law(
    problem: QuadraticProblem,
    eta: float | Schedule,
    local_steps: int | np.ndarray | None = None,
    server_lr: float = 1.0,
    *,
    participation: int | None = None,
    weights: np.ndarray | None = None,
    warn: bool = True,
) -> RoundLaw:
    """Exact one-round law of FedAvg (see the module docstring for the formulas).

    Parameters
    ----------
    problem : QuadraticProblem
    eta : float or Schedule
        Client learning rate ``η > 0``; or a :class:`~fedsde.params.Schedule` whose ``eta``, ``local_steps`` and
        ``server_lr`` are used (checked where it was built; ``local_steps`` and ``server_lr`` then not given).
    local_steps : int or array of int, shape (Q,)
        ``E`` (same for every client) or per-client ``τ_k``.
    server_lr : float
        Actual server step ``s > 0`` (``s = 1`` is plain FedAvg; ``s = h·η₀`` in seed 002's SDE notation).
    participation : int, optional
        Number ``m`` of clients sampled uniformly without replacement each round, weighted ``p_k Q/m``.
    weights : array, shape (Q,), optional
        Aggregation weights ``ω_k`` replacing ``p_k`` in ``B``, ``c`` and ``Cov ε`` (for server rules that are
        linear in the client displacements, e.g. FedNova's ``ω_k = p_k τ_eff / τ_k``); default ``p``.
        They need not sum to one.
    warn : bool
        Emit a ``RuntimeWarning`` when some client's local SGD expands (``η·λ_max(U_k) ≥ 2``).
    """
    eta, steps, server_lr = fedavg_rates(eta, local_steps, server_lr, problem.Q)  # a Schedule: checked already
    if participation is not None:
        participation = positive_int("participation", participation)
        if participation > problem.Q:
            raise FedsdeInputError(
                f"participation={participation}: cannot sample more clients than there are (Q={problem.Q})"
            )
    expanding = tuple(int(k) for k in np.flatnonzero(eta * problem.max_curvature() >= 2.0))
    if expanding and warn:
        warnings.warn(
            f"eta*max_eig(U_k) >= 2 for clients {list(expanding)} (eta={eta}): local SGD expands on them",
            RuntimeWarning,
            stacklevel=2,
        )
    if weights is None:
        omega = problem.p
    else:
        omega = client_weights("weights", weights, problem.Q, normalise=False, noun="")
    M, Gamma = client_round_maps(problem, eta, steps)
    B = np.einsum("q,qij->ij", omega, M)
    Ba = np.einsum("q,qij,qj->i", omega, M, problem.a)
    noise = eta**2 * np.einsum("q,qij->ij", omega**2, Gamma)
    return RoundLaw(
        B=B,
        Ba=Ba,
        noise_cov=noise,
        eta=eta,
        server_lr=server_lr,
        local_steps=steps,
        participation=participation,
        M=M,
        Gamma=Gamma,
        p=omega,
        a=problem.a,
        expanding_clients=expanding,
    )
