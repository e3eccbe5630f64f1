"""The bundled data sets read without scikit-learn equal scikit-learn's own loaders, bit for bit."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from sklearn import datasets

from fedsde.problems.classification import bundled


@pytest.mark.parametrize(("ours", "theirs"), [
    (bundled.digits, datasets.load_digits),
    (bundled.breast_cancer, datasets.load_breast_cancer),
    (bundled.diabetes, lambda: datasets.load_diabetes(scaled=False)),
])
def test_equal_to_scikit_learn(ours, theirs):
    X, y = ours()
    ref = theirs()
    assert X.dtype == np.float64 and X.shape == ref.data.shape and y.shape == ref.target.shape
    np.testing.assert_array_equal(X, ref.data)
    np.testing.assert_array_equal(y, ref.target)
    assert y.dtype == (np.float64 if ours is bundled.diabetes else np.int64)


def test_diabetes_feature_names():
    assert list(bundled.DIABETES_FEATURES) == datasets.load_diabetes().feature_names


def test_a_missing_file_falls_back_to_scikit_learn(monkeypatch):
    monkeypatch.setattr(bundled, "_data_file", lambda name: None)
    for ours, theirs in ((bundled.digits, datasets.load_digits), (bundled.breast_cancer, datasets.load_breast_cancer),
                         (bundled.diabetes, lambda: datasets.load_diabetes(scaled=False))):
        X, y = ours()
        np.testing.assert_array_equal(X, theirs().data)
        np.testing.assert_array_equal(y, theirs().target)


def test_building_a_data_problem_does_not_import_scikit_learn():
    code = ("import sys; from fedsde.problems import federated_classification; "
            "federated_classification('digits', n_clients=4, seed=0); "
            "from fedsde.problems.regression.data import diabetes_clients; "
            "diabetes_clients(clients=3, partition='iid', seed=0); print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
