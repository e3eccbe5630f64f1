"""Partitioners: sizes and label histograms as specified, reproducibility, and the stall guards."""

from __future__ import annotations

import numpy as np
import pytest

from fedsde.errors import FedsdeInputError
from fedsde.problems import (
    dirichlet_partition,
    iid_partition,
    label_histogram,
    load_dataset,
    niid2_partition,
    quantity_skew_partition,
    shard_partition,
)


@pytest.fixture(scope="module")
def digits_labels():
    return load_dataset("digits")[1]


def _disjoint(parts, n):
    allidx = np.concatenate(parts)
    assert np.unique(allidx).size == allidx.size
    assert allidx.min() >= 0 and allidx.max() < n
    return allidx


def test_iid_sizes():
    parts = iid_partition(103, 10, seed=0)
    sizes = [p.size for p in parts]
    assert sum(sizes) == 103 and max(sizes) - min(sizes) <= 1
    _disjoint(parts, 103)


def test_dirichlet_covers_data_and_respects_min_size(digits_labels):
    y = digits_labels
    parts = dirichlet_partition(y, 20, 0.1, seed=1, min_size=10)
    allidx = _disjoint(parts, y.size)
    assert allidx.size == y.size  # every class is split completely
    assert min(p.size for p in parts) >= 10
    H = label_histogram(y, parts)
    np.testing.assert_array_equal(H.sum(0), np.bincount(y))
    # strong skew at α = 0.1: most clients hold most of their data in at most two classes
    top2 = np.sort(H, axis=1)[:, -2:].sum(1) / H.sum(1)
    assert np.median(top2) > 0.8
    again = dirichlet_partition(y, 20, 0.1, seed=1, min_size=10)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    # large α: close to the global label distribution π.  Class c goes to client k in proportion q_ck ~ Dir(α·1_Q),
    # independent over c, so δ_ck = Q·q_ck − 1 has variance v = (Q − 1)/(Qα + 1) and, to first order, the label
    # share f_ck = π_c(1 + δ_ck)/Σ_c' π_c'(1 + δ_c'k) has s.e. π_c·√(v·((1 − π_c)² + Σ_{c'≠c} π_c'²)).  Cutting
    # each class at integer positions moves every count by less than 1, hence f_ck by less than (1 + C·π_c)/n_k:
    # a deterministic allowance added to 5 s.e.  (The N/Q cap cannot bind: before the last class every client
    # holds about (N − n_last)/Q samples.)
    Q, alpha = 5, 1000.0
    H = label_histogram(y, dirichlet_partition(y, Q, alpha, seed=0))
    pi = np.bincount(y) / y.size
    v = (Q - 1) / (Q * alpha + 1)
    se = pi * np.sqrt(v * ((1 - pi) ** 2 + np.sum(pi**2) - pi**2))
    n_k = H.sum(1, keepdims=True)
    rounding = (1 + pi.size * pi) / n_k
    z = np.maximum(np.abs(H / n_k - pi) - rounding, 0.0) / se
    assert z.max() < 5, f"label shares off by {z.max():.2f} s.e. beyond the rounding allowance"
    assert np.all(5 * se + rounding < 0.25 * pi)  # the check resolves a 25% change of any class's share


def test_dirichlet_stall_guard_fires(digits_labels):
    with pytest.raises(FedsdeInputError, match=r"max_tries=5: .*min_size=30"):
        dirichlet_partition(digits_labels, 50, 0.05, seed=0, min_size=30, max_tries=5)
    with pytest.raises(FedsdeInputError, match="exceeds"):
        dirichlet_partition(digits_labels, 100, 0.5, seed=0, min_size=20)


def test_shards_pathological_split():
    y = np.repeat(np.arange(10), 30)  # 300 samples, 30 per class
    parts = shard_partition(y, 10, 2, seed=3)  # 20 shards of 15, each inside one class
    assert [p.size for p in parts] == [30] * 10
    _disjoint(parts, y.size)
    H = label_histogram(y, parts)
    assert set(np.unique(H)) <= {0, 15, 30}
    assert np.all((H > 0).sum(1) <= 2)
    np.testing.assert_array_equal(H.sum(0), np.full(10, 30))


def test_shards_drop_the_remainder(digits_labels):
    parts = shard_partition(digits_labels, 20, 2, seed=0)
    size = 2 * (digits_labels.size // 40)
    assert all(p.size == size for p in parts)


def test_niid2_histogram(digits_labels):
    y = digits_labels
    parts = niid2_partition(y, 5, 1, seed=0)
    _disjoint(parts, y.size)
    H = label_histogram(y, parts)
    shard = int(np.min(np.bincount(y)) // 6)  # every class feeds one biased client (5 shards) + 1 uniform
    assert all(p.size == 10 * shard for p in parts)
    for i in range(5):
        expect = np.zeros(10, int)
        expect[[2 * i, 2 * i + 1]] = 5 * shard
        np.testing.assert_array_equal(H[i], expect)
    np.testing.assert_array_equal(H[5], np.full(10, shard))


def test_quantity_skew(digits_labels):
    parts = quantity_skew_partition(digits_labels.size, 8, 0.5, seed=4, min_size=20)
    sizes = np.array([p.size for p in parts])
    assert sizes.sum() == digits_labels.size and sizes.min() >= 20 and sizes.max() > 2 * sizes.min()
    _disjoint(parts, digits_labels.size)
    with pytest.raises(FedsdeInputError, match="max_tries=3"):
        quantity_skew_partition(100, 10, 0.01, seed=0, min_size=9, max_tries=3)
