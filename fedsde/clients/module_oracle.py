"""Gradient oracle of clients training a user's ``nn.Module`` (:class:`~fedsde.problems.module.ModuleProblem`).

One local step of every (replicate, client slot) of a block of ``B`` replicates is one ``torch.func`` pass:
``vmap(grad(Σ_i c_i ℓ(functional_call(module, w, x_i), y_i)))`` over the ``slots·B`` entries
(:class:`~fedsde.problems.module.functional.FunctionalModule`), plus ``λw``.  Everything random is drawn **outside**
``vmap``, from the block's own stream (:class:`~fedsde.clients.streams.ReplicateStreams`), into tensors whose shapes
are fixed by the run's configuration:

* the minibatch: without replacement the draws of :class:`~fedsde.clients.data_oracles.MinibatchOracle`
  (``sampling="minibatch"``), number for number — ``N_max`` uniform keys per slot when ``N_max <= 2b`` or
  ``b > 32`` (the ``b`` smallest keys), else Floyd's algorithm on ``b`` uniforms — so that a module that computes
  a built-in model gives the built-in path's trajectories; with replacement ``b`` uniforms, row ``⌊u N_k⌋``; with
  ``batch_size=None`` (``"full"``) every row, nothing drawn;
* the dropout masks: for each dropout module, one uniform per (slot, replicate, row of the batch, masked entry),
  ``keep = u < 1 − p``, drawn after the minibatch.

Blocks are computed one at a time with the same shapes, so a replicate's numbers do not depend on the chunking
or on how many replicates run (for one block size), as for every other oracle.  On a GPU :func:`launch_blocks`
blocks go into one call (a ``vmap`` over several blocks' entries: fewer, larger launches; never more than the run
has), the chunk's last group padded to the same number of blocks, so every call has one shape whatever the chunk.
Whether a call runs through ``vmap`` or entry by entry is the problem's ``batching``
(:mod:`fedsde.problems.module.batching`: with ``auto`` timed on the first step); :meth:`ModuleOracle.batching`
says which.

The gradient :meth:`ModuleOracle.sample` returns lives in a buffer that the next call overwrites (the local loop
uses each draw before it draws again): a step allocates nothing of size ``slots·B·d``.

A client population (:class:`~fedsde.problems.module.population.ModulePopulationProblem`) is never padded: at the
start of every round the rows of the clients its slots hold are read through the problem's bounded cache into one
ragged block (:func:`fedsde.clients.population_rows.participant_rows`) and the slots are renumbered into it; the
draws above depend on the population's sizes and ``N_max`` only, so the numbers are those of the materialised
problem, bit for bit (entries past a client's rows, which carry weight 0, read another row instead of zeros).
"""

from __future__ import annotations

import numpy as np
import torch

from fedsde._memory import available_memory, memory_fits
from fedsde.clients.data_oracles import DENSE_FACTOR, FLOYD_MAX, floyd_sample
from fedsde.clients.oracles import OracleBase
from fedsde.clients.streams import ReplicateStreams
from fedsde.errors import FedsdeInputError

#: most replicate blocks in one call on a GPU (:func:`launch_blocks`)
LAUNCH_BLOCKS = 8
#: work space one call on a GPU may take (bytes of :func:`step_bytes`); fewer blocks per call above it
LAUNCH_BYTES = 1 << 31


class ModuleOracle(OracleBase):
    """Minibatch gradients of a :class:`~fedsde.problems.module.ModuleProblem` (see the module docstring).

    Parameters
    ----------
    problem : ModuleProblem
    nblocks : int
    device, dtype
    """

    participants_only = True
    accepts_clients = True

    def __init__(self, problem, nblocks: int, device, dtype):
        if not hasattr(problem, "functional"):
            raise FedsdeInputError(f"oracle: a {type(problem).__name__} is not a module problem")
        self.problem = problem
        self.fm = problem.functional(device, dtype)
        self.device, self.dtype = torch.device(device), dtype
        self.Q = problem.Q
        self.sizes = torch.as_tensor(problem.sizes, device=device)
        self.n_max = int(problem.sizes.max())
        self.ydt = torch.int64 if problem.uses_labels else dtype
        self.population = hasattr(problem, "population")
        if self.population:  # the participants' rows, read round by round (begin_round)
            self.X = self.Y = self.starts = None
        else:
            X, Y = padded_rows(problem)
            self.X = torch.as_tensor(X).to(device=device, dtype=dtype)  # (Q, N_max, …)
            self.Y = torch.as_tensor(Y).to(device=device, dtype=self.ydt)  # (Q, N_max, …)
        self.l2 = float(problem.l2)
        self.batch = problem.batch_size
        self.with_replacement = problem.sampling == "with-replacement"
        self.clients = self.gather_clients = None
        self.pos = torch.arange(self.n_max, device=device)
        self.cap = self.n_max if self.batch is None else (
            int(self.batch) if self.with_replacement else min(int(self.batch), self.n_max))
        self._out = None  # the gradients' buffer, reused by every step
        self._mask_buffers: dict = {}
        #: blocks of the whole run (set by the simulator; None: this chunk's), the most one call may group
        self.run_blocks: int | None = None

    def batching(self) -> list:
        """How the steps were batched so far (:class:`~fedsde.problems.module.batching.Choice` of every shape)."""
        return list(self.fm.made.values())

    def begin_round(self, batch=None, max_batch=None, clients: torch.Tensor | None = None) -> None:
        """Start a round; ``clients`` (nb, slots, B): the client of every slot (default slot ``k`` = client ``k``)."""
        self.clients = self.gather_clients = clients
        if self.population:  # the rows of the slots' clients; the slots renumbered into them
            from fedsde.clients.population_rows import participant_rows

            local, X, Y, starts = participant_rows(self.problem, clients)
            shape = tuple(self.problem.row_shape)
            self.X = torch.as_tensor(X).to(device=self.device, dtype=self.dtype).reshape(-1, *shape)
            self.Y = torch.as_tensor(Y).to(device=self.device, dtype=self.ydt)
            self.starts = torch.as_tensor(starts, device=self.device)
            self.gather_clients = local
        self.round_batch = batch  # (R, slots) from EpochSteps, viewed block-major at the first step
        if batch is not None:
            self.cap = int(max_batch) if max_batch is not None else int(batch.max())
            if not self.with_replacement:
                self.cap = min(self.cap, self.n_max)

    def _slot_sizes(self, nb: int, slots: int, B: int) -> torch.Tensor:
        if self.clients is None:
            return self.sizes.view(1, slots, 1).expand(nb, slots, B)
        return self.sizes[self.clients]

    def _batches(self, nb: int, slots: int, B: int) -> torch.Tensor | None:
        """The round's batch sizes from EpochSteps, (nb, slots, B) (None: the problem's ``batch_size``)."""
        rb = self.round_batch
        if rb is not None and rb.dim() == 2:
            self.round_batch = rb = rb.to(self.device).view(nb, B, slots).transpose(1, 2)
        return rb

    def _draw(self, streams: ReplicateStreams, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Row indices (nb, slots, B, cap) and their weights ``c`` (1/batch on the batch's rows, 0 elsewhere); the
        batch sizes are the problem's ``batch_size`` or, with EpochSteps, the round's (every (replicate, slot) its
        own, drawn the same way)."""
        nb, slots, B = n.shape
        cap = self.cap
        ar = torch.arange(cap, device=self.device)
        rb = self._batches(nb, slots, B)
        n1 = n.unsqueeze(-1)  # (nb, slots, B, 1)
        if rb is None and self.batch is None:  # the client's whole data
            valid = ar < n1
            c = valid.to(self.dtype) / n1.to(self.dtype)
            return ar.expand(nb, slots, B, cap), c
        if self.with_replacement:
            b = torch.full_like(n1, cap) if rb is None else rb.unsqueeze(-1)
            u = streams.uniform_(torch.empty((nb, slots, B, cap), dtype=torch.float64, device=self.device))
            idx = torch.minimum(torch.floor(u * n1).to(torch.int64), n1 - 1)
        else:
            b = torch.clamp(n1, max=cap) if rb is None else torch.minimum(rb.unsqueeze(-1), n1)
            if self.n_max <= DENSE_FACTOR * cap or cap > FLOYD_MAX:  # the b smallest of N_max keys
                keys = streams.uniform_(torch.empty((nb, slots, B, self.n_max), dtype=torch.float64,
                                                    device=self.device))
                keys = keys.masked_fill(self.pos >= n1, 2.0)
                idx = torch.topk(keys, cap, dim=-1, largest=False, sorted=True).indices
            else:  # Floyd: O(batch) draws per slot
                u = streams.uniform_(torch.empty((nb, slots, B, cap), dtype=torch.float64, device=self.device))
                idx = floyd_sample(u, n, b[..., 0])
        valid = ar < b
        c = valid.to(self.dtype) / b.clamp(min=1).to(self.dtype)
        return torch.where(valid, idx, 0), c

    def _masks(self, streams: ReplicateStreams, lead: tuple[int, ...]) -> list[torch.Tensor]:
        """``keep/(1 − p)`` with ``keep = u < 1 − p`` of one uniform per entry, in buffers kept between steps."""
        out = []
        for i, ((_, mod), shape) in enumerate(zip(self.fm.dropouts, self.fm.mask_shapes, strict=True)):
            full = (*lead, *shape)
            buf = self._mask_buffers.get(i)
            if buf is None or tuple(buf.shape) != full:
                buf = self._mask_buffers[i] = torch.empty(full, dtype=self.dtype, device=self.device)
            out.append(streams.uniform_(buf).lt_(1.0 - mod.p).mul_(1.0 / (1.0 - mod.p)))
        return out

    def sample(self, x: torch.Tensor, streams: ReplicateStreams) -> torch.Tensor:
        nb, slots, B, d = x.shape
        n = self._slot_sizes(nb, slots, B)
        idx, c = self._draw(streams, n)
        masks = self._masks(streams, (nb, slots, B, self.cap)) if self.fm.dropouts else []
        client = (torch.arange(self.Q, device=self.device).view(1, slots, 1).expand(nb, slots, B)
                  if self.gather_clients is None else self.gather_clients)
        if self.population:  # ragged rows of the round's clients (rows past a client's end carry weight 0)
            flat = torch.clamp(self.starts[client].unsqueeze(-1) + idx, max=self.X.shape[0] - 1)
            Xf, Yf = self.X, self.Y
        else:
            flat = (client.unsqueeze(-1) * self.n_max + idx)  # (nb, slots, B, cap)
            Xf, Yf = self.X.flatten(0, 1), self.Y.flatten(0, 1)
        if self._out is None or self._out.shape != x.shape:
            self._out = torch.empty_like(x)
        out = self._out
        G = min(launch_blocks(self.problem, slots, B, self.device, self.dtype), self.run_blocks or nb)
        M = G * slots * B
        for a in range(0, nb, G):  # G blocks per call, the last group padded: one shape whatever the chunk
            k = min(G, nb - a)
            rows, cb = flat[a:a + k], c[a:a + k]
            xw, mb = x[a:a + k], [m[a:a + k] for m in masks]
            if k < G:
                rows, cb, xw = (_pad(t, G) for t in (rows, cb, xw))
                mb = [_pad(m, G) for m in mb]
            xb = Xf.index_select(0, rows.reshape(-1)).view(M, self.cap, *Xf.shape[1:])
            yb = Yf.index_select(0, rows.reshape(-1)).view(M, self.cap, *Yf.shape[1:])
            mb = [m.reshape(M, self.cap, *m.shape[4:]) for m in mb]
            dest = out[a:a + k].view(k * slots * B, d)
            g = self.fm.grads(xw.reshape(M, d), xb, yb, cb.reshape(M, self.cap), mb, out=dest if k == G else None)
            if k < G:
                dest.copy_(g[:k * slots * B])
        return out.add_(x, alpha=self.l2) if self.l2 else out


def _pad(t: torch.Tensor, G: int) -> torch.Tensor:
    """``t`` (k, …) padded to ``G`` entries along its first axis by repeating its first entry."""
    return torch.cat([t, t[:1].expand(G - t.shape[0], *t.shape[1:])])


def launch_blocks(problem, slots: int, block: int, device, dtype: torch.dtype) -> int:
    """Replicate blocks per call of the module: 1 on the CPU (where a block's call is already large); on a GPU up to
    :data:`LAUNCH_BLOCKS`, as many as keep one call's work space (:func:`step_bytes`) within :data:`LAUNCH_BYTES`.
    A function of the configuration only (never of the free memory), so a run's calls have the same shape on every
    rerun."""
    if torch.device(device).type == "cpu":
        return 1
    return int(max(1, min(LAUNCH_BLOCKS, LAUNCH_BYTES // max(1, step_bytes(problem, slots, block, dtype)))))


def padded_rows(problem) -> tuple[np.ndarray, np.ndarray]:
    """Rows and targets of every client in a padded client-major layout: (Q, N_max, …) each (zeros after ``N_k``)."""
    Q, n_max = problem.Q, int(problem.sizes.max())
    real = np.arange(n_max) < problem.sizes[:, None]
    X = np.zeros((Q, n_max, *problem.X.shape[1:]))
    Y = np.zeros((Q, n_max, *problem.y.shape[1:]), dtype=problem.y.dtype)
    X[real] = problem.X
    Y[real] = problem.y
    return X, Y


#: (Q, d) tensors per replicate that a chain's round holds beside the oracle's work space on a module problem: the
#: clients' weights, the oracle's gradients of every block and the displacements (the generic estimate is ten)
SLOT_COPIES = 3


def step_bytes(problem, slots: int, block: int, dtype: torch.dtype) -> int:
    """Work space of one local step of one block: for ``slots·block`` entries of ``b`` rows, the gathered rows,
    the dropout masks and about four copies of a row's activations (forward, backward; a convolution's unfolded
    input counted in them), plus the entry's gradient.  Measured against the peak RSS of one step on the MNIST
    ``Net`` (d = 53,002: 1.06× its need) and a 10⁶-weight MLP (1.8×) by ``tests/test_memory_budget.py``'s probe."""
    item = torch.finfo(dtype).bits // 8
    b = int(problem.sizes.max()) if problem.batch_size is None else int(problem.batch_size)
    row = int(np.prod(problem.row_shape, dtype=np.int64))
    per_entry = b * (row + 4 * int(problem._cache["act_floats"])) + problem.d
    return int(item * slots * block * per_entry)


def rows_bytes(problem, dtype: torch.dtype) -> int:
    """The oracle's copy of the clients' rows on its device: padded (Q, N_max, …) rows and targets (a population:
    the largest round's rows are counted by its own ``round_memory``)."""
    if hasattr(problem, "population"):
        return 0
    item = torch.finfo(dtype).bits // 8
    row = int(np.prod(problem.row_shape, dtype=np.int64))
    target = int(np.prod(problem.y.shape[1:], dtype=np.int64))
    return int(problem.Q * int(problem.sizes.max()) * (item * row + 8 * target))


def module_oracle():
    """Oracle factory ``(problem, nblocks, device, dtype) -> ModuleOracle``, with its up-front memory check
    (``factory.check_memory(problem, slots=, block=, device=, dtype=, memory_limit=)``)."""

    built: list[ModuleOracle] = []

    def factory(problem, nblocks, device, dtype):
        oracle = ModuleOracle(problem, nblocks, device, dtype)
        built.append(oracle)
        return oracle

    def run_info() -> dict:
        """``{"batching": {"requested", "used", "timings"}}`` of the oracles built so far (one per chunk)."""
        from fedsde.problems.module.batching import report

        made = {}
        for oracle in built:
            made |= {(c.purpose, c.entries, c.rows): c for c in oracle.batching()}
        requested = built[0].problem.batching if built else "auto"
        return {"batching": report(requested, list(made.values()))}

    def check_memory(problem, *, slots: int, block: int, device, dtype, memory_limit=None) -> int:
        need = (step_bytes(problem, slots, block, dtype) * launch_blocks(problem, slots, block, device, dtype)
                + rows_bytes(problem, dtype))
        memory_fits(f"module {type(problem.module).__name__} (d={problem.d}, {slots} client slots × {block} "
                    "replicates per block)", need, available_memory(device, memory_limit),
                    "use a smaller batch_size, fewer clients per round (--participation) or a smaller block_size",
                    device=device)
        return need

    factory.describe = {"oracle": "module"}
    factory.check_memory = check_memory
    factory.run_info = run_info
    factory.slot_copies = SLOT_COPIES
    return factory
