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


def test_tolerances_of_solvers_statistics_and_chains_keep_their_values():
    from fedsde.problems.classification import models
    from fedsde.validity import general, verdict

    assert (tol.LBFGS_GTOL, tol.LBFGS_FTOL, tol.NEWTON_GTOL) == (1e-12, 1e-15, 1e-13)
    assert (tol.OPTIMUM_GTOL, tol.LOCAL_OPTIMUM_GTOL, tol.LANCZOS_RTOL) == (1e-8, 1e-6, 1e-8)
    assert (tol.BURN_IN_TOL, tol.RANGE_FLOOR) == (1e-6, 1e-9)
    # the names the modules exported before are the shared ones
    assert general.Z95 is tol.Z95 and verdict.RANGE_FLOOR is tol.RANGE_FLOOR
    assert models.FD_STEP == 1e-5  # a step, not a tolerance: it stays with the finite differences


def test_grid_round_and_integer_tolerances_decide():
    from fedsde.problems import paper_table_problem
    from fedsde.scaling.quadratic import scaled_problem
    from fedsde.sde.brownian import GridBrownian
    from fedsde.sde.schedules import RateSchedule

    bm = GridBrownian(0.0, 0.1, (1, 1), seed=0, steps=10)
    assert bm.index(0.3 + 0.5 * tol.GRID_TOL * 0.1) == 3  # within GRID_TOL steps of the grid
    with pytest.raises(FedsdeInputError, match="not on the grid"):
        bm.index(0.3 + 4 * tol.GRID_TOL * 0.1)
    sched = RateSchedule("eta", [1.0, 2.0, 3.0], 0.1)
    assert sched(0.2 * (1 - 0.25 * tol.INT_TOL)) == 3.0  # a time just short of n·h is in round n
    assert sched(0.2 * (1 - 4 * tol.INT_TOL)) == 2.0
    pb = paper_table_problem()
    assert scaled_problem(pb, "clients", 2 * (1 + 0.5 * tol.INT_TOL)).Q == 2 * pb.Q
    with pytest.raises(FedsdeInputError, match="whole number"):
        scaled_problem(pb, "clients", 2 * (1 + 4 * tol.INT_TOL))


def test_psd_burn_in_and_optimum_tolerances_decide():
    from fedsde.report.stationary import burn_in_rounds
    from fedsde.sde.coefficients import psd_sqrt
    from fedsde.theory.problems import synthetic_logistic

    np.testing.assert_allclose(psd_sqrt(np.diag([4.0, -0.5 * tol.PSD_TOL])), np.diag([2.0, 0.0]))
    with pytest.raises(FedsdeInputError, match="not positive semi-definite"):
        psd_sqrt(np.diag([1.0, -4 * tol.PSD_TOL]))
    # ρⁿ < BURN_IN_TOL: 0.5^20 ≈ 9.5e-7 < 1e-6 <= 0.5^19
    assert burn_in_rounds(0.5) == burn_in_rounds(0.5, tol.BURN_IN_TOL) == 20
    pb = synthetic_logistic(3, 20, kind="iid", seed=3)
    assert np.linalg.norm(pb.grad(pb.optimum)) <= tol.OPTIMUM_GTOL
