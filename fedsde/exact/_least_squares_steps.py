"""The exact second-moment algebra of minibatch local SGD on least-squares clients (internal).

Used by :mod:`fedsde.exact.least_squares` (the round law of FedAvg) and :mod:`fedsde.exact.least_squares_sde`.

Augmented state.  With ``ŵ = (w, 1)`` one local step on client ``k`` is linear, ``ŵ' = G_S ŵ`` with

    G_S = [[I − η(A_S), η c_S], [0, 1]] = D − η H̄_S,   H_i = ê_i v_iᵀ,  ê_i = (x_i, 0),  v_i = (x_i, −y_i),

``D = diag((1 − ηλ) I, 1)`` and ``H̄_S`` the batch mean of the rank-one ``H_i``.  For a batch mean,
``E[H̄_S X H̄_Sᵀ] = H̄ X H̄ᵀ + κ 𝒩(X)`` with ``𝒩(X) = (1/n) Σ_i H_i X H_iᵀ − H̄ X H̄ᵀ`` (the rows' population
covariance; ``κ`` from :func:`fedsde.problems.regression.noise_factors`).  So for a start with mean ``m̂`` and
centred second moment ``P̂`` (raw second moment ``X = P̂ + m̂m̂ᵀ``), one step gives

    m̂' = Ḡ m̂,     P̂' = Ḡ P̂ Ḡᵀ + η² κ [𝒩(P̂) + 𝒩_c(m̂)],

``Ḡ = E G_S`` and ``𝒩_c(m̂) = 𝒩(m̂m̂ᵀ)``, the covariance of the per-row gradients ``x_i (v_iᵀ m̂)`` evaluated in
centred form (no cancellation).  Both are linear in ``X``; the recursion accepts any ``P̂`` (also a raw second
moment with ``m̂ = 0``), so one code path gives the chain's moments, its linear operators and the SDE's generator.
The noise accumulated over the ``τ_k`` steps, ``N_k = Σ_t Ḡ^{τ−1−t} η²κ[...] Ḡ^{τ−1−t}ᵀ``, is
``E[Cov(w_k | w_n)]``; the mean map ``Φ_k = Ḡ^{τ_k}`` is kept as ``J_k = Φ_k − I`` (accumulated, no cancellation).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from fedsde.errors import FedsdeInputError

#: most subsets enumerated for the renormalised participation weights
MAX_SUBSETS = 1_000_000


class LocalData:
    """Per-client arrays of the local-step algebra, padded to ``n_max`` rows (module docstring).

    Parameters
    ----------
    problem : RegressionProblem
    eta : float
    local_steps : ndarray of int, shape (Q,)
    shift : ndarray, shape (d,), optional
        Work in the coordinates ``u = w − shift`` (reduces cancellation in raw second moments).
    """

    def __init__(self, problem, eta: float, local_steps: np.ndarray, shift: np.ndarray | None = None):
        Xp, yp, wp = problem.padded_rows()
        A, c = problem.moments()
        d = problem.d
        self.Q, self.d, self.eta = problem.Q, d, float(eta)
        self.local_steps = np.asarray(local_steps, dtype=np.int64)
        self.kappa = problem.noise_factors()  # (Q,), for the problem's batch size and sampling
        lam = problem.l2
        shift = np.zeros(d) if shift is None else np.asarray(shift, dtype=np.float64)
        self.shift = shift
        yp = yp - Xp @ shift  # residual targets in the shifted coordinates
        c = c - A @ shift
        bvec = c - lam * shift  # deterministic part: g(u) = (Ā + λ)u − bvec
        self.X, self.wts = Xp, wp
        self.V = np.concatenate([Xp, -yp[..., None]], axis=-1)  # (Q, n, d+1)
        Hbar = np.concatenate([A, -c[..., None]], axis=-1)  # (Q, d, d+1): mean of the rows' H_i (top block)
        self.Hbar = Hbar
        G = np.zeros((self.Q, d + 1, d + 1))
        G[:, :d, :d] = -self.eta * (A + lam * np.eye(d))
        G[:, :d, d] = self.eta * bvec
        self.GmI = G.copy()  # Ḡ − I (exact)
        G[:, np.arange(d + 1), np.arange(d + 1)] += 1.0
        self.G = G

    # ------------------------------------------------------------------ one step's noise
    def noise(self, mhat: np.ndarray, P: np.ndarray | None) -> np.ndarray:
        """``κ η² [𝒩(P̂) + 𝒩_c(m̂)]`` for ``m̂`` (Q, N, d+1) and ``P̂`` (Q, N, d+1, d+1) or None, shape (Q, N, d, d)."""
        X, w, V = self.X, self.wts, self.V
        rho = np.einsum("qia,qna->qni", V, mhat)  # v_iᵀ m̂
        R = rho[..., None] * X[:, None]  # (Q, N, n, d)
        Rc = (R - np.einsum("qi,qnia->qna", w, R)[:, :, None, :]) * (w > 0)[:, None, :, None]
        out = np.einsum("qni,qnia,qnib->qnab", np.broadcast_to(w[:, None], rho.shape), Rc, Rc, optimize=True)
        if P is not None:
            VP = np.einsum("qia,qnab->qnib", V, P)
            q = np.einsum("qnib,qib->qni", VP, V) * w[:, None]  # (1/n) v_iᵀ P̂ v_i
            out = out + np.einsum("qni,qia,qib->qnab", q, X, X, optimize=True)
            HP = np.einsum("qab,qnbc->qnac", self.Hbar, P)
            out = out - np.einsum("qnac,qdc->qnad", HP, self.Hbar)
        return (self.eta**2 * self.kappa)[:, None, None, None] * out

    # ------------------------------------------------------------------ τ_k local steps
    def run(self, mhat: np.ndarray, P: np.ndarray | None) -> np.ndarray:
        """``N_k``: noise accumulated over every client's ``τ_k`` steps from ``(m̂, P̂)``, shape (Q, N, d, d).

        ``mhat`` (N, d+1) or (Q, N, d+1); ``P`` (N, d+1, d+1), (Q, N, d+1, d+1) or None (zero).
        """
        Q, d = self.Q, self.d
        m = np.broadcast_to(mhat, (Q, *mhat.shape[-2:])).copy()
        n_batch = m.shape[1]
        if P is None:
            Pt = np.zeros((Q, n_batch, d + 1, d + 1))
        else:
            Pt = np.broadcast_to(P, (Q, n_batch, d + 1, d + 1)).copy()
        Nacc = np.zeros((Q, n_batch, d, d))
        G, T = self.G, self.G[:, :d, :d]
        for t in range(int(self.local_steps.max())):
            live = self.local_steps > t
            inc = self.noise(m, Pt)
            Nn = np.einsum("qab,qnbc,qdc->qnad", T, Nacc, T, optimize=True) + inc
            mn = np.einsum("qab,qnb->qna", G, m)
            Pn = np.einsum("qab,qnbc,qdc->qnad", G, Pt, G, optimize=True)
            Pn[:, :, :d, :d] += inc
            if live.all():
                Nacc, m, Pt = Nn, mn, Pn
            else:
                Nacc[live], m[live], Pt[live] = Nn[live], mn[live], Pn[live]
        return Nacc

    def mean_maps(self) -> np.ndarray:
        """``Ĵ_k = Ḡ_k^{τ_k} − I`` (Q, d+1, d+1), accumulated as ``Ĵ ← Ḡ Ĵ + (Ḡ − I)`` (no cancellation)."""
        J = np.zeros_like(self.G)
        for t in range(int(self.local_steps.max())):
            live = self.local_steps > t
            Jn = np.einsum("qab,qbc->qac", self.G, J) + self.GmI
            J[live] = Jn[live]
        return J


def weight_moments(omega: np.ndarray, participation: int | None, weighting: str,
                   p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First and second moments of the round's aggregation weights: ``μ = E ω`` (Q,) and ``C = E ωωᵀ`` (Q, Q).

    Schemes (as :func:`fedsde.sim.simulate` draws them): all clients (``ω``); a uniform ``m``-subset ``S`` weighted
    ``ω_k Q/m`` (``unbiased``: ``E[I_k] = m/Q``, ``E[I_k I_j] = m(m−1)/(Q(Q−1))``) or ``ω_k / Σ_{j∈S} ω_j``
    (``renormalised``: every subset enumerated, or in closed form when all ``ω_k`` are equal); or ``m`` draws with
    replacement with probabilities ``p``, each weighted ``1/m`` (``multinomial``:
    ``C = (1 − 1/m) ppᵀ + diag(p)/m``).
    """
    Q = omega.size
    if participation is None or (participation == Q and weighting != "multinomial"):
        return omega.copy(), np.outer(omega, omega)
    m = int(participation)
    if weighting == "multinomial":
        return p.copy(), (1.0 - 1.0 / m) * np.outer(p, p) + np.diag(p) / m
    if weighting == "renormalised" and not np.all(omega == omega[0]):
        return _renormalised_moments(omega, m)
    if weighting == "renormalised":  # equal weights: every participant gets 1/m
        omega = np.full(Q, 1.0 / Q)
    pi1, pi2 = m / Q, (m * (m - 1) / (Q * (Q - 1)) if Q > 1 else 0.0)
    scale = (Q / m) ** 2
    C = scale * pi2 * np.outer(omega, omega)
    C[np.diag_indices(Q)] = scale * pi1 * omega**2
    return omega.copy(), C


def _renormalised_moments(omega: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    Q = omega.size
    count = math.comb(Q, m)
    if count > MAX_SUBSETS:
        raise FedsdeInputError(
            f"participation={m}, weighting='renormalised': the exact moments enumerate the C({Q}, {m}) = {count:.3g} "
            f"client subsets (at most {MAX_SUBSETS}); use weighting='unbiased' or equal client weights"
        )
    mu, C = np.zeros(Q), np.zeros((Q, Q))
    for chunk in _chunks(itertools.combinations(range(Q), m), 20000):
        idx = np.asarray(chunk)  # (n, m)
        w = np.zeros((idx.shape[0], Q))
        np.put_along_axis(w, idx, omega[idx], axis=1)
        tot = w.sum(1, keepdims=True)
        w = np.where(tot > 0, w / np.where(tot > 0, tot, 1.0), 0.0)
        mu += w.sum(0)
        C += w.T @ w
    return mu / count, C / count


def _chunks(it, size: int):
    while True:
        block = list(itertools.islice(it, size))
        if not block:
            return
        yield block
