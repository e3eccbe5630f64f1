"""Stochastic-gradient oracles used by the local-training loop (:mod:`fedsde.clients.local`).

The loop keeps client weights in block-major layout ``x`` of shape ``(nb, S, B, d)``: ``nb`` blocks of ``B``
(= :data:`fedsde.clients.streams.BLOCK` by default) replicates, ``S`` client slots (``Q``, or the round's ``m``
participants), dimension ``d``.  An oracle is built for one chunk of blocks on one device and answers
``sample(x, streams) -> g`` (same shape) with ``g = ∇F_k(x) + ξ``.  Randomness comes only from the
:class:`~fedsde.clients.streams.ReplicateStreams` it is handed; all arithmetic is per block with fixed shapes, which
keeps results independent of chunking.  :class:`GradientOracle` is the protocol, :class:`OracleBase` its defaults.
"""

from __future__ import annotations

from typing import Protocol

import torch

from fedsde.clients.streams import BLOCK, ReplicateStreams
from fedsde.problems.quadratic import QuadraticProblem


class GradientOracle(Protocol):
    """What the local-training loop (:func:`fedsde.clients.local.run_local_steps`) asks of a gradient oracle.

    Attributes
    ----------
    participants_only : bool
        True when :meth:`begin_round` accepts ``clients``: the simulator may then hand over only the round's
        participants (``S = m`` slots instead of ``Q``) under partial participation.

    Methods
    -------
    begin_round(batch=None, max_batch=None, clients=None)
        Called once at the start of every round of local training, always with these three keywords:
        ``batch`` of shape ``(R, S)`` the round's batch sizes (from :class:`~fedsde.clients.steps.EpochSteps`,
        else ``None``: the oracle's own batch size), ``max_batch`` the padded batch length fixed by the run
        (``None`` with ``batch=None``), ``clients`` of shape ``(nb, S, B)`` the client held by each of the ``S``
        slots of ``x`` (``None``: slot ``k`` holds client ``k``).
    sample(x, streams)
        ``g = ∇F_k(x) + ξ`` of the shape of ``x``, ``(nb, S, B, d)``, drawing only from ``streams``.

    :class:`OracleBase` gives the defaults (``participants_only = False``, a ``begin_round`` that does nothing).
    An object with only ``sample`` is accepted too: the loop reads a missing ``begin_round`` and
    ``participants_only`` as those defaults.
    """

    participants_only: bool

    def begin_round(self, batch: torch.Tensor | None = None, max_batch: int | None = None,
                    clients: torch.Tensor | None = None) -> None: ...

    def sample(self, x: torch.Tensor, streams: ReplicateStreams) -> torch.Tensor: ...


class OracleBase:
    """Defaults of the :class:`GradientOracle` protocol: every slot holds its own client, nothing to reset."""

    #: the oracle does not accept ``clients`` in :meth:`begin_round`
    participants_only = False

    def begin_round(self, batch: torch.Tensor | None = None, max_batch: int | None = None,
                    clients: torch.Tensor | None = None) -> None:
        """Start a round (nothing to do for a stateless oracle)."""
        return None


class GaussianQuadraticOracle(OracleBase):
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
