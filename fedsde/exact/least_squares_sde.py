"""Exact moments of the FedAvg SDE on least-squares clients (seed 002 eq. (2) with exact round moments).

On the clock ``t = n·h`` the SDE matches one round's conditional moments (reference/seed-fedsde.md §3b, the
``corrected`` convention of :mod:`fedsde.sde.coefficients`):

    dw = b(w) dt + σ(w) dB,     b(w) = E[Δ | w] / h,     σσᵀ(w) = Cov[Δ | w] / h,

with ``Δ = w_{n+1} − w_n`` and its moments from :class:`fedsde.exact.least_squares.LeastSquaresRoundLaw`.  The
drift is linear, ``b(w) = G (w − m*)`` with ``G = (s/h) Σ_k μ_k J_k`` and ``m*`` the chain's fixed point, and the
diffusion is quadratic in ``w``, so the moment equations close and are linear:

    dm/dt = G (m − m*),      dP/dt = G P + P Gᵀ + E[σσᵀ(w)],

``E[σσᵀ(w)]`` being linear in ``P + (m−m*)(m−m*)ᵀ`` and ``m − m*``.  With ``δ = m − m*`` and ``D = δδᵀ``
(``dD/dt = G D + D Gᵀ``) the state ``(P, D, δ, 1)`` (``2d² + d + 1`` numbers) obeys one linear ODE, solved by a
matrix exponential at every requested time; ``P`` is carried apart from ``D``, so no cancellation.  On a problem
whose minibatch noise is constant this is the Ornstein–Uhlenbeck law of the ``corrected`` quadratic SDE.

Where ``d <= DENSE_MAX_D`` (or ``method="dense"``) the ODE's matrix is built and exponentiated; otherwise
(``method="matrix-free"``, the default above ``DENSE_MAX_D``) it is only applied, in ``O(N d²)`` per local step, and
its action integrated by ``expm_multiply``, the stationary law found by Lanczos and conjugate gradients
(:mod:`fedsde.exact._least_squares_sde_solve`): memory ``O(d³ + N d)`` instead of ``O(d⁴)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

from fedsde._memory import available_memory, memory_fits
from fedsde._threads import SMALL_PRODUCTS_D, one_blas_thread, small_products
from fedsde._tolerances import STATIONARY_MARGIN
from fedsde._validate import choice, client_steps, positive_float
from fedsde.errors import FedsdeInputError, NoStationaryLawError
from fedsde.exact.least_squares import (
    _CHUNK_FLOATS,
    DENSE_MAX_D,
    METHODS,
    SOLVE_RTOL,
    LeastSquaresRoundLaw,
    _check_problem,
    _initial,
    base_weights,
    check_rows_memory,
    round_law_of,
    work_bytes,
)
from fedsde.params import FULL_PARTICIPATION, ClientSampling, Schedule, fedavg_rates, takes_values


@dataclass(frozen=True)
class SDEMoments:
    """Mean and covariance of the SDE at requested times (clock ``t = n·h``).

    Attributes
    ----------
    times : ndarray, shape (T,)
    mean : ndarray, shape (T, d)
    cov : ndarray, shape (T, d, d)
    """

    times: np.ndarray
    mean: np.ndarray
    cov: np.ndarray


@dataclass(frozen=True)
class LeastSquaresSDE:
    """``dw = b(w) dt + σ(w) dB`` with the exact round moments (module docstring).

    Attributes
    ----------
    law : LeastSquaresRoundLaw
        The round law (internal coordinates centred at its fixed point ``m*``).
    h : float
        Time step: one round lasts ``h`` on the clock ``t``.
    method : {"auto", "dense", "matrix-free"}
        How :meth:`moments` and :meth:`stationary` solve the moment equations (module docstring; ``auto``: dense
        where ``d <= DENSE_MAX_D``).
    """

    law: LeastSquaresRoundLaw
    h: float
    method: str = "auto"
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def d(self) -> int:
        return self.law.d

    @property
    def matrix_free(self) -> bool:
        """Whether the moment equations are solved without their matrix (see ``method``)."""
        return self.method == "matrix-free" or (self.method == "auto" and self.d > DENSE_MAX_D)

    def rescaled(self, server_lr: float, h: float) -> LeastSquaresSDE:
        """The SDE of the same clients and ``η`` with server step ``server_lr`` and time step ``h`` (the drift
        scales as ``s/h``, the diffusion as ``s²/h``); the noise's linear part, once built, is shared."""
        law = dataclasses.replace(self.law, server_lr=positive_float("server_lr", server_lr))
        return LeastSquaresSDE(law=law, h=positive_float("h", h), method=self.method,
                               _cache={"unit": self._cache.setdefault("unit", {})})

    @property
    def centre(self) -> np.ndarray:
        """``m*``: the drift's zero (the chain's stationary mean), shape (d,)."""
        if "centre" not in self._cache:
            self._cache["centre"] = self.law.fixed_point()
        return self._cache["centre"]

    @property
    def drift_matrix(self) -> np.ndarray:
        """``G``: ``b(w) = G (w − m*)``, shape (d, d)."""
        return self.law.L[:self.d, :self.d] / self.h

    def drift(self, w) -> np.ndarray:
        """``b(w) = (E[w_{n+1} | w] − w)/h`` for ``w`` of shape (..., d)."""
        w = np.asarray(w, dtype=np.float64)
        return (w - self.centre) @ self.drift_matrix.T

    def diffusion_cov(self, w) -> np.ndarray:
        """``σσᵀ(w) = Cov[w_{n+1} | w]/h`` (quadratic in ``w``) for ``w`` of shape (..., d): shape (..., d, d).

        Evaluated as ``K vec(ûûᵀ)`` with ``û = (w − m*, 1)`` and the matrix ``K`` of :meth:`diffusion_operator`
        (one product per batch, for simulating the SDE; :meth:`LeastSquaresRoundLaw.conditional_cov` is the direct
        evaluation).
        """
        w = np.asarray(w, dtype=np.float64)
        d = self.d
        flat = w.reshape(-1, d) - self.centre
        u = np.concatenate([flat, np.ones((flat.shape[0], 1))], axis=1)
        D = (np.einsum("ni,nj->nij", u, u).reshape(u.shape[0], -1) @ self.diffusion_operator().T).reshape(-1, d, d)
        return (0.5 * (D + np.swapaxes(D, 1, 2))).reshape(*w.shape, d)

    def diffusion_operator(self) -> np.ndarray:
        """``K`` (d², (d+1)²): ``vec σσᵀ(w) = K vec(ûûᵀ)`` with ``û = (w − m*, 1)`` (row-major; and
        ``E vec σσᵀ(w) = K vec E ûûᵀ``)."""
        if "K" not in self._cache:
            self._cache["K"] = self._blocks()[0]
        return self._cache["K"]

    def _blocks(self) -> tuple[np.ndarray, np.ndarray]:
        """``K``: ``E σσᵀ`` as a linear map of the raw augmented moment (d², (d+1)²), and ``G ⊕ G`` (d², d²)."""
        d, law = self.d, self.law
        if "K" in self._cache:
            G = self.drift_matrix
            return self._cache["K"], np.kron(G, np.eye(d)) + np.kron(np.eye(d), G)
        K = self._cache["K"] = law.noise_operator() / self.h
        G = self.drift_matrix
        return K, np.kron(G, np.eye(d)) + np.kron(np.eye(d), G)

    def generator(self) -> np.ndarray:
        """Matrix of the linear ODE of ``z = (vec P, vec D, δ, 1)``, shape (2d² + d + 1,)²."""
        d = self.d
        K, GG = self._blocks()
        dd = d * d
        aug = np.arange(dd).reshape(d, d)
        rows = (aug // d) * (d + 1) + aug % d  # position of entry (i, j) of a d×d block in the (d+1)² layout
        Kdd = K[:, rows.reshape(-1)]  # acts on P + D
        Kdelta = K[:, np.arange(d) * (d + 1) + d] + K[:, d * (d + 1) + np.arange(d)]  # entries (i, d) and (d, i)
        Kone = K[:, (d + 1) ** 2 - 1]
        n = 2 * dd + d + 1
        Z = np.zeros((n, n))
        Z[:dd, :dd] = GG + Kdd
        Z[:dd, dd:2 * dd] = Kdd
        Z[:dd, 2 * dd:2 * dd + d] = Kdelta
        Z[:dd, -1] = Kone
        Z[dd:2 * dd, dd:2 * dd] = GG
        Z[2 * dd:2 * dd + d, 2 * dd:2 * dd + d] = self.drift_matrix
        return Z

    def moments(self, times: Sequence[float] | np.ndarray, w0=None, cov0=None) -> SDEMoments:
        """Mean and covariance at ``times`` (clock ``t``, each ``>= 0``) from ``(w0, cov0)`` at ``t = 0``.

        ``w0`` defaults to zero, ``cov0`` to zero (a point start).
        """
        t = np.atleast_1d(np.asarray(times, dtype=np.float64))
        if t.ndim != 1 or not np.all(np.isfinite(t)) or np.any(t < 0):
            raise FedsdeInputError(f"times: {np.asarray(times).tolist()!r} must be finite and >= 0")
        return self.moments_from(t, *_initial(self.d, w0, cov0))

    def moments_from(self, t: np.ndarray, m0: np.ndarray, P0: np.ndarray) -> SDEMoments:
        """:meth:`moments` from checked inputs: ``t`` (T,) finite ``>= 0``, the start mean (d,) and covariance
        (d, d) (:func:`fedsde._validate.start_point`), none checked again (the validity test's exact side)."""
        d = self.d
        delta = m0 - self.centre
        z0 = np.concatenate([P0.reshape(-1), np.outer(delta, delta).reshape(-1), delta, [1.0]])
        if self.matrix_free:
            from fedsde.exact._least_squares_sde_solve import propagate

            G = self.drift_matrix
            with one_blas_thread(d <= SMALL_PRODUCTS_D):
                zs = propagate(self.generator_operator(), (4 * d + 1) * float(np.trace(G)), t, z0)
        else:
            Z = self.generator()
            zs = [scipy.linalg.expm(Z * ti) @ z0 for ti in t]
        means, covs = np.empty((t.size, d)), np.empty((t.size, d, d))
        for i, z in enumerate(zs):
            P = z[:d * d].reshape(d, d)
            means[i] = self.centre + z[2 * d * d:2 * d * d + d]
            covs[i] = 0.5 * (P + P.T)
        return SDEMoments(times=t, mean=means, cov=covs)

    def stationary(self) -> tuple[np.ndarray, np.ndarray]:
        """Stationary mean ``m*`` and covariance (``G P + P Gᵀ + E σσᵀ = 0`` at ``m = m*``).

        Raises :class:`NoStationaryLawError` when the second-moment generator has an eigenvalue with real part
        ``>= 0`` (the message gives the largest).
        """
        d = self.d
        if self.matrix_free:
            with one_blas_thread(d <= SMALL_PRODUCTS_D):
                return self.centre, self._stationary_matrix_free()
        Z = self.generator()
        A = Z[:d * d, :d * d]
        lead = float(np.max(np.linalg.eigvals(A).real))
        if lead >= -STATIONARY_MARGIN * max(1.0, float(np.abs(A).max())):
            raise NoStationaryLawError(f"the SDE's second-moment generator has an eigenvalue with real part "
                                       f"{lead:.6g} >= 0, so the SDE has no stationary law")
        P = np.linalg.solve(A, -Z[:d * d, -1]).reshape(d, d)
        return self.centre, 0.5 * (P + P.T)

    # ------------------------------------------------------------------ matrix-free
    def _quad(self, X: np.ndarray) -> np.ndarray:
        """``𝒬(X)``: the part of ``E σσᵀ`` quadratic in ``w − m*``, for ``X`` of shape (d, d) (matrix-free)."""
        d = self.d
        Xh = np.zeros((1, d + 1, d + 1))
        Xh[0, :d, :d] = X
        return self.law.pieces(np.zeros((1, d + 1)), Xh)[2][0, :d, :d] / self.h

    def _offsets(self) -> tuple[np.ndarray, np.ndarray]:
        """``ℓ`` (d², d) and ``vec k`` (d²,): the linear and constant parts of ``E σσᵀ`` in ``w − m*``, from the
        noise of ``[[0, e_i], [e_iᵀ, 0]]`` and ``[[0, 0], [0, 1]]`` (the dense generator's columns)."""
        unit = self._cache.setdefault("unit", {})
        if "ell" not in unit:  # per unit server step s (the noise scales as s²)
            law, d = self.law, self.d
            chunk = max(1, min(d + 1, _CHUNK_FLOATS // max(1, law.data.rows * (d + 1))))
            cols = []
            for start in range(0, d + 1, chunk):
                idx = np.arange(start, min(d + 1, start + chunk))
                X = np.zeros((idx.size, d + 1, d + 1))
                X[np.arange(idx.size), idx, d] = 1.0
                X[np.arange(idx.size), d, idx] = 1.0
                cols.append(law.pieces(np.zeros((idx.size, d + 1)), X)[2][:, :d, :d].reshape(idx.size, d * d))
            cols = np.concatenate(cols) / law.server_lr**2
            unit["ell"], unit["k"] = np.ascontiguousarray(cols[:d].T), cols[d]
        scale = self.law.server_lr**2 / self.h
        return scale * unit["ell"], scale * unit["k"]

    def generator_operator(self):
        """:meth:`generator` as a ``scipy.sparse.linalg.LinearOperator`` (with its transpose), never formed."""
        from fedsde.exact._least_squares_sde_solve import generator_operator

        ell, k = self._offsets()
        return generator_operator(self.drift_matrix, self._quad, ell, k)

    def _stationary_matrix_free(self) -> np.ndarray:
        from fedsde.exact._least_squares_sde_solve import LyapunovInverse, largest_eigenvalue
        from fedsde.exact._least_squares_solve import stationary_covariance

        d, G = self.d, self.drift_matrix
        K = self._offsets()[1].reshape(d, d)
        K = 0.5 * (K + K.T)

        def generator(P):
            return G @ P + P @ G.T + self._quad(P)

        lead = largest_eigenvalue(generator, d, K)
        if lead >= -STATIONARY_MARGIN * max(1.0, 2.0 * float(np.abs(G).max())):
            raise NoStationaryLawError(f"the SDE's second-moment generator has an eigenvalue with real part "
                                       f"{lead:.6g} >= 0, so the SDE has no stationary law")
        P, _, res = stationary_covariance(lambda P: P + generator(P), K, None,
                                          preconditioner=LyapunovInverse(G))
        if not (np.isfinite(res) and res <= SOLVE_RTOL and np.all(np.isfinite(P))):
            raise NoStationaryLawError(f"the SDE's stationary covariance solve did not converge (relative residual "
                                       f"{res:.3g}; largest eigenvalue of the second-moment generator {lead:.6g})")
        return P


@small_products
@takes_values(types={"clients": ClientSampling}, clients=("participation", "weighting"))
def least_squares_sde(
    problem,
    eta: float | Schedule,
    local_steps: int | Sequence[int] | np.ndarray | None = None,
    server_lr: float = 1.0,
    h: float | None = None,
    *,
    clients: ClientSampling | None = None,
    weights: np.ndarray | None = None,
    memory_limit: int | str | None = None,
    method: str = "auto",
) -> LeastSquaresSDE:
    """The FedAvg SDE of a :class:`~fedsde.problems.RegressionProblem` with exact round moments.

    Parameters
    ----------
    problem : RegressionProblem
    eta, local_steps, server_lr, clients, participation, weighting, weights
        As :func:`fedsde.exact.least_squares_round_law` (``eta`` a :class:`~fedsde.params.Schedule`: its ``h``
        too, checked where it was built).
    h : float, optional
        Time step of the clock ``t = n·h``; default ``η`` (seed 002, Section 6).
    memory_limit : int or str, optional
        Bytes the moment equations may use (default: what is free).
    method : {"auto", "dense", "matrix-free"}
        The generator's matrix (``dense``, ``O(d⁴)`` memory) or only its action (``matrix-free``); ``auto``: dense
        where ``d <= DENSE_MAX_D``.
    """
    _check_problem(problem)
    if isinstance(eta, Schedule):  # checked where it was built
        h = eta.time_step if h is None else positive_float("h", h)
        eta, steps, server_lr = fedavg_rates(eta, local_steps, server_lr, problem.Q)
    else:
        eta, server_lr = positive_float("eta", eta), positive_float("server_lr", server_lr)
        h = eta if h is None else positive_float("h", h)
        steps = client_steps("local_steps", local_steps, problem.Q)
    choice("method", method, METHODS)
    check_rows_memory(problem)
    clients = FULL_PARTICIPATION if clients is None else clients
    omega = base_weights(problem, clients, weights)
    law = round_law_of(problem, eta, steps, server_lr, clients, omega)
    d = problem.d
    n = 2 * d * d + d + 1
    if method == "dense" or (method == "auto" and d <= DENSE_MAX_D):
        memory_fits(f"SDE moment generator (d={d})", 8 * 4 * n * n + work_bytes(d, law.data.rows),
                    available_memory("cpu", memory_limit), "the dense moment equations need O(d⁴) memory; use "
                    "fewer features or method='matrix-free'")
    else:  # ℓ (d³), the Krylov and Taylor vectors (a few dozen of n), the batched noise columns
        chunk = max(1, min(d + 1, _CHUNK_FLOATS // max(1, law.data.rows * (d + 1))))
        memory_fits(f"SDE moment equations (d={d}, matrix-free)", 8 * (d**3 + 40 * n)
                    + work_bytes(d, law.data.rows, batch=chunk), available_memory("cpu", memory_limit),
                    "the matrix-free moment equations need O(d³ + rows·d) memory; use fewer features or rows")
    law = round_law_of(problem, eta, steps, server_lr, clients, omega, shift=law.fixed_point())
    return LeastSquaresSDE(law=law, h=h, method=method)


@small_products
def least_squares_sde_moments(
    problem,
    eta: float,
    local_steps: int | Sequence[int] | np.ndarray,
    times: Sequence[float] | np.ndarray,
    server_lr: float = 1.0,
    h: float | None = None,
    *,
    w0=None,
    cov0=None,
    participation: int | None = None,
    weighting: str = "unbiased",
    weights: np.ndarray | None = None,
) -> SDEMoments:
    """Exact mean and covariance of the least-squares FedAvg SDE at ``times`` (clock ``t = n·h``; round ``n`` of
    the chain sits at ``t = n·h``), from ``w0`` (default: the problem's ``initial_weights()``) and ``cov0``."""
    sde = least_squares_sde(problem, eta, local_steps, server_lr, h, participation=participation,
                            weighting=weighting, weights=weights)
    return sde.moments(times, problem.initial_weights() if w0 is None else w0, cov0)
