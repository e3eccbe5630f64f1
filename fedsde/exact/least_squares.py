"""Exact first and second moments of minibatch FedAvg on least-squares clients (real minibatch noise).

One local step on client ``k`` is ``w' = (I − ηA_S) w + η c_S`` with a fresh minibatch ``S`` of ``b`` rows
(:mod:`fedsde.problems.regression`): the gradient is linear in ``w`` and the minibatch noise quadratic in ``w``, so
``(E w, E wwᵀ)`` after a step is a linear function of ``(E w, E wwᵀ)`` before it, through the data's second and
fourth moments (:mod:`fedsde.exact._least_squares_steps`).  A round starts every client at ``w_n``; given ``w_n`` the
clients are independent, the server step is ``w_{n+1} = w_n + s Σ_k ω_k Δ_k`` (seed 002 Sec. 3; ``ω`` from the
participation scheme, independent of the minibatches) and, with ``d_k(w) = E[Δ_k | w] = Ĵ_k ŵ`` (affine),
``μ = E ω``, ``C = E ωωᵀ``, ``Cδ = C − μμᵀ`` and ``N_k`` the client's accumulated minibatch noise,

    E[w_{n+1} | w_n]   = w_n + s Σ_k μ_k d_k(w_n),
    Cov[w_{n+1} | w_n] = s² Σ_{k,j} Cδ_kj d_k(w_n) d_j(w_n)ᵀ + s² Σ_k C_kk N_k(w_n),

(the second is quadratic in ``w_n``).  Averaging over ``w_n ~ (m, P)``: ``m' = m + s Σ μ_k d_k(m)`` and

    P' = A P Aᵀ + s² Σ_{k,j} Cδ_kj (J_k P J_jᵀ + d_k(m) d_j(m)ᵀ) + s² Σ_k C_kk E N_k(w_n),   A = I + s Σ μ_k J_k,

the least-squares analogue of :meth:`fedsde.exact.RoundLaw.step` (which it equals when the noise is constant).
The stationary law is the fixed point: ``Σ_k μ_k d_k(m*) = 0`` and a linear system of size ``d²`` for ``P*``,
solved when the second-moment operator contracts (otherwise :class:`~fedsde.errors.NoStationaryLawError` with
its spectral radius).  Clock: rounds ``n``; in seed 002's notation round ``n`` sits at ``t = n·h`` and ``s = h·η₀``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fedsde._memory import available_memory, memory_fits
from fedsde._tolerances import PSD_TOL, STATIONARY_MARGIN, SYM_TOL
from fedsde._validate import (
    choice,
    client_steps,
    client_weights,
    positive_float,
    positive_int,
    record_rounds,
    schedule,
    start_point,
)
from fedsde.errors import FedsdeInputError, NoStationaryLawError
from fedsde.exact._least_squares_steps import LocalData, weight_moments
from fedsde.exact.moments import Moments

WEIGHTINGS = ("unbiased", "renormalised", "multinomial")


def _check_problem(problem) -> None:
    if not hasattr(problem, "padded_rows") or getattr(problem, "model", None) != "least-squares":
        raise FedsdeInputError(f"problem: {type(problem).__name__} is not a least-squares RegressionProblem "
                               "(the exact least-squares moments need its rows)")


@dataclass(frozen=True)
class LeastSquaresRoundLaw:
    """Exact first and second moments of one FedAvg round on least-squares clients (module docstring).

    Attributes
    ----------
    eta, server_lr : float
        Client learning rate ``η`` and actual server step ``s``.
    local_steps : ndarray of int, shape (Q,)
    participation : int or None
    weighting : str
    mu : ndarray, shape (Q,)
        ``E ω``: mean aggregation weights.
    C : ndarray, shape (Q, Q)
        ``E ωωᵀ``.
    J : ndarray, shape (Q, d+1, d+1)
        ``Ĵ_k = Ḡ_k^{τ_k} − I`` on ``ŵ = (w, 1)``: ``d_k(w) = Ĵ_k ŵ`` (first d rows).
    """

    eta: float
    server_lr: float
    local_steps: np.ndarray
    participation: int | None
    weighting: str
    mu: np.ndarray = field(repr=False)
    C: np.ndarray = field(repr=False)
    J: np.ndarray = field(repr=False)
    data: LocalData = field(repr=False)

    @property
    def d(self) -> int:
        return self.data.d

    @property
    def Q(self) -> int:
        return self.data.Q

    @property
    def L(self) -> np.ndarray:
        """``s Σ_k μ_k Ĵ_k`` (d+1, d+1): ``E[Δ | w] = L ŵ`` in the internal coordinates."""
        return self.server_lr * np.einsum("q,qij->ij", self.mu, self.J)

    @property
    def mean_map(self) -> tuple[np.ndarray, np.ndarray]:
        """``(A, a)`` with ``E[w_{n+1} | w_n] = A w_n + a``: shapes (d, d) and (d,)."""
        L, d = self.L, self.d
        return np.eye(d) + L[:d, :d], L[:d, d] - L[:d, :d] @ self.data.shift

    def fixed_point(self) -> np.ndarray:
        """The stationary mean ``m*`` with ``E[Δ | m*] = 0``, shape (d,)."""
        L, d = self.L, self.d
        return self.data.shift + np.linalg.solve(-L[:d, :d], L[:d, d])

    def _hat(self, w: np.ndarray) -> np.ndarray:
        """``(w − shift, 1)`` for ``w`` of shape (N, d), shape (N, d+1)."""
        return np.concatenate([w - self.data.shift, np.ones((w.shape[0], 1))], axis=1)

    @property
    def spectral_radius(self) -> float:
        """Spectral radius of ``A`` (the mean recursion contracts iff < 1)."""
        return float(np.max(np.abs(np.linalg.eigvals(self.mean_map[0]))))

    def pieces(self, mhat: np.ndarray, P: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The round's parts for a batch of states (augmented, see :mod:`fedsde.exact._least_squares_steps`).

        Parameters
        ----------
        mhat : ndarray, shape (N, d+1)
            Means ``(m, γ)`` (``γ = 1`` for a state, 0 for the homogeneous part).
        P : ndarray, shape (N, d+1, d+1), or None
            Centred second moments (or raw ones with ``mhat = 0``).

        Returns
        -------
        drift : ndarray, shape (N, d+1)
            ``s Σ_k μ_k Ĵ_k m̂`` (``E Δ``).
        lin : ndarray, shape (N, d+1, d+1)
            ``L P̂`` with ``L = s Σ_k μ_k Ĵ_k``.
        noise : ndarray, shape (N, d+1, d+1)
            ``E Cov[Δ | w]``: ``s² [Σ_kj Cδ_kj (Ĵ_k P̂ Ĵ_jᵀ + d_k d_jᵀ) + Σ_k C_kk N_k]``.
        """
        s, d = self.server_lr, self.d
        J, mu = self.J, self.mu
        Cd = self.C - np.outer(mu, mu)
        dk = np.einsum("qab,nb->qna", J, mhat)  # (Q, N, d+1)
        drift = s * np.einsum("q,qna->na", mu, dk)
        Nk = self.data.run(mhat, P)  # (Q, N, d, d)
        noise = np.zeros((mhat.shape[0], d + 1, d + 1))
        noise[:, :d, :d] = np.einsum("q,qnab->nab", np.diag(self.C), Nk)
        if np.any(Cd != 0.0):
            noise += np.einsum("kj,kna,jnb->nab", Cd, dk, dk, optimize=True)
            if P is not None:
                JP = np.einsum("kab,nbc->knac", J, P)
                W = np.einsum("kj,knac->jnac", Cd, JP)
                noise += np.einsum("jnac,jec->nae", W, J)
        noise *= s * s
        if P is None:
            lin = np.zeros_like(noise)
        else:
            lin = np.einsum("ab,nbc->nac", s * np.einsum("q,qij->ij", mu, J), P)
        return drift, lin, noise

    def step(self, mean: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean (d,) and covariance (d, d) after one round, given those before it (module docstring)."""
        d = self.d
        mean = np.asarray(mean, dtype=np.float64)
        P = np.zeros((1, d + 1, d + 1))
        P[0, :d, :d] = cov
        drift, lin, noise = self.pieces(self._hat(mean[None]), P)
        L = self.L
        Pn = P[0] + lin[0] + lin[0].T + L @ P[0] @ L.T + noise[0]
        Pn = Pn[:d, :d]
        return mean + drift[0, :d], 0.5 * (Pn + Pn.T)

    def conditional_mean(self, w) -> np.ndarray:
        """``E[w_{n+1} | w_n = w]`` for ``w`` of shape (..., d)."""
        A, a = self.mean_map
        return np.asarray(w, dtype=np.float64) @ A.T + a

    def conditional_cov(self, w) -> np.ndarray:
        """``Cov[w_{n+1} | w_n = w]`` (quadratic in ``w``) for ``w`` of shape (..., d): shape (..., d, d)."""
        w = np.asarray(w, dtype=np.float64)
        noise = self.pieces(self._hat(w.reshape(-1, self.d)), None)[2][:, :self.d, :self.d]
        return 0.5 * (noise + np.swapaxes(noise, 1, 2)).reshape(*w.shape, self.d)

    def second_moment_operator(self, *, memory_limit: int | str | None = None) -> np.ndarray:
        """Matrix of the homogeneous map ``P ↦ P'`` on row-major ``vec(P)``, shape (d², d²)."""
        d = self.d
        memory_fits(f"second-moment operator (d={d})", operator_bytes(d, self.Q, self.data.X.shape[1]),
                    available_memory("cpu", memory_limit), "the exact stationary law needs O(d⁴) memory; use fewer "
                    "features")
        L = self.L
        cols = []
        for start in range(0, d * d, _CHUNK):
            idx = np.arange(start, min(d * d, start + _CHUNK))
            P = np.zeros((idx.size, d + 1, d + 1))
            P[np.arange(idx.size), idx // d, idx % d] = 1.0
            _, lin, noise = self.pieces(np.zeros((idx.size, d + 1)), P)
            out = P + lin + np.einsum("nab,cb->nac", P, L) + np.einsum("ab,nbc,dc->nad", L, P, L) + noise
            cols.append(out[:, :d, :d].reshape(idx.size, d * d))
        return np.concatenate(cols).T


#: basis matrices per application when building an operator
_CHUNK = 256


def operator_bytes(d: int, Q: int, n_max: int) -> int:
    """Memory the d²×d² operator needs: the matrix, its LU copy and the per-chunk client work arrays."""
    return 8 * (3 * d**4 + 6 * Q * min(_CHUNK, d * d) * ((d + 1) ** 2 + n_max * (d + 1)))


def least_squares_round_law(
    problem,
    eta: float,
    local_steps: int | Sequence[int] | np.ndarray,
    server_lr: float = 1.0,
    *,
    participation: int | None = None,
    weighting: str = "unbiased",
    weights: np.ndarray | None = None,
    shift: np.ndarray | None = None,
) -> LeastSquaresRoundLaw:
    """Exact one-round moments of minibatch FedAvg on a :class:`~fedsde.problems.RegressionProblem`.

    Parameters
    ----------
    problem : RegressionProblem
        With a ``batch_size`` and ``sampling`` (the minibatches of every local step).
    eta : float
        Client learning rate ``η > 0``.
    local_steps : int or array of int, shape (Q,)
        ``E`` or per-client ``τ_k``.
    server_lr : float
        Actual server step ``s > 0``.
    participation : int, optional
        ``m`` clients per round (default: all).
    weighting : {"unbiased", "renormalised", "multinomial"}
        Participation weights as :func:`fedsde.sim.simulate` draws them (see
        :func:`fedsde.exact._least_squares_steps.weight_moments`).
    weights : array, shape (Q,), optional
        Base aggregation weights ``ω_k`` replacing ``p_k`` (server rules linear in the displacements, e.g.
        :func:`fedsde.exact.aggregator_round_weights` of FedNova or FedDisco); not with ``multinomial``.
    shift : array, shape (d,), optional
        Internal coordinates ``u = w − shift`` (results are reported in ``w`` whatever it is; used by the SDE).
    """
    _check_problem(problem)
    eta = positive_float("eta", eta)
    server_lr = positive_float("server_lr", server_lr)
    steps = client_steps("local_steps", local_steps, problem.Q)
    Q = problem.Q
    choice("weighting", weighting, WEIGHTINGS)
    if participation is not None:
        participation = positive_int("participation", participation)
        if participation > Q:
            raise FedsdeInputError(f"participation={participation}: cannot exceed the number of clients Q={Q}")
    if weights is None:
        omega = problem.p.copy()
    else:
        if weighting == "multinomial" and participation is not None:
            raise FedsdeInputError("weights: not used by weighting='multinomial' (its draws follow p, weights 1/m)")
        omega = client_weights("weights", weights, Q, normalise=False, noun="")
    mu, C = weight_moments(omega, participation, weighting, problem.p)
    data = LocalData(problem, eta, steps, shift)
    return LeastSquaresRoundLaw(eta=eta, server_lr=server_lr, local_steps=steps, participation=participation,
                                weighting=weighting, mu=mu, C=C, J=data.mean_maps(), data=data)


def _initial(d: int, w0, cov0) -> tuple[np.ndarray, np.ndarray]:
    m0 = start_point(w0, d)
    if cov0 is None:
        return m0, np.zeros((d, d))
    P0 = np.asarray(cov0, dtype=np.float64)
    if P0.ndim == 0:
        P0 = float(P0) * np.eye(d)
    if P0.shape != (d, d) or not np.all(np.isfinite(P0)) or np.abs(P0 - P0.T).max() > SYM_TOL * max(
            1.0, np.abs(P0).max()) or np.linalg.eigvalsh(0.5 * (P0 + P0.T))[0] < -PSD_TOL * max(1.0, np.abs(P0).max()):
        raise FedsdeInputError(f"cov0: shape {np.shape(cov0)} must be ({d}, {d}), finite, symmetric PSD")
    return m0, 0.5 * (P0 + P0.T)


def least_squares_transient_moments(
    problem,
    eta: float | Sequence[float] | np.ndarray,
    local_steps: int | Sequence[int] | np.ndarray,
    rounds: int,
    server_lr: float | Sequence[float] | np.ndarray = 1.0,
    *,
    w0=None,
    cov0=None,
    participation: int | None = None,
    weighting: str = "unbiased",
    weights: np.ndarray | None = None,
    record: Sequence[int] | np.ndarray | None = None,
) -> Moments:
    """Exact mean and covariance of the server weights after every round (mirrors
    :func:`fedsde.exact.transient_moments`).

    Parameters
    ----------
    problem : RegressionProblem
    eta, server_lr : float or array, shape (rounds,)
        Constant or per-round client rate and server step.
    local_steps : int or array of int, shape (Q,)
    rounds : int
    w0 : array, shape (d,), optional
        Start (default: the problem's ``initial_weights()``); with ``cov0`` the start law has that covariance.
    participation, weighting, weights
        See :func:`least_squares_round_law`.
    record : sequence of int, optional
        Rounds (0..rounds) to keep; default all.

    Returns
    -------
    Moments
        ``rounds`` (T,), ``mean`` (T, d), ``cov`` (T, d, d).
    """
    _check_problem(problem)
    rounds = positive_int("rounds", rounds, minimum=0)
    etas = schedule("eta", eta, rounds) if rounds else np.array([positive_float("eta", np.ravel(eta)[0])])
    lrs = schedule("server_lr", server_lr, rounds) if rounds else np.array([np.ravel(server_lr)[0]])
    m, P = _initial(problem.d, problem.initial_weights() if w0 is None else w0, cov0)
    keep = record_rounds("record", record, rounds)
    at = {int(k): i for i, k in enumerate(keep)}
    means, covs = np.empty((keep.size, problem.d)), np.empty((keep.size, problem.d, problem.d))
    laws: dict[tuple[float, float], LeastSquaresRoundLaw] = {}
    kw = {"participation": participation, "weighting": weighting, "weights": weights}
    if rounds == 0:
        least_squares_round_law(problem, float(etas[0]), local_steps, float(lrs[0]), **kw)
    if 0 in at:
        means[at[0]], covs[at[0]] = m, P
    for n in range(rounds):
        key = (float(etas[n]), float(lrs[n]))
        if key not in laws:
            laws[key] = least_squares_round_law(problem, key[0], local_steps, key[1], **kw)
        m, P = laws[key].step(m, P)
        if n + 1 in at:
            means[at[n + 1]], covs[at[n + 1]] = m, P
    return Moments(rounds=keep, mean=means, cov=covs)


@dataclass(frozen=True)
class LeastSquaresStationaryLaw:
    """Stationary mean (d,) and covariance (d, d) of the chain, the spectral radius of its second-moment operator
    and the round law that produced them."""

    mean: np.ndarray
    cov: np.ndarray
    spectral_radius: float
    law: LeastSquaresRoundLaw


def least_squares_stationary_law(
    problem,
    eta: float,
    local_steps: int | Sequence[int] | np.ndarray,
    server_lr: float = 1.0,
    *,
    participation: int | None = None,
    weighting: str = "unbiased",
    weights: np.ndarray | None = None,
    memory_limit: int | str | None = None,
) -> LeastSquaresStationaryLaw:
    """Stationary mean and covariance of minibatch FedAvg on least-squares clients (mirrors
    :func:`fedsde.exact.stationary_law`): the fixed point of :meth:`LeastSquaresRoundLaw.step`.

    The mean solves ``Σ_k μ_k d_k(m) = 0``; the covariance ``vec P = (I − T)⁻¹ vec K`` with ``T`` the
    second-moment operator (d² × d², built up front after a memory check) and ``K`` the round's constant part at
    the stationary mean.

    Raises
    ------
    NoStationaryLawError
        When the mean map or the second-moment operator has spectral radius ``>= 1`` (the message gives it).
    FedsdeInputError
        Bad arguments, or the operator does not fit in memory (with the estimate).
    """
    law = least_squares_round_law(problem, eta, local_steps, server_lr, participation=participation,
                                  weighting=weighting, weights=weights)
    where = (f"eta={law.eta}, local_steps={_steps_repr(law.local_steps)}, server_lr={law.server_lr}"
             + (f", participation={participation}" if participation is not None else ""))
    rho1 = law.spectral_radius
    if rho1 >= 1.0 - STATIONARY_MARGIN:
        raise NoStationaryLawError(f"{where}: the mean map has spectral radius {rho1:.6g} >= 1, so the chain has "
                                   "no stationary law")
    T = law.second_moment_operator(memory_limit=memory_limit)
    rho2 = float(np.max(np.abs(np.linalg.eigvals(T))))
    if rho2 >= 1.0 - STATIONARY_MARGIN:
        raise NoStationaryLawError(f"{where}: the second-moment operator has spectral radius {rho2:.6g} >= 1 (the "
                                   "minibatch noise makes the variance diverge), so there is no stationary law")
    d = problem.d
    mean = law.fixed_point()
    _, K = law.step(mean, np.zeros((d, d)))
    P = np.linalg.solve(np.eye(d * d) - T, K.reshape(-1)).reshape(d, d)
    return LeastSquaresStationaryLaw(mean=mean, cov=0.5 * (P + P.T), spectral_radius=rho2, law=law)


def _steps_repr(local_steps: np.ndarray) -> str:
    steps = np.asarray(local_steps)
    return str(int(steps[0])) if np.all(steps == steps[0]) else ",".join(map(str, steps.tolist()))
