"""Data for least-squares clients: a user's CSV file, and two sets shipped with installed packages (no downloads).

* :func:`csv_clients` — rows of a CSV file (UTF-8, header row, comma separated): the ``features`` columns, the
  ``target`` column and a ``client_column`` whose every distinct value is one client (in order of first
  appearance).  Missing columns, empty or non-numeric cells, NaN/inf and rows of the wrong length are one-line
  :class:`~fedsde.errors.FedsdeInputError` naming the file, the row (and its line) and the column.
  :func:`~fedsde.problems.regression.csv_reader.csv_blocks` (re-exported here) streams the same records, checks and
  messages in blocks (:func:`csv_clients` reads through it, and so does :mod:`fedsde.problems.regression.store`, which
  keeps a file's rows on disk).
* :func:`grunfeld_clients` — statsmodels' Grunfeld investment panel: 11 US firms × 20 years (1935–1954), the
  firm's gross investment ``invest`` on its market ``value`` and its ``capital`` stock; every firm is a client.
* :func:`diabetes_clients` — scikit-learn's diabetes data (442 patients, 10 baseline variables, a disease
  progression score one year later), split among clients by :mod:`fedsde.problems.classification.partition` (``iid``,
  ``dirichlet`` over the target cut into quantile bins, or ``quantity`` skew).
* :func:`standardise` — centre and scale features and target with the pooled mean and standard deviation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedsde._validate import choice
from fedsde.errors import FedsdeInputError
from fedsde.problems.regression.csv_reader import CSV_BLOCK, csv_blocks, csv_cell

__all__ = ["CSV_BLOCK", "check_magnitudes", "csv_blocks", "csv_cell", "csv_clients", "diabetes_clients",
           "grunfeld_clients", "moment_limit", "standardise"]

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
    from fedsde.problems.classification import bundled
    from fedsde.problems.classification import partition as part

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
