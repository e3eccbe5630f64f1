"""Quadratic problems: shapes, validation, optimum and loss, I/O, generator."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedsde.errors import FedsdeInputError
from fedsde.problems import (
    QuadraticProblem,
    load_problem,
    paper_table_problem,
    random_quadratic_problem,
    save_problem,
)


def test_scalar_problem_optimum_and_constant_term():
    pb = paper_table_problem()
    assert pb.Q == 3 and pb.d == 1
    # w* = Σ p U a / Σ p U = (−1 + 0 + 8)/7 = 1
    assert pb.optimum == pytest.approx([1.0])
    # F(w) = ½ Σ p_k U_k (w − a_k)²; at w = 1: (1·4 + 2·1 + 4·1)/6 = 10/6
    assert pb.min_loss == pytest.approx(10 / 6)
    assert pb.loss(np.array([0.0])) == pytest.approx((1 + 0 + 16) / 6)


def test_shapes_full_diag_scalar_agree():
    U = [[1.0, 2.0], [3.0, 0.5]]
    S = [[0.1, 0.2], [0.3, 0.4]]
    a = [[0.0, 1.0], [2.0, -1.0]]
    diag = QuadraticProblem.from_arrays(U, a, S, [1, 3])
    full = QuadraticProblem.from_arrays([np.diag(u) for u in U], a, [np.diag(s) for s in S], [1, 3])
    np.testing.assert_array_equal(diag.U, full.U)
    np.testing.assert_allclose(diag.p, [0.25, 0.75])
    assert diag.is_diagonal
    # optimum: per coordinate Σ p U a / Σ p U
    want = [(0.25 * 1 * 0 + 0.75 * 3 * 2) / (0.25 * 1 + 0.75 * 3), (0.25 * 2 * 1 + 0.75 * 0.5 * -1) / (0.5 + 0.375)]
    np.testing.assert_allclose(diag.optimum, want)


def test_optimum_minimises_loss_full_matrices():
    pb = random_quadratic_problem(5, 4, seed=3)
    w = pb.optimum
    np.testing.assert_allclose(pb.grad(w), 0, atol=1e-12)
    rng = np.random.default_rng(0)
    for _ in range(5):
        v = rng.standard_normal(4) * 1e-3
        assert pb.loss(w + v) > pb.loss(w)
    # excess loss of a point mass equals F(w) − F*
    x = rng.standard_normal(4)
    assert pb.excess_loss(x, np.zeros((4, 4))) == pytest.approx(pb.loss(x) - pb.min_loss)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(U=[1.0, -1.0], a=[0.0, 1.0], Sigma=[1.0, 1.0]), r"U\[1\]: not positive semi-definite"),
        (dict(U=[1.0, 1.0], a=[0.0, 1.0], Sigma=[1.0, -2.0]), r"Sigma\[1\]: not positive semi-definite"),
        (dict(U=[[[1, 2], [0, 1]]], a=[[0, 0]], Sigma=[[1, 1]]), r"U\[0\]: not symmetric"),
        (dict(U=[1.0, 1.0], a=[0.0, 1.0], Sigma=[1.0, 1.0], p=[0, 0]), "all weights are zero"),
        (dict(U=[1.0, 1.0], a=[0.0, 1.0], Sigma=[1.0, 1.0], p=[1, -1]), r"p\[1\]=-1.0: weights must be"),
        (dict(U=[1.0, 1.0, 1.0], a=[0.0, 1.0], Sigma=[1.0, 1.0]), r"U: shape \(3,\) must be"),
        (dict(U=[1.0, 1.0], a=[0.0, np.nan], Sigma=[1.0, 1.0]), "a: contains NaN"),
        (dict(U=[0.0, 0.0], a=[0.0, 1.0], Sigma=[1.0, 1.0]), "singular"),
        (dict(U=[1.0, 1.0], a=[0.0, 1.0], Sigma=[1.0, 1.0], p=[1, 2, 3]), r"p: shape \(3,\) must be \(2,\)"),
    ],
)
def test_validation_errors_name_argument(kwargs, match):
    with pytest.raises(FedsdeInputError, match=match):
        QuadraticProblem.from_arrays(kwargs.pop("U"), kwargs.pop("a"), kwargs.pop("Sigma"), kwargs.pop("p", None))


@pytest.mark.parametrize("suffix", [".toml", ".json"])
@pytest.mark.parametrize("diagonal", [True, False])
def test_save_load_roundtrip(tmp_path, suffix, diagonal):
    pb = random_quadratic_problem(3, 2, seed=1, diagonal=diagonal, weights="random")
    path = save_problem(pb, tmp_path / f"pb{suffix}")
    back = load_problem(path)
    for name in ("U", "a", "Sigma", "p"):
        np.testing.assert_allclose(getattr(back, name), getattr(pb, name), rtol=1e-15)
    assert not list(tmp_path.glob(".*tmp"))  # no leftovers from the atomic write


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_label_distributions_roundtrip_and_transforms(tmp_path, suffix):
    pb = QuadraticProblem.from_arrays([1.0, 2.0, 4.0], [-1.0, 0.0, 2.0], [0.5, 1.0, 2.0],
                                      label_distributions=[[8, 2], [5, 5], [0, 10]])
    want = np.array([[0.8, 0.2], [0.5, 0.5], [0.0, 1.0]])
    np.testing.assert_allclose(pb.label_distributions, want)  # rows normalised
    back = load_problem(save_problem(pb, tmp_path / f"pb{suffix}"))
    np.testing.assert_allclose(back.label_distributions, want, rtol=1e-15)
    np.testing.assert_allclose(pb.with_weights([1, 2, 1]).label_distributions, want)
    np.testing.assert_allclose(pb.replicated(2).label_distributions, np.vstack([want, want]))
    assert "label_distributions" not in paper_table_problem().to_dict()
    assert paper_table_problem().replicated(2).label_distributions is None


def test_label_distributions_in_a_problem_file(tmp_path):
    path = tmp_path / "pb.toml"
    path.write_text('U = [1.0, 2.0]\na = [0.0, 1.0]\nSigma = [1.0, 1.0]\nlabel_distributions = [[1, 3], [2, 2]]\n')
    np.testing.assert_allclose(load_problem(path).label_distributions, [[0.25, 0.75], [0.5, 0.5]])
    path.write_text('U = [1.0, 2.0]\na = [0.0, 1.0]\nSigma = [1.0, 1.0]\nlabels = [[1, 3], [2, 2]]\n')
    with pytest.raises(FedsdeInputError, match=r"unknown key\(s\) labels \(allowed: .*label_distributions\)"):
        load_problem(path)


@pytest.mark.parametrize(("dists", "match"), [
    ([[1, 0], [0, -1]], r"label_distributions\[1\]\[1\]=-1\.0: must be finite and >= 0"),
    ([[1, 0], [np.nan, 1]], r"label_distributions\[1\]\[0\]=nan"),
    ([[1, 0], [0, 0]], r"label_distributions\[1\]: sums to 0"),
    ([[1, 0], [0, 1], [1, 1]], r"label_distributions: shape \(3, 2\) must be \(Q, C\) with Q=2"),
    ([1, 0], r"label_distributions: shape \(2,\)"),
])
def test_label_distributions_validation(dists, match):
    with pytest.raises(FedsdeInputError, match=match):
        QuadraticProblem.from_arrays([1.0, 2.0], [0.0, 1.0], [1.0, 1.0], label_distributions=dists)


def test_load_errors(tmp_path):
    with pytest.raises(FedsdeInputError, match="does not exist"):
        load_problem(tmp_path / "missing.toml")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"U": [1.0], "a": [0.0]}))
    with pytest.raises(FedsdeInputError, match="missing key"):
        load_problem(bad)
    bad.write_text("{not json")
    with pytest.raises(FedsdeInputError, match="cannot be parsed"):
        load_problem(bad)
    other = tmp_path / "pb.yaml"
    other.write_text("U: 1")
    with pytest.raises(FedsdeInputError, match="suffix"):
        load_problem(other)


def test_generator_is_seeded_and_heterogeneous():
    a = random_quadratic_problem(6, 3, seed=11, spread=2.0)
    b = random_quadratic_problem(6, 3, seed=11, spread=2.0)
    c = random_quadratic_problem(6, 3, seed=12, spread=2.0)
    np.testing.assert_array_equal(a.U, b.U)
    assert not np.allclose(a.U, c.U)
    lam = np.linalg.eigvalsh(a.U)
    assert lam.min() >= 0.5 - 1e-12 and lam.max() <= 4.0 + 1e-12
    assert np.std(a.a) > 0.5  # spread of client optima
    with pytest.raises(FedsdeInputError, match="curvature"):
        random_quadratic_problem(2, 2, seed=0, curvature=(3.0, 1.0))
