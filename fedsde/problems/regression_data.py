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
import io
import math
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
    text = read_text(path, "data file")
    reader = csv.reader(io.StringIO(text))
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
    cols = [names.index(c) for c in features]
    t_col, c_col = names.index(target), names.index(client_column)
    rows: dict[str, tuple[list, list]] = {}
    lines: list[tuple[int, int]] = []  # (row, line) of every record, for messages
    cells: list[list[float]] = []
    count = 0
    for record in reader:
        if not record or all(not c.strip() for c in record):
            continue  # blank line
        count += 1
        at = f"{where}, row {count} (line {reader.line_num})"
        if len(record) != len(names):
            raise FedsdeInputError(f"{at}: has {len(record)} fields, the header has {len(names)}")
        client = record[c_col].strip()
        if not client:
            raise FedsdeInputError(f"{at}, column {client_column!r}: empty (every row needs a client)")
        x = [_number(record[j], at, names[j]) for j in cols]
        xs, ys = rows.setdefault(client, ([], []))
        xs.append(x)
        ys.append(_number(record[t_col], at, target))
        lines.append((count, reader.line_num))
        cells.append([*x, ys[-1]])
    if not rows:
        raise FedsdeInputError(f"{where}: has a header but no rows")
    column_names = [*features, target]
    check_magnitudes(np.asarray(cells), count, len(cols), lambda i, j: (
        f"{where}, row {lines[i][0]} (line {lines[i][1]}), column {column_names[j]!r}"))
    clients = list(rows)
    X = [np.asarray(rows[c][0], dtype=np.float64).reshape(-1, len(cols)) for c in clients]
    y = [np.asarray(rows[c][1], dtype=np.float64) for c in clients]
    return X, y, clients


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
    """Features and target centred and scaled by their pooled mean and standard deviation (constant columns are
    only centred); returns the new lists and the statistics used."""
    Xa, ya = np.concatenate(X), np.concatenate(y)
    mx, sx = Xa.mean(0), Xa.std(0)
    my, sy = float(ya.mean()), float(ya.std())
    sx = np.where(sx > 0, sx, 1.0)
    sy = sy if sy > 0 else 1.0
    stats = {"feature_mean": mx.tolist(), "feature_sd": sx.tolist(), "target_mean": my, "target_sd": sy}
    return [(x - mx) / sx for x in X], [(v - my) / sy for v in y], stats
