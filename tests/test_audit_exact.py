"""Precision of M_k = I − r^τ at small η, and the matched SDE reported as exact at grid times (no slope)."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

from fedsde.exact import client_round_maps
from fedsde.exact.round_law import one_minus_power
from fedsde.problems import QuadraticProblem, paper_table_problem


def _exact_one_minus_power(x, n):
    mp.mp.dps = 50
    return 1 - (1 - mp.mpf(x)) ** n


@pytest.mark.parametrize("eta", [1e-9, 1e-5, 1e-2, 0.3, 0.6, 0.9])
def test_one_minus_power_keeps_every_digit(eta):
    """−expm1(τ·log1p(−ηλ)) against 50-digit arithmetic, r = 1 − ηλ of either sign, τ odd and even."""
    for lam in (0.5, 1.0, 2.0):
        x = float(mp.mpf(eta) * lam)
        for n in (1, 2, 5, 50, 51):
            ex = _exact_one_minus_power(x, n)
            got = one_minus_power(x, n)
            assert abs(mp.mpf(float(got)) / ex - 1) < 4e-16, (eta, lam, n)


def test_round_maps_at_tiny_eta():
    """M_k and Γ_k of the round law are accurate to ~1e-15 at η = 1e-9 (1 − |r|^τ lost 8 digits there)."""
    pb = QuadraticProblem.from_arrays([[1.0, 3.0]], [[0.0, 0.0]], [[1.0, 2.0]])
    for eta in (1e-9, 1e-5):
        M, G = client_round_maps(pb, eta, np.array([7]))
        mp.mp.dps = 50
        for i, lam in enumerate((1.0, 3.0)):
            r = 1 - mp.mpf(eta) * lam
            assert abs(mp.mpf(float(M[0, i, i])) / (1 - r**7) - 1) < 1e-15
            g = sum(r ** (2 * m) for m in range(7)) * (1.0, 2.0)[i]
            assert abs(mp.mpf(float(G[0, i, i])) / g - 1) < 1e-15


def test_matched_weak_error_is_exact_at_grid_times_not_a_slope(capsys):
    """The matched SDE equals the chain at grid times: errors at rounding level get no fitted slope."""
    import json
    from pathlib import Path

    from fedsde.cli import main
    from fedsde.compare import weak_error_vs_step

    pb = paper_table_problem()
    kw = dict(t_end=2.0, steps=[0.05, 0.025, 0.0125], w0=2.0)
    matched = weak_error_vs_step(pb, 0.05, 5, variant="matched", **kw)
    assert matched.exact_at_grid and np.isnan(matched.slope) and matched.errors.max() < 1e-14
    corrected = weak_error_vs_step(pb, 0.05, 5, variant="corrected", **kw)
    assert not corrected.exact_at_grid and 0.5 < corrected.slope < 1.5
    problem = str(Path(__file__).resolve().parents[1] / "examples" / "problems" / "paper_table.toml")
    argv = ["compare", "--problem", problem, "--eta", "0.05", "--local-steps", "5", "--rounds", "40"]
    assert main([*argv, "--variant", "matched"]) == 0
    out = capsys.readouterr().out
    assert "exact at grid times" in out and "slope vs h" not in out
    assert main([*argv, "--variant", "matched", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert all(v["exact_at_grid"] and v["slope"] is None for v in obj["slope"].values())


def test_scalar_bias_equals_the_round_law_fixed_point():
    """The vectorised C4(E) − w* of the bias-in-E claim against fedsde.exact.round_law's c, r of either sign."""
    from fedsde.exact import round_law
    from fedsde.theory.claims.families_002 import scalar_bias

    U, a, p = np.array([2.145, 3.812, 0.748]), np.array([-2.606, 1.811, 0.893]), np.array([0.632, 0.175, 0.193])
    pb = QuadraticProblem.from_arrays(U, a, np.ones(3), p)
    for eta in (0.0091, 0.3, 0.5):
        E = np.array([1, 2, 7, 200])
        got = scalar_bias(U, a, p, eta, E)
        ref = [float(round_law(pb, eta, int(e), warn=False).c[0]) - float(pb.optimum[0]) for e in E]
        np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-13)
