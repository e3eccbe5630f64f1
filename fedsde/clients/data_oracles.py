"""Gradient oracles for clients with real data (:class:`~fedsde.problems.classification.problem.ClassificationProblem`).

Shapes follow :mod:`fedsde.clients.oracles`: ``x`` of shape ``(nb, slots, B, d)`` (blocks × client slots ×
replicates per block × dimension).  Every random draw fills whole blocks from their own stream and every tensor has a
shape fixed by the run's configuration (not by the draws), which keeps results bit-identical and independent of how
replicates are chunked.  Models: logistic, softmax and the one-hidden-layer tanh MLP
(:mod:`fedsde.problems.classification.mlp`).

* :class:`MinibatchOracle` — true minibatch SGD: the mean gradient of ``S_k`` samples drawn without replacement,
  either independently at every step (``sampling="minibatch"``) or as consecutive batches of a fresh random
  permutation every epoch (``sampling="epoch"``, what data loaders do; the last batch of an epoch may be
  smaller);
* :class:`GaussianMinibatchOracle` — the full client gradient plus Gaussian noise with the minibatch covariance
  ``Σ_k(w) = (1/b − 1/N_k) · sample covariance`` (``b`` the batch size) of seed 002, Sec. 3 (so the SDE
  machinery applies to real data): ``ξ = √((1/b − 1/N_k)/(N_k − 1)) Σ_i (z_i − z̄) ∇ℓ_i(w)`` with
  ``z_i ~ N(0, 1)`` has exactly that covariance;
* :class:`FullGradientOracle` — the exact client gradient (deterministic local GD).

How the work is laid out (results are the same up to rounding; the choice depends on the configuration only):

* *shared rows* — every slot holds its own client (no participation sampling): the client's rows ``X_k`` are
  shared by all replicates, so one matmul ``X_k (N_k × F) @ W (F × replicates·K)`` per client does the forward
  pass and one ``X_kᵀ @ E`` the backward pass; a minibatch is a 0/1 weight per row.  Used when the padded
  client length ``N_max`` is at most twice the batch (or for full / Gaussian gradients), so the work stays
  O(batch) per step.
* *gathered rows* — otherwise each replicate's minibatch rows are gathered (``index_select``) and batched
  matmuls of shape ``(batch × F) @ (F × K)`` run per replicate.  Minibatches of at most :data:`FLOYD_MAX` rows
  are drawn with Floyd's algorithm (``b`` uniform draws per slot and step: O(batch) randomness and O(batch²)
  work whatever ``N_k``); larger ones keep the ``b`` smallest of ``N_max`` uniform keys.

Batch sizes are fixed (``batch_size=``) or handed over every round by the simulator from
:class:`~fedsde.clients.steps.EpochSteps` through ``begin_round(batch=…, max_batch=…)`` (the
:class:`~fedsde.clients.oracles.GradientOracle` protocol).
"""

from __future__ import annotations

import torch

from fedsde.clients.data_rows import ClientRows
from fedsde.clients.oracles import OracleBase
from fedsde.clients.population_rows import PopulationRows
from fedsde.clients.streams import ReplicateStreams
from fedsde.errors import FedsdeInputError
from fedsde.params import takes_values
from fedsde.problems.classification.models import LogisticModel
from fedsde.problems.classification.options import DEFAULTS, SAMPLINGS, Minibatches  # noqa: F401 (SAMPLINGS: re-exported)

#: use shared client rows with 0/1 weights while N_max <= DENSE_FACTOR · batch (else gather the batch rows)
DENSE_FACTOR = 2
#: largest batch drawn with Floyd's algorithm (its work grows as batch²)
FLOYD_MAX = 32


class _DataOracle(OracleBase):
    """Shared set-up: data layouts, batch sizes (``batch_size`` checked by the caller: a :class:`Minibatches`'),
    the clients held by each slot, and the model's gradients."""

    #: the simulator may hand over only the round's participants (``clients`` in :meth:`begin_round`)
    participants_only = True
    accepts_clients = True

    def __init__(self, problem, nblocks: int, device, dtype, batch_size: int | None):
        population = hasattr(problem, "population")
        if not population and not hasattr(problem, "padded"):
            raise FedsdeInputError(
                f"oracle: {type(problem).__name__} has no per-sample data; data oracles need a ClassificationProblem"
            )
        self.problem = problem
        # padded (built on first use) or ragged rows; a population's participants' rows, loaded round by round
        self.rows = (PopulationRows if population else ClientRows)(problem, device, dtype)
        self.Q, self.n_max, self.F = self.rows.Q, self.rows.n_max, self.rows.F
        self.K = problem.n_outputs
        model = problem.classifier
        self.logistic = isinstance(model, LogisticModel)
        self.H = int(model.hidden) if model.hidden_layer else 0
        self.l2 = float(problem.l2)
        self.sizes = torch.as_tensor(problem.sizes, device=device)  # (Q,)
        self.pos = torch.arange(self.n_max, device=device)
        self.dtype, self.device = dtype, device
        self.fixed_batch = batch_size
        self.batch = None
        self.max_batch = None
        self.clients = None
        self._pad_mask = None
        self.step = 0
        self._rows = None
        self._rep = None
        self._bufs: dict[str, torch.Tensor] = {}
        self._from_fixed = True
        self._mean_w = None

    @property
    def X(self) -> torch.Tensor:
        """Design rows of every client, padded: (Q, N_max, F)."""
        return self.rows.X

    @property
    def Xt(self) -> torch.Tensor:
        """Their transpose, (Q, F, N_max)."""
        return self.rows.Xt

    @property
    def Y(self) -> torch.Tensor:
        """Targets, padded: (Q, N_max, 1) (logistic) or one-hot (Q, N_max, K)."""
        return self.rows.Y

    def begin_round(self, batch: torch.Tensor | None = None, max_batch: int | None = None,
                    clients: torch.Tensor | None = None) -> None:
        """Start a round.

        Parameters
        ----------
        batch : Tensor of int, shape (R, slots), optional
            Batch size of every replicate and slot (default: the fixed ``batch_size``).
        max_batch : int, optional
            Padded batch length (at least ``batch.max()``; fixed by the run's configuration).
        clients : Tensor of int, shape (nb, slots, B), optional
            Client held by every slot (default: slot ``k`` is client ``k``, ``slots = Q``).
        """
        self.step = 0
        self._rows = None
        self._mean_w = None
        if clients is None:
            sizes = self.sizes.view(1, self.Q, 1, 1)
        else:
            sizes = self.sizes[clients].unsqueeze(-1)  # (nb, slots, B, 1)
        if isinstance(self.rows, PopulationRows):  # the participants' rows; the slots renumbered into them
            clients = self.rows.select(clients)
        self.clients = clients
        self._slot_sizes = sizes
        self._pad_mask = None
        self._from_fixed = batch is None  # batch sizes from the fixed batch_size (not handed over by EpochSteps)
        if batch is None:
            if self.fixed_batch is None:
                raise FedsdeInputError(
                    "batch_size: the oracle needs a batch size (give batch_size= or local_steps=EpochSteps(...))"
                )
            self.batch = torch.clamp(sizes, max=self.fixed_batch)
            self.max_batch = int(min(self.fixed_batch, self.n_max))
        else:
            self.max_batch = int(max_batch) if max_batch is not None else int(batch.max())
            self.batch = batch  # (R, slots); viewed block-major at the first step

    @property
    def _pad(self) -> torch.Tensor:
        """Padding rows of every slot's client, (…, N_max); formed on first use in a round (passes that gather a
        minibatch never need it)."""
        if self._pad_mask is None:
            self._pad_mask = self.pos >= self._slot_sizes
        return self._pad_mask

    def _mean_weights(self) -> torch.Tensor:
        """``1/N_k`` on every real row of each slot's client (0 on padding), shape (1|nb, slots, 1|B, N); per round."""
        if self._mean_w is None:
            self._mean_w = (1.0 / self._slot_sizes.to(self.dtype)).masked_fill(self._pad, 0.0)
        return self._mean_w

    def _batch_view(self, nb: int, slots: int, B: int) -> torch.Tensor:
        if self.batch.dim() == 2:
            self.batch = self.batch.view(nb, B, slots).transpose(1, 2).unsqueeze(-1)
        return self.batch

    # ------------------------------------------------------------------ gradients
    def _residual(self, Z: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """``∂ℓ/∂z``: ``σ(z) − y`` or ``softmax(z) − e_y`` (``Y`` broadcast against ``Z``)."""
        if self.logistic:
            return torch.sigmoid(Z).sub_(Y)
        P = torch.exp(Z - Z.amax(-1, keepdim=True))
        return P.div_(P.sum(-1, keepdim=True)).sub_(Y)

    def _grad_dense(self, x: torch.Tensor, wts: torch.Tensor) -> torch.Tensor:
        """``Σ_i wts_i ∇ℓ_i(x) + λx`` over all (padded) rows of every slot's client; ``wts`` (nb, slots, B, N)."""
        if self.clients is None:
            return self._grad_shared(x, wts)
        if self._rows is None:  # the slots' client rows (M, N, F), gathered once per round
            self._rows = self.rows.slot_rows(self.clients)
        g = self._grad_rows(x, *self._rows, wts)
        return g.add_(x, alpha=self.l2) if self.l2 else g

    def _buf(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        """A work buffer reused across steps (fresh large allocations cost page faults on every step)."""
        b = self._bufs.get(name)
        if b is None or b.shape != shape:
            b = self._bufs[name] = torch.empty(shape, dtype=self.dtype, device=self.device)
        return b

    def _shared_rows(self, nb: int):
        """Client rows ``X`` (nb·slots, N, F), ``Xᵀ`` (nb·slots, F, N), targets ``Yᵀ`` (nb·slots, 1, K, N), repeated
        per block."""
        if self._rep is None or self._rep[0] != nb:
            slots, N, F = self.X.shape
            Yt = self.Y.transpose(1, 2)
            self._rep = (nb, self.X.expand(nb, slots, N, F).reshape(nb * slots, N, F),
                         self.Xt.expand(nb, slots, F, N).reshape(nb * slots, F, N),
                         Yt.expand(nb, slots, *Yt.shape[1:]).reshape(nb * slots, 1, *Yt.shape[1:]))
        return self._rep[1:]

    def _softmax_residual_(self, Z: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """In place: ``Z`` (…, K) of logits becomes ``softmax(Z) − Y``."""
        Z.sub_(Z.amax(-1, keepdim=True)).exp_()
        return Z.div_(Z.sum(-1, keepdim=True)).sub_(Y)

    def _softmax_residual_t(self, Z: torch.Tensor, Yt: torch.Tensor) -> torch.Tensor:
        """In place: ``Z`` (…, K, N) of logits becomes ``softmax over K − Yᵀ`` (``σ − y`` for logistic)."""
        if self.logistic:
            return Z.sigmoid_().sub_(Yt)
        Z.sub_(Z.amax(-2, keepdim=True)).exp_()
        return Z.div_(Z.sum(-2, keepdim=True)).sub_(Yt)

    def _grad_shared(self, x: torch.Tensor, wts: torch.Tensor) -> torch.Tensor:
        """Slot ``k`` holds client ``k``: per (block, client), all ``B`` replicates in one matmul with the client's
        rows — logits ``(N × F) @ (F × B·K)`` (linear) or hidden pre-activations ``(B·H × F) @ (F × N)`` (MLP) — so
        that only small per-replicate transposes of ``W`` are needed; ridge term included."""
        nb, slots, B, d = x.shape
        F, K, H, N = self.F, self.K, self.H, self.n_max
        M = nb * slots
        Xr, Xtr, Ytr = self._shared_rows(nb)
        xs = x.view(M, B, d)
        wts = wts.expand(nb, slots, wts.shape[2], N)  # B axis may be 1 (weights shared by the replicates)
        out = torch.empty_like(x)
        o = out.view(M, B, d)
        if not H:
            Wt = self._buf("Wt", (M, B, K, F))
            Wt.copy_(xs.view(M, B, F, K).transpose(2, 3))
            Wt3 = Wt.view(M, B * K, F)
            Yr4 = self.Y.unsqueeze(0).expand(nb, *self.Y.shape).reshape(M, N, 1, -1)
            # logits of every row and replicate: Z = X Wᵀᵀ, shape (M, N, B·K), classes contiguous
            Z = torch.bmm(Xr, Wt3.transpose(1, 2), out=self._buf("Z", (M, N, B * K))).view(M, N, B, K)
            E = self._residual(Z, Yr4) if self.logistic else self._softmax_residual_(Z, Yr4)
            E.mul_(wts.reshape(M, -1, N).transpose(1, 2).unsqueeze(-1))
            # G = Eᵀ X + λ·Wᵀ, in place in the Wᵀ buffer (one pass), then transposed back per replicate
            G = torch.baddbmm(Wt3, E.view(M, N, B * K).transpose(1, 2), Xr, beta=self.l2, out=Wt3)
            o.view(M, B, F, K).copy_(G.view(M, B, K, F).transpose(2, 3))
            return out
        cut = F * H
        W1t = self._buf("W1t", (M, B, H, F))
        W1t.copy_(xs[..., :cut].reshape(M, B, F, H).transpose(2, 3))
        A = torch.bmm(W1t.view(M, B * H, F), Xtr, out=self._buf("A", (M, B * H, N))).tanh_()  # (M, B·H, N)
        A = A.view(M * B, H, N)
        W2 = xs[..., cut:].reshape(M * B, H + 1, K)
        Z = torch.baddbmm(W2[:, H:].transpose(1, 2), W2[:, :H].transpose(1, 2), A)  # (M·B, K, N)
        E = self._softmax_residual_t(Z.view(M, B, K, N), Ytr).mul_(wts.reshape(M, -1, 1, N)).view(M * B, K, N)
        g2 = o[..., cut:].view(M * B, H + 1, K)
        g2[:, :H].copy_(torch.baddbmm(W2[:, :H], A, E.transpose(1, 2), beta=self.l2))  # contiguous, then placed
        torch.add(E.sum(-1), W2[:, H], alpha=self.l2, out=g2[:, H])
        D = torch.bmm(W2[:, :H], E).mul_(1.0 - A * A)  # (M·B, H, N)
        G = torch.baddbmm(W1t.view(M, B * H, F), D.view(M, B * H, N), Xr, beta=self.l2, out=W1t.view(M, B * H, F))
        o[..., :cut].unflatten(-1, (F, H)).copy_(G.view(M, B, H, F).transpose(2, 3))
        return out

    def _grad_rows(self, x: torch.Tensor, Xr: torch.Tensor, Xrt: torch.Tensor, Yr: torch.Tensor,
                   wts: torch.Tensor) -> torch.Tensor:
        """``Σ_i wts_i ∇ℓ_i(x)`` with each replicate's own rows ``Xr`` (M, n, F), ``Xrt = Xrᵀ`` (M, F, n),
        targets ``Yr`` (M, n, K) and weights ``wts`` (nb, slots, B, n); ``M = nb·slots·B`` (no ridge term)."""
        nb, slots, B, d = x.shape
        M = nb * slots * B
        F, K, H = self.F, self.K, self.H
        w8 = wts.expand(nb, slots, B, -1).reshape(M, -1, 1)
        if not H:
            Z = torch.bmm(Xr, x.reshape(M, F, K))
            E = self._residual(Z, Yr).mul_(w8)
            return torch.bmm(Xrt, E).view(nb, slots, B, d)
        cut = F * H
        xf = x.reshape(M, d)
        W2 = xf[:, cut:].reshape(M, H + 1, K)
        A = torch.tanh(torch.bmm(Xr, xf[:, :cut].reshape(M, F, H)))  # (M, n, H)
        Z = torch.baddbmm(W2[:, H:], A, W2[:, :H])
        E = self._residual(Z, Yr).mul_(w8)
        g2 = torch.cat([torch.bmm(A.transpose(1, 2), E), E.sum(1, keepdim=True)], dim=1)
        D = torch.bmm(E, W2[:, :H].transpose(1, 2)).mul_(1.0 - A * A)
        g1 = torch.bmm(Xrt, D)
        return torch.cat([g1.view(M, cut), g2.view(M, -1)], dim=1).view(nb, slots, B, d)

    def _gather(self, idx: torch.Tensor):
        """Rows ``idx`` (nb, slots, B, n) of every slot's client: (M, n, F), its transpose and targets (M, n, K)."""
        return self.rows.gather(idx, self.clients)


def floyd_sample(u: torch.Tensor, n: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Uniform ``b``-subsets of ``{0, …, n − 1}`` from uniforms ``u`` (…, cap) by Floyd's algorithm.

    For ``t = 0 … b − 1``: ``j = n − b + t``, ``r = ⌊u_t (j + 1)⌋``; take ``r`` unless already taken, else ``j``
    (Floyd, "A sample of brilliance", CACM 1987).  ``n``, ``b`` broadcast against ``u[..., 0]`` with
    ``1 <= b <= n``; entries ``t >= b`` are 0 (mask them with ``t < b``).  Work O(cap²) per slot, independent of n.

    Returns
    -------
    Tensor of int64, shape of ``u``
    """
    cap = u.shape[-1]
    idx = torch.zeros(u.shape, dtype=torch.int64, device=u.device)
    nb = (n - b).to(torch.int64)
    for t in range(cap):
        j = nb + t  # (…,) largest index allowed at this draw
        r = torch.minimum(torch.floor(u[..., t] * (j + 1).to(u.dtype)).to(torch.int64), j)
        if t:
            r = torch.where((idx[..., :t] == r.unsqueeze(-1)).any(-1), j, r)
        idx[..., t] = torch.where(t < b, r, 0)
    return idx


class MinibatchOracle(_DataOracle):
    """Minibatch gradients drawn without replacement (see the module docstring).

    Parameters
    ----------
    problem : ClassificationProblem
    nblocks : int
    device, dtype
    minibatches : Minibatches, optional
        Its ``batch_size``: a fixed batch size ``b`` (capped at ``N_k``; ``None``: taken from ``EpochSteps`` every
        round) and its ``sampling`` (``"minibatch"``, ``"epoch"``), checked (taken whole, trusted), or those
        keywords.
    """

    @takes_values(types={"minibatches": Minibatches}, minibatches=("batch_size", "sampling"))
    def __init__(self, problem, nblocks, device, dtype, *, minibatches: Minibatches | None = None):
        batches = minibatches or DEFAULTS[1]
        super().__init__(problem, nblocks, device, dtype, batches.batch_size)
        self.sampling = batches.sampling
        self._u = None
        self._perm = None
        # every slot's batch covers all its rows: the minibatch is the whole client (no randomness needed)
        self._whole = batches.batch_size is not None and batches.batch_size >= self.n_max

    def _buffer(self, shape: tuple[int, ...]) -> torch.Tensor:
        if self._u is None or self._u.shape != shape:
            self._u = torch.empty(shape, dtype=torch.float64, device=self.device)
        return self._u

    def sample(self, x: torch.Tensor, streams: ReplicateStreams) -> torch.Tensor:
        nb, slots, B, _ = x.shape
        cap = self.max_batch
        batch = self._batch_view(nb, slots, B)  # (nb|1, slots, B|1, 1)
        sizes = self._slot_sizes
        step = self.step
        self.step += 1
        if self._whole and self._from_fixed:
            return self._grad_dense(x, self._mean_weights())
        if self.sampling == "epoch":
            keys = streams.uniform_(self._buffer((nb, slots, B, self.n_max))).masked_fill(self._pad, 2.0)
            ar = torch.arange(cap, device=self.device)
            j = step % (-(-sizes // batch))  # batch index within the epoch
            fresh = torch.argsort(keys, dim=-1)
            self._perm = fresh if step == 0 else torch.where(j == 0, fresh, self._perm)
            pos = j * batch + ar
            valid = (ar < batch) & (pos < sizes)
            idx = self._perm.gather(-1, pos.clamp(max=self.n_max - 1).expand(nb, slots, B, cap))
        elif self.n_max <= DENSE_FACTOR * cap:  # draw over all rows, keep the `batch` smallest keys
            keys = streams.uniform_(self._buffer((nb, slots, B, self.n_max))).masked_fill(self._pad, 2.0)
            kth = torch.topk(keys, cap, dim=-1, largest=False, sorted=True).values
            thr = kth.gather(-1, (batch.expand(nb, slots, B, 1) - 1).clamp(min=0))
            chosen = (keys <= thr) & ~self._pad
            count = torch.clamp(batch, min=1).to(self.dtype)
            return self._grad_dense(x, chosen.to(self.dtype) / count)
        elif cap > FLOYD_MAX:  # the `batch` smallest of N_max keys
            keys = streams.uniform_(self._buffer((nb, slots, B, self.n_max))).masked_fill(self._pad, 2.0)
            idx = torch.topk(keys, cap, dim=-1, largest=False, sorted=True).indices
            valid = torch.arange(cap, device=self.device) < batch
        else:  # Floyd: O(batch) draws per slot
            u = streams.uniform_(self._buffer((nb, slots, B, cap)))
            b = batch.expand(nb, slots, B, 1)[..., 0]
            idx = floyd_sample(u, sizes.expand(nb, slots, B, 1)[..., 0], b)
            valid = torch.arange(cap, device=self.device) < batch
        valid = valid.expand(nb, slots, B, cap)
        count = valid.sum(-1, keepdim=True).clamp(min=1).to(self.dtype)
        g = self._grad_rows(x, *self._gather(idx), valid.to(self.dtype) / count)
        return g.add_(x, alpha=self.l2) if self.l2 else g


class GaussianMinibatchOracle(_DataOracle):
    """Full client gradient plus Gaussian noise with the minibatch covariance (see the module docstring).

    Parameters are those of :class:`MinibatchOracle`: of the ``minibatches`` only the ``batch_size`` is read.
    """

    @takes_values(types={"minibatches": Minibatches}, minibatches=("batch_size",))
    def __init__(self, problem, nblocks, device, dtype, *, minibatches: Minibatches | None = None):
        super().__init__(problem, nblocks, device, dtype, (minibatches or DEFAULTS[1]).batch_size)
        self._z = None

    def sample(self, x: torch.Tensor, streams: ReplicateStreams) -> torch.Tensor:
        nb, slots, B, _ = x.shape
        batch = self._batch_view(nb, slots, B).to(self.dtype)
        if self._z is None or self._z.shape[:3] != (nb, slots, B):
            self._z = torch.empty((nb, slots, B, self.n_max), dtype=self.dtype, device=self.device)
        z = streams.normal_(self._z).masked_fill(self._pad, 0.0)
        n = self._slot_sizes.to(self.dtype)
        zc = (z - z.sum(-1, keepdim=True) / n).masked_fill(self._pad, 0.0)
        scale = torch.sqrt(torch.clamp(1.0 / batch - 1.0 / n, min=0.0) / torch.clamp(n - 1.0, min=1.0))
        wts = (1.0 / n).masked_fill(self._pad, 0.0) + scale * zc  # (nb, slots, B, N)
        return self._grad_dense(x, wts)


class FullGradientOracle(_DataOracle):
    """Exact client gradients ``∇F_k(x)`` (no noise)."""

    def __init__(self, problem, nblocks, device, dtype):
        super().__init__(problem, nblocks, device, dtype, batch_size=1)

    def begin_round(self, batch=None, max_batch=None, clients=None) -> None:
        super().begin_round(None, None, clients)

    def sample(self, x: torch.Tensor, streams: ReplicateStreams) -> torch.Tensor:
        return self._grad_dense(x, self._mean_weights())


def minibatch_oracle(batch_size: int | None = None, sampling: str = "minibatch"):
    """Oracle factory ``(problem, nblocks, device, dtype) -> MinibatchOracle`` for :func:`fedsde.sim.simulate`."""
    return minibatches_oracle(Minibatches(batch_size, sampling))


def minibatches_oracle(minibatches: Minibatches):
    """The factory of :func:`minibatch_oracle` from a checked value, taken whole (e.g. a problem's
    :attr:`~fedsde.problems.ClassificationProblem.minibatches`)."""

    def factory(problem, nblocks, device, dtype):
        return MinibatchOracle(problem, nblocks, device, dtype, minibatches=minibatches)

    factory.describe = {"oracle": "minibatch", "batch_size": minibatches.batch_size, "sampling": minibatches.sampling}
    return factory


def gaussian_oracle(batch_size: int | None = None):
    """Oracle factory for :class:`GaussianMinibatchOracle`."""
    batches = Minibatches(batch_size)

    def factory(problem, nblocks, device, dtype):
        return GaussianMinibatchOracle(problem, nblocks, device, dtype, minibatches=batches)

    factory.describe = {"oracle": "gaussian", "batch_size": batch_size}
    return factory


def full_gradient_oracle():
    """Oracle factory for :class:`FullGradientOracle`."""

    def factory(problem, nblocks, device, dtype):
        return FullGradientOracle(problem, nblocks, device, dtype)

    factory.describe = {"oracle": "full"}
    return factory
