"""fedsde._tolerances: the named tolerances have the values the code was written with, and decide as documented."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from scipy import stats

from fedsde import _tolerances as tol
from fedsde.errors import FedsdeInputError
from fedsde.problems import QuadraticProblem


def test_values_and_the_normal_quantile():
    assert tol.EPS == np.finfo(np.float64).eps == sys.float_info.epsilon
    assert tol.Z95 == stats.norm.ppf(0.975)
    assert (tol.SYM_TOL, tol.PSD_TOL, tol.SINGULAR_TOL, tol.RANK_TOL) == (1e-10, 1e-10, 1e-12, 1e-14)
    assert (tol.STATIONARY_MARGIN, tol.DIVERGENCE_SLACK, tol.INT_TOL, tol.GRID_TOL) == (1e-12, 1e-9, 1e-9, 1e-6)
    assert (tol.EXACT_AGREEMENT, tol.EXACT_AGREEMENT_STRICT, tol.NUMERICAL_AGREEMENT) == (1e-9, 1e-10, 1e-6)
    # every tolerance is a small positive float (the division floor far below any of them)
    names = [n for n in dir(tol) if n.isupper()]
    for name in names:
        value = getattr(tol, name)
        assert isinstance(value, float) and value > 0, name
        assert value == tol.Z95 or value < 1e-5, name
    assert tol.DIVISION_FLOOR < min(getattr(tol, n) for n in names if n != "DIVISION_FLOOR")


def test_label_prints_tolerances_as_the_claims_do():
    assert [tol.label(x) for x in (1e-9, 1e-10, 1e-6, 1e-12, 1e-2, 2.5e-3)] == [
        "1e-9", "1e-10", "1e-6", "1e-12", "1e-2", "2.5e-3"]


def test_matrix_tolerances_decide_symmetric_and_psd_inputs():
    base = dict(a=[[0.0, 0.0]], Sigma=[[1.0, 1.0]])
    eps = 0.5 * tol.SYM_TOL
    pb = QuadraticProblem.from_arrays(U=[[[1.0, eps], [0.0, 1.0]]], **base)  # asymmetry within the tolerance
    np.testing.assert_array_equal(pb.U[0], pb.U[0].T)
    with pytest.raises(FedsdeInputError, match="not symmetric"):
        QuadraticProblem.from_arrays(U=[[[1.0, 4 * tol.SYM_TOL], [0.0, 1.0]]], **base)
    # a Hessian singular up to the tolerance has no unique optimum
    with pytest.raises(FedsdeInputError, match="singular"):
        QuadraticProblem.from_arrays(U=[[1.0, 0.5 * tol.SINGULAR_TOL]], a=[[0.0, 0.0]], Sigma=[[1.0, 1.0]])
    QuadraticProblem.from_arrays(U=[[1.0, 4 * tol.SINGULAR_TOL]], a=[[0.0, 0.0]], Sigma=[[1.0, 1.0]])
