"""The minimum-norm point of the convex hull of vectors (the MGDA / FedAWARE sub-problem).

    λ* = argmin_{λ ∈ Δ_Q} ‖Σ_k λ_k v_k‖²,   Δ_Q = {λ >= 0, Σ λ_k = 1}

Solved on the Gram matrix ``M = V Vᵀ`` in float64 (seed 000, eq. (8); reference/seed-fedaware.md §1.5):

1. start at the best pair: for every pair the 2-point problem ``min_{c∈[0,1]} ‖c a + (1 − c) b‖²`` has the closed
   form ``c = 1`` if ``⟨a,b⟩ >= ‖a‖²``, ``c = 0`` if ``⟨a,b⟩ >= ‖b‖²``, else ``c = (‖b‖² − ⟨a,b⟩)/‖a − b‖²``;
2. Frank–Wolfe with exact line search: vertex ``t = argmin_k (Mλ)_k``, step by the 2-point rule between the
   current point and ``v_t``; stop when the duality gap ``λᵀMλ − min_k (Mλ)_k`` is below ``tol``;
3. active-set polish (Wolfe's minimum-norm-point iterations) from the Frank–Wolfe point: solve the KKT system
   ``M_SS λ_S = ν 1, 1ᵀλ_S = 1`` on the support, move towards its solution as far as the simplex allows
   (dropping vertices that reach zero), and add the vertex with the smallest ``(Mλ)_k`` while it violates
   optimality.  Frank–Wolfe alone converges only like ``1/t``; the polish makes the weights exact to rounding.

Batched over leading axes (one problem per replicate); no loop over replicates.
"""

from __future__ import annotations

import numpy as np
import torch

from fedsde._tolerances import ACTIVE_SET_RTOL, DIVISION_FLOOR, MIN_NORM_GAP
from fedsde._validate import positive_int
from fedsde.errors import FedsdeInputError


def _two_point(aa: torch.Tensor, ab: torch.Tensor, bb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``c`` minimising ``‖c a + (1 − c) b‖²`` and the minimum, elementwise."""
    denom = aa + bb - 2 * ab
    c = torch.where(denom > 0, (bb - ab) / torch.where(denom > 0, denom, torch.ones_like(denom)),
                    torch.zeros_like(denom))
    c = torch.where(ab >= aa, torch.ones_like(c), torch.where(ab >= bb, torch.zeros_like(c), c)).clamp(0, 1)
    cost = c * c * aa + 2 * c * (1 - c) * ab + (1 - c) ** 2 * bb
    return c, cost


def min_norm_gram(M: torch.Tensor, *, max_iter: int = 100, tol: float = MIN_NORM_GAP,
                  polish: bool = True) -> torch.Tensor:
    """Min-norm simplex weights from Gram matrices ``M`` of shape (..., Q, Q); returns shape (..., Q)."""
    *batch, Q, _ = M.shape
    M = M.reshape(-1, Q, Q).to(torch.float64)
    Bn = M.shape[0]
    if Q == 1:
        return torch.ones((*batch, 1), dtype=torch.float64, device=M.device)
    diag = torch.diagonal(M, dim1=1, dim2=2)  # (B, Q)
    c, cost = _two_point(diag[:, :, None], M, diag[:, None, :])  # pair (i, j): c·v_i + (1 − c)·v_j
    flat = cost.reshape(Bn, -1).argmin(1)
    i, j = flat // Q, flat % Q
    rows = torch.arange(Bn, device=M.device)
    lam = torch.zeros((Bn, Q), dtype=torch.float64, device=M.device)
    ci = c[rows, i, j]
    lam[rows, i] += ci
    lam[rows, j] += 1 - ci
    scale = diag.max(1).values.clamp_min(DIVISION_FLOOR)
    for _ in range(max_iter):
        Ml = torch.bmm(M, lam.unsqueeze(-1)).squeeze(-1)
        aa = (lam * Ml).sum(1)
        ab, t = Ml.min(1)
        if bool(((aa - ab) <= tol * scale).all()):
            break
        bb = M[rows, t, t]
        step, _ = _two_point(aa, ab, bb)
        lam = step.unsqueeze(1) * lam
        lam[rows, t] += 1 - step
    if polish:
        lam = _polish(M, lam)
    return lam.reshape(*batch, Q)


def _affine_minimiser(M: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """Minimiser of ``λᵀMλ`` over ``{λ: λ = 0 off S, Σ λ = 1}`` for every batch element, ``S`` the ``support`` mask
    (pseudo-inverse when the KKT system ``M_SS λ_S = ν 1, 1ᵀλ_S = 1`` is singular)."""
    Bn, Q = support.shape
    supp = support.to(M.dtype)
    K = torch.zeros((Bn, Q + 1, Q + 1), dtype=M.dtype, device=M.device)
    K[:, :Q, :Q] = M * supp[:, :, None] * supp[:, None, :] + torch.diag_embed(1 - supp)
    K[:, :Q, Q] = -supp
    K[:, Q, :Q] = supp
    rhs = torch.zeros((Bn, Q + 1, 1), dtype=M.dtype, device=M.device)
    rhs[:, Q] = 1.0
    sol, info = torch.linalg.solve_ex(K, rhs)
    bad = (info != 0) | ~torch.isfinite(sol).all(1).squeeze(-1)
    if bool(bad.any()):
        sol[bad] = torch.linalg.pinv(K[bad], hermitian=True) @ rhs[bad]
    lam = sol[:, :Q, 0] * supp
    return lam / lam.sum(1, keepdim=True)


def _polish(M: torch.Tensor, lam: torch.Tensor, max_rounds: int | None = None) -> torch.Tensor:
    """Wolfe-style active-set iterations from the feasible point ``lam`` (exact to rounding).

    Minor cycle: move towards the minimiser on the affine hull of the support; if it leaves the simplex, stop at
    the boundary (ratio test) and drop the vertices that reach zero.  Major cycle: once the affine minimiser is
    feasible, add the vertex with the smallest ``(Mλ)_k`` if it beats ``λᵀMλ``; otherwise the point is optimal.
    Elements that do not certify within ``max_rounds`` keep their last (feasible, no worse) point.
    """
    Bn, Q = lam.shape
    scale = torch.diagonal(M, dim1=1, dim2=2).max(1).values.clamp_min(DIVISION_FLOOR)
    lam = lam.clone()
    support = lam > 0
    idx = torch.arange(Bn, device=M.device)  # unfinished batch elements
    for _ in range(max_rounds or 4 * Q + 4):
        Mi, Si, li = M[idx], support[idx], lam[idx]
        cand = _affine_minimiser(Mi, Si)
        dirn = cand - li
        shrink = Si & (dirn < 0)
        ratio = torch.where(shrink, li / (-dirn).clamp_min(DIVISION_FLOOR), torch.full_like(li, float("inf")))
        theta = ratio.min(1).values.clamp(max=1.0)
        li = (li + theta.unsqueeze(1) * dirn).clamp_min(0) * Si
        li = li / li.sum(1, keepdim=True)
        feasible = theta >= 1.0
        Si = Si & ((li > 0) | feasible.unsqueeze(1))
        Ml = torch.bmm(Mi, li.unsqueeze(-1)).squeeze(-1)
        val = (li * Ml).sum(1)
        worst, t = torch.where(Si, torch.full_like(Ml, float("inf")), Ml).min(1)
        add = feasible & (worst < val - ACTIVE_SET_RTOL * scale[idx])
        r = torch.arange(idx.numel(), device=M.device)
        Si[r[add], t[add]] = True
        lam[idx], support[idx] = li, Si
        idx = idx[~(feasible & ~add)]
        if idx.numel() == 0:
            break
    return lam


def min_norm_weights(vectors, *, max_iter: int = 100, tol: float = MIN_NORM_GAP) -> np.ndarray:
    """Weights ``λ`` on the simplex minimising ``‖Σ_k λ_k v_k‖`` (see the module docstring).

    Parameters
    ----------
    vectors : array, shape (Q, d) (or (..., Q, d) for several problems)
        The vectors ``v_k`` as rows.
    max_iter : int
        Frank–Wolfe iterations before the polish.
    tol : float
        Duality-gap tolerance (relative to the largest ``‖v_k‖²``).

    Returns
    -------
    ndarray, shape (Q,) (or (..., Q))
    """
    V = torch.as_tensor(np.asarray(vectors, dtype=np.float64))
    if V.ndim < 2 or V.shape[-2] < 1 or not bool(torch.isfinite(V).all()):
        raise FedsdeInputError(f"vectors: shape {tuple(V.shape)} must be (Q, d) with Q >= 1 and finite entries")
    positive_int("max_iter", max_iter)
    M = V @ V.transpose(-1, -2)
    return min_norm_gram(M, max_iter=max_iter, tol=tol).numpy()
