"""Chunks of replicates run in parallel threads, one CPU core each (internal).

Replicate chunks are independent: every block of replicates draws from its own random streams
(:mod:`fedsde.clients.streams`) and computes with the same tensor shapes whatever the chunk, so a run cut into
chunks gives the numbers of one big batch bit for bit.  :func:`run_chunks` runs them in a pool of ``workers``
Python threads, each with one torch intra-op thread: torch releases the GIL inside its kernels, so the threads
compute at the same time, and the per-block random draws — serial inside one generator, hence the part of a run
that torch's own threads cannot split — run on all cores at once.

Why threads (and not processes, nor torch's intra-op threads alone), measured on the quadratic simulator
(``benchmarks/bench_sim.py``): torch's intra-op threads split each kernel but not the serial Mersenne-Twister draws,
which are most of a quadratic run (2 threads gave 1.2× on 2 cores, 16 gave 1.85× on 16); processes would pay an
interpreter start and a copy of the problem per worker.  With one thread per chunk every part of the run scales
with the cores, until memory bandwidth or the number of chunks bounds it: a run needs at least ``workers``
blocks, and :func:`plan_workers` keeps every chunk large enough (:data:`MIN_CHUNK_WORK`) for its kernels to
outweigh the Python overhead that the threads share under the GIL.

How far that goes (the quadratic simulator of ``benchmarks/bench_sim.py``: R = 1000, Q = 100, d = 10, E = 10): a
local step of one block draws 1.3·10⁵ normals (about 2.5 ms of one core) and makes half a dozen torch calls, whose
Python part (≈ 30 µs) is all a thread holds the GIL for; eight chunks of one block on eight cores hold it ≈ 10 % of
the time, and each chunk's tensors (≈ 1 MB) stay in the core's cache, so the draws — serial per generator, the bulk
of the run — run side by side: ≥ 6× on 8 cores (8 blocks: at most 8×; R >= 2048 for 16 cores).  Measured on 2
shared cores: the chunk threads cost the same CPU time as one thread (no overhead), so the wall-clock speed-up is the
number of cores that are free.

Results do not depend on ``workers`` (nor on the chunks): chunks write disjoint rows, streamed moments are merged in
block order (:class:`fedsde.sim.moments.StreamingMoments`), a divergence error names the earliest step and then
the lowest replicate of any chunk (:func:`run_chunks`) and the blow-up warning the earliest event
(:class:`fedsde.sim.moments.BlowUpWatch`) — what one chunk of all replicates reports.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from fedsde.clients.streams import split_chunks
from fedsde.errors import FedsdeInputError
from fedsde.sim.moments import ChunkAborted

#: least work of one chunk's step (tensor elements) worth a thread of its own
MIN_CHUNK_WORK = 1 << 14
#: a cross-device run of one chunk whose step touches fewer tensor elements (replicates × slots × d) runs with one
#: torch thread: splitting such small kernels cost several times the CPU time on a shared 2-core machine (20 rounds
#: of 8 replicates × 10 participants of synthetic(1, 1), d = 610: 5 s of CPU time with one thread, 21 s with two)
SMALL_KERNELS = 1 << 20


def resolve_workers(workers: int | None, device: torch.device) -> int:
    """``workers`` if given (an int >= 1), else the threads torch may use on the CPU and 1 on another device (one
    GPU stream: chunks in threads would only interleave its kernels)."""
    if workers is None:
        return max(1, torch.get_num_threads()) if torch.device(device).type == "cpu" else 1
    if isinstance(workers, bool) or not isinstance(workers, int | np.integer) or workers < 1:
        raise FedsdeInputError(f"workers={workers!r}: must be an integer >= 1 (or None: the threads torch may use)")
    return int(workers)


def plan_workers(R: int, chunk_size: int | None, block: int, workers: int, per_replicate: int) -> list[tuple[int, int]]:
    """Replicate ranges ``[(start, stop), …]`` for ``workers`` threads.

    Parameters
    ----------
    R, block : int
        Replicates and replicates per random block (chunks start on block boundaries).
    chunk_size : int or None
        Largest chunk the memory allows with one chunk in flight (:func:`fedsde.sim.moments.plan_chunks`); with
        ``k`` chunks in flight each gets ``1/k`` of it.
    workers : int
        Threads available.
    per_replicate : int
        Tensor elements one replicate touches per step (sets :data:`MIN_CHUNK_WORK`'s share).

    Returns
    -------
    list of (int, int)
        One chunk (or the memory plan's chunks) when a single thread is best; otherwise at least as many chunks as
        threads used.
    """
    nblocks = -(-R // block)
    cap = nblocks if chunk_size is None else max(1, -(-int(chunk_size) // block))
    useful = max(1, R * max(1, per_replicate) // MIN_CHUNK_WORK)
    k = min(workers, nblocks, cap, useful)
    if k <= 1:
        return split_chunks(R, chunk_size, block)
    per = -(-nblocks // k) if chunk_size is None else max(1, min(-(-nblocks // k), cap // k))
    return [(a * block, min(R, (a + per) * block)) for a in range(0, nblocks, per)]


class Stop:
    """Shared by the chunks of one run: the step of the earliest failure so far.  A chunk calls :meth:`check` before
    each step and stops (:class:`~fedsde.sim.moments.ChunkAborted`) once past it: no chunk can then report an earlier
    failure, and every chunk that could has run far enough to do so."""

    def __init__(self):
        self.when: int | None = None
        self._lock = threading.Lock()

    def fail(self, when: int) -> None:
        with self._lock:
            self.when = when if self.when is None else min(self.when, when)

    def check(self, when: int) -> None:
        if self.when is not None and when > self.when:
            raise ChunkAborted


def diverged(exc: BaseException, when: int, row: int) -> BaseException:
    """Mark a divergence error with its step and first replicate (how :func:`run_chunks` picks the one a run of one
    chunk would raise: the earliest step, then the lowest replicate)."""
    exc.fedsde_when, exc.fedsde_row = int(when), int(row)
    return exc


def run_chunks(fn: Callable[[int, int, Stop], None], chunks: list[tuple[int, int]], workers: int, *,
               on_error: Callable[[], None] | None = None,
               before_raise: Callable[[BaseException], None] | None = None, one_thread: bool = False) -> None:
    """Call ``fn(start, stop, halt)`` for every chunk, in ``min(workers, len(chunks))`` threads of one torch thread
    each (``halt``: the run's :class:`Stop`).

    Failures are reported as a run of one chunk reports them, whatever the chunks and threads: a divergence marked
    by :func:`diverged` at the earliest step (then the lowest replicate) of any chunk — the other chunks run up to
    that step, no further — and any other exception before it (the first in chunk order).  ``on_error()`` is called
    at every failure (e.g. to release chunks waiting on another) and ``before_raise(exc)`` just before the chosen
    exception is raised (e.g. to issue the warnings a run of one chunk would have issued by then).
    ``one_thread``: a single chunk runs with one torch thread too (kernels too small to split: torch's threads then
    cost more CPU time than they save, several times more on a loaded machine).
    """
    n = min(workers, len(chunks))
    halt = Stop()
    failures: dict[int, BaseException] = {}
    lock = threading.Lock()

    def call(i: int, a: int, b: int) -> None:
        try:
            fn(a, b, halt)
        except ChunkAborted:
            return
        except BaseException as exc:
            halt.fail(getattr(exc, "fedsde_when", -1))
            with lock:
                failures[i] = exc
            if on_error is not None:
                on_error()

    if n <= 1:
        threads = torch.get_num_threads()
        if one_thread:
            torch.set_num_threads(1)
        try:
            for i, (a, b) in enumerate(chunks):
                call(i, a, b)
        finally:
            torch.set_num_threads(threads)
    else:
        threads = torch.get_num_threads()

        def job(i: int, a: int, b: int) -> None:
            torch.set_num_threads(1)  # this thread's OpenMP team; every worker sets its own
            call(i, a, b)

        try:
            with ThreadPoolExecutor(max_workers=n, thread_name_prefix="fedsde-chunk") as pool:
                for fut in [pool.submit(job, i, a, b) for i, (a, b) in enumerate(chunks)]:
                    fut.result()
        finally:
            torch.set_num_threads(threads)
    if failures:
        plain = [i for i in sorted(failures) if not hasattr(failures[i], "fedsde_when")]
        pick = plain[0] if plain else min(failures, key=lambda i: (failures[i].fedsde_when, failures[i].fedsde_row))
        if before_raise is not None:
            before_raise(failures[pick])
        raise failures[pick]
