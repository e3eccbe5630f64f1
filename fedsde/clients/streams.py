"""Chunk-invariant random streams for batches of replicates.

Replicates are grouped in fixed blocks of ``block`` consecutive indices; block ``b`` draws from its own
``torch.Generator`` seeded from ``(seed, b)`` through ``numpy.random.SeedSequence``.  Every block is
drawn in full (replicates past ``R`` are padding) and the simulator computes block by block with the same
tensor shapes whatever the batch, so simulating replicates ``[0, R)`` in one batch or in chunks gives
bit-identical numbers on the same device.

Block size.  :func:`resolve_block_size` picks ``block = min(R, BLOCK)`` by default, so a run of ``R < BLOCK``
replicates computes exactly ``R`` (never a padded block of :data:`BLOCK`).  Prefix property: the first ``R'``
replicates of a run with ``R > R'`` replicates equal a run with ``R'`` replicates whenever both use the same
block size — always when ``R' >= BLOCK`` (both use :data:`BLOCK`); a run with ``R' < BLOCK`` uses its own
streams (its block size ``R'`` enters the seed, see :func:`block_seed`).  Pass an explicit ``block_size`` to
share streams across such runs.
No global RNG is touched.

On a GPU one generator call per block would cost one kernel launch (and one seeded generator) per ``block``
replicates — thousands per step at 10⁶ paths.  There, blocks are drawn in groups of :data:`DEVICE_GROUP`
consecutive blocks: group ``g`` (blocks ``g·G … g·G + G − 1``) draws from one generator seeded from
``(seed, g)``, always for the whole group (a chunk that covers part of a group draws it in full and keeps its
blocks), so chunking and the prefix property hold on the device as on the CPU.  CPU numbers are unchanged (one
generator per block); GPU numbers differ from the CPU's anyway (another generator).
"""

from __future__ import annotations

import numpy as np
import torch

from fedsde import _validate
from fedsde.errors import FedsdeInputError

#: replicates per random stream; chunk sizes are rounded to multiples of it
BLOCK = 128
#: blocks drawn by one generator call on a non-CPU device (see the module docstring)
DEVICE_GROUP = 64
_GROUP_TAG = 0x67726F75  # separates the group streams of a device from the block streams of the CPU


def resolve_seed(seed: int | torch.Generator | None) -> int:
    """A non-negative integer seed from an int or a ``torch.Generator`` (one draw from it):
    :func:`fedsde._validate.seed`."""
    return _validate.seed("seed", seed)


def block_seed(seed: int, block: int, purpose: int = 0, block_size: int = BLOCK) -> int:
    """Seed of the stream of replicate block ``block`` (``purpose`` separates independent uses).

    ``block_size`` other than :data:`BLOCK` enters the seed, so runs with different block sizes use unrelated
    streams.
    """
    entropy = [seed, purpose, block] if block_size == BLOCK else [seed, purpose, block, block_size]
    state = np.random.SeedSequence(entropy).generate_state(2, np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


class ReplicateStreams:
    """Random draws for whole blocks ``first_block … first_block + nblocks − 1`` of :data:`BLOCK` replicates.

    Tensors it fills have the block index first: shape ``(nblocks, …)``; block ``b`` is filled from its own
    generator (CPU) or from its group's (other devices, :data:`DEVICE_GROUP` blocks per generator call), and always
    in full (replicates past ``R`` are padding), so a replicate's draws never depend on how many replicates are
    simulated next to it.

    Parameters
    ----------
    seed : int
    first_block, nblocks : int
        First block index and number of blocks.
    device : torch.device
    purpose : int
        Separates independent stream families with the same seed.
    block : int
        Replicates per block (default :data:`BLOCK`).
    group : int, optional
        Blocks per generator call (default: 1 on the CPU, :data:`DEVICE_GROUP` on other devices; part of the
        definition of the numbers).
    """

    def __init__(self, seed: int, first_block: int, nblocks: int, device: torch.device, purpose: int = 0,
                 block: int = BLOCK, group: int | None = None):
        self.device = torch.device(device)
        self.nblocks = nblocks
        self.block = int(block)
        self.first_block = int(first_block)
        self.group = int(group) if group is not None else (1 if self.device.type == "cpu" else DEVICE_GROUP)
        self._gens = []
        if self.group == 1:
            for i in range(nblocks):
                self._gens.append(_generator(self.device, block_seed(seed, first_block + i, purpose, self.block)))
        else:
            g0, g1 = self.first_block // self.group, -(-(self.first_block + nblocks) // self.group)
            for g in range(g0, g1):
                entropy = [seed, purpose, g, self.block, self.group, _GROUP_TAG]
                state = np.random.SeedSequence(entropy).generate_state(2, np.uint32)
                self._gens.append(_generator(self.device, (int(state[0]) << 31) ^ int(state[1])))

    def _fill(self, out: torch.Tensor, method: str, *args) -> torch.Tensor:
        if self.group == 1:
            for b, g in enumerate(self._gens):
                getattr(out[b], method)(*args, generator=g)
            return out
        G = self.group
        base = (self.first_block // G) * G
        for i, g in enumerate(self._gens):
            lo = max(0, base + i * G - self.first_block)  # this group's blocks in out: [lo, hi)
            hi = min(self.nblocks, base + (i + 1) * G - self.first_block)
            skip = self.first_block + lo - (base + i * G)  # blocks of the group before lo
            part = out[lo:hi]
            if hi - lo == G and part.is_contiguous():
                getattr(part, method)(*args, generator=g)
            else:  # the whole group, drawn as one contiguous tensor of fixed shape, then the chunk's blocks kept
                full = torch.empty((G, *out.shape[1:]), dtype=out.dtype, device=out.device)
                getattr(full, method)(*args, generator=g)
                part.copy_(full[skip:skip + hi - lo])
        return out

    def normal_(self, out: torch.Tensor) -> torch.Tensor:
        """Fill ``out`` (shape (nblocks, …)) with standard normals, one block (or group) per generator."""
        return self._fill(out, "normal_")

    def uniform_(self, out: torch.Tensor) -> torch.Tensor:
        """Fill ``out`` (shape (nblocks, …)) with U[0, 1) draws, one block (or group) per generator."""
        return self._fill(out, "uniform_")

    def randint(self, low: int, high: int, shape: tuple[int, ...]) -> torch.Tensor:
        """Integers uniform in ``[low, high)``, shape (nblocks, *shape)."""
        if self.group == 1:
            return torch.stack(
                [torch.randint(low, high, shape, generator=g, device=self.device) for g in self._gens]
            )
        out = torch.empty((self.nblocks, *shape), dtype=torch.int64, device=self.device)
        return self._fill(out, "random_", low, high)


def _generator(device: torch.device, seed: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def resolve_block_size(block_size: int | None, replicates: int) -> int:
    """Replicates per random stream: ``block_size`` if given, else ``min(replicates, BLOCK)`` (see the module
    docstring: a run never computes more than ``max(R, BLOCK·⌈R/BLOCK⌉)`` replicates, and none past ``R`` when
    ``R <= BLOCK``)."""
    if block_size is None:
        return max(1, min(int(replicates), BLOCK))
    if isinstance(block_size, bool) or not isinstance(block_size, int | np.integer) or block_size < 1:
        raise FedsdeInputError(f"block_size={block_size!r}: must be an integer >= 1 (or None: min(replicates, "
                               f"{BLOCK}))")
    return int(block_size)


def split_chunks(R: int, chunk_size: int | None, block: int = BLOCK) -> list[tuple[int, int]]:
    """Replicate ranges ``[(start, stop), …]`` covering ``[0, R)``; chunk size rounded up to a block multiple."""
    if chunk_size is not None and (isinstance(chunk_size, bool) or int(chunk_size) != chunk_size or chunk_size < 1):
        raise FedsdeInputError(f"chunk_size={chunk_size!r}: must be an integer >= 1 (or None for one chunk)")
    if chunk_size is None or chunk_size >= R:
        return [(0, R)]
    chunk_size = int(chunk_size)
    size = max(block, -(-int(chunk_size) // block) * block)
    return [(a, min(R, a + size)) for a in range(0, R, size)]
