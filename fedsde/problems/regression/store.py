"""A least-squares CSV file's rows on disk, client after client, read one client at a time (internal).

:func:`scan_csv` streams the file once (:func:`fedsde.problems.regression.data.csv_blocks`, the reader of the
materialised path, so the checks and messages are the same): the clients in order of first appearance, their row
counts, the pooled statistics of :func:`~fedsde.problems.regression.data.standardise` and the raw rows in file order
(a temporary file).  :func:`build_store` then writes the (standardised) design rows and targets grouped by client,
each client's rows in file order, into a float64 memory-mapped :class:`RowStore` in the system's temporary folder,
so client ``k`` is the slice ``rows[o_k : o_k + n_k]``.  Memory: ``O(Q)`` numbers and one block of rows; disk:
``N·(d + 1)·8`` bytes for the store (``d`` design columns and the target, reserved before it is written), and
``N·(F + 2)·8`` more for the raw rows while the store is built.  Both are :func:`tempfile.TemporaryFile` files in the
system's temporary folder (``TMPDIR``): on POSIX systems they have no name from the start, so nothing is left behind
even when the process is killed; the store's file is closed (and its disk space freed) when the store is
garbage-collected, or at exit (:func:`weakref.finalize`).

The pooled statistics are sums over blocks (each block's mean and squared deviations, merged by Chan, Golub &
LeVeque's pairwise update, 1979) rather than NumPy's sums over the whole column, so they agree with
:func:`~fedsde.problems.regression.data.standardise` to float64 rounding (about 1e-16 relative), not bit for bit;
without standardisation the rows are the file's numbers, bit for bit.
"""

from __future__ import annotations

import mmap
import os
import tempfile
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedsde.errors import FedsdeInputError
from fedsde.problems.regression.data import csv_blocks, csv_cell, moment_limit

#: rows per block of the passes over the raw rows and the store
STORE_BLOCK = 1 << 16


def _temp_file(prefix: str, size: int = 0):
    """A new temporary file (module docstring) with ``size`` bytes reserved: a disk without room is one line here
    rather than a crash while the memory map is written."""
    fh = tempfile.TemporaryFile(prefix=prefix, suffix=".f64", dir=tempfile.gettempdir())
    try:
        if size and hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fh.fileno(), 0, size)
        elif size:
            os.ftruncate(fh.fileno(), size)
    except OSError as exc:
        fh.close()
        raise FedsdeInputError(f"temporary folder {tempfile.gettempdir()!r}: no room for the rows on disk ({size} "
                               f"bytes: {exc.strerror}); set TMPDIR to a folder with room") from None
    return fh


class _Index(dict):
    """Client name → index in order of first appearance (a new name gets the next index)."""

    def __missing__(self, key: str) -> int:
        self[key] = value = len(self)
        return value


def _read_rows(fh, start: int, stop: int, width: int) -> np.ndarray:
    """Rows ``start:stop`` of a float64 file of ``width`` columns, read (not mapped: the pages of a pass over the
    whole file do not stay in the process's resident memory; ``os.pread``, so threads may read at once)."""
    n = 8 * (stop - start) * width
    data = os.pread(fh.fileno(), n, 8 * start * width)
    if len(data) != n:
        raise OSError(f"short read from a temporary file ({len(data)} of {n} bytes)")
    return np.frombuffer(data, dtype=np.float64).reshape(stop - start, width).copy()


class RowStore:
    """Design rows ``(N, d)`` and targets ``(N,)`` of ``Q`` clients, client after client, in a read-only float64
    memory map of shape ``(N, d + 1)`` (the target last) of a temporary ``file``, closed with the store (or at
    exit)."""

    def __init__(self, file, sizes: np.ndarray, d: int):
        self.file = file
        self._finalizer = weakref.finalize(self, file.close)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)
        self.N, self.d = int(self.sizes.sum()), int(d)
        self.rows = np.memmap(file, dtype=np.float64, mode="r", shape=(self.N, self.d + 1))

    @property
    def Q(self) -> int:
        return int(self.sizes.size)

    @property
    def disk_bytes(self) -> int:
        """Bytes of the store's file: ``N·(d + 1)·8``."""
        return 8 * self.N * (self.d + 1)

    def client(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Client ``k``'s design rows (n_k, d) and targets (n_k,): views of one copy read from the file."""
        a = int(self.offsets[k])
        block = np.array(self.rows[a:a + int(self.sizes[k])])
        return block[:, :self.d], block[:, self.d]

    def blocks(self, rows: int = STORE_BLOCK):
        """``(clients, X, y)`` for consecutive blocks of at most ``rows`` rows: the client of every row (n,) and
        the rows (read from the file)."""
        ends = np.cumsum(self.sizes)
        for a in range(0, self.N, rows):
            b = min(a + rows, self.N)
            block = _read_rows(self.file, a, b, self.d + 1)
            yield np.searchsorted(ends, np.arange(a, b), side="right"), block[:, :self.d], block[:, self.d]


@dataclass
class CsvScan:
    """What :func:`scan_csv` found: client names (first appearance), row counts (Q,), the pooled mean and sum of
    squared deviations of every column (features, then the target), whether a column is constant, and the raw rows'
    temporary file (file order: values, client; an open :func:`tempfile.TemporaryFile`) or ``None``."""

    path: str
    columns: list[str]
    clients: list[str]
    sizes: np.ndarray
    mean: np.ndarray
    m2: np.ndarray
    constant: np.ndarray
    first: np.ndarray
    raw: object | None

    @property
    def N(self) -> int:
        return int(self.sizes.sum())

    def stats(self) -> dict:
        """The statistics :func:`~fedsde.problems.regression.data.standardise` reports (same keys)."""
        F = len(self.columns) - 1
        mean = np.where(self.constant, self.first, self.mean)
        sd = np.sqrt(self.m2 / self.N)
        sd = np.where(self.constant | (sd <= 0), 1.0, sd)
        return {"feature_mean": mean[:F].tolist(), "feature_sd": sd[:F].tolist(), "target_mean": float(mean[F]),
                "target_sd": float(sd[F])}

    def drop_raw(self) -> None:
        if self.raw is not None:
            self.raw.close()
            self.raw = None


def scan_csv(path, features: Sequence[str], target: str, client_column: str, *, keep_raw: bool = True) -> CsvScan:
    """Stream ``path`` once (module docstring); ``keep_raw``: also write the raw rows to a temporary file and check
    their magnitudes (:func:`~fedsde.problems.regression.data.check_magnitudes`' limit and message)."""
    index = _Index()
    sizes = np.zeros(1024, dtype=np.int64)
    C = len(features) + 1
    n, total, m2 = 0, np.zeros(C), np.zeros(C)
    lo, hi, first = np.full(C, np.inf), np.full(C, -np.inf), None
    raw = _temp_file("fedsde-raw-") if keep_raw else None
    try:
        for clients, values in csv_blocks(path, features, target, client_column):
            ids = np.fromiter(map(index.__getitem__, clients), dtype=np.int64, count=len(clients))
            if len(index) > sizes.size:
                sizes = np.concatenate([sizes, np.zeros(max(sizes.size, len(index)), dtype=np.int64)])
            uniq, counts = np.unique(ids, return_counts=True)
            sizes[uniq] += counts
            nb = values.shape[0]
            with np.errstate(over="ignore", invalid="ignore"):  # values too large are refused below
                mb = values.mean(0)
                m2 += ((values - mb) ** 2).sum(0)
                if n:  # Chan, Golub & LeVeque's merge of (n, mean, M2) with the block's
                    delta = mb - total / n
                    m2 += delta * delta * (n * nb / (n + nb))
                total += values.sum(0)
            if first is None:
                first = values[0].copy()
            n += nb
            lo, hi = np.minimum(lo, values.min(0)), np.maximum(hi, values.max(0))
            if raw:
                raw.write(np.column_stack([values, ids]).tobytes())
        scan = CsvScan(path=str(path), columns=[*features, target], clients=list(index),
                       sizes=sizes[:len(index)].copy(), mean=total / n, m2=m2, constant=lo == hi, first=first, raw=raw)
        if raw:
            raw.flush()
            _check_magnitudes(scan)
    except BaseException:
        if raw:
            raw.close()
        raise
    return scan


def _check_magnitudes(scan: CsvScan) -> None:
    """The first cell (row by row) above :func:`moment_limit`, with the message of the materialised path."""
    C = len(scan.columns)
    limit = moment_limit(scan.N, C - 1)
    for a in range(0, scan.N, STORE_BLOCK):
        block = _read_rows(scan.raw, a, min(a + STORE_BLOCK, scan.N), C + 1)
        big = np.abs(block[:, :C]) > limit
        if big.any():
            i, j = (int(v) for v in np.argwhere(big)[0])
            raise FedsdeInputError(
                f"{csv_cell(scan.path, a + i, scan.columns[j])}: "
                f"{float(block[i, j])!r} is too large: values above {limit:.3g} (with these rows and columns) "
                "overflow the data's second and fourth moments in float64; rescale the column")


def _release(array: np.memmap) -> None:
    """Drop the written pages of a memory map from the process's resident memory (they stay in the file)."""
    try:
        array._mmap.madvise(mmap.MADV_DONTNEED)
    except (AttributeError, OSError, ValueError):  # no madvise on this platform
        pass


def build_store(scan: CsvScan, *, standardise: bool, intercept: bool) -> RowStore:
    """Write the raw rows of ``scan`` grouped by client (each client's rows in file order), standardised by the
    pooled statistics when asked, with a column of ones before the target when ``intercept``; the raw file is
    removed."""
    C = len(scan.columns)
    F, d = C - 1, C - 1 + int(bool(intercept))
    if standardise:
        st = scan.stats()
        mean = np.array([*st["feature_mean"], st["target_mean"]])
        sd = np.array([*st["feature_sd"], st["target_sd"]])
    file = None
    try:
        file = _temp_file("fedsde-rows-", 8 * max(scan.N, 1) * (d + 1))
        store = np.memmap(file, dtype=np.float64, mode="r+", shape=(max(scan.N, 1), d + 1))  # keeps the reserve
        offsets = np.concatenate([[0], np.cumsum(scan.sizes)[:-1]]).astype(np.int64)
        cursor = np.zeros(scan.sizes.size, dtype=np.int64)
        for a in range(0, scan.N, STORE_BLOCK):
            block = _read_rows(scan.raw, a, min(a + STORE_BLOCK, scan.N), C + 1)
            ids = block[:, C].astype(np.int64)
            values = (block[:, :C] - mean) / sd if standardise else block[:, :C]
            order = np.argsort(ids, kind="stable")  # rank of every row among its client's rows in the block
            sid = ids[order]
            new = np.r_[True, sid[1:] != sid[:-1]]
            starts = np.flatnonzero(new)
            rank = np.empty_like(ids)
            rank[order] = np.arange(ids.size) - np.repeat(starts, np.diff(np.r_[starts, ids.size]))
            dest = offsets[ids] + cursor[ids] + rank
            cursor[sid[starts]] += np.diff(np.r_[starts, ids.size])
            out = np.empty((ids.size, d + 1))
            out[:, :F] = values[:, :F]
            if intercept:
                out[:, F] = 1.0
            out[:, d] = values[:, F]
            store[dest] = out
            store.flush()
            _release(store)
        del store
    except BaseException:
        if file is not None:
            file.close()
        raise
    finally:
        scan.drop_raw()
    return RowStore(file, scan.sizes, d)
