"""A map on Grunfeld (least squares, exact reference) against the exact gaps, computed independently of the
validity test: FedAvg's exact mean and covariance on least-squares clients
(:func:`fedsde.exact.least_squares_transient_moments`) against the SDE's (``LeastSquaresSDE.moments``), through
``E F = F(m) + ½ tr(HP)`` and ``E‖∇F‖² = ‖∇F(m)‖² + tr(HPH)``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedsde.maps import MapGrid, run_map

GRUNFELD = Path(__file__).resolve().parents[1] / "examples" / "problems" / "grunfeld.toml"
ROUNDS, TOL = 20, 0.05
METRICS = ("train_loss", "grad_norm_sq")


def exact_gaps(problem, eta: float, E: int, s: float) -> dict:
    """metric → ``max_t |E φ_FedAvg(t) − E φ_SDE(t)| / range_t E φ_SDE`` from the two exact laws (w₀ = 0)."""
    from fedsde.exact.least_squares import least_squares_transient_moments
    from fedsde.validity.reference import exact_sde_law, moment_metric_means

    w0 = np.zeros(problem.d)
    fed = least_squares_transient_moments(problem, eta, E, ROUNDS, s, w0=w0)
    fm = moment_metric_means(problem, np.asarray(fed.mean), np.asarray(fed.cov), METRICS)
    mom = exact_sde_law(problem, eta=eta, local_steps=E, server_lr=s, h=eta).moments(np.arange(ROUNDS + 1) * eta, w0)
    sm = moment_metric_means(problem, mom.mean, mom.cov, METRICS)
    return {m: float(np.max(np.abs(fm[m] - sm[m])[1:]) / (sm[m].max() - sm[m].min())) for m in METRICS}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::fedsde.errors.DivergenceWarning")  # the cells at η = 0.3 diverge, as expected
def test_grunfeld_map_decides_clear_cells_and_estimates_the_exact_gaps(tmp_path):
    from fedsde.problems import load_problem

    rec = run_map(GRUNFELD, MapGrid(eta=(0.02, 0.1, 0.3), local_steps=(1, 2, 4)), rounds=ROUNDS, replicates=256,
                  seed=28, out=tmp_path / "g", progress=False, options={"fedavg": "sampled"})
    problem = load_problem(GRUNFELD)
    clear = decided = 0
    for c in rec["cells"]:
        exact = exact_gaps(problem, c["eta"], c["local_steps"], c["server_lr"])
        worst = max(exact.values())
        if worst < TOL / 2:
            clear += 1
            assert c["outcome"] in ("tracks", "inconclusive"), (c, exact)
            decided += c["outcome"] == "tracks"
        elif worst > 2 * TOL:
            clear += 1
            assert c["outcome"] in ("does not track", "inconclusive"), (c, exact)
            decided += c["outcome"] == "does not track"
        assert c["gap"] == pytest.approx(exact[c["metric"]], rel=0.3), (c, exact)
    assert clear >= 4 and decided >= clear - 1
