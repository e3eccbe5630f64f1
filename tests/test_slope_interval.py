"""Every fitted log–log slope comes with its interval: closed forms of the interval, its coverage on Monte-Carlo
errors of a known power law (fixed seeds, binomial tolerance), and the outputs that print slopes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.special import stdtrit

from fedsde._stats import fit_slope_interval
from fedsde.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "problems"


def test_exact_points_closed_forms():
    h = np.array([1.0, 0.5, 0.25, 0.125])
    on_line = fit_slope_interval(h, 3.0 * h**1.5)
    assert on_line.slope == pytest.approx(1.5, rel=1e-12)
    assert on_line.upper - on_line.lower < 1e-9  # no misfit: no width
    two = fit_slope_interval([1.0, 2.0], [1.0, 8.0])
    assert two.slope == two.lower == two.upper == pytest.approx(3.0) and "two exact points" in two.basis
    # a bent curve: the residual interval, written out (Student t on J − 2 d.f.)
    y = h + h**2
    lx, ly = np.log(h), np.log(y)
    b, a = np.polyfit(lx, ly, 1)
    half = stdtrit(2, 0.975) * math.sqrt(np.sum((ly - a - b * lx) ** 2) / 2 / np.sum((lx - lx.mean()) ** 2))
    got = fit_slope_interval(h, y)
    assert (got.lower, got.upper) == pytest.approx((b - half, b + half), rel=1e-12)
    assert fit_slope_interval([1.0], [1.0]).text().startswith("not fitted")


def test_bootstrap_interval_covers_the_true_slope():
    """Errors C·h of a known slope 1 estimated with Monte-Carlo noise (s.e. 20 % of the smallest error): the 95 %
    interval covers 1 in at least 95 % − 5 s.e. of 300 trials; and an error within its noise gives a wide one."""
    h = np.array([0.4, 0.2, 0.1, 0.05])
    truth = 0.5 * h
    se = np.full(4, 0.2 * truth.min())
    rng = np.random.default_rng(3)
    n = 300
    hits = 0
    for k in range(n):
        est = np.abs(truth + se * rng.standard_normal(4))
        f = fit_slope_interval(h, est, se, draws=1000, seed=k)
        hits += f.lower <= 1.0 <= f.upper
    assert hits / n >= 0.95 - 5 * math.sqrt(0.05 * 0.95 / n)
    noisy = fit_slope_interval(h, [0.2, 0.1, 0.05, 0.001], [0.01, 0.01, 0.01, 0.01])
    assert noisy.upper - noisy.lower > 1.0  # the smallest error is indistinguishable from zero


@pytest.mark.parametrize("name", ["paper_table", "my_data"])  # quadratic and least-squares routes
def test_compare_prints_every_slope_with_its_interval(capsys, name):
    argv = ["compare", "--problem", str(EXAMPLES / f"{name}.toml"), "--eta", "0.05", "--local-steps", "2",
            "--rounds", "8", "--time-steps", "0.05,0.025,0.0125"]
    assert main([*argv, "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    for v in obj["slope"].values():
        lo, hi = v["slope_interval"]
        assert lo <= v["slope"] <= hi and v["slope_basis"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "slope vs h" in line]
    assert len(lines) == 2 and all("[" in line for line in lines)
