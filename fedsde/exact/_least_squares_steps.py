"""The exact second-moment algebra of minibatch local SGD on least-squares clients (internal).

Used by :mod:`fedsde.exact.least_squares` (the round law of FedAvg) and :mod:`fedsde.exact.least_squares_sde`.

Augmented state.  With ``ŵ = (w, 1)`` one local step on client ``k`` is linear, ``ŵ' = G_S ŵ`` with

    G_S = [[I − η(A_S), η c_S], [0, 1]] = D − η H̄_S,   H_i = ê_i v_iᵀ,  ê_i = (x_i, 0),  v_i = (x_i, −y_i),

``D = diag((1 − ηλ) I, 1)`` and ``H̄_S`` the batch mean of the rank-one ``H_i``.  For a batch mean,
``E[H̄_S X H̄_Sᵀ] = H̄ X H̄ᵀ + κ 𝒩(X)`` with ``𝒩(X) = (1/n) Σ_i H_i X H_iᵀ − H̄ X H̄ᵀ`` (the rows' population
covariance; ``κ`` from :func:`fedsde.problems.regression.problem.noise_factors`).  So for a start with mean ``m̂`` and
centred second moment ``P̂`` (raw second moment ``X = P̂ + m̂m̂ᵀ``), one step gives

    m̂' = Ḡ m̂,     P̂' = Ḡ P̂ Ḡᵀ + η² κ [𝒩(P̂) + 𝒩_c(m̂)],

``Ḡ = E G_S`` and ``𝒩_c(m̂) = 𝒩(m̂m̂ᵀ)``, the covariance of the per-row gradients ``x_i (v_iᵀ m̂)`` evaluated in
centred form (no cancellation).  Both are linear in ``X``; the recursion accepts any ``P̂`` (also a raw second
moment with ``m̂ = 0``), so one code path gives the chain's moments, its linear operators and the SDE's generator.
The noise accumulated over the ``τ_k`` steps, ``N_k = Σ_t Ḡ^{τ−1−t} η²κ[...] Ḡ^{τ−1−t}ᵀ``, is
``E[Cov(w_k | w_n)]``; the mean map ``Φ_k = Ḡ^{τ_k}`` is kept as ``J_k = Φ_k − I`` (no cancellation).

Every map here is applied matrix-free, in ``O(N d²)`` per local step (``N`` rows): the homogeneous part of the
round's second-moment map is a sum of terms ``X_k diag(·) X_kᵀ``-like products over the rows, never a
``d² × d²`` matrix (:mod:`fedsde.exact._least_squares_solve` solves and powers it).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from fedsde.errors import FedsdeInputError

#: most subsets enumerated for the renormalised participation weights
MAX_SUBSETS = 1_000_000


class LocalData:
    """Per-client arrays of the local-step algebra (module docstring), rows grouped by client size.

    The rows are held as :meth:`~fedsde.problems.RegressionProblem.size_groups` gives them: clients of similar row
    counts stacked and padded to the largest of their group, so memory grows with ``N · d`` (the rows), not with
    ``Q · max n_k``.  One local step on a batch of ``B`` states costs ``O(N d²)`` (the rows' fourth-moment terms
    ``x_i x_iᵀ (v_iᵀ P̂ v_i)``, never a ``d² × d²`` matrix) plus ``O(Q d³)``.

    Parameters
    ----------
    problem : RegressionProblem
    eta : float
    local_steps : ndarray of int, shape (Q,)
    shift : ndarray, shape (d,), optional
        Work in the coordinates ``u = w − shift`` (reduces cancellation in raw second moments).
    """

    def __init__(self, problem, eta: float, local_steps: np.ndarray, shift: np.ndarray | None = None):
        A, c = problem.moments()
        d = problem.d
        self.Q, self.d, self.eta = problem.Q, d, float(eta)
        self.rows = int(problem.sizes.sum())
        self.local_steps = np.asarray(local_steps, dtype=np.int64)
        self.kappa = problem.noise_factors()  # (Q,), for the problem's batch size and sampling
        lam = problem.l2
        shift = np.zeros(d) if shift is None else np.asarray(shift, dtype=np.float64)
        self.shift = shift
        c = c - A @ shift
        bvec = c - lam * shift  # deterministic part: g(u) = (Ā + λ)u − bvec
        Hbar = np.concatenate([A, -c[..., None]], axis=-1)  # (Q, d, d+1): mean of the rows' H_i (top block)
        self.Hbar = Hbar
        U = A + lam * np.eye(d)
        G = np.zeros((self.Q, d + 1, d + 1))
        G[:, :d, :d] = -self.eta * U
        G[:, :d, d] = self.eta * bvec
        self.GmI = G.copy()  # Ḡ − I (exact)
        G[:, np.arange(d + 1), np.arange(d + 1)] += 1.0
        self.G = G
        self._U, self._bvec = U, bvec
        self._u, self._V = np.linalg.eigh(U)  # client Hessians' eigenbases (local steps are diagonal there)
        coef = self.eta**2 * self.kappa
        self.groups = []
        for idx, X, y, w in problem.size_groups():
            r = y - X @ shift  # residual targets in the shifted coordinates (padding rows stay 0)
            V = np.concatenate([X, -r[..., None]], axis=-1)  # (c, n, d+1)
            g = _Group(idx, X, V, w, mask=w > 0, G=G[idx], Hbar=Hbar[idx], coef=coef[idx], steps=self.local_steps[idx])
            g.eig(self._V[idx], 1.0 - self.eta * self._u[idx], self._u[idx] - lam, r, self.eta * bvec[idx])
            self.groups.append(g)

    # ------------------------------------------------------------------ τ_k local steps
    def round_noise(self, mhat: np.ndarray, P: np.ndarray | None, weights: np.ndarray) -> np.ndarray:
        """``Σ_k weights_k N_k``: the clients' accumulated minibatch noise over their ``τ_k`` steps from
        ``(m̂, P̂)``, weighted, shape (B, d, d).

        ``mhat`` (B, d+1) or None (zero: the homogeneous part); ``P`` (B, d+1, d+1) or None (zero).
        """
        B = (mhat if mhat is not None else P).shape[0]
        out = np.zeros((B, self.d, self.d))
        for g in self.groups:
            wk = weights[g.idx]
            if not np.any(wk):
                continue
            out += np.einsum("c,cnab->nab", wk, g.run(mhat, P, self.d))
        return out

    def run(self, mhat: np.ndarray, P: np.ndarray | None) -> np.ndarray:
        """``N_k`` for every client, shape (Q, B, d, d) (see :meth:`round_noise`)."""
        B = (mhat if mhat is not None else P).shape[0]
        out = np.zeros((self.Q, B, self.d, self.d))
        for g in self.groups:
            out[g.idx] = g.run(mhat, P, self.d)
        return out

    def mean_maps(self) -> np.ndarray:
        """``Ĵ_k = Ḡ_k^{τ_k} − I`` (Q, d+1, d+1) from the eigendecomposition of the client Hessian ``U_k``:
        ``(1 − ηu)^τ − 1`` through ``expm1``/``log1p`` (every digit kept at small ``ηu``) and the offset column
        ``η Σ_{t<τ} Ḡ^t b = η V diag(((1 − ηu)^τ − 1)/(−ηu)) Vᵀ b`` (``ητ`` where ``u = 0``)."""
        d, eta = self.d, self.eta
        u, V = self._u, self._V  # (Q, d), (Q, d, d)
        tau = self.local_steps[:, None].astype(np.float64)
        x = eta * u
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            jj = np.where(x <= 0.5, np.expm1(tau * np.log1p(-np.minimum(x, 0.5))), (1.0 - x) ** tau - 1.0)
            f = np.where(x != 0.0, -jj / np.where(x != 0.0, x, 1.0), tau)
        J = np.zeros((self.Q, d + 1, d + 1))
        J[:, :d, :d] = np.einsum("qab,qb,qcb->qac", V, jj, V)
        J[:, :d, :d] = 0.5 * (J[:, :d, :d] + np.swapaxes(J[:, :d, :d], 1, 2))
        J[:, :d, d] = eta * np.einsum("qab,qb,qcb,qc->qa", V, f, V, self._bvec)
        return J


class _Group:
    """Clients of similar size, stacked: ``X`` (c, n, d), ``V`` (c, n, d+1), ``w`` (c, n) and their maps."""

    def __init__(self, idx, X, V, w, *, mask, G, Hbar, coef, steps):
        self.idx, self.X, self.V, self.w, self.mask = idx, X, V, w, mask
        self.G, self.Hbar, self.coef, self.steps = G, Hbar, coef, steps
        self.Xt = np.swapaxes(X, 1, 2)
        self.Vt = np.swapaxes(V, 1, 2)

    def noise(self, m: np.ndarray | None, P: np.ndarray | None, d: int, B: int) -> np.ndarray:
        """``κη² [𝒩(P̂) + 𝒩_c(m̂)]`` for ``m̂`` (c, B, d+1) and ``P̂`` (c, B, d+1, d+1) (either None: zero),
        shape (c, B, d, d)."""
        X, w = self.X, self.w
        out = None
        if m is not None:
            rho = m @ self.Vt  # (c, B, n): v_iᵀ m̂
            Rbar = (rho * w[:, None]) @ X  # (c, B, d)
            Rc = rho[..., None] * X[:, None] - Rbar[:, :, None, :]
            Rc *= self.mask[:, None, :, None]
            out = np.swapaxes(Rc * w[:, None, :, None], 2, 3) @ Rc
        if P is not None:
            VP = self.V[:, None] @ P  # (c, B, n, d+1)
            q = np.einsum("cbia,cia->cbi", VP, self.V) * w[:, None]  # (1/n) v_iᵀ P̂ v_i
            XqX = np.swapaxes(X[:, None] * q[..., None], 2, 3) @ X[:, None]
            HPH = self.Hbar[:, None] @ P @ np.swapaxes(self.Hbar, 1, 2)[:, None]
            out = XqX - HPH if out is None else out + XqX - HPH
        if out is None:
            return np.zeros((self.X.shape[0], B, d, d))
        return self.coef[:, None, None, None] * out

    def eig(self, V, g, a, r, eb) -> None:
        """The clients' eigenbases ``U_k = V diag(u) Vᵀ``: ``g = 1 − ηu``, ``a = u − λ`` (eigenvalues of ``Ā_k``),
        the rows rotated, ``Xr = X V`` (c, n, d), the residual targets ``r`` and ``η Vᵀ b`` (c, d)."""
        self.Vb, self.g, self.a, self.r = V, g, a, r
        self.Xr = self.X @ V
        self.Xrt = np.swapaxes(self.Xr, 1, 2)
        self.eb = np.einsum("cab,ca->cb", V, eb)
        self.gg = g[:, :, None] * g[:, None, :]
        self.aa = a[:, :, None] * a[:, None, :]

    def run_diagonal(self, mhat: np.ndarray | None, P: np.ndarray | None, d: int) -> np.ndarray:
        """:meth:`run` for states whose ``P̂`` has no last row and column (a covariance, not a raw augmented
        moment), in each client's eigenbasis, where a local step is ``P̃ ↦ (g gᵀ) ∘ P̃`` and ``Ā P Ā`` is
        ``(a aᵀ) ∘ P̃``: ``O(n_k d²)`` per step and ``O(d³)`` per round for the two rotations."""
        c = self.idx.size
        B = (mhat if mhat is not None else P).shape[0]
        V, Vt = self.Vb[:, None], np.swapaxes(self.Vb, 1, 2)[:, None]
        w, Xr = self.w, self.Xr
        Pt = None if P is None else Vt @ P[None, :, :d, :d] @ V  # (c, B, d, d)
        if mhat is not None:
            m = np.einsum("cab,na->cnb", self.Vb, mhat[:, :d])  # (c, B, d)
            gam = np.broadcast_to(mhat[:, d], (c, B)).copy()
        else:
            m = None
        Nacc = np.zeros((c, B, d, d))
        gg, aa = self.gg[:, None], self.aa[:, None]
        coef = self.coef[:, None, None, None]
        for t in range(int(self.steps.max())):
            live = self.steps > t
            inc = None
            if m is not None:
                rho = m @ self.Xrt - gam[..., None] * self.r[:, None]  # (c, B, n): v_iᵀ m̂
                Rbar = (rho * w[:, None]) @ Xr  # (c, B, d)
                Rc = rho[..., None] * Xr[:, None] - Rbar[:, :, None, :]
                Rc *= self.mask[:, None, :, None]
                inc = np.swapaxes(Rc * w[:, None, :, None], 2, 3) @ Rc
            if Pt is not None:
                q = np.einsum("cbia,cia->cbi", Xr[:, None] @ Pt, Xr) * w[:, None]
                part = np.swapaxes(Xr[:, None] * q[..., None], 2, 3) @ Xr[:, None] - aa * Pt
                inc = part if inc is None else inc + part
            inc = coef * inc if inc is not None else np.zeros((c, B, d, d))
            Nn = gg * Nacc + inc
            Pn = inc if Pt is None else gg * Pt + inc
            mn = None if m is None else self.g[:, None] * m + gam[..., None] * self.eb[:, None]
            if live.all():
                Nacc, Pt, m = Nn, Pn, mn
            else:
                Nacc[live] = Nn[live]
                Pt = np.zeros_like(Pn) if Pt is None else Pt
                Pt[live] = Pn[live]
                if m is not None:
                    m[live] = mn[live]
        return V @ Nacc @ Vt

    def run(self, mhat: np.ndarray | None, P: np.ndarray | None, d: int) -> np.ndarray:
        """``N_k`` of the group's clients from ``(m̂, P̂)`` (batch B, shared by all), shape (c, B, d, d)."""
        if P is None or (not np.any(P[:, d, :]) and not np.any(P[:, :, d])):
            B = (mhat if mhat is not None else P).shape[0]
            if mhat is not None and not np.any(mhat):
                mhat = None
            if P is not None and not np.any(P):
                P = None
            if mhat is None and P is None:
                return np.zeros((self.idx.size, B, d, d))
            return self.run_diagonal(mhat, P, d)
        c = self.idx.size
        B = (mhat if mhat is not None else P).shape[0]
        if mhat is not None and not np.any(mhat):
            mhat = None
        if P is not None and not np.any(P):
            P = None
        m = None if mhat is None else np.broadcast_to(mhat, (c, *mhat.shape)).copy()
        Pt = None if P is None else np.broadcast_to(P, (c, *P.shape)).copy()
        Nacc = np.zeros((c, B, d, d))
        G = self.G[:, None]
        Gt = np.swapaxes(G, 2, 3)
        T, Tt = G[..., :d, :d], Gt[..., :d, :d]
        for t in range(int(self.steps.max())):
            live = self.steps > t
            inc = self.noise(m, Pt, d, B)
            Nn = T @ Nacc @ Tt + inc
            mn = None if m is None else (G @ m[..., None])[..., 0]
            Pn = np.zeros((c, B, d + 1, d + 1)) if Pt is None else G @ Pt @ Gt
            Pn[:, :, :d, :d] += inc
            if live.all():
                Nacc, m, Pt = Nn, mn, Pn
            else:
                Nacc[live] = Nn[live]
                if m is not None:
                    m[live] = mn[live]
                Pt = np.zeros_like(Pn) if Pt is None else Pt
                Pt[live] = Pn[live]
        return Nacc


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
