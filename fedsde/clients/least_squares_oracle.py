"""Minibatch gradient oracle of least-squares clients (:class:`~fedsde.problems.regression.problem.RegressionProblem`).

It follows the oracle protocol of :mod:`fedsde.clients.oracles`: ``x`` of shape ``(nb, slots, B, d)`` (blocks × client
slots × replicates per block × dimension), ``sample(x, streams) -> g`` of the same shape with

    g = (1/b) Σ_{t=1..b} x_{i_t} (x_{i_t}ᵀ w − y_{i_t}) + λ w,

the rows ``i_1 … i_b`` drawn afresh at every step from the slot's client:

* ``sampling="with-replacement"`` — ``b`` independent uniform rows, ``i_t = ⌊u_t n_k⌋`` from ``b`` uniforms;
* ``sampling="without-replacement"`` — a uniform ``b``-subset: for ``b <=`` :data:`FLOYD_MAX` by Floyd's algorithm
  from ``b`` uniforms (:func:`floyd_subsets`), otherwise the ``b`` smallest of ``n_max`` uniform keys (keys of
  padding rows are set above every real key).

Every draw fills whole blocks from their own stream, with shapes fixed by the run's configuration (not by the
draws), so results are bit-identical however the replicates are chunked.  ``begin_round(batch, max_batch,
clients=…)`` takes per-slot batch sizes (from :class:`~fedsde.clients.steps.EpochSteps`) and the participants held
by the slots (``participants_only``), as the data oracles of :mod:`fedsde.clients.data_oracles` do.  On a
least-squares population (:class:`~fedsde.problems.regression.population.RegressionPopulation`, rows on disk)
``begin_round`` loads only the participants' rows (:func:`fedsde.clients.population_rows.gather_clients`, through
the problem's bounded cache) and renumbers the slots' clients into them; the draws, which depend only on the sizes
and on ``n_max`` (the whole population's), are those of the materialised problem, and so are the numbers.
"""

from __future__ import annotations

import numpy as np
import torch

from fedsde._validate import choice, positive_int
from fedsde.clients.population_rows import gather_clients
from fedsde.errors import FedsdeInputError

SAMPLINGS = ("without-replacement", "with-replacement")

#: largest batch drawn with Floyd's algorithm (its work grows as batch²); larger ones use n_max keys
FLOYD_MAX = 32


def floyd_subsets(u: torch.Tensor, n: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Uniform ``b``-subsets of ``{0, …, n − 1}`` from uniforms ``u`` (…, cap) by Floyd's algorithm.

    For ``t = 0 … b − 1``: ``j = n − b + t``, ``r = ⌊u_t (j + 1)⌋``; take ``r`` unless already taken, else ``j``
    (Floyd, "A sample of brilliance", CACM 1987).  ``n``, ``b`` (int64) broadcast against ``u[..., 0]`` with
    ``1 <= b <= n``; entries ``t >= b`` are 0 (mask them).

    Returns
    -------
    Tensor of int64, shape of ``u``
    """
    idx = torch.zeros(u.shape, dtype=torch.int64, device=u.device)
    low = n - b
    for t in range(u.shape[-1]):
        j = low + t
        r = torch.minimum(torch.floor(u[..., t] * (j + 1).to(u.dtype)).to(torch.int64), j)
        if t:
            r = torch.where((idx[..., :t] == r.unsqueeze(-1)).any(-1), j, r)
        idx[..., t] = torch.where(t < b, r, 0)
    return idx


class LeastSquaresMinibatchOracle:
    """Minibatch gradients of least-squares clients (see the module docstring).

    Parameters
    ----------
    problem : RegressionProblem or RegressionPopulation
    nblocks : int
        Blocks of replicates in the chunk.
    device, dtype
    batch_size : int, optional
        Rows per step ``b`` (default: the problem's; EpochSteps may hand over batch sizes every round instead).
    sampling : {"without-replacement", "with-replacement"}, optional
        Default: the problem's.
    """

    #: the simulator may hand over only the round's participants (``clients`` in :meth:`begin_round`)
    participants_only = True
    accepts_clients = True

    def __init__(self, problem, nblocks: int, device, dtype, *, batch_size: int | None = None,
                 sampling: str | None = None):
        self.on_demand = hasattr(problem, "client_data") and hasattr(problem, "store")
        if not (hasattr(problem, "padded_rows") or self.on_demand):
            raise FedsdeInputError(f"oracle: {type(problem).__name__} has no regression rows; the least-squares "
                                   "oracle needs a RegressionProblem")
        # the problem's own batch size and sampling were checked when it was built; given ones are checked here
        sampling = problem.sampling if sampling is None else choice("sampling", sampling, SAMPLINGS)
        self.problem = problem
        self.Q, self.n_max, self.d = problem.Q, int(np.max(problem.sizes)), problem.d
        # the rows as they are, client after client (memory N·d, not Q·max n_k); row i of client k is at
        # offsets[k] + i.  A population (rows on disk) loads its round's participants in begin_round instead.
        if not self.on_demand:
            self.X = torch.as_tensor(problem.X, dtype=dtype, device=device)  # (N, d)
            self.y = torch.as_tensor(problem.y, dtype=dtype, device=device)  # (N,)
            self.sizes = torch.as_tensor(problem.sizes, device=device)
            self.offsets = torch.as_tensor(np.concatenate([[0], np.cumsum(problem.sizes)[:-1]]), dtype=torch.int64,
                                           device=device)
        self.l2 = float(problem.l2)
        self.replace = sampling == "with-replacement"
        self.fixed_batch = problem.batch_size if batch_size is None else positive_int("batch_size", batch_size)
        if self.fixed_batch is not None and not self.replace and self.fixed_batch > int(problem.sizes.min()):
            raise FedsdeInputError(f"batch_size={self.fixed_batch}: exceeds the {int(problem.sizes.min())} rows of "
                                   "the smallest client (sampling='without-replacement')")
        self.dtype, self.device = dtype, device
        self.pos = torch.arange(self.n_max, device=device)
        self._u: torch.Tensor | None = None
        self.clients = None
        self.batch = None
        self.cap = None

    def begin_round(self, batch: torch.Tensor | None = None, max_batch: int | None = None,
                    clients: torch.Tensor | None = None) -> None:
        """Start a round: ``batch`` (R, slots) per-slot batch sizes (default the fixed one), ``max_batch`` their padded
        length, ``clients`` (nb, slots, B) the client held by every slot (default: slot ``k`` is client ``k``)."""
        if self.on_demand:  # the participants' rows, one after the other; the slots renumbered into them
            X, y, self.offsets, sizes, clients = gather_clients(self.problem, clients, self.device, self.dtype)
            self.X, self.y = X, y.to(self.dtype)
            self.sizes = torch.as_tensor(sizes, device=self.device)
        self.clients = clients
        if clients is None:
            self._slot_sizes = self.sizes.view(1, self.Q, 1, 1)
            self._base = self.offsets.view(1, self.Q, 1, 1)
        else:
            self._slot_sizes = self.sizes[clients].unsqueeze(-1)  # (nb, slots, B, 1)
            self._base = self.offsets[clients].unsqueeze(-1)
        if batch is None:
            if self.fixed_batch is None:
                raise FedsdeInputError("batch_size: the oracle needs a batch size (give the problem a batch_size, "
                                       "batch_size= or local_steps=EpochSteps(...))")
            self.batch = torch.full((1, 1, 1, 1), self.fixed_batch, device=self.device)
            self.cap = self.fixed_batch
        else:
            self.cap = int(max_batch) if max_batch is not None else int(batch.max())
            self.batch = batch  # (R, slots); viewed block-major at the first step

    def _batch_view(self, nb: int, slots: int, B: int) -> torch.Tensor:
        if self.batch.dim() == 2:
            self.batch = self.batch.view(nb, B, slots).transpose(1, 2).unsqueeze(-1)
        return self.batch

    def _buffer(self, shape: tuple[int, ...]) -> torch.Tensor:
        if self._u is None or self._u.shape != shape:
            self._u = torch.empty(shape, dtype=torch.float64, device=self.device)
        return self._u

    def sample(self, x: torch.Tensor, streams) -> torch.Tensor:
        if self.batch is None:
            self.begin_round()
        nb, slots, B, d = x.shape
        cap = self.cap
        batch = self._batch_view(nb, slots, B)  # (nb|1, slots, B|1, 1)
        sizes = self._slot_sizes
        if self.replace:
            u = streams.uniform_(self._buffer((nb, slots, B, cap)))
            n = sizes.to(torch.float64)
            idx = torch.minimum(torch.floor(u * n).to(torch.int64), sizes - 1)
        elif cap <= FLOYD_MAX:
            u = streams.uniform_(self._buffer((nb, slots, B, cap)))
            shape = (nb, slots, B)
            idx = floyd_subsets(u, sizes.expand(*shape, 1)[..., 0], batch.expand(*shape, 1)[..., 0])
        else:
            keys = streams.uniform_(self._buffer((nb, slots, B, self.n_max)))
            keys = keys.masked_fill(self.pos >= sizes, 2.0)
            idx = torch.topk(keys, cap, dim=-1, largest=False, sorted=True).indices
        valid = (torch.arange(cap, device=self.device) < batch).expand(nb, slots, B, cap)
        wts = valid.to(self.dtype) / valid.sum(-1, keepdim=True).clamp(min=1).to(self.dtype)
        # entries past a slot's batch carry weight 0: read the client's first row (the b smallest keys of a client
        # smaller than the longest batch run past its rows, possibly past the last client's)
        flat = (torch.where(valid, idx, 0) + self._base).reshape(-1)
        M = nb * slots * B
        Xb = self.X.index_select(0, flat).view(M, cap, d)
        yb = self.y.index_select(0, flat).view(M, cap)
        r = torch.bmm(Xb, x.reshape(M, d, 1)).squeeze(-1).sub_(yb).mul_(wts.reshape(M, cap))
        g = torch.bmm(r.unsqueeze(1), Xb).view(nb, slots, B, d)
        return g.add_(x, alpha=self.l2) if self.l2 else g


def least_squares_oracle(batch_size: int | None = None, sampling: str | None = None):
    """Oracle factory ``(problem, nblocks, device, dtype) -> LeastSquaresMinibatchOracle`` for
    :func:`fedsde.sim.simulate` (``oracle_factory=``); ``None`` takes the problem's batch size / sampling."""
    if sampling is not None:
        choice("sampling", sampling, SAMPLINGS)
    if batch_size is not None:
        positive_int("batch_size", batch_size)
    return _factory(batch_size, sampling, {"batch_size": batch_size, "sampling": sampling})


def problem_least_squares_oracle(problem):
    """:func:`least_squares_oracle` with ``problem``'s own batch size and sampling (checked when the problem was
    built, not again), recorded as such."""
    return _factory(None, None, {"batch_size": problem.batch_size, "sampling": problem.sampling})


def _factory(batch_size: int | None, sampling: str | None, shown: dict):
    def factory(problem, nblocks, device, dtype):
        return LeastSquaresMinibatchOracle(problem, nblocks, device, dtype, batch_size=batch_size, sampling=sampling)

    factory.describe = {"oracle": "least-squares minibatch", **shown}
    return factory
