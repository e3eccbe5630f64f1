"""The batch rule corrected for minibatches drawn without replacement: its factor's closed forms, what it keeps
(checked against an independent computation from the rows), the rate of its exact discrepancy as η → 0 against the
linear rule's, the data route, the square-root analogue and the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedsde._stats import fit_loglog_slope
from fedsde.cli import main
from fedsde.errors import FedsdeInputError
from fedsde.problems import load_problem
from fedsde.problems.regression import noise_factors
from fedsde.scaling import FedAvgConfig, compare_least_squares
from fedsde.scaling.batch_rule import batch_factor, finite_population_factor, problem_batch_factor, sqrt_batch_rule

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "problems"
GRUNFELD = str(EXAMPLES / "grunfeld.toml")  # 11 firms of 20 rows, b = 5 without replacement
MY_DATA = str(EXAMPLES / "my_data.toml")  # 3 sites of 8, 10 and 6 rows, b = 4 without replacement


def _trace_temperature(problem, s: float, eta: float, w) -> float:
    """``tr(s·η·Σ_k p_k² f_k(b)·Cov_i(g_i))`` from the per-row gradients, written out independently."""
    Xs, ys = problem.client_data()
    b, total = problem.batch_size, 0.0
    for k, (X, y) in enumerate(zip(Xs, ys, strict=True)):
        n = y.size
        g = X * (X @ w - y)[:, None] + problem.l2 * w
        fac = 1.0 / b if problem.sampling == "with-replacement" else (n - b) / (b * (n - 1)) if n > b else 0.0
        total += problem.p[k] ** 2 * fac * np.trace(np.cov(g.T, bias=True))
    return s * eta * total


def test_factor_closed_forms():
    sizes = np.full(11, 20)
    assert batch_factor(sizes, 5, 2, "without-replacement").factor == pytest.approx(3.0, rel=1e-15)
    got = batch_factor(sizes, 4, 1.5, "without-replacement")  # κ(n − b)/(n − κb) = 1.5·16/14
    assert got.exact and got.factor == pytest.approx(1.5 * 16 / 14, rel=1e-15) and got.basis == "equal"
    wr = batch_factor([8, 10, 6], 4, 2, "with-replacement")
    assert wr.factor == 2.0 and wr.exact and not wr.corrected
    # f_k(b) is the finite-population factor of the minibatch covariance (fedsde.problems.regression)
    np.testing.assert_allclose(finite_population_factor([8, 10, 6, 3], 4),
                               noise_factors(np.array([8, 10, 6, 3]), 4, "without-replacement"), rtol=1e-15)
    # different sizes: one g needs the weights, lies between the clients' ratios, and κb = n_k leaves no noise
    with pytest.raises(FedsdeInputError, match="weights: clients of different sizes"):
        batch_factor([8, 10, 6], 4, 1.5, "without-replacement")
    mixed = batch_factor([8, 10, 12], 4, 1.5, "without-replacement", weights=[1.0, 2.0, 3.0])
    assert not mixed.exact and mixed.per_client.min() < mixed.factor < mixed.per_client.max()
    fb, fk = finite_population_factor([8, 10, 12], 4), finite_population_factor([8, 10, 12], 6)
    assert mixed.factor == pytest.approx(np.dot([1, 2, 3], fb) / np.dot([1, 2, 3], fk), rel=1e-15)
    # a client left without noise (6 rows, κb = 6): the others make up its share, g above every finite ratio
    lost = batch_factor([8, 10, 6], 4, 1.5, "without-replacement", weights=[1.0, 2.0, 3.0])
    assert lost.per_client[2] == np.inf and lost.factor > lost.per_client[:2].max()
    with pytest.raises(FedsdeInputError, match="no minibatch noise is left"):
        batch_factor(sizes, 5, 4, "without-replacement")


def test_equal_clients_keep_the_temperature_at_every_point():
    """Grunfeld: b = 5 → 10 divides every client's minibatch covariance by g = 3, at any w (not only w*)."""
    pb = load_problem(GRUNFELD)
    g = problem_batch_factor(pb, 2).factor
    rng = np.random.default_rng(0)
    for w in (pb.optimum, rng.normal(size=pb.d), rng.normal(size=pb.d) * 3):
        np.testing.assert_allclose(pb.minibatch_covariance(w, 10) * g, pb.minibatch_covariance(w, 5), rtol=1e-12)


def test_clients_of_different_sizes_keep_the_trace_at_the_optimum():
    """my_data (8, 10 and 6 rows), b = 4 → 6: the trace-matched g keeps tr T(w*) (an independent computation from the
    rows), not the matrix; the stationary excess loss then falls like η while the covariance's shape stays off."""
    pb = load_problem(MY_DATA)
    fac = problem_batch_factor(pb, 1.5)
    assert fac.basis == "trace" and not fac.exact
    w = pb.optimum
    base = _trace_temperature(pb, 1.0, 0.02, w)
    scaled = _trace_temperature(pb.replace(batch_size=6), fac.factor, 0.02, w)
    assert scaled == pytest.approx(base, rel=1e-12)
    rows = []
    for eta, n in ((0.02, 48), (0.01, 96), (0.005, 192)):
        r = compare_least_squares(pb, FedAvgConfig(eta=eta, local_steps=2, server_lr=1.0, rounds=n), "batch", 1.5)
        assert r.scaled.config.server_lr == pytest.approx(fac.factor, rel=1e-15)
        rows.append((r.stationary["excess_loss_rel"], r.stationary["cov_rel"]))
    loss, cov = np.array(rows).T
    assert np.all(loss[1:] / loss[:-1] > 0.4) and np.all(loss[1:] / loss[:-1] < 0.6)  # ∝ η (measured 0.49)
    assert cov.min() > 0.07  # the shape of the stationary covariance: O(1) (measured 0.080–0.085)


def test_corrected_rule_discrepancy_falls_like_eta_where_the_linear_rule_stalls():
    """Grunfeld, E = 2, κ = 2, τ = n·η·E fixed: the corrected rule's exact discrepancy falls ∝ η (the value at η =
    0.0025 is 0.25 of that at 0.01, slope 1.0), the linear rule's stays at 0.33."""
    pb = load_problem(GRUNFELD)
    etas = np.array([0.01, 0.005, 0.0025])
    got = {}
    for rule in ("batch", "batch-linear"):
        got[rule] = np.array([compare_least_squares(pb, FedAvgConfig(eta=e, local_steps=2, server_lr=1.0,
                                                                     rounds=round(0.96 / e)), rule, 2).max_rel
                              for e in etas])
    assert got["batch"][-1] <= 0.35 * got["batch"][0]
    assert fit_loglog_slope(etas, got["batch"])[0] == pytest.approx(1.0, abs=0.05)
    assert np.all(np.abs(got["batch-linear"] - 1.0 / 3.0) < 0.01)


def test_data_route_matches_the_trace_at_the_start():
    from fedsde.problems.data_files import data_problem_from_dict
    from fedsde.scaling import compare_data

    cancer = data_problem_from_dict({"kind": "classification", "dataset": "breast_cancer", "clients": 4,
                                     "partition": "iid", "batch_size": 8, "seed": 0})
    cfg = FedAvgConfig(eta=0.05, local_steps=1, server_lr=1.0, rounds=4)
    res = compare_data(cancer, cfg, "batch", 2, replicates=2, seed=0, points=1)
    step, n_new = res.batch.applied(4, "horizon")
    assert res.scaled.config.rounds == n_new and res.scaled.config.server_lr == pytest.approx(step, rel=1e-15)
    assert res.scaled.config.horizon == pytest.approx(cfg.horizon, rel=1e-14)
    rel = res.scaled.temperature_trace / res.base.temperature_trace - 1
    assert rel == pytest.approx(step / res.batch.factor - 1, abs=1e-12)  # only the whole rounds move it
    assert res.notes[0].startswith("batch rule corrected for sampling without replacement")


def test_square_root_analogue_takes_g_as_its_factor():
    """A batch b → κb without replacement divides the adaptive SDE's noise by g: the square-root rule with κ = g keeps
    the SDE's coefficients (to rounding), with κ itself it does not."""
    from fedsde.aggregators import FedAdam
    from fedsde.problems import QuadraticProblem
    from fedsde.scaling.sqrt_rule import sqrt_sde_invariance

    pb = QuadraticProblem.from_arrays([[[2.0, 0.5], [0.5, 1.0]], [[1.0, 0.0], [0.0, 3.0]]], [[1.0, -1.0], [0.0, 2.0]],
                                      [[[1.0, 0.3], [0.3, 0.5]], [[0.5, 0.0], [0.0, 2.0]]], [0.6, 0.4])
    fac = batch_factor(np.full(2, 20), 5, 2, "without-replacement")  # g = 3
    agg = FedAdam(beta1=0.9, beta2=0.99)
    kw = dict(eta=0.05, local_steps=3, server_lr=0.1)
    assert sqrt_sde_invariance(pb, agg, kappa=fac.factor, noise=fac.factor, **kw) < 1e-12
    assert sqrt_sde_invariance(pb, agg, kappa=2.0, noise=fac.factor, **kw) > 0.1  # measured 0.18
    rule, s2, n2 = sqrt_batch_rule(agg, 0.1, 96, fac)
    assert s2 == pytest.approx(0.1 * np.sqrt(3.0), rel=1e-15) and n2 == 32
    assert rule.adaptive_form().beta2 == pytest.approx(1 - 3 * 0.01, rel=1e-12)


def test_command_line_says_which_rule_ran(capsys):
    argv = ["scaling", "--problem", GRUNFELD, "--eta", "0.01", "--local-steps", "2", "--rounds", "96", "--kappa", "2"]
    assert main([*argv, "--rule", "batch", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    bf = obj["batch_factor"]
    assert bf["corrected"] and bf["exact"] and bf["factor"] == pytest.approx(3.0) and bf["rounds"] == 32
    assert obj["scaled"]["server_lr"] == pytest.approx(3.0) and obj["invariants"]["temperature_rel_change"] < 1e-12
    assert main([*argv, "--rule", "batch-linear", "--json"]) == 0
    lin = json.loads(capsys.readouterr().out)
    assert "batch_factor" not in lin and lin["scaled"]["server_lr"] == 2.0
    assert lin["discrepancy"]["max_rel"] > 3 * obj["discrepancy"]["max_rel"]
    assert main([*argv, "--rule", "batch"]) == 0
    assert "note: batch rule corrected for sampling without replacement" in capsys.readouterr().out
