"""Stochastic-gradient oracles used by the local-training loop (:mod:`fedsde.clients.local`).

The loop keeps client weights in block-major layout ``x`` of shape ``(nb, slots, B, d)``: ``nb`` blocks of ``B``
(= :data:`fedsde.clients.streams.BLOCK` by default) replicates, ``slots`` client slots (``Q``, or the round's ``m``
participants), dimension ``d``.  An oracle is built for one chunk of blocks on one device and answers
``sample(x, streams) -> g`` (same shape) with ``g = ∇F_k(x) + ξ``.  Randomness comes only from the
:class:`~fedsde.clients.streams.ReplicateStreams` it is handed; all arithmetic is per block with fixed shapes, which
keeps results independent of chunking.  :class:`GradientOracle` is the protocol, :class:`OracleBase` its defaults.
"""

from __future__ import annotations

from typing import Protocol

import torch

from fedsde.clients.streams import ReplicateStreams
from fedsde.problems.quadratic.problem import QuadraticProblem


class GradientOracle(Protocol):
    """What the local-training loop (:func:`fedsde.clients.local.run_local_steps`) asks of a gradient oracle.

    Attributes
    ----------
    participants_only : bool
        True when :meth:`begin_round` accepts ``clients``: the simulator may then hand over only the round's
        participants (``slots = m`` instead of ``Q``) under partial participation.
    accepts_clients : bool
        True when :meth:`begin_round` accepts ``clients`` (every ``participants_only`` oracle does); an oracle that
        accepts them without ``participants_only`` (the Gaussian quadratic one, whose draws for all ``Q`` clients
        define the numbers of ordinary runs) gets only the participants in the cross-device regime of
        :mod:`fedsde.sim.participation`.

    Methods
    -------
    begin_round(batch=None, max_batch=None, clients=None)
        Called once at the start of every round of local training, always with these three keywords:
        ``batch`` of shape ``(R, slots)`` the round's batch sizes (from :class:`~fedsde.clients.steps.EpochSteps`,
        else ``None``: the oracle's own batch size), ``max_batch`` the padded batch length fixed by the run
        (``None`` with ``batch=None``), ``clients`` of shape ``(nb, slots, B)`` the client held by each of the
        slots of ``x`` (``None``: slot ``k`` holds client ``k``).
    sample(x, streams)
        ``g = ∇F_k(x) + ξ`` of the shape of ``x``, ``(nb, slots, B, d)``, drawing only from ``streams``.

    :class:`OracleBase` gives the defaults (``participants_only = accepts_clients = False``, a ``begin_round`` that
    does nothing).  An object with only ``sample`` is accepted too: the loop reads a missing ``begin_round``,
    ``participants_only`` and ``accepts_clients`` as those defaults.
    """

    participants_only: bool
    accepts_clients: bool

    def begin_round(self, batch: torch.Tensor | None = None, max_batch: int | None = None,
                    clients: torch.Tensor | None = None) -> None: ...

    def sample(self, x: torch.Tensor, streams: ReplicateStreams) -> torch.Tensor: ...


class OracleBase:
    """Defaults of the :class:`GradientOracle` protocol: every slot holds its own client, nothing to reset."""

    #: the oracle does not accept ``clients`` in :meth:`begin_round`
    participants_only = False
    accepts_clients = False

    def begin_round(self, batch: torch.Tensor | None = None, max_batch: int | None = None,
                    clients: torch.Tensor | None = None) -> None:
        """Start a round (nothing to do for a stateless oracle)."""
        return None


class GaussianQuadraticOracle(OracleBase):
    """``g_k(x) = U_k (x − a_k) + L_k z``, ``z ~ N(0, I)``, ``L_k L_kᵀ = Σ_k`` (seed 002, Assumption 4.4).

    Elementwise products when every ``U_k`` and ``Σ_k`` is diagonal; batched matmuls of fixed shape
    ``(B, d) @ (d, d)`` otherwise.  Slot ``k`` holds client ``k`` unless :meth:`begin_round` hands over
    ``clients`` (the cross-device regime of :mod:`fedsde.sim.participation`): then every slot of every replicate
    computes with its own client's ``U``, ``a`` and ``L`` (gathered once per round).

    Parameters
    ----------
    problem : QuadraticProblem
    nblocks : int
        Blocks of replicates in the chunk.
    device, dtype
        Where and in what precision to compute.
    """

    #: :meth:`begin_round` accepts ``clients`` (used only in the cross-device regime, see :class:`GradientOracle`)
    accepts_clients = True

    def __init__(self, problem: QuadraticProblem, nblocks: int, device: torch.device, dtype: torch.dtype):
        self.problem, self.nblocks, self.device, self.dtype = problem, nblocks, device, dtype
        self.diagonal = problem.is_diagonal
        self.clients = None
        kw = {"dtype": dtype, "device": device}
        self._a = torch.as_tensor(problem.a, **kw)  # (Q, d)
        if self.diagonal:
            self._u = torch.as_tensor(problem.U.diagonal(axis1=1, axis2=2).copy(), **kw)  # (Q, d)
            self._l = torch.as_tensor(problem.Sigma.diagonal(axis1=1, axis2=2).copy() ** 0.5, **kw)
            self.u = self._u[None, :, None, :]  # (1, Q, 1, d)
            self.l = self._l[None, :, None, :]
            self.ua = self.u * self._a[None, :, None, :]
        self._per_block = None  # (Uᵀ, Lᵀ, −aᵀU) repeated per block, built at the first full-matrix step
        self._z = None

    def begin_round(self, batch=None, max_batch=None, clients: torch.Tensor | None = None) -> None:
        """Start a round; ``clients`` (nb, slots, B): the client of every slot (default: slot ``k`` is client ``k``)."""
        self.clients = None
        if clients is None:
            return
        if self.diagonal:
            self.clients = (self._u[clients], self._l[clients], self._u[clients] * self._a[clients])
        else:
            Ut, Lt, neg_aU = self._matrices()
            self.clients = (Ut[clients], Lt[clients], neg_aU[clients])  # (nb, slots, B, d, d), …, (nb, slots, B, 1, d)

    def _matrices(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``U_kᵀ``, ``L_kᵀ`` (Q, d, d) and ``−a_kᵀU_kᵀ`` (Q, 1, d) (cached)."""
        if not hasattr(self, "_mats"):
            kw = {"dtype": self.dtype, "device": self.device}
            Ut = torch.as_tensor(self.problem.U.transpose(0, 2, 1).copy(), **kw)
            Lt = torch.as_tensor(self.problem.noise_factors().transpose(0, 2, 1).copy(), **kw)
            self._mats = (Ut, Lt, -torch.bmm(self._a[:, None, :], Ut))
        return self._mats

    def sample(self, x: torch.Tensor, streams: ReplicateStreams) -> torch.Tensor:
        if self._z is None or self._z.shape != x.shape:
            self._z = torch.empty_like(x)
        z = streams.normal_(self._z)
        nb, Q, B, d = x.shape
        if self.clients is not None:  # every slot with its own client
            if self.diagonal:
                u, ell, ua = self.clients
                return torch.addcmul(torch.addcmul(-ua, u, x), ell, z)
            Ut, Lt, neg_aU = (t.reshape(nb * Q * B, *t.shape[-2:]) for t in self.clients)
            g = torch.baddbmm(neg_aU, x.reshape(nb * Q * B, 1, d), Ut)
            return torch.baddbmm(g, z.reshape(nb * Q * B, 1, d), Lt).view(nb, Q, B, d)
        if self.diagonal:
            return torch.addcmul(torch.addcmul(-self.ua, self.u, x), self.l, z)
        if self._per_block is None or self._per_block[0].shape[0] != nb * Q:
            self._per_block = tuple(m.expand(nb, *m.shape).reshape(nb * Q, *m.shape[1:]) for m in self._matrices())
        Ut, Lt, neg_aU = self._per_block  # x @ U_kᵀ, per block
        g = torch.baddbmm(neg_aU, x.reshape(nb * Q, B, d), Ut)
        g = torch.baddbmm(g, z.reshape(nb * Q, B, d), Lt)
        return g.view(nb, Q, B, d)
