"""Exact first and second moments of minibatch FedAvg on least-squares clients (real minibatch noise).

One local step on client ``k`` is ``w' = (I − ηA_S) w + η c_S`` with a fresh minibatch ``S`` of ``b`` rows
(:mod:`fedsde.problems.regression.problem`): the gradient is linear in ``w`` and the minibatch noise quadratic in ``w``,
so ``(E w, E wwᵀ)`` after a step is a linear function of ``(E w, E wwᵀ)`` before it, through the data's second and
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
from functools import cached_property

import numpy as np

from fedsde._memory import available_memory, memory_fits
from fedsde._threads import small_products
from fedsde._tolerances import DIVISION_FLOOR, PSD_TOL, STATIONARY_MARGIN, SYM_TOL
from fedsde._validate import choice, client_weights, start_point
from fedsde.errors import FedsdeInputError, NoStationaryLawError
from fedsde.exact._least_squares_steps import LocalData, weight_moments
from fedsde.params import FULL_PARTICIPATION, ClientSampling, Schedule, fedavg_rates, takes_values

METHODS = ("auto", "dense", "matrix-free")
#: a stationary solve whose relative residual is above this is refused
SOLVE_RTOL = 1e-9


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
        drift = s * np.einsum("q,qab,nb->na", mu, J, mhat)
        noise = np.zeros((mhat.shape[0], d + 1, d + 1))
        noise[:, :d, :d] = self.data.round_noise(mhat, P, np.diag(self.C).copy())
        sig, B = self._participation_terms
        if sig.size:
            Bm = np.einsum("rab,nb->rna", B, mhat)
            noise += np.einsum("r,rna,rnb->nab", sig, Bm, Bm)
            if P is not None:
                BP = B[:, None] @ P[None]
                noise += np.einsum("r,rnac,rbc->nab", sig, BP, B)
        noise *= s * s
        if P is None:
            lin = np.zeros_like(noise)
        else:
            lin = np.einsum("ab,nbc->nac", s * np.einsum("q,qij->ij", mu, J), P)
        return drift, lin, noise

    @cached_property
    def _participation_terms(self) -> tuple[np.ndarray, np.ndarray]:
        """``Cδ = C − μμᵀ = Σ_r σ_r u_r u_rᵀ`` as ``(σ, B)`` with ``B_r = Σ_k u_rk Ĵ_k`` (r, d+1, d+1), so that
        ``Σ_kj Cδ_kj Ĵ_k X Ĵ_jᵀ = Σ_r σ_r B_r X B_rᵀ`` (empty under full participation)."""
        Cd = self.C - np.outer(self.mu, self.mu)
        if not np.any(Cd):
            return np.zeros(0), np.zeros((0, self.d + 1, self.d + 1))
        sig, U = np.linalg.eigh(0.5 * (Cd + Cd.T))
        keep = np.abs(sig) > 1e-15 * np.abs(sig).max()
        return sig[keep], np.einsum("kr,kab->rab", U[:, keep], self.J)

    def second_moment_map(self, P: np.ndarray) -> np.ndarray:
        """The homogeneous map ``T``: ``P ↦ A P Aᵀ + E Cov[·]`` (quadratic part of the noise), applied matrix-free
        to a (d, d) matrix or a batch (B, d, d), in ``O(N d²)`` per local step (module docstring)."""
        d = self.d
        P = np.asarray(P, dtype=np.float64)
        batch = P.reshape(-1, d, d)
        Ph = np.zeros((batch.shape[0], d + 1, d + 1))
        Ph[:, :d, :d] = batch
        noise = self.pieces(np.zeros((batch.shape[0], d + 1)), Ph)[2][:, :d, :d]
        A = self.mean_map[0]
        return (A @ batch @ A.T + noise).reshape(P.shape)

    def noise_operator(self) -> np.ndarray:
        """``K`` (d², (d+1)²): ``vec E Cov[w' | w] = K vec E[ŵŵᵀ]`` (row-major) with ``ŵ = (w − shift, 1)``: the
        conditional covariance as a linear map of the raw augmented second moment (built column by column)."""
        d = self.d
        n = (d + 1) ** 2
        chunk = max(1, min(n, _CHUNK_FLOATS // max(1, self.data.rows * (d + 1))))
        cols = []
        for start in range(0, n, chunk):
            idx = np.arange(start, min(n, start + chunk))
            X = np.zeros((idx.size, d + 1, d + 1))
            X[np.arange(idx.size), idx // (d + 1), idx % (d + 1)] = 1.0
            noise = self.pieces(np.zeros((idx.size, d + 1)), X)[2]
            cols.append(noise[:, :d, :d].reshape(idx.size, d * d))
        return np.concatenate(cols).T

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
        """Matrix of the homogeneous map ``P ↦ P'`` on row-major ``vec(P)``, shape (d², d²) (the dense form of
        :meth:`second_moment_map`; used only where it is cheaper, small ``d``)."""
        d = self.d
        memory_fits(f"second-moment operator (d={d})", 8 * 3 * d**4 + work_bytes(d, self.data.rows),
                    available_memory("cpu", memory_limit), "the dense d²×d² operator needs O(d⁴) memory (the "
                    "matrix-free solve does not)")
        A = self.mean_map[0]
        K = self.noise_operator()
        aug = np.arange(d * d).reshape(d, d)
        cols = ((aug // d) * (d + 1) + aug % d).reshape(-1)
        return np.kron(A, A) + K[:, cols]


#: floats of row-sized work arrays per batch of basis matrices when building a dense operator
_CHUNK_FLOATS = 8_000_000
#: at most this many features, the stationary law and the long transients use the dense d²×d² matrices
DENSE_MAX_D = 8


def work_bytes(d: int, rows: int, batch: int = 1) -> int:
    """Memory of one application of the round map to ``batch`` states: the rows (with their size-group padding,
    at most 25 %) times a few work arrays of shape (rows, d+1), plus ``O(d²)`` per state.  It grows with the rows
    ``N`` and ``d``, never with ``Q · max n_k``."""
    return int(8 * (6 * 1.25 * rows * (d + 1) * batch + 16 * batch * (d + 1) ** 2))


def operator_bytes(d: int, Q: int, n_max: int) -> int:
    """Memory of the exact stationary law (kept for callers of the former dense path): the matrix-free work
    arrays for ``Q · n_max`` rows at most, plus the dense operator where ``d <= DENSE_MAX_D``."""
    dense = 8 * 3 * d**4 if d <= DENSE_MAX_D else 8 * 40 * d * d
    return dense + work_bytes(d, Q * n_max)


def check_rows_memory(problem, *, memory_limit: int | str | None = None) -> None:
    """Refuse, naming the rows, problems whose exact moments would not fit in memory."""
    rows, d = int(problem.sizes.sum()), problem.d
    need = work_bytes(d, rows) + 8 * problem.Q * 6 * (d + 1) ** 2
    memory_fits(f"exact least-squares moments ({rows} rows × d={d}, Q={problem.Q} clients)", need,
                available_memory("cpu", memory_limit), "the cost grows with the rows times the features (and "
                "Q·d² for the clients' maps); use fewer rows or clients, or set FEDSDE_MEMORY_LIMIT if more "
                "memory is free than detected")


@takes_values(types={"clients": ClientSampling}, clients=("participation", "weighting"))
def least_squares_round_law(
    problem,
    eta: float | Schedule,
    local_steps: int | Sequence[int] | np.ndarray | None = None,
    server_lr: float = 1.0,
    *,
    clients: ClientSampling | None = None,
    weights: np.ndarray | None = None,
    shift: np.ndarray | None = None,
) -> LeastSquaresRoundLaw:
    """Exact one-round moments of minibatch FedAvg on a :class:`~fedsde.problems.RegressionProblem`.

    Parameters
    ----------
    problem : RegressionProblem
        With a ``batch_size`` and ``sampling`` (the minibatches of every local step).
    eta : float or Schedule
        Client learning rate ``η > 0``; or a :class:`~fedsde.params.Schedule` whose ``eta``, ``local_steps`` and
        ``server_lr`` are used (checked where it was built).
    local_steps : int or array of int, shape (Q,)
        ``E`` or per-client ``τ_k``.
    server_lr : float
        Actual server step ``s > 0``.
    clients : ClientSampling, optional
        :class:`~fedsde.params.ClientSampling` (default: every client), or its fields as keywords
        (:func:`fedsde.params.takes_values`):
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
    eta, steps, server_lr = fedavg_rates(eta, local_steps, server_lr, problem.Q)  # a Schedule: checked already
    check_rows_memory(problem)
    clients = FULL_PARTICIPATION if clients is None else clients
    return round_law_of(problem, eta, steps, server_lr, clients, base_weights(problem, clients, weights), shift)


def base_weights(problem, clients: ClientSampling, weights) -> np.ndarray:
    """The base aggregation weights ``ω`` (Q,): ``p``, or ``weights`` (checked here); ``clients`` (checked where
    it was built) against the problem's ``Q`` and ``weights``."""
    Q = problem.Q
    if clients.participation is not None and clients.participation > Q:
        raise FedsdeInputError(f"participation={clients.participation}: cannot exceed the number of clients Q={Q}")
    if weights is None:
        return problem.p.copy()
    if clients.weighting == "multinomial" and clients.participation is not None:
        raise FedsdeInputError("weights: not used by weighting='multinomial' (its draws follow p, weights 1/m)")
    return client_weights("weights", weights, Q, normalise=False, noun="")


def round_law_of(problem, eta: float, steps: np.ndarray, server_lr: float, clients: ClientSampling,
                 omega: np.ndarray, shift: np.ndarray | None = None) -> LeastSquaresRoundLaw:
    """:func:`least_squares_round_law` from checked inputs, none checked again: the rates (numbers), the local
    steps (int64, shape (Q,)), the :class:`~fedsde.params.ClientSampling` and the base weights of
    :func:`base_weights` (for the layers that build many laws of one setting: the transient, the SDE)."""
    mu, C = weight_moments(omega, clients.participation, clients.weighting, problem.p)
    data = LocalData(problem, eta, steps, shift)
    return LeastSquaresRoundLaw(eta=eta, server_lr=server_lr, local_steps=steps, participation=clients.participation,
                                weighting=clients.weighting, mu=mu, C=C, J=data.mean_maps(), data=data)


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


@dataclass(frozen=True)
class LeastSquaresStationaryLaw:
    """Stationary mean (d,) and covariance (d, d) of the chain, the spectral radius of its second-moment operator,
    the round law that produced them, the relative residual ``‖P − T(P) − K‖_F/‖K‖_F`` of the covariance and the
    method (``dense`` or ``matrix-free``)."""

    mean: np.ndarray
    cov: np.ndarray
    spectral_radius: float
    law: LeastSquaresRoundLaw
    residual: float = 0.0
    method: str = "dense"


@small_products
@takes_values(types={"clients": ClientSampling}, clients=("participation", "weighting"))
def least_squares_stationary_law(
    problem,
    eta: float | Schedule,
    local_steps: int | Sequence[int] | np.ndarray | None = None,
    server_lr: float = 1.0,
    *,
    clients: ClientSampling | None = None,
    weights: np.ndarray | None = None,
    memory_limit: int | str | None = None,
    method: str = "auto",
) -> LeastSquaresStationaryLaw:
    """Stationary mean and covariance of minibatch FedAvg on least-squares clients (mirrors
    :func:`fedsde.exact.stationary_law`): the fixed point of :meth:`LeastSquaresRoundLaw.step`.

    The mean solves ``Σ_k μ_k d_k(m) = 0``; the covariance solves ``P = T(P) + K`` with ``T`` the second-moment
    map and ``K`` the round's constant part at the stationary mean: matrix-free by preconditioned conjugate
    gradients (``T`` is self-adjoint and positive; :mod:`fedsde.exact._least_squares_solve`), to a relative
    residual ``‖P − T(P) − K‖_F/‖K‖_F`` of about 1e-13 (``residual``), with ``ρ(T)`` by Lanczos; or, where
    ``d <= DENSE_MAX_D`` (or ``method="dense"``), with the d² × d² matrix of ``T`` and a direct solve.  Memory
    grows with the rows times ``d``, checked up front.

    ``eta``, ``local_steps``, ``server_lr``, ``clients`` (or ``participation``, ``weighting``) and ``weights``
    as :func:`least_squares_round_law`.

    Raises
    ------
    NoStationaryLawError
        When the mean map or the second-moment operator has spectral radius ``>= 1`` (the message gives it).
    FedsdeInputError
        Bad arguments, or the operator does not fit in memory (with the estimate).
    """
    choice("method", method, METHODS)
    check_rows_memory(problem, memory_limit=memory_limit)
    law = least_squares_round_law(problem, eta, local_steps, server_lr, clients=clients, weights=weights)
    return stationary_of(problem, law, method, memory_limit)


def stationary_of(problem, law: LeastSquaresRoundLaw, method: str, memory_limit=None) -> LeastSquaresStationaryLaw:
    """:func:`least_squares_stationary_law` of a built round law (``method`` checked by the caller)."""
    from fedsde.exact._least_squares_solve import perron_root, stationary_covariance

    participation = law.participation
    where = (f"eta={law.eta}, local_steps={_steps_repr(law.local_steps)}, server_lr={law.server_lr}"
             + (f", participation={participation}" if participation is not None else ""))
    rho1 = law.spectral_radius
    if rho1 >= 1.0 - STATIONARY_MARGIN:
        raise NoStationaryLawError(f"{where}: the mean map has spectral radius {rho1:.6g} >= 1, so the chain has "
                                   "no stationary law")
    d = problem.d
    mean = law.fixed_point()
    _, K = law.step(mean, np.zeros((d, d)))
    diverges = (f"{where}: the second-moment operator has spectral radius {{:.6g}} >= 1 (the minibatch noise makes "
                "the variance diverge), so there is no stationary law")
    if method == "dense" or (method == "auto" and d <= DENSE_MAX_D):
        T = law.second_moment_operator(memory_limit=memory_limit)
        rho2 = float(np.max(np.abs(np.linalg.eigvals(T))))
        if rho2 >= 1.0 - STATIONARY_MARGIN:
            raise NoStationaryLawError(diverges.format(rho2))
        P = np.linalg.solve(np.eye(d * d) - T, K.reshape(-1)).reshape(d, d)
        res = float(np.linalg.norm(P - law.second_moment_map(P) - K) / max(np.linalg.norm(K), DIVISION_FLOOR))
        return LeastSquaresStationaryLaw(mean=mean, cov=0.5 * (P + P.T), spectral_radius=rho2, law=law,
                                         residual=res, method="dense")
    P, _, res = stationary_covariance(law.second_moment_map, K, law.mean_map[0])
    ok = np.isfinite(res) and np.all(np.isfinite(P))
    rho2 = perron_root(law.second_moment_map, d, P if ok else None)
    if rho2 >= 1.0 - STATIONARY_MARGIN:
        raise NoStationaryLawError(diverges.format(rho2))
    if not ok or res > SOLVE_RTOL:
        raise NoStationaryLawError(f"{where}: the stationary covariance solve did not converge (relative residual "
                                   f"{res:.3g}; spectral radius of the second-moment operator {rho2:.6g})")
    return LeastSquaresStationaryLaw(mean=mean, cov=P, spectral_radius=rho2, law=law, residual=res,
                                     method="matrix-free")


def _steps_repr(local_steps: np.ndarray) -> str:
    steps = np.asarray(local_steps)
    return str(int(steps[0])) if np.all(steps == steps[0]) else ",".join(map(str, steps.tolist()))
