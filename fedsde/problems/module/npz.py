"""The clients of an npz file as a client population (:class:`NpzPopulation`): client ``k``'s rows are read from its
slice of the file only when asked.

``np.savez`` stores every array as an uncompressed ``.npy`` member of a zip archive, so each member's data lie at a
fixed offset of the file: the offset is found from the member's local zip header and its ``.npy`` header
(:func:`numpy.lib.format.read_magic`, ``read_array_header_*``), and the array is opened with :class:`numpy.memmap`
(``np.load(..., mmap_mode="r")`` does not map the members of an npz).  A compressed file (``np.savez_compressed``)
cannot be mapped and is refused in one line.

Clients are the distinct values of ``client`` in order of first appearance, as in
:func:`fedsde.problems.module.problem.client_order` (what the materialised problem uses); client ``k``'s rows are
the rows with that value in file order (a stable argsort of the client index; when the file already holds every
client's rows together, only the first row of each is kept).  The global test set (``x_test``, ``y_test``) is held
as client 0's test split, which is where the metrics' test draws then take their blocks from (the module problem's
test set is global, so its accuracy is the same).
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import numpy as np

from fedsde.errors import FedsdeInputError
from fedsde.problems.module.checks import check_numeric
from fedsde.problems.module.functional import LABEL_LOSSES
from fedsde.problems.module.problem import client_order

_MEMBERS = ("x", "y", "client", "x_test", "y_test")
#: rows per block when every row of the file is checked (:meth:`NpzPopulation.check_rows`)
CHECK_ROWS = 1 << 16


def npz_members(path, label: str | None = None) -> dict[str, np.ndarray]:
    """Every array of an uncompressed npz, memory-mapped read-only (name without ``.npy`` -> array); ``label``: the
    file as messages name it (default its path)."""
    path = Path(path)
    label = str(path) if label is None else label
    out = {}
    with zipfile.ZipFile(path) as zf, path.open("rb") as fh:
        for info in zf.infolist():
            name = info.filename.removesuffix(".npy")
            if info.compress_type != zipfile.ZIP_STORED:
                raise FedsdeInputError(f"data={label!r}: array {name!r} is compressed, so it cannot be read "
                                       "client by client; save the file with np.savez (not np.savez_compressed)")
            fh.seek(info.header_offset)
            head = fh.read(30)
            if head[:4] != b"PK\x03\x04":
                raise FedsdeInputError(f"data={label!r}: not a readable zip member {info.filename!r}")
            name_len, extra_len = struct.unpack("<HH", head[26:30])
            fh.seek(info.header_offset + 30 + name_len + extra_len)
            version = np.lib.format.read_magic(fh)
            read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in read:
                raise FedsdeInputError(f"data={label!r}: array {name!r} has .npy version {version}")
            shape, fortran, dtype = read[version](fh)
            if dtype.hasobject:
                raise FedsdeInputError(f"data={label!r}: array {name!r} holds Python objects")
            offset = fh.tell()
            if int(np.prod(shape, dtype=np.int64)) == 0:
                out[name] = np.zeros(shape, dtype=dtype)
            else:
                out[name] = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape,
                                      order="F" if fortran else "C")
    return out


class NpzPopulation:
    """The clients of an npz (arrays ``x`` (n, …), ``y`` (n,), ``client`` (n,) [, ``x_test``, ``y_test``]) read on
    demand from the memory-mapped file (see the module docstring)."""

    def __init__(self, path, *, label: str | None = None):
        self.path = Path(path)
        label = label or str(path)
        try:
            arrays = npz_members(self.path, label)
        except FedsdeInputError:
            raise
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise FedsdeInputError(f"data={label!r}: cannot be read as an .npz of plain arrays "
                                   f"({type(exc).__name__})") from None
        missing = [a for a in ("x", "y", "client") if a not in arrays]
        extra = sorted(set(arrays) - set(_MEMBERS))
        if missing or extra or (("x_test" in arrays) != ("y_test" in arrays)):
            raise FedsdeInputError(f"data={label!r}: needs arrays x, y, client (x_test, y_test optional, together); "
                                   f"found {', '.join(sorted(arrays)) or 'none'}")
        self.x, self.y = arrays["x"], arrays["y"]
        client = np.asarray(arrays["client"])
        if self.x.ndim < 2 or self.y.shape != self.x.shape[:1] or client.shape != self.x.shape[:1]:
            raise FedsdeInputError(f"data={label!r}: shapes x {self.x.shape}, y {self.y.shape}, client "
                                   f"{client.shape} must be (n, …), (n,) and (n,)")
        if self.x.shape[0] == 0:
            raise FedsdeInputError(f"data={label!r}: x has no rows (shape {self.x.shape}); a population needs at "
                                   "least one client with one row")
        for name in ("x", "y", "x_test", "y_test"):  # the dtypes, from the headers (no row is read)
            if name in arrays:
                try:
                    check_numeric(name, np.empty(0, dtype=arrays[name].dtype))
                except FedsdeInputError as exc:
                    raise FedsdeInputError(f"data={label!r}: {exc}") from None
        ids, names = client_order(client)
        self.client_names = tuple(str(v) for v in names)
        self.Q = len(names)
        self.sizes = np.bincount(ids, minlength=self.Q).astype(np.int64)
        self._starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)
        # rows of each client in file order; None: the file holds every client's rows together already
        self._order = None if bool(np.all(ids[1:] >= ids[:-1])) else np.argsort(ids, kind="stable")
        self.x_test, self.y_test = arrays.get("x_test"), arrays.get("y_test")
        m = 0 if self.x_test is None else int(self.x_test.shape[0])
        if m and (self.x_test.shape[1:] != self.x.shape[1:] or self.y_test.shape != (m,)):
            raise FedsdeInputError(f"data={label!r}: x_test {self.x_test.shape}, y_test {self.y_test.shape} must be "
                                   f"(m, {', '.join(map(str, self.x.shape[1:]))}) and (m,)")
        self.test_sizes = np.zeros(self.Q, dtype=np.int64)
        self.test_sizes[0] = m
        self.row_shape = tuple(int(s) for s in self.x.shape[1:])
        self.n_features = int(np.prod(self.row_shape, dtype=np.int64))
        self.label = label
        self.n_classes = 2  # set by check_rows from the labels
        self._checked: str | None = None

    def check_rows(self, loss: str) -> None:
        """Check every row as :func:`~fedsde.problems.module.module_problem` checks an npz it holds (``x`` finite;
        class labels integers >= 0, else finite targets; the same messages), streaming the mapped arrays in
        blocks of :data:`CHECK_ROWS` rows (memory of a block, not of the file), and set ``n_classes`` (``1 +`` the
        largest label).  Called once per loss by :func:`~fedsde.problems.module.population.module_population_problem`
        before any row is used."""
        from fedsde.problems.module.problem import _targets as checked_targets

        if self._checked == loss:
            return
        top = -1
        for xname, yname, X, Y in (("x", "y", self.x, self.y), ("x_test", "y_test", self.x_test, self.y_test)):
            n = 0 if X is None else int(X.shape[0])
            for a in range(0, n, CHECK_ROWS):
                xb = np.asarray(X[a:a + CHECK_ROWS])
                if not np.isfinite(xb).all():
                    raise FedsdeInputError(f"data={self.label!r}: {xname}: contains NaN or inf")
                try:
                    yb = checked_targets(yname, np.asarray(Y[a:a + CHECK_ROWS]), xb.shape[0], loss)
                except FedsdeInputError as exc:
                    raise FedsdeInputError(f"data={self.label!r}: {exc}") from None
                if loss in LABEL_LOSSES and yb.size:
                    top = max(top, int(yb.max()))
        self.n_classes = max(top + 1, 2)
        self._checked = loss

    def client_rows(self, k: int, split: str = "train", rows=None) -> tuple[np.ndarray, np.ndarray]:
        """Rows (n, …) float64 and targets (n,) of client ``k``'s ``split`` (all, or those numbered ``rows``)."""
        k = int(k)
        if not 0 <= k < self.Q:
            raise FedsdeInputError(f"client={k}: must lie in [0, {self.Q - 1}]")
        if split == "test":
            n = int(self.test_sizes[k])
            idx = np.arange(n) if rows is None else np.asarray(rows, dtype=np.int64)
            if not n:
                return np.zeros((0, *self.row_shape)), np.zeros(0, dtype=np.int64)
            return np.asarray(self.x_test[idx], dtype=np.float64), _targets(self.y_test[idx], self._checked)
        if split != "train":
            raise FedsdeInputError(f"split={split!r}: must be 'train' or 'test'")
        a, n = int(self._starts[k]), int(self.sizes[k])
        local = np.arange(n) if rows is None else np.asarray(rows, dtype=np.int64)
        if local.size and (local.min() < 0 or local.max() >= n):
            raise FedsdeInputError(f"rows: must lie in [0, {n - 1}] for client {k}")
        if self._order is None:
            idx = a + local
            if rows is None:  # one contiguous slice of the file
                return np.asarray(self.x[a:a + n], dtype=np.float64), _targets(self.y[a:a + n], self._checked)
        else:
            idx = self._order[a + local]
        return np.asarray(self.x[idx], dtype=np.float64), _targets(self.y[idx], self._checked)

    def describe(self) -> dict:
        return {"data": self.path.name, "population": "npz slices (memory-mapped)"}


def _targets(y, loss: str | None = None) -> np.ndarray:
    """Labels as the checked problem holds them (:func:`~fedsde.problems.module.module_problem`): int64 for
    integer arrays and for class labels (whole numbers, :meth:`NpzPopulation.check_rows`), else float64."""
    y = np.asarray(y)
    if np.issubdtype(y.dtype, np.integer) or loss in LABEL_LOSSES:
        return y.astype(np.int64)
    return y.astype(np.float64)
