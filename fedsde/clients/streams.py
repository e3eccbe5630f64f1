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
"""

from __future__ import annotations

import numpy as np
import torch

from fedsde.errors import FedsdeInputError

#: replicates per random stream; chunk sizes are rounded to multiples of it
BLOCK = 128


def resolve_seed(seed: int | torch.Generator | None) -> int:
    """A non-negative integer seed from an int or a ``torch.Generator`` (one draw from it)."""
    if isinstance(seed, torch.Generator):
        return int(torch.randint(0, 2**62, (1,), generator=seed).item())
    if seed is None:
        raise FedsdeInputError("seed: required (an int or a torch.Generator); fedsde never uses global RNG")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise FedsdeInputError(f"seed={seed!r}: must be a non-negative integer or a torch.Generator")
    return int(seed)


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
    generator, and always in full (replicates past ``R`` are padding), so a replicate's draws never depend
    on how many replicates are simulated next to it.

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
    """

    def __init__(self, seed: int, first_block: int, nblocks: int, device: torch.device, purpose: int = 0,
                 block: int = BLOCK):
        self.device = torch.device(device)
        self.nblocks = nblocks
        self.block = int(block)
        self._gens = []
        for i in range(nblocks):
            g = torch.Generator(device=self.device)
            g.manual_seed(block_seed(seed, first_block + i, purpose, self.block))
            self._gens.append(g)

    def normal_(self, out: torch.Tensor) -> torch.Tensor:
        """Fill ``out`` (shape (nblocks, …)) with standard normals, one block per generator."""
        for b, g in enumerate(self._gens):
            out[b].normal_(generator=g)
        return out

    def uniform_(self, out: torch.Tensor) -> torch.Tensor:
        """Fill ``out`` (shape (nblocks, …)) with U[0, 1) draws, one block per generator."""
        for b, g in enumerate(self._gens):
            out[b].uniform_(generator=g)
        return out

    def randint(self, low: int, high: int, shape: tuple[int, ...]) -> torch.Tensor:
        """Integers uniform in ``[low, high)``, shape (nblocks, *shape)."""
        return torch.stack(
            [torch.randint(low, high, shape, generator=g, device=self.device) for g in self._gens]
        )


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
