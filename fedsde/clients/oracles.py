"""Stochastic-gradient oracles used by the local-training loop.

The simulator keeps client weights in block-major layout ``x`` of shape ``(nb, Q, B, d)``: ``nb`` blocks of
``B`` (= :data:`fedsde.clients.streams.BLOCK`) replicates, ``Q`` clients, dimension ``d``.  An oracle is built for
one chunk of blocks on one device and answers ``sample(x, streams) -> g`` (same shape) with
``g = ∇F_k(x) + ξ``.  Randomness comes only from the :class:`~fedsde.clients.streams.ReplicateStreams` it is
handed; all arithmetic is per block with fixed shapes, which keeps results independent of chunking.
"""

from __future__ import annotations

from typing import Protocol

import torch

from fedsde.clients.streams import BLOCK, ReplicateStreams
from fedsde.problems.quadratic import QuadraticProblem


class GradientOracle(Protocol):
    """Protocol of gradient oracles (see the module docstring).

    Optional extensions read by the simulator: ``begin_round(batch, max_batch[, clients=…])`` is called at
    the start of every round with the round's batch sizes (from :class:`~fedsde.clients.steps.EpochSteps`, else
    ``None``); an oracle with ``participants_only = True`` accepts ``clients`` of shape ``(nb, S, B)`` naming the
    client held by each of the ``S`` slots of ``x`` (the simulator then trains only the round's participants).
    See :mod:`fedsde.clients.data_oracles`.
    """

    def sample(self, x: torch.Tensor, streams: ReplicateStreams) -> torch.Tensor: ...


class GaussianQuadraticOracle:
    """``g_k(x) = U_k (x − a_k) + L_k z``, ``z ~ N(0, I)``, ``L_k L_kᵀ = Σ_k`` (seed 002, Assumption 4.4).

    Elementwise products when every ``U_k`` and ``Σ_k`` is diagonal; batched matmuls of fixed shape
    ``(B, d) @ (d, d)`` otherwise.

    Parameters
    ----------
    problem : QuadraticProblem
    nblocks : int
        Blocks of replicates in the chunk.
    device, dtype
        Where and in what precision to compute.
    """

    def __init__(self, problem: QuadraticProblem, nblocks: int, device: torch.device, dtype: torch.dtype):
        Q, d = problem.Q, problem.d
        self.diagonal = problem.is_diagonal
        a = torch.as_tensor(problem.a, dtype=dtype, device=device)
        if self.diagonal:
            self.u = torch.as_tensor(problem.U.diagonal(axis1=1, axis2=2).copy(), dtype=dtype,
                                     device=device)[None, :, None, :]  # (1, Q, 1, d)
            self.l = torch.as_tensor(problem.Sigma.diagonal(axis1=1, axis2=2).copy() ** 0.5, dtype=dtype,
                                     device=device)[None, :, None, :]
            self.ua = self.u * a[None, :, None, :]
        else:
            Ut = torch.as_tensor(problem.U.transpose(0, 2, 1).copy(), dtype=dtype, device=device)
            Lt = torch.as_tensor(problem.noise_factors().transpose(0, 2, 1).copy(), dtype=dtype, device=device)
            self.Ut = Ut.expand(nblocks, Q, d, d).reshape(nblocks * Q, d, d)  # x @ U_kᵀ, per block
            self.Lt = Lt.expand(nblocks, Q, d, d).reshape(nblocks * Q, d, d)
            neg_aU = -torch.bmm(a[:, None, :], Ut)  # (Q, 1, d)
            self.neg_aU = neg_aU.expand(nblocks, Q, 1, d).reshape(nblocks * Q, 1, d)
        self._z = torch.empty((nblocks, Q, BLOCK, d), dtype=dtype, device=device)

    def sample(self, x: torch.Tensor, streams: ReplicateStreams) -> torch.Tensor:
        if self._z.shape != x.shape:  # blocks of another size than BLOCK
            self._z = torch.empty_like(x)
        z = streams.normal_(self._z)
        if self.diagonal:
            return torch.addcmul(torch.addcmul(-self.ua, self.u, x), self.l, z)
        nb, Q, B, d = x.shape
        g = torch.baddbmm(self.neg_aU, x.reshape(nb * Q, B, d), self.Ut)
        g = torch.baddbmm(g, z.reshape(nb * Q, B, d), self.Lt)
        return g.view(nb, Q, B, d)
