"""Gradient oracles for clients with real data (:class:`~fedsde.problems.logistic.ClassificationProblem`).

Shapes follow :mod:`fedsde.sim.oracles`: ``x`` of shape ``(nb, Q, B, d)`` (blocks × clients × replicates per
block × dimension).  Client data sit in a padded layout ``(Q, N_max, n_features)``.  Every random draw fills
whole blocks from their own stream and every tensor has a shape fixed by the run's configuration (not by the
draws), which keeps results bit-identical and independent of how replicates are chunked.

* :class:`MinibatchOracle` — true minibatch SGD: the mean gradient of ``S_k`` samples drawn without replacement,
  either independently at every step (``sampling="minibatch"``) or as consecutive batches of a fresh random
  permutation every epoch (``sampling="epoch"``, what data loaders do; the last batch of an epoch may be
  smaller);
* :class:`GaussianMinibatchOracle` — the full client gradient plus Gaussian noise with the minibatch covariance
  ``Σ_k(w) = (1/S − 1/N_k) · sample covariance`` of seed 002, Sec. 3 (so the SDE machinery applies to real
  data): ``ξ = √((1/S − 1/N_k)/(N_k − 1)) Σ_i (z_i − z̄) ∇ℓ_i(w)`` with ``z_i ~ N(0, 1)`` has exactly that
  covariance;
* :class:`FullGradientOracle` — the exact client gradient (deterministic local GD).

Batch sizes are fixed (``batch_size=``) or handed over every round by the simulator from
:class:`~fedsde.sim.steps.EpochSteps` through ``begin_round(batch, max_batch)``.
"""

from __future__ import annotations

import torch

from fedsde._validate import positive_int
from fedsde.errors import FedsdeInputError
from fedsde.sim.streams import ReplicateStreams

SAMPLINGS = ("minibatch", "epoch")


class _DataOracle:
    """Shared set-up: padded data, targets, batch sizes and the clients held by each slot."""

    #: the simulator may hand over only the round's participants (``clients`` in :meth:`begin_round`)
    participants_only = True

    def __init__(self, problem, nblocks: int, device, dtype, batch_size: int | None):
        if not hasattr(problem, "padded"):
            raise FedsdeInputError(
                f"oracle: {type(problem).__name__} has no per-sample data; data oracles need a ClassificationProblem"
            )
        Xp, yp = problem.padded()
        self.problem = problem
        self.Q, self.n_max, self.F = Xp.shape
        self.K = problem.n_outputs
        self.logistic = problem.model == "logistic"
        self.l2 = float(problem.l2)
        self.X = torch.as_tensor(Xp, dtype=dtype, device=device)  # (Q, N, F)
        y = torch.as_tensor(yp, device=device)
        if self.logistic:
            self.Y = y.to(dtype).unsqueeze(-1)  # (Q, N, 1)
        else:
            self.Y = torch.nn.functional.one_hot(y, self.K).to(dtype)  # (Q, N, K)
        self.sizes = torch.as_tensor(problem.sizes, device=device)  # (Q,)
        self.pos = torch.arange(self.n_max, device=device)
        self.dtype, self.device = dtype, device
        self.fixed_batch = None if batch_size is None else positive_int("batch_size", batch_size)
        self.batch = None
        self.max_batch = None
        self.clients = None
        self.step = 0

    def begin_round(self, batch: torch.Tensor | None = None, max_batch: int | None = None,
                    clients: torch.Tensor | None = None) -> None:
        """Start a round.

        Parameters
        ----------
        batch : Tensor of int, shape (R, S), optional
            Batch size of every replicate and slot (default: the fixed ``batch_size``).
        max_batch : int, optional
            Padded batch length (at least ``batch.max()``; fixed by the run's configuration).
        clients : Tensor of int, shape (nb, S, B), optional
            Client held by every slot (default: slot ``k`` is client ``k``, ``S = Q``).
        """
        self.step = 0
        self.clients = clients
        if clients is None:
            sizes = self.sizes.view(1, self.Q, 1, 1)
        else:
            sizes = self.sizes[clients].unsqueeze(-1)  # (nb, S, B, 1)
        self._slot_sizes = sizes
        self._pad = self.pos >= sizes  # (…, N)
        if batch is None:
            if self.fixed_batch is None:
                raise FedsdeInputError(
                    "batch_size: the oracle needs a batch size (give batch_size= or local_steps=EpochSteps(...))"
                )
            self.batch = torch.clamp(sizes, max=self.fixed_batch)
            self.max_batch = int(min(self.fixed_batch, self.n_max))
        else:
            self.max_batch = int(max_batch) if max_batch is not None else int(batch.max())
            self.batch = batch  # (R, S); viewed block-major at the first step

    def _batch_view(self, nb: int, S: int, B: int) -> torch.Tensor:
        if self.batch.dim() == 2:
            self.batch = self.batch.view(nb, B, S).transpose(1, 2).unsqueeze(-1)
        return self.batch

    def _slot_data(self):
        """Design rows and targets of every slot's client: (1|nb, S, 1|B, N, F) and (…, N, K)."""
        if self.clients is None:
            return self.X.unsqueeze(0).unsqueeze(2), self.Y.unsqueeze(0).unsqueeze(2)
        return self.X[self.clients], self.Y[self.clients]

    def _grad(self, x: torch.Tensor, Xb: torch.Tensor, Yb: torch.Tensor, wts: torch.Tensor) -> torch.Tensor:
        """``Σ_s wts_s ∇ℓ_s(x) + λx`` for samples ``Xb`` (nb, S, B, n, F), targets ``Yb`` and weights (…, n)."""
        nb, S, B, d = x.shape
        W = x.view(nb, S, B, self.F, self.K)
        Z = torch.matmul(Xb, W)  # (nb, S, B, n, K)
        if self.logistic:
            P = torch.sigmoid(Z)
        else:
            P = torch.exp(Z - Z.amax(-1, keepdim=True))
            P = P / P.sum(-1, keepdim=True)
        E = (P - Yb).mul_(wts.unsqueeze(-1))
        G = torch.matmul(Xb.transpose(-1, -2), E).reshape(nb, S, B, d)
        return G.add_(x, alpha=self.l2) if self.l2 else G


class MinibatchOracle(_DataOracle):
    """Minibatch gradients drawn without replacement (see the module docstring).

    Parameters
    ----------
    problem : ClassificationProblem
    nblocks : int
    device, dtype
    batch_size : int, optional
        Fixed batch size ``S`` (capped at ``N_k``); otherwise taken from ``EpochSteps`` every round.
    sampling : {"minibatch", "epoch"}
    """

    def __init__(self, problem, nblocks, device, dtype, *, batch_size: int | None = None,
                 sampling: str = "minibatch"):
        super().__init__(problem, nblocks, device, dtype, batch_size)
        if sampling not in SAMPLINGS:
            raise FedsdeInputError(f"sampling={sampling!r}: must be one of {', '.join(SAMPLINGS)}")
        self.sampling = sampling
        self._keys = None
        self._perm = None

    def sample(self, x: torch.Tensor, streams: ReplicateStreams) -> torch.Tensor:
        nb, S, B, _ = x.shape
        cap = self.max_batch
        batch = self._batch_view(nb, S, B)  # (nb|1, S, B|1, 1)
        if self._keys is None or self._keys.shape[:3] != (nb, S, B):
            self._keys = torch.empty((nb, S, B, self.n_max), dtype=torch.float64, device=self.device)
        keys = streams.uniform_(self._keys).masked_fill(self._pad, 2.0)  # padding sorts last
        ar = torch.arange(cap, device=self.device)
        if self.sampling == "minibatch":
            idx = torch.topk(keys, cap, dim=-1, largest=False, sorted=True).indices  # (nb, S, B, cap)
            valid = ar < batch
        else:
            sizes = self._slot_sizes
            j = self.step % (-(-sizes // batch))  # batch index within the epoch
            fresh = torch.argsort(keys, dim=-1)
            self._perm = fresh if self.step == 0 else torch.where(j == 0, fresh, self._perm)
            pos = j * batch + ar
            valid = (ar < batch) & (pos < sizes)
            idx = self._perm.gather(-1, pos.clamp(max=self.n_max - 1).expand(nb, S, B, cap))
        self.step += 1
        if self.clients is None:
            base = (torch.arange(self.Q, device=self.device) * self.n_max).view(1, S, 1, 1)
        else:
            base = (self.clients * self.n_max).unsqueeze(-1)
        flat = (idx + base).reshape(-1)
        Xb = self.X.view(-1, self.F).index_select(0, flat).view(nb, S, B, cap, self.F)
        Yb = self.Y.view(-1, self.K).index_select(0, flat).view(nb, S, B, cap, self.K)
        count = valid.sum(-1, keepdim=True).clamp(min=1).to(self.dtype)
        return self._grad(x, Xb, Yb, valid.to(self.dtype) / count)


class GaussianMinibatchOracle(_DataOracle):
    """Full client gradient plus Gaussian noise with the minibatch covariance (see the module docstring).

    Parameters are those of :class:`MinibatchOracle` without ``sampling``.
    """

    def __init__(self, problem, nblocks, device, dtype, *, batch_size: int | None = None):
        super().__init__(problem, nblocks, device, dtype, batch_size)
        self._z = None

    def sample(self, x: torch.Tensor, streams: ReplicateStreams) -> torch.Tensor:
        nb, S, B, _ = x.shape
        batch = self._batch_view(nb, S, B).to(self.dtype)
        if self._z is None or self._z.shape[:3] != (nb, S, B):
            self._z = torch.empty((nb, S, B, self.n_max), dtype=self.dtype, device=self.device)
        z = streams.normal_(self._z).masked_fill(self._pad, 0.0)
        n = self._slot_sizes.to(self.dtype)
        zc = (z - z.sum(-1, keepdim=True) / n).masked_fill(self._pad, 0.0)
        scale = torch.sqrt(torch.clamp(1.0 / batch - 1.0 / n, min=0.0) / torch.clamp(n - 1.0, min=1.0))
        wts = (1.0 / n).masked_fill(self._pad, 0.0) + scale * zc  # (nb, S, B, N)
        Xb, Yb = self._slot_data()
        return self._grad(x, Xb, Yb, wts)


class FullGradientOracle(_DataOracle):
    """Exact client gradients ``∇F_k(x)`` (no noise)."""

    def __init__(self, problem, nblocks, device, dtype):
        super().__init__(problem, nblocks, device, dtype, batch_size=1)

    def begin_round(self, batch=None, max_batch=None, clients=None) -> None:
        super().begin_round(None, None, clients)

    def sample(self, x: torch.Tensor, streams: ReplicateStreams) -> torch.Tensor:
        wts = (1.0 / self._slot_sizes.to(self.dtype)).masked_fill(self._pad, 0.0)
        Xb, Yb = self._slot_data()
        return self._grad(x, Xb, Yb, wts)


def minibatch_oracle(batch_size: int | None = None, sampling: str = "minibatch"):
    """Oracle factory ``(problem, nblocks, device, dtype) -> MinibatchOracle`` for :func:`fedsde.sim.simulate`."""
    if sampling not in SAMPLINGS:
        raise FedsdeInputError(f"sampling={sampling!r}: must be one of {', '.join(SAMPLINGS)}")
    if batch_size is not None:
        positive_int("batch_size", batch_size)

    def factory(problem, nblocks, device, dtype):
        return MinibatchOracle(problem, nblocks, device, dtype, batch_size=batch_size, sampling=sampling)

    factory.describe = {"oracle": "minibatch", "batch_size": batch_size, "sampling": sampling}
    return factory


def gaussian_oracle(batch_size: int | None = None):
    """Oracle factory for :class:`GaussianMinibatchOracle`."""
    if batch_size is not None:
        positive_int("batch_size", batch_size)

    def factory(problem, nblocks, device, dtype):
        return GaussianMinibatchOracle(problem, nblocks, device, dtype, batch_size=batch_size)

    factory.describe = {"oracle": "gaussian", "batch_size": batch_size}
    return factory


def full_gradient_oracle():
    """Oracle factory for :class:`FullGradientOracle`."""

    def factory(problem, nblocks, device, dtype):
        return FullGradientOracle(problem, nblocks, device, dtype)

    factory.describe = {"oracle": "full"}
    return factory
