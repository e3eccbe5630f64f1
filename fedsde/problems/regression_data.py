"""Data for least-squares clients: a user's CSV file, and two sets shipped with installed packages (no downloads).

* :func:`csv_clients` — rows of a CSV file (UTF-8, header row, comma separated): the ``features`` columns, the
  ``target`` column and a ``client_column`` whose every distinct value is one client (in order of first
  appearance).  Missing columns, empty or non-numeric cells, NaN/inf and rows of the wrong length are one-line
  :class:`~fedsde.errors.FedsdeInputError` naming the file, the row (and its line) and the column.
  :func:`csv_blocks` streams the same records, checks and messages in blocks (:func:`csv_clients` reads through
  it, and so does :mod:`fedsde.problems.regression_store`, which keeps a file's rows on disk).
* :func:`grunfeld_clients` — statsmodels' Grunfeld investment panel: 11 US firms × 20 years (1935–1954), the
  firm's gross investment ``invest`` on its market ``value`` and its ``capital`` stock; every firm is a client.
* :func:`diabetes_clients` — scikit-learn's diabetes data (442 patients, 10 baseline variables, a disease
  progression score one year later), split among clients by :mod:`fedsde.problems.partition` (``iid``,
  ``dirichlet`` over the target cut into quantile bins, or ``quantity`` skew).
* :func:`standardise` — centre and scale features and target with the pooled mean and standard deviation.
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import math
import operator
from collections.abc import Sequence

import numpy as np

from fedsde._io import read_text
from fedsde._validate import choice
from fedsde.errors import FedsdeInputError

DATASETS = ("grunfeld", "diabetes")
DIABETES_PARTITIONS = ("iid", "dirichlet", "quantity")
GRUNFELD_FEATURES = ("value", "capital")


def csv_clients(path, features: Sequence[str], target: str,
                client_column: str) -> tuple[list[np.ndarray], list[np.ndarray], list[str]]:
    """Per-client features (n_k, F) and targets (n_k,) from a CSV file, and the client names (module docstring)."""
    rows: dict[str, list] = {}
    cells: list[np.ndarray] = []
    for clients, values in csv_blocks(path, features, target, client_column):
        for c, v in zip(clients, values, strict=True):
            rows.setdefault(c, []).append(v)
        cells.append(values)
    values, F = np.concatenate(cells), len(features)
    check_magnitudes(values, values.shape[0], F, lambda i, j: csv_cell(path, i, [*features, target][j]))
    clients = list(rows)
    both = [np.asarray(rows[c], dtype=np.float64).reshape(-1, F + 1) for c in clients]
    return [np.ascontiguousarray(v[:, :F]) for v in both], [v[:, F].copy() for v in both], clients


#: records per block of :func:`csv_blocks`
CSV_BLOCK = 1 << 14


def csv_blocks(path, features: Sequence[str], target: str, client_column: str, block: int = CSV_BLOCK):
    """The records of a CSV file in blocks of at most ``block``, in file order, without holding the file: yields
    ``(clients, values)``: client names (list of str) and ``values`` (n, F + 1) float64 (the features, then the
    target).  Checks and messages are those of :func:`csv_clients` (which reads through this): header, columns,
    field counts, empty or non-numeric cells, NaN/inf; blank lines are skipped; a file with no record is refused.
    A block is converted at once; a block in doubt (a blank line, a bad cell) record by record, and an error is
    reported with its row and line from a second reading of the file up to it.  Magnitudes are checked by the caller
    (:func:`check_magnitudes`, which needs the number of rows; :func:`csv_cell` names a cell)."""
    with _opened(path) as fh:
        reader = csv.reader(fh)
        names, cols, c_col = _header(reader, path, features, target, client_column)
        take = operator.itemgetter(*cols) if len(cols) > 1 else (lambda r, j=cols[0]: (r[j],))
        count = 0
        while chunk := list(itertools.islice(reader, block)):
            got = _fast_block(chunk, len(names), c_col, take, len(cols)) or _exact_block(chunk, len(names), c_col,
                                                                                        cols)
            if got is None:
                _raise_first_error(path, features, target, client_column)
            if got[0]:
                count += len(got[0])
                yield got
    if not count:
        raise FedsdeInputError(f"data file {str(path)!r}: has a header but no rows")


@contextlib.contextmanager
def _opened(path):
    """``path`` opened as UTF-8 text (a leading byte-order mark dropped); bytes that are not UTF-8 are the one-line
    message of :func:`fedsde._io.read_text` naming the first one's offset."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            yield fh
    except UnicodeDecodeError:
        read_text(path, "data file")
        raise


def _header(reader, path, features, target, client_column) -> tuple[list[str], list[int], int]:
    where = f"data file {str(path)!r}"
    header = next(reader, None)
    if not header or not any(h.strip() for h in header):
        raise FedsdeInputError(f"{where}: empty (it needs a header row naming the columns)")
    names = [h.strip() for h in header]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise FedsdeInputError(f"{where}: column name(s) {', '.join(map(repr, dup))} appear more than once")
    wanted = [*features, target, client_column]
    missing = [c for c in wanted if c not in names]
    if missing:
        raise FedsdeInputError(f"{where}: no column(s) {', '.join(map(repr, missing))} (columns: "
                               f"{', '.join(names)})")
    return names, [names.index(c) for c in (*features, target)], names.index(client_column)


def _fast_block(chunk, width, c_col, take, ncols):
    """A block of plain records at once (every record of ``width`` fields, a client, finite numbers), else None."""
    if set(map(len, chunk)) != {width}:
        return None
    clients = [r[c_col].strip() for r in chunk]
    if not all(clients):
        return None
    try:  # float() strips white space as _number does
        values = np.fromiter(map(float, itertools.chain.from_iterable(map(take, chunk))), dtype=np.float64,
                             count=len(chunk) * ncols).reshape(len(chunk), ncols)
    except ValueError:
        return None
    return (clients, values) if np.isfinite(values).all() else None


def _exact_block(chunk, width, c_col, cols):
    """The block record by record (blank lines skipped); None at a record that fails a check."""
    clients, values = [], []
    for r in chunk:
        if not r or not "".join(r).strip():
            continue
        if len(r) != width or not r[c_col].strip():
            return None
        try:
            v = [float(r[j]) for j in cols]
        except ValueError:
            return None
        if not all(map(math.isfinite, v)):
            return None
        clients.append(r[c_col].strip())
        values.append(v)
    return clients, np.asarray(values, dtype=np.float64).reshape(-1, len(cols))


def _records(path, features, target, client_column):
    """``(row, line, record, names, cols, c_col)`` of every record, one by one (blank lines skipped)."""
    with _opened(path) as fh:
        reader = csv.reader(fh)
        names, cols, c_col = _header(reader, path, features, target, client_column)
        count = 0
        for record in reader:
            if not record or not "".join(record).strip():
                continue  # blank line
            count += 1
            yield count, reader.line_num, record, names, cols, c_col


def _raise_first_error(path, features, target, client_column) -> None:
    """Read the file record by record and raise the first record's error (row, line, column)."""
    where = f"data file {str(path)!r}"
    for count, line, record, names, cols, c_col in _records(path, features, target, client_column):
        at = f"{where}, row {count} (line {line})"
        if len(record) != len(names):
            raise FedsdeInputError(f"{at}: has {len(record)} fields, the header has {len(names)}")
        if not record[c_col].strip():
            raise FedsdeInputError(f"{at}, column {names[c_col]!r}: empty (every row needs a client)")
        for j in cols:
            _number(record[j], at, names[j])
    raise AssertionError("a block failed its checks but no record does")  # pragma: no cover


def csv_cell(path, row: int, column: str) -> str:
    """``data file '…', row r (line l), column 'c'`` for record ``row`` (from 0) of a file that reads without
    errors (a second reading up to it)."""
    for count, line, *_ in _records(path, [], column, column):
        if count == row + 1:
            return f"data file {str(path)!r}, row {count} (line {line}), column {column!r}"
    raise IndexError(row)


def moment_limit(rows: int, columns: int) -> float:
    """Largest magnitude of a feature or target whose fourth moments (the exact minibatch covariances multiply
    four row values and sum them over rows and columns) stay far inside float64:
    ``(float64 max / (rows · (columns + 1)²))^{1/4} / 10``."""
    return float((np.finfo(np.float64).max / (max(rows, 1) * (columns + 1) ** 2)) ** 0.25 / 10.0)


def check_magnitudes(values: np.ndarray, rows: int, columns: int, where) -> None:
    """Refuse a cell above :func:`moment_limit`; ``where(i, j)`` names row ``i`` and column ``j`` of ``values``."""
    limit = moment_limit(rows, columns)
    big = np.abs(values) > limit
    if big.any():
        i, j = (int(v) for v in np.argwhere(big)[0])
        raise FedsdeInputError(f"{where(i, j)}: {float(values[i, j])!r} is too large: values above {limit:.3g} "
                               "(with these rows and columns) overflow the data's second and fourth moments in "
                               "float64; rescale the column")


def _number(cell: str, at: str, column: str) -> float:
    s = cell.strip()
    if not s:
        raise FedsdeInputError(f"{at}, column {column!r}: empty (a number is needed)")
    try:
        v = float(s)
    except ValueError:
        raise FedsdeInputError(f"{at}, column {column!r}: {s!r} is not a number") from None
    if not math.isfinite(v):
        raise FedsdeInputError(f"{at}, column {column!r}: {s!r} is not a finite number (NaN and inf are refused)")
    return v


def grunfeld_clients() -> tuple[list[np.ndarray], list[np.ndarray], list[str]]:
    """Grunfeld's panel (statsmodels): per firm ``(value, capital)`` rows (20, 2), ``invest`` (20,), firm names."""
    from statsmodels.datasets import grunfeld

    df = grunfeld.load_pandas().data
    firms = list(dict.fromkeys(df["firm"].astype(str)))
    X, y = [], []
    for firm in firms:
        rows = df[df["firm"].astype(str) == firm].sort_values("year")
        X.append(rows[list(GRUNFELD_FEATURES)].to_numpy(dtype=np.float64))
        y.append(rows["invest"].to_numpy(dtype=np.float64))
    return X, y, firms


def diabetes_clients(*, clients: int, partition: str, seed: int, alpha: float = 0.5, bins: int = 5,
                     min_size: int = 10, quantity_beta: float = 1.0
                     ) -> tuple[list[np.ndarray], list[np.ndarray], list[str], list[str]]:
    """scikit-learn's diabetes data (unscaled) split among ``clients`` (module docstring).

    Returns per-client features (n_k, 10), targets (n_k,), client names and the feature names.
    ``dirichlet``: per-bin Dirichlet(α) skew over the target cut at its ``bins``-quantiles (every client keeps at
    least ``min_size`` rows); ``quantity``: client sizes from Dirichlet(β) proportions.
    """
    from fedsde.problems import bundled
    from fedsde.problems import partition as part

    choice("partition", partition, DIABETES_PARTITIONS)
    X, y = bundled.diabetes()
    if partition == "iid":
        parts = part.iid_partition(y.size, clients, seed=seed)
    elif partition == "dirichlet":
        edges = np.quantile(y, np.linspace(0.0, 1.0, bins + 1)[1:-1])
        labels = np.searchsorted(edges, y, side="right")
        parts = part.dirichlet_partition(labels, clients, alpha, seed=seed, min_size=min_size)
    else:  # quantity
        parts = part.quantity_skew_partition(y.size, clients, quantity_beta, seed=seed, min_size=min_size)
    parts = [np.sort(i) for i in parts]
    return ([X[i] for i in parts], [y[i] for i in parts], [str(k) for k in range(len(parts))],
            list(bundled.DIABETES_FEATURES))


def standardise(X: list[np.ndarray], y: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray], dict]:
    """Features and target centred and scaled by their pooled mean and standard deviation (a constant column, all
    of its values equal, is centred on its value exactly and not scaled); returns the new lists and the statistics
    used."""
    Xa, ya = np.concatenate(X), np.concatenate(y)
    mx, sx = Xa.mean(0), Xa.std(0)
    my, sy = float(ya.mean()), float(ya.std())
    const = Xa.min(0) == Xa.max(0)  # a rounded mean of equal values need not be that value: sd would be ~1e-17
    mx, sx = np.where(const, Xa[0], mx), np.where(const | (sx <= 0), 1.0, sx)
    if ya.min() == ya.max():
        my, sy = float(ya[0]), 1.0
    sy = sy if sy > 0 else 1.0
    stats = {"feature_mean": mx.tolist(), "feature_sd": sx.tolist(), "target_mean": my, "target_sd": sy}
    return [(x - mx) / sx for x in X], [(v - my) / sy for v in y], stats
