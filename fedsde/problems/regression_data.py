"""Data for least-squares clients: a user's CSV file, and two sets shipped with installed packages (no downloads).

* :func:`csv_clients` — rows of a CSV file (UTF-8, header row, comma separated): the ``features`` columns, the
  ``target`` column and a ``client_column`` whose every distinct value is one client (in order of first
  appearance).  Missing columns, empty or non-numeric cells, NaN/inf and rows of the wrong length are one-line
  :class:`~fedsde.errors.FedsdeInputError` naming the file, the row (and its line) and the column.
* :func:`grunfeld_clients` — statsmodels' Grunfeld investment panel: 11 US firms × 20 years (1935–1954), the
  firm's gross investment ``invest`` on its market ``value`` and its ``capital`` stock; every firm is a client.
* :func:`diabetes_clients` — scikit-learn's diabetes data (442 patients, 10 baseline variables, a disease
  progression score one year later), split among clients by :mod:`fedsde.problems.partition` (``iid``,
  ``dirichlet`` over the target cut into quantile bins, or ``quantity`` skew).
* :func:`standardise` — centre and scale features and target with the pooled mean and standard deviation.
"""

from __future__ import annotations

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
    where = f"data file {str(path)!r}"
    rows: dict[str, list] = {}
    lines: list[np.ndarray] = []  # line of every record, for messages
    cells: list[np.ndarray] = []
    for clients, values, at_lines in csv_blocks(path, features, target, client_column):
        for c, v in zip(clients, values, strict=True):
            rows.setdefault(c, []).append(v)
        lines.append(at_lines)
        cells.append(values)
    line = np.concatenate(lines)
    count, F = line.size, len(features)
    column_names = [*features, target]
    check_magnitudes(np.concatenate(cells), count, F, lambda i, j: (
        f"{where}, row {i + 1} (line {int(line[i])}), column {column_names[j]!r}"))
    clients = list(rows)
    both = [np.asarray(rows[c], dtype=np.float64).reshape(-1, F + 1) for c in clients]
    return [np.ascontiguousarray(v[:, :F]) for v in both], [v[:, F].copy() for v in both], clients


#: records per block of :func:`csv_blocks`
CSV_BLOCK = 1 << 14


def csv_blocks(path, features: Sequence[str], target: str, client_column: str, block: int = CSV_BLOCK):
    """The records of a CSV file in blocks of at most ``block``, in file order, without holding the file: yields
    ``(clients, values, lines)``: client names (list of str), ``values`` (n, F + 1) float64 (the features, then the
    target) and the line of every record (n,) int64.  Checks and messages are those of :func:`csv_clients` (which
    reads through this): header, columns, field counts, empty or non-numeric cells, NaN/inf; blank lines are
    skipped; a file with no record is refused.  Magnitudes are checked by the caller (:func:`check_magnitudes`,
    which needs the number of rows)."""
    where = f"data file {str(path)!r}"
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            yield from _blocks(csv.reader(fh), where, list(features), target, client_column, int(block))
    except UnicodeDecodeError:
        read_text(path, "data file")  # the one-line message naming the offset of the first byte that is not UTF-8
        raise


def _blocks(reader, where: str, features: list[str], target: str, client_column: str, block: int):
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
    cols = [names.index(c) for c in (*features, target)]
    c_col = names.index(client_column)
    take = operator.itemgetter(*cols) if len(cols) > 1 else (lambda r, j=cols[0]: (r[j],))
    count = 0
    records: list[list[str]] = []
    lines: list[int] = []
    for record in reader:
        if not record or not "".join(record).strip():
            continue  # blank line
        records.append(record)
        lines.append(reader.line_num)
        if len(records) == block:
            yield _block(records, lines, count, where, names, cols, c_col, take)
            count += len(records)
            records, lines = [], []
    if records:
        yield _block(records, lines, count, where, names, cols, c_col, take)
    elif not count:
        raise FedsdeInputError(f"{where}: has a header but no rows")


def _block(records, lines, count, where, names, cols, c_col, take):
    """One block's clients, values and lines; on any doubt the records are checked one by one (the messages)."""
    n, width = len(records), len(names)
    try:
        if any(len(r) != width for r in records):
            raise ValueError
        clients = [r[c_col].strip() for r in records]
        if not all(clients):
            raise ValueError
        values = np.fromiter(map(float, itertools.chain.from_iterable(map(take, records))), dtype=np.float64,
                             count=n * len(cols)).reshape(n, len(cols))
        if not np.isfinite(values).all():
            raise ValueError
    except ValueError:
        for i, record in enumerate(records):  # raises at the first bad record
            at = f"{where}, row {count + i + 1} (line {lines[i]})"
            if len(record) != width:
                raise FedsdeInputError(f"{at}: has {len(record)} fields, the header has {width}") from None
            if not record[c_col].strip():
                raise FedsdeInputError(f"{at}, column {names[c_col]!r}: empty (every row needs a client)") from None
            for j in cols:
                _number(record[j], at, names[j])
        raise
    return clients, values, np.asarray(lines, dtype=np.int64)


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
