"""The data sets that ship with scikit-learn, read from its data folder with NumPy (no download, no import).

Importing scikit-learn costs about a second at the start of every command that builds a data problem (0.9 s on a
2-core VM, 1.3 s on a 16-core GPU machine); the three bundled files fedsde uses are small CSVs, read here exactly
as scikit-learn's loaders parse them (``sklearn.datasets.load_digits``, ``load_breast_cancer``, ``load_diabetes(
scaled=False)``; equal bit for bit, ``tests/test_bundled_data.py``).  Where a file is not where this scikit-learn
keeps it, the loader of scikit-learn itself is used.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

#: feature names of the diabetes data, as scikit-learn gives them
DIABETES_FEATURES = ("age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6")


def _data_file(name: str) -> Path | None:
    """``sklearn/datasets/data/<name>`` of the installed scikit-learn, found without importing it; None if absent."""
    spec = importlib.util.find_spec("sklearn")
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(root) / "datasets" / "data" / name
        if path.is_file():
            return path
    return None


def digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1797 8×8 digit images: features (1797, 64) float64, labels (1797,) int64."""
    path = _data_file("digits.csv.gz")
    if path is None:
        from sklearn.datasets import load_digits

        data = load_digits()
        return np.asarray(data.data, dtype=np.float64), np.asarray(data.target, dtype=np.int64)
    arr = np.loadtxt(path, delimiter=",")
    return arr[:, :-1], arr[:, -1].astype(np.int64)


def breast_cancer() -> tuple[np.ndarray, np.ndarray]:
    """The Wisconsin breast-cancer data: features (569, 30) float64, labels (569,) int64."""
    path = _data_file("breast_cancer.csv")
    if path is not None:
        with open(path, encoding="utf-8") as fh:
            n, p = (int(v) for v in fh.readline().split(",")[:2])  # header: samples, features, class names
        arr = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
        if arr.shape == (n, p + 1):
            return arr[:, :-1], arr[:, -1].astype(np.int64)
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    return np.asarray(data.data, dtype=np.float64), np.asarray(data.target, dtype=np.int64)


def diabetes() -> tuple[np.ndarray, np.ndarray]:
    """The diabetes data, unscaled: features (442, 10) float64 (:data:`DIABETES_FEATURES`), target (442,)."""
    paths = _data_file("diabetes_data_raw.csv.gz"), _data_file("diabetes_target.csv.gz")
    if None in paths:
        from sklearn.datasets import load_diabetes

        data = load_diabetes(scaled=False)
        return np.asarray(data.data, dtype=np.float64), np.asarray(data.target, dtype=np.float64)
    return np.loadtxt(paths[0]), np.loadtxt(paths[1])
