"""Moments over replicates accumulated chunk by chunk, and the blow-up watch of a run (internal).

:class:`StreamingMoments` keeps, for every recorded time, the sums ``S1 = Σ_r (w_r − c)`` and
``S2 = Σ_r (w_r − c)(w_r − c)ᵀ`` with a shift ``c`` (the mean of the first replicate block, which every chunking
sees first), so memory does not grow with the number of replicates ``R``.  The sums are formed per replicate block
of fixed size (the same reduction whatever the chunk) and added to the running total in the global block order by
a sequential ``cumsum``: the moments are **bit-identical however the replicates are chunked**, and whatever order
chunks running in parallel threads finish in (a chunk that finishes early waits in a short queue of block sums
until the blocks before it are in).  Mean and covariance (ddof = 1) follow as ``c + S1/R`` and
``(S2 − S1 S1ᵀ/R)/(R − 1)``; the shift keeps the cancellation small.

Weights on the CPU are reduced in NumPy (no copy: the tensor's memory is read in place).  Weights on another
device are reduced there (the shift, and per block the sums ``Σ (w − c)`` and ``Σ (w − c)(w − c)ᵀ`` by batched
products of one fixed shape over groups of :data:`SUM_GROUP` blocks aligned with the global block index, so that a
block's sums do not depend on the chunk) and only the block sums reach the host, in one copy per
:data:`FLUSH_BYTES` of them (at the end of a run of ordinary size): no per-round transfer of the replicates.

:class:`BlowUpWatch` compares the largest ``|w|`` of every round with a scale of the problem (start point,
optimum, client optima, noise) and issues one :class:`fedsde.errors.DivergenceWarning` per run when it is exceeded
by :data:`BLOWUP_FACTOR`: growth far beyond anything the problem explains.  Chunks (which may run in parallel)
record their first event and the run warns once at its end for the earliest one, so that the warning is the same
however the replicates were chunked and however many threads ran them.
"""

from __future__ import annotations

import math
import threading
import warnings

import numpy as np
import torch

from fedsde._memory import memory_fits
from fedsde.errors import DivergenceWarning

#: a run is "blowing up" when max |w| exceeds this many times the problem's scale (see problem_scale)
BLOWUP_FACTOR = 1e6
#: block sums kept on a device before they are copied to the host and merged (bytes)
FLUSH_BYTES = 1 << 28
#: blocks per batched product of the device reduction (one shape, groups aligned with the global block index)
SUM_GROUP = 64


class ChunkAborted(Exception):
    """A chunk stopped because another chunk of the same run failed (internal; never reaches the user)."""


class StreamingMoments:
    """Running mean and covariance over replicates at ``T`` recorded times (see the module docstring).

    Parameters
    ----------
    T, d : int
        Recorded times and dimension.
    block : int
        Replicates per block: chunks start on block boundaries and every block is reduced on its own.
    full : sequence of int, optional
        The recorded times whose full (d, d) covariance is kept; at the others only the variances (sums of
        squares, ``O(d)``).  Default every time (``O(T·d²)``); ``()``: variances only, memory ``O(T·d)``.
    """

    def __init__(self, T: int, d: int, block: int, full=None):
        self.block = int(block)
        self.shift = np.zeros((T, d))
        self.s1 = np.zeros((T, d))
        self.full = frozenset(range(T)) if full is None else frozenset(int(t) for t in full)
        self.s2 = [np.zeros((d, d)) if t in self.full else np.zeros(d) for t in range(T)]
        self.count = np.zeros(T, np.int64)
        self._next = np.zeros(T, np.int64)  # first replicate not yet merged, per recorded time
        self._pending: list[dict] = [{} for _ in range(T)]  # start -> (rows, b1, b2): waiting for earlier blocks
        self._known = np.zeros(T, bool)  # shift set
        self._device_shift: dict[int, torch.Tensor] = {}
        self._device_bytes = 0
        self._cond = threading.Condition()
        self._aborted = False

    def abort(self) -> None:
        """Release chunks waiting for the first block's shift (another chunk failed)."""
        with self._cond:
            self._aborted = True
            self._cond.notify_all()

    def add(self, t: int, start: int, w: torch.Tensor | np.ndarray) -> None:
        """Add the rows ``[start, start + len(w))`` (``start`` a multiple of the block) at recorded time ``t``."""
        on_device = self._on_device(w)
        R = int(w.shape[0])
        if on_device:
            x = w.detach().to(torch.float64)
            if start == 0:
                self._set_shift(t, x[: min(self.block, R)].mean(0))
            y = self._wait_shift(t, device=True)
            b1, b2 = self._device_sums(x, y, start, t in self.full)
        else:
            x = w.detach().to("cpu", torch.float64).numpy() if hasattr(w, "detach") else np.asarray(w, np.float64)
            if start == 0:
                self._set_shift(t, x[: min(self.block, R)].mean(0))
            shift = self._wait_shift(t, device=False)
            nb = -(-R // self.block)
            y = np.zeros((nb * self.block, x.shape[1]))
            np.subtract(x, shift, out=y[:R])
            y = y.reshape(nb, self.block, -1)
            b1 = y.sum(1)  # (nb, d): one reduction per block, the same whatever nb
            b2 = np.einsum("nbi,nbj->nij", y, y) if t in self.full else np.einsum("nbi,nbi->ni", y, y)
        with self._cond:
            self._pending[t][int(start)] = (R, b1, b2)
            if on_device:
                self._device_bytes += (b1.numel() + b2.numel()) * 8
                if self._device_bytes > FLUSH_BYTES:
                    self._host_pending()
            self._merge(t)

    @staticmethod
    def _on_device(w) -> bool:
        """Reduce ``w`` with torch where it is (a tensor off the CPU) rather than in NumPy."""
        return isinstance(w, torch.Tensor) and w.device.type != "cpu"

    def _set_shift(self, t: int, c) -> None:
        with self._cond:
            if isinstance(c, torch.Tensor):
                self._device_shift[t] = c
            else:
                self.shift[t] = c
            self._known[t] = True
            self._cond.notify_all()

    def _wait_shift(self, t: int, *, device: bool):
        with self._cond:
            while not self._known[t]:
                if self._aborted:
                    raise ChunkAborted
                self._cond.wait()
            return self._device_shift[t] if device else self.shift[t]

    def _device_sums(self, x: torch.Tensor, shift: torch.Tensor, start: int,
                     full: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Block sums ``Σ (x − c)`` (nb, d) and ``Σ (x − c)(x − c)ᵀ`` (nb, d, d) (``full``; else ``Σ (x − c)²``,
        (nb, d)) of the rows ``x`` starting at replicate ``start``, by batched products of one fixed shape over
        groups of :data:`SUM_GROUP` blocks aligned with the global block index (each block at its own place in its
        group, zeros elsewhere): a block's sums are then computed by the same kernel at the same place whatever the
        chunk, so they do not depend on it."""
        R, d = x.shape
        G, B = SUM_GROUP, self.block
        b0 = start // B
        nb = -(-R // B)
        lead = b0 % G  # blocks of the first group before the chunk's
        ng = -(-(lead + nb) // G)
        y = torch.zeros((ng * G * B, d), dtype=torch.float64, device=x.device)
        torch.sub(x, shift, out=y[lead * B:lead * B + R])
        y = y.view(ng, G, B, d)
        ones = torch.ones((G, 1, B), dtype=torch.float64, device=x.device)
        b1 = torch.cat([torch.bmm(ones, y[g]) for g in range(ng)])[lead:lead + nb].view(nb, d)
        if full:
            b2 = torch.cat([torch.bmm(y[g].transpose(1, 2), y[g]) for g in range(ng)])[lead:lead + nb]
        else:
            b2 = torch.cat([torch.bmm(ones, y[g] * y[g]) for g in range(ng)])[lead:lead + nb].view(nb, d)
        return b1, b2

    def _host_pending(self) -> None:
        """Copy the block sums still on a device to the host (one transfer for all of them)."""
        items = [(t, k, v) for t, pend in enumerate(self._pending) for k, v in pend.items()
                 if isinstance(v[1], torch.Tensor)]
        if items:
            flat = torch.cat([torch.cat([v[1].reshape(-1), v[2].reshape(-1)]) for _, _, v in items]).cpu().numpy()
            pos = 0
            for t, k, (R, b1, b2) in items:
                n1, n2 = b1.numel(), b2.numel()
                self._pending[t][k] = (R, flat[pos:pos + n1].reshape(b1.shape), flat[pos + n1:pos + n1 + n2].reshape(
                    b2.shape))
                pos += n1 + n2
        for t, c in self._device_shift.items():
            self.shift[t] = c.cpu().numpy()
        self._device_bytes = 0

    def _merge(self, t: int) -> None:
        """Add the pending block sums that follow the merged ones, in block order (caller holds the lock)."""
        pend = self._pending[t]
        while int(self._next[t]) in pend and not isinstance(pend[int(self._next[t])][1], torch.Tensor):
            R, b1, b2 = pend.pop(int(self._next[t]))
            self.s1[t] = np.cumsum(np.concatenate([self.s1[t][None], b1]), axis=0)[-1]
            self.s2[t] = np.cumsum(np.concatenate([self.s2[t][None], b2]), axis=0)[-1]
            self.count[t] += R
            self._next[t] += R

    def _finish(self) -> None:
        with self._cond:
            if self._device_shift or any(self._pending):
                self._host_pending()
                for t in range(len(self._pending)):
                    self._merge(t)

    def mean(self) -> np.ndarray:
        """Mean over replicates, shape (T, d)."""
        self._finish()
        n = np.maximum(self.count, 1)[:, None]
        return self.shift + self.s1 / n

    def cov(self) -> np.ndarray:
        """Covariance over replicates (ddof = 1), shape (T, d, d) (every time kept in full, see ``full``)."""
        if len(self.full) != len(self.s2):
            from fedsde.errors import FedsdeInputError

            raise FedsdeInputError(f"cov: the full covariance was kept at {len(self.full)} of the {len(self.s2)} "
                                   "recorded times only (full=…); use cov_at(t) or var()")
        return np.stack([self.cov_at(t) for t in range(len(self.s2))]) if self.s2 else np.zeros((0, 0, 0))

    def cov_at(self, t: int) -> np.ndarray:
        """Covariance over replicates (ddof = 1) at a recorded time kept in full, shape (d, d)."""
        self._finish()
        n = max(int(self.count[t]), 1)
        return (self.s2[t] - np.outer(self.s1[t], self.s1[t]) / n) / max(n - 1, 1)

    def var(self) -> np.ndarray:
        """Variances over replicates (ddof = 1), shape (T, d): the covariances' diagonals, at every time."""
        self._finish()
        out = np.empty_like(self.s1)
        for t, s2 in enumerate(self.s2):
            n = max(int(self.count[t]), 1)
            sq = np.diagonal(s2) if s2.ndim == 2 else s2
            out[t] = (sq - self.s1[t] ** 2 / n) / max(n - 1, 1)
        return out


def problem_scale(problem, w_start: np.ndarray) -> float:
    """``1 + max|w0| + max|w*| + max|a_k| + max √Σ_k,ii`` (the terms a problem has), the yardstick of a blow-up."""
    parts = [1.0, float(np.max(np.abs(w_start), initial=0.0))]
    for name in ("optimum", "a", "Sigma"):
        if name == "optimum" and hasattr(problem, "padded") and "optimum" not in getattr(problem, "_cache", {}):
            continue  # a data problem's w* is a full solve (seconds): used only once computed
        try:
            v = np.asarray(getattr(problem, name), dtype=np.float64)
        except Exception:  # an attribute a problem lacks or cannot compute (singular Hessian)
            continue
        if name == "Sigma":
            v = np.sqrt(np.abs(np.diagonal(v, axis1=-2, axis2=-1)))
        if v.size and np.all(np.isfinite(v)):
            parts.append(float(np.max(np.abs(v))))
    return float(sum(parts))


class BlowUpWatch:
    """One :class:`DivergenceWarning` per run when ``max |w|`` exceeds ``BLOWUP_FACTOR × scale``.

    :meth:`scan` warns at once, or, given ``order`` (the chunk's first replicate) and ``when`` (the step), records
    the chunk's first event; :meth:`flush` then warns once for the earliest step of any chunk, with the largest
    ``|w|`` and the lowest replicate of the chunks that exceeded the limit at that step: the warning of a run of one
    chunk, whatever the chunks.
    """

    def __init__(self, scale: float, what: str, factor: float = BLOWUP_FACTOR):
        self.scale = float(scale)
        self.limit = factor * self.scale
        self.what = what
        self.warned = False
        self._events: dict[int, tuple[int, float, str, str, int]] = {}
        self._lock = threading.Lock()

    def check(self, biggest: float, where: str, stacklevel: int = 3) -> None:
        """``biggest`` = max |w| now (finite); ``where`` names the round/time and replicate."""
        if not self.warned and biggest > self.limit and math.isfinite(biggest):
            self.warned = True
            warnings.warn(
                f"{self.what} is blowing up: max |w| = {biggest:.3g} at {where}, more than "
                f"{self.limit / self.scale:.0e} × the problem's scale {self.scale:.3g} (start, optimum, client optima, "
                "noise); the settings probably diverge — reduce eta or server_lr",
                DivergenceWarning, stacklevel=stacklevel,
            )

    def scan(self, w: torch.Tensor, where: str, *, first: int = 0, noun: str = "replicate",
             order: int | None = None, when: int = 0) -> bool:
        """Check the weights ``w`` (R, d) after a step with one reduction.

        Returns False when an entry is NaN/inf (the caller raises :class:`~fedsde.errors.SimulationDivergedError`
        naming the place); otherwise, when ``max |w|`` exceeds the limit, warns once (``order`` None) or records the
        chunk's first event (``order`` the chunk's first replicate, ``when`` the step; see :meth:`flush`), at
        ``where`` and the first such row (``noun first + row``), and returns True.
        """
        biggest = float(w.abs().amax()) if w.numel() else 0.0  # NaN propagates: one reduction for both checks
        if not math.isfinite(biggest):
            return False
        if biggest > self.limit and not self.warned and (order is None or order not in self._events):
            r = first + int(torch.nonzero(w.abs().amax(-1) > self.limit)[0, 0])
            if order is None:
                self.check(biggest, f"{where} ({noun} {r})", stacklevel=4)
            else:
                with self._lock:
                    self._events.setdefault(int(order), (int(when), biggest, where, noun, r))
        return True

    def flush(self, before: int | None = None, stacklevel: int = 4) -> None:
        """Warn once for the recorded events of the earliest step (before step ``before``, if given)."""
        with self._lock:
            events = [e for e in self._events.values() if before is None or e[0] < before]
            self._events.clear()
        if events:
            when = min(e[0] for e in events)
            same = [e for e in events if e[0] == when]
            self.check(max(e[1] for e in same), f"{same[0][2]} ({same[0][3]} {min(e[4] for e in same)})",
                       stacklevel=stacklevel)


def plan_chunks(what: str, R: int, chunk_size: int | None, block: int, per_rep: int, stored: int, available: int,
                hint: str, *, working_set: int = 1 << 30, device=None) -> int | None:
    """How many replicates to run at once so that the run fits in ``available`` bytes.

    ``stored`` bytes are kept for the whole run, ``per_rep`` bytes per replicate of a chunk.  A run that cannot fit
    even one block (or the given ``chunk_size``) raises a one-line :class:`~fedsde.errors.FedsdeInputError` with the
    estimate.  Without ``chunk_size``: ``None`` (one chunk) when everything fits in half of ``working_set`` (1 GiB:
    512 MiB on the CPU; callers on a GPU pass its free memory) and half of what is left, else the largest block
    multiple that does.  Chunks run in parallel threads share this budget (:mod:`fedsde.sim.workers`).  Inside a
    command the chosen working set is charged to its budget (:func:`fedsde._memory.memory_fits`; ``device`` None or
    a CPU).
    """
    memory_fits(what, stored + per_rep * min(R, block), available, hint, device=device)
    if chunk_size is not None:
        memory_fits(f"chunk_size={chunk_size}", stored + per_rep * min(R, int(chunk_size)), available,
                    "use a smaller chunk_size", device=device)
        return chunk_size
    budget = min(available - stored, working_set) // 2
    size = max(block, budget // per_rep // block * block)
    memory_fits(what, stored + per_rep * min(R, size), available, hint, device=device)
    return None if size >= R else int(size)


def working_set(device: torch.device, available: int) -> int:
    """The working-set cap of :func:`plan_chunks`: 1 GiB on the CPU, the free memory on another device (a GPU is
    fastest with the whole run in one chunk)."""
    return 1 << 30 if torch.device(device).type == "cpu" else int(available)
