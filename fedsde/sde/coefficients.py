"""Linear SDEs of FedAvg on quadratic clients: the variants ``paper``, ``corrected`` and ``matched``.

Every variant is an Ornstein–Uhlenbeck process on the clock ``t = n·h`` (round ``n``, time step ``h``)

    dw = −A (w − c) dt + b dB(t),        reported as (A (d, d), c (d,), diffusion_cov = b bᵀ (d, d)).

With the exact one-round law of the chain (:func:`fedsde.exact.round_law`: ``B = Σ_k p_k [I − (I − ηU_k)^E]``,
``c = B⁻¹ Σ_k p_k [I − (I − ηU_k)^E] a_k`` (the paper's ``C4``), ``noise_cov = η² Σ_k p_k² Γ_k``), client learning
rate ``η``, actual server step ``s`` (``= h·η₀``) and time step ``h``:

* ``corrected`` — seed 002 eq. (2) with the exact round moments (reference/seed-fedsde.md §3b, boxed SDE):
  ``A = (s/h)·B``, ``diffusion_cov = (s²/h)·noise_cov``.  One Euler–Maruyama step of size ``h`` is exactly one
  round of the Gaussianised chain, eq. (1).
* ``paper`` — eq. (4) / Thm 6.3 as printed, lifted to general ``(s, h)`` through eq. (2) (it equals eq. (4) at
  ``h = η``, ``s = 1``): ``A = (s/h)·B`` (the printed drift is right: ``B = η·D``), ``diffusion_cov =
  (s²η²/h)·b_p b_pᵀ`` with ``b_p = E·I + Σ_k p_k Σ_k^{1/2} S_k`` and
  ``S_k = Σ_{j<E} Σ_{i=1..j} (I − ηU_k)^{j−i} U_k``.  For scalar and diagonal problems this is eq. (4)
  coordinate by coordinate; for full matrices the product ``Σ_k^{1/2} S_k`` is symmetrised, an extrapolation
  of the printed scalar formula.  At ``h = η``, ``s = 1`` the diffusion is ``η·b_p²`` as printed.
* ``matched`` — the moment-matched OU (§3b "exact-at-grid-points alternative"): ``A = −logm(I − sB)/h`` and
  ``diffusion_cov = A P + P Aᵀ`` with ``P`` the chain's stationary covariance (discrete Lyapunov).  Its
  transition over time ``h`` equals the chain's round law exactly, so its law equals the chain's at every grid
  time.  Needs every eigenvalue of ``I − sB`` in ``(0, 1)`` (``B`` is symmetric).
* ``order2``, ``order2-centred``, ``order2-series`` — the order-2 SDE (:func:`order2_sde_coefficients`; its forms
  are described in :mod:`fedsde.sde.order2`, derived in :mod:`fedsde.symbolic.order2`): one round's mean matched to
  ``O(η³)`` and covariance to ``O(η⁴)``.

The paper's Thm 6.3 transient variance uses ``e^{−Dt}`` where ``e^{−2Dt}`` is correct; :meth:`LinearSDE.moments`
uses the correct solution of the moment ODEs ``m' = −A(m − c)``, ``P' = −AP − PAᵀ + bbᵀ`` (seed 002, A.11).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import scipy.linalg

from fedsde._tolerances import PSD_TOL, SINGULAR_TOL
from fedsde._validate import choice, client_steps, positive_float
from fedsde.errors import FedsdeInputError, NoStationaryLawError
from fedsde.exact.round_law import RoundLaw, round_law
from fedsde.params import Schedule, fedavg_rates, unpack
from fedsde.problems.quadratic.problem import QuadraticProblem

#: the quadratic SDE variants (``corrected`` is the default everywhere)
VARIANTS = ("paper", "corrected", "matched")
#: the order-2 forms on quadratic clients (:mod:`fedsde.sde.order2`) and the variant name each gives its LinearSDE
ORDER2_FORMS = {"round-law": "order2", "centred": "order2-centred", "series": "order2-series"}
#: the order-2 SDE's variant names, accepted wherever a quadratic variant is
ORDER2_VARIANTS = tuple(ORDER2_FORMS.values())


class GaussianLaw(NamedTuple):
    """Mean (d,) and covariance (d, d) of a Gaussian law."""

    mean: np.ndarray
    cov: np.ndarray


def psd_sqrt(M: np.ndarray, *, name: str = "matrix") -> np.ndarray:
    """Symmetric square root of a symmetric positive semi-definite matrix (tiny negative eigenvalues clipped).

    Raises
    ------
    FedsdeInputError
        If ``M`` has an eigenvalue below ``−PSD_TOL·max(1, ‖M‖)`` (:data:`~fedsde._tolerances.PSD_TOL`): no real
        square root exists.
    """
    M = 0.5 * (M + M.T)
    lam, V = np.linalg.eigh(M)
    scale = max(1.0, float(np.abs(lam).max(initial=0.0)))
    if lam.size and lam[0] < -PSD_TOL * scale:
        raise FedsdeInputError(f"{name}: not positive semi-definite (smallest eigenvalue {lam[0]:.6g})")
    return (V * np.sqrt(np.clip(lam, 0.0, None))) @ V.T


def paper_noise_factor(problem: QuadraticProblem, eta: float, local_steps: int) -> np.ndarray:
    """``b_p = E·I + Σ_k p_k Σ_k^{1/2} S_k`` of eq. (4) as printed (symmetrised), shape (d, d).

    ``S_k = Σ_{j<E} Σ_{i=1..j} (I − ηU_k)^{j−i} U_k = U_k Σ_{m=0}^{E−2} (E − 1 − m) (I − ηU_k)^m``, evaluated in the
    eigenbasis of ``U_k``.  Scalar problems give the printed bracket ``E + Σ_k p_k √Σ_k S_k``.
    """
    E = int(local_steps)
    lam, V = np.linalg.eigh(problem.U)  # (Q, d), (Q, d, d)
    r = 1.0 - eta * lam
    m = np.arange(max(E - 1, 0), dtype=np.float64)
    weights = (E - 1 - m)[None, None, :]  # (1, 1, E-1)
    series = np.sum(weights * r[:, :, None] ** m[None, None, :], axis=-1) if E > 1 else np.zeros_like(r)
    S = np.einsum("qij,qj,qkj->qik", V, lam * series, V)
    root = np.stack([psd_sqrt(Sk, name=f"Sigma[{k}]") for k, Sk in enumerate(problem.Sigma)])
    b = E * np.eye(problem.d) + np.einsum("q,qij,qjk->ik", problem.p, root, S)
    return 0.5 * (b + b.T)


@dataclass(frozen=True)
class LinearSDE:
    """``dw = −A (w − c) dt + b dB(t)`` on the clock ``t = n·h``, with ``diffusion_cov = b bᵀ``.

    Attributes
    ----------
    A : ndarray, shape (d, d)
        Drift matrix (per unit of time ``t``).
    c : ndarray, shape (d,)
        Centre of the drift (the chain's stationary mean ``C4`` for every variant).
    diffusion_cov : ndarray, shape (d, d)
        ``b bᵀ`` (per unit of time ``t``).
    variant : str
        ``"paper"``, ``"corrected"`` or ``"matched"``.
    h : float
        Time step: one round lasts ``h`` on the clock ``t``.
    server_lr : float
        Actual server step ``s = h·η₀``.
    eta : float
        Client learning rate ``η``.
    local_steps : ndarray of int, shape (Q,)
        Local steps of each client.
    """

    A: np.ndarray
    c: np.ndarray
    diffusion_cov: np.ndarray
    variant: str
    h: float
    server_lr: float
    eta: float
    local_steps: np.ndarray = field(repr=False)

    @property
    def d(self) -> int:
        return int(self.c.shape[0])

    @property
    def server_rate(self) -> float:
        """``η₀ = s/h``, the server learning rate per unit of time ``t``."""
        return self.server_lr / self.h

    def drift(self, w: np.ndarray) -> np.ndarray:
        """``−A (w − c)`` for ``w`` of shape (..., d)."""
        return -(np.asarray(w, dtype=np.float64) - self.c) @ self.A.T

    def diffusion_factor(self) -> np.ndarray:
        """The symmetric PSD square root ``b`` of ``diffusion_cov``, shape (d, d)."""
        return psd_sqrt(self.diffusion_cov, name=f"diffusion_cov of the {self.variant!r} SDE")

    def stationary(self) -> GaussianLaw | None:
        """Stationary law ``N(c, P)``, ``A P + P Aᵀ = b bᵀ`` (``scipy.linalg.solve_continuous_lyapunov``).

        Returns ``None`` when some eigenvalue of ``A`` has real part ``<= 0`` (no stationary law), up to
        :data:`~fedsde._tolerances.SINGULAR_TOL` relative to ``max(1, max|eig(A)|)``.
        """
        eig = np.linalg.eigvals(self.A)
        if eig.real.min() <= SINGULAR_TOL * max(1.0, float(np.abs(eig).max())):
            return None
        P = scipy.linalg.solve_continuous_lyapunov(self.A, self.diffusion_cov)
        return GaussianLaw(self.c.copy(), 0.5 * (P + P.T))

    def transition(self, dt: float) -> tuple[np.ndarray, np.ndarray]:
        """Exact transition over a time ``dt``: ``w(t + dt) = c + Φ (w(t) − c) + N(0, K)``.

        ``Φ = e^{−A dt}`` and ``K = ∫_0^dt e^{−Au} bbᵀ e^{−Aᵀu} du``, both from one matrix exponential
        (Van Loan, 1978): ``expm([[A, bbᵀ], [0, −Aᵀ]] dt) = [[·, G], [0, Φᵀ]]`` and ``K = Φ G``; valid with or
        without a stationary law.

        Returns
        -------
        Phi : ndarray, shape (d, d)
        K : ndarray, shape (d, d)
        """
        d = self.d
        dt = float(dt)
        # Van Loan at a short step δ = dt/2^j (‖A‖δ <= 1 keeps the exponential well conditioned), then j doublings
        # Φ_{2δ} = Φ_δ², K_{2δ} = Φ_δ K_δ Φ_δᵀ + K_δ.
        norm = float(np.abs(self.A).sum(axis=0).max()) * abs(dt)
        j = max(0, int(np.ceil(np.log2(norm)))) if norm > 1.0 else 0
        delta = dt / 2.0**j
        C = np.zeros((2 * d, 2 * d))
        C[:d, :d] = self.A
        C[:d, d:] = self.diffusion_cov
        C[d:, d:] = -self.A.T
        F = scipy.linalg.expm(C * delta)
        Phi = F[d:, d:].T
        K = Phi @ F[:d, d:]
        for _ in range(j):
            K = Phi @ K @ Phi.T + K
            Phi = Phi @ Phi
        return Phi, 0.5 * (K + K.T)

    def moments(self, t: float, mean0, cov0=None) -> GaussianLaw:
        """Law at time ``t >= 0`` (clock ``t = n·h``) from ``N(mean0, cov0)`` at time 0 (exact moment ODEs)."""
        if not np.isfinite(t) or t < 0:
            raise FedsdeInputError(f"t={t!r}: must be finite and >= 0")
        Phi, K = self.transition(t)
        m0 = np.asarray(mean0, dtype=np.float64).reshape(self.d)
        P0 = np.zeros((self.d, self.d)) if cov0 is None else np.asarray(cov0, dtype=np.float64)
        return GaussianLaw(self.c + Phi @ (m0 - self.c), Phi @ P0 @ Phi.T + K)


def _matched(law: RoundLaw, h: float) -> tuple[np.ndarray, np.ndarray]:
    """``A = −logm(I − sB)/h`` and ``A P + P Aᵀ`` (see the module docstring)."""
    T = law.transition
    T = 0.5 * (T + T.T)  # B is symmetric; remove rounding asymmetry
    mu, V = np.linalg.eigh(T)
    if mu.min() <= 0.0 or mu.max() >= 1.0:
        bad = mu.min() if mu.min() <= 0.0 else mu.max()
        exc = NoStationaryLawError if mu.max() >= 1.0 else FedsdeInputError
        raise exc(
            f"server_lr={law.server_lr}, eta={law.eta}: variant='matched' needs every eigenvalue of I − sB in "
            f"(0, 1); found {bad:.6g}"
        )
    A = (V * (-np.log(mu) / h)) @ V.T
    P = scipy.linalg.solve_discrete_lyapunov(T, law.server_noise_cov)
    P = 0.5 * (P + P.T)
    D = A @ P + P @ A.T
    return A, 0.5 * (D + D.T)


def quadratic_sde_coefficients(
    problem: QuadraticProblem,
    eta: float | Schedule,
    local_steps: int | np.ndarray | None = None,
    server_lr: float = 1.0,
    h: float | None = None,
    variant: str = "corrected",
) -> LinearSDE:
    """Drift and diffusion of the quadratic FedAvg SDE ``dw = −A(w − c) dt + b dB`` (see the module docstring).

    Parameters
    ----------
    problem : QuadraticProblem
    eta : float or Schedule
        Client learning rate ``η > 0``; or a :class:`~fedsde.params.Schedule` whose ``eta``, ``local_steps``,
        ``server_lr`` and ``h`` are used (checked where it was built).
    local_steps : int or array of int, shape (Q,)
        ``E`` (or per-client ``τ_k``; the ``paper`` variant needs one ``E`` for all clients).
    server_lr : float
        Actual server step ``s = h·η₀ > 0`` (``1``: plain FedAvg).
    h : float, optional
        Time step of the clock ``t = n·h``; default ``η`` (seed 002, Section 6).
    variant : {"corrected", "paper", "matched"} or one of :data:`ORDER2_VARIANTS`
        The order-2 names give :func:`order2_sde_coefficients` (form ``round-law``, ``centred`` or ``series``).

    Returns
    -------
    LinearSDE

    Raises
    ------
    FedsdeInputError
        Bad arguments; ``matched`` when some eigenvalue of ``I − sB`` is ``<= 0``.
    NoStationaryLawError
        ``matched`` when some eigenvalue of ``I − sB`` is ``>= 1`` (no stationary law to match).
    """
    sched, eta, local_steps, server_lr = unpack(eta, local_steps, server_lr)
    if variant in ORDER2_VARIANTS:
        form = next(f for f, v in ORDER2_FORMS.items() if v == variant)
        if sched is not None:  # its numbers (the order-2 coefficients take plain ones)
            eta, local_steps, server_lr = fedavg_rates(sched, None, None, problem.Q)
            h = sched.time_step if h is None else h
        return order2_sde_coefficients(problem, eta, local_steps, server_lr, h, form)
    choice("variant", variant, VARIANTS)
    if sched is None:
        eta = positive_float("eta", eta)
        server_lr = positive_float("server_lr", server_lr)
        h = eta if h is None else positive_float("h", h)
    else:  # checked where the Schedule was built
        eta, _, server_lr = fedavg_rates(sched, None, None, problem.Q)  # one number each (no schedules here)
        h = sched.time_step if h is None else h
    law = round_law(problem, sched or eta, local_steps, server_lr, warn=False)
    c = law.c
    s = server_lr
    if variant == "corrected":
        A = (s / h) * law.B
        D = (s * s / h) * law.noise_cov
    elif variant == "paper":
        steps = law.local_steps
        if not np.all(steps == steps[0]):
            raise FedsdeInputError(
                f"local_steps={steps.tolist()}: variant='paper' (eq. (4)) needs the same E for every client"
            )
        A = (s / h) * law.B
        bp = paper_noise_factor(problem, eta, int(steps[0]))
        D = (s * s * eta * eta / h) * (bp @ bp.T)
    else:
        A, D = _matched(law, h)
    return LinearSDE(
        A=A, c=c, diffusion_cov=0.5 * (D + D.T), variant=variant, h=h, server_lr=s, eta=eta,
        local_steps=law.local_steps,
    )


def _sym(M: np.ndarray) -> np.ndarray:
    return 0.5 * (M + M.T)


def order2_sde_coefficients(
    problem: QuadraticProblem,
    eta: float,
    local_steps: int | np.ndarray,
    server_lr: float = 1.0,
    h: float | None = None,
    form: str = "round-law",
) -> LinearSDE:
    """The order-2 SDE of FedAvg on quadratic clients as a :class:`LinearSDE` (the forms: :mod:`fedsde.sde.order2`;
    derivation: :mod:`fedsde.symbolic.order2`).

    Parameters
    ----------
    problem : QuadraticProblem
    eta : float
        Client learning rate ``η > 0``.
    local_steps : int or array of int, shape (Q,)
        ``E`` or per-client ``τ_k``.
    server_lr : float
        Actual server step ``s > 0``.
    h : float, optional
        Time step of the clock ``t = n·h`` (default ``η``).
    form : {"round-law", "centred", "series"}

    Returns
    -------
    LinearSDE
        ``variant`` ``"order2"`` (round-law), ``"order2-centred"`` or ``"order2-series"``.
    """
    choice("form", form, tuple(ORDER2_FORMS))
    eta = positive_float("eta", eta)
    s = positive_float("server_lr", server_lr)
    h = eta if h is None else positive_float("h", h)
    steps = client_steps("local_steps", local_steps, problem.Q)
    if form == "round-law":
        law = round_law(problem, eta, steps, s, warn=False)
        B, N = law.B, law.noise_cov
        A = (s / h) * (B + 0.5 * s * B @ B)
        D = (s * s / h) * (N + 0.5 * s * (B @ N + N @ B))
        c = law.c
    else:
        A, c, D = _series(problem, eta, steps, s, h)
        if form == "centred":
            c = round_law(problem, eta, steps, s, warn=False).c
    return LinearSDE(A=_sym(A), c=np.asarray(c, dtype=np.float64), diffusion_cov=_sym(D),
                     variant=ORDER2_FORMS[form], h=h, server_lr=s, eta=eta, local_steps=steps)


def _series(problem: QuadraticProblem, eta: float, steps: np.ndarray, s: float, h: float):
    """``(A, c, D)`` of the truncated series (:mod:`fedsde.sde.order2`)."""
    U, a, Sig, p = problem.U, problem.a, problem.Sigma, problem.p
    tau = steps.astype(np.float64)
    pair = tau * (tau - 1) / 2
    M1 = np.einsum("q,qij->ij", p * tau, U)
    U2 = U @ U
    M2 = np.einsum("q,qij->ij", p * pair, U2)
    A = (s * eta * M1 - s * eta**2 * M2 + 0.5 * (s * eta) ** 2 * M1 @ M1) / h
    Ua = np.einsum("qij,qj->qi", U, a)
    U2a = np.einsum("qij,qj->qi", U2, a)
    m1a = (p * tau) @ Ua
    r = (s * eta * m1a - s * eta**2 * (p * pair) @ U2a + 0.5 * (s * eta) ** 2 * M1 @ m1a) / h
    c = np.linalg.solve(A, r)
    Sbar = np.einsum("q,qij->ij", p * p * tau, Sig)
    US = U @ Sig
    cross = np.einsum("q,qij->ij", p * p * pair, US + np.swapaxes(US, 1, 2))
    D = (s * eta) ** 2 / h * (Sbar - eta * cross + 0.5 * s * eta * (M1 @ Sbar + Sbar @ M1))
    return A, c, D
