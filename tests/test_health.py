"""A run that does not train says so (fedsde.sim.health): the exact variance of the unbiased participation weights
against a Monte-Carlo draw of subsets, the divergence rule (a tenfold mean train loss that does not come back, or a
loss that is not finite) and the rise rule on both sides, and the warnings of the command line and of the Python
``simulate`` on a module problem and on a client population with LogNormal sizes."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from test_module_cli import _files

from fedsde.cli import main
from fedsde.errors import DivergenceWarning, TrainingWarning
from fedsde.sim.health import (
    GROWTH_FACTOR,
    WEIGHT_VARIANCE_LIMIT,
    growth_warning,
    participants_for,
    rise_warning,
    weight_sum_variance,
)


def _sizes(Q: int, seed: int = 0) -> np.ndarray:
    """Client weights from LogNormal(4, 2) sizes, as the synthetic populations draw them."""
    n = np.random.default_rng(seed).lognormal(4.0, 2.0, Q).astype(np.int64) + 50
    return n / n.sum()


def test_weight_sum_variance_is_the_variance_of_subset_draws():
    p, m, draws = _sizes(40), 4, 40_000
    rng = np.random.default_rng(1)
    subsets = np.argsort(rng.random((draws, p.size)), axis=1)[:, :m]  # uniform m-subsets, without replacement
    W = (p.size / m) * p[subsets].sum(1)
    sq = (W - 1.0) ** 2  # E W = 1 exactly, so the mean of (W − 1)² is unbiased for Var W
    v = weight_sum_variance(p, m)
    assert abs(W.mean() - 1.0) < 5 * W.std() / np.sqrt(draws)
    assert abs(sq.mean() - v) < 5 * sq.std() / np.sqrt(draws)
    assert v > 20 * sq.std() / np.sqrt(draws)  # the draw tells it from zero


def test_weights_that_sum_to_one_have_no_variance():
    p = _sizes(30)
    assert weight_sum_variance(p, 5, "renormalised") == 0.0 == weight_sum_variance(p, 5, "multinomial")
    assert weight_sum_variance(p, None) == 0.0 == weight_sum_variance(p, 30)
    assert weight_sum_variance(np.full(30, 1 / 30), 5) == pytest.approx(0.0, abs=1e-15)  # equal clients


def test_participants_for_reaches_the_limit_and_no_fewer_do():
    p = _sizes(1000)
    m = participants_for(p)
    assert weight_sum_variance(p, m) <= WEIGHT_VARIANCE_LIMIT < weight_sum_variance(p, m - 1)


def _warned(fn, *args, **kwargs):
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        out = fn(*args, **kwargs)
    return out, log


def test_a_loss_that_grows_tenfold_and_stays_high_is_divergence_from_its_first_round():
    rounds = np.arange(6)
    loss = np.array([2.385, 1114, 2491, 3373, 2655, 1987])[:, None] * np.ones(4)  # digits CNN at eta = 50
    n, log = _warned(growth_warning, rounds, loss)
    assert n == 1 and len(log) == 1 and log[0].category is DivergenceWarning
    assert "467-fold by round 1" in str(log[0].message)
    nonfinite = np.array([2.0, 1.5, 3.0, 2.5, 1.0, 0.5])[:, None] * np.ones(4)
    nonfinite[3, 2] = np.inf  # one replicate's loss overflows: the mean is not finite, whatever comes after
    n, log = _warned(growth_warning, rounds, nonfinite)
    assert n == 3 and "is not finite at round 3" in str(log[0].message)


def test_a_spike_that_comes_back_below_the_start_is_not_divergence():
    rounds = np.arange(12)  # the small CNN at eta = 1.2 (docs/own_model.md): a 34-fold catapult that trains
    loss = np.array([2.39, 4.66, 80.0, 36.9, 37.9, 35.3, 29.8, 21.7, 13.2, 8.04, 5.29, 2.2])[:, None] * np.ones(8)
    assert _warned(growth_warning, rounds, loss) == (None, [])
    below = np.minimum(loss, 0.99 * GROWTH_FACTOR * 2.39)  # just under the factor, ending above the start: not
    below[-1] = 3.0  # divergence either (the rise rule's case)
    assert _warned(growth_warning, rounds, below) == (None, [])


def test_a_loss_that_ends_above_its_start_beyond_its_noise_rises_and_names_the_cause():
    rounds = np.array([0, 10, 20])
    rng = np.random.default_rng(0)
    start = np.full(8, 2.303)
    up = np.stack([start, 2.4 + 0.1 * rng.standard_normal(8), 3.0 + 0.2 * rng.standard_normal(8)])
    p = _sizes(1000)
    ok, log = _warned(rise_warning, rounds, up, p=p, participation=10, weighting="unbiased")
    assert ok and log[0].category is TrainingWarning
    text = str(log[0].message)
    assert "Var W = 1.07" in text and "--weighting renormalised" in text and "--participation" in text
    ok, log = _warned(rise_warning, rounds, up, p=p, participation=10, weighting="renormalised")
    assert ok and "Var W" not in str(log[0].message) and "--weighting" not in str(log[0].message)
    noisy = np.stack([start, start, 2.303 + np.r_[1.0, -1.0, 0.5, -0.5, 0.2, -0.2, 0.3, -0.1]])  # within 2 s.e.
    assert _warned(rise_warning, rounds, noisy) == (False, [])
    heavy = np.stack([start, start, 2.4 + np.r_[0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.5, 40.0]])  # 8 of 8 above
    assert (heavy[-1].mean() - 2.303) < 2 * heavy[-1].std(ddof=1) / np.sqrt(8)  # the mean alone cannot tell
    ok, log = _warned(rise_warning, rounds, heavy)
    assert ok and "8 of 8 replicates above their start" in str(log[0].message)
    down = np.stack([start, start - 0.5, start - 1.0])
    assert _warned(rise_warning, rounds, down) == (False, [])


def _json(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out else None), err


def test_a_module_run_at_eta_50_warns_from_round_1_and_a_healthy_one_does_not(tmp_path, capsys):
    base = ["simulate", "--problem", _files(tmp_path), "--local-steps", "2", "--rounds", "3", "--replicates", "4",
            "--seed", "0", "--json"]
    code, res, err = _json(capsys, [*base, "--eta", "50"])
    assert code == 0 and len(res["warnings"]) == 1 and "diverging" in res["warnings"][0]
    assert "by round 1 " in res["warnings"][0] and f"warning: {res['warnings'][0]}" in err
    code, res, err = _json(capsys, [*base, "--eta", "50", "--strict"])
    assert code == 2 and res is None and "--strict: the simulation is diverging" in err
    code, res, _ = _json(capsys, [*base, "--eta", "0.1"])
    assert code == 0 and res["warnings"] == []


POPULATION = dict(alpha=1.0, beta=1.0, seed=0, n_clients=500, dim=10, n_classes=4, batch_size=10)


def _population_run(m: int, weighting: str):
    from fedsde.problems.populations.synthetic import synthetic_population_problem
    from fedsde.sim import simulate

    pb = synthetic_population_problem(**POPULATION)
    return _warned(simulate, pb, eta=0.1, local_steps=5, rounds=5, replicates=8, seed=0, participation=m,
                   weighting=weighting, metrics=["train_loss"], record=[0, 5])


def test_unequal_unbiased_weights_are_named_before_the_run_with_the_remedies():
    # 5 of 500 clients of LogNormal sizes: Var W = 1.98; the loss goes 1.386 -> 2.79 (docs/cross_device.md)
    res, log = _population_run(5, "unbiased")
    first = next(w for w in log if w.category is TrainingWarning)
    text = str(first.message)
    assert "Var W = 1.98" in text and "--weighting renormalised" in text and "participants per round" in text
    assert res.metrics["train_loss"][-1].mean() > res.metrics["train_loss"][0].mean()


def test_enough_participants_train_without_a_word():
    res, log = _population_run(100, "unbiased")  # Var W = 0.08: the loss falls, 1.386 -> 1.32
    assert [str(w.message) for w in log] == []
    assert res.metrics["train_loss"][-1].mean() < res.metrics["train_loss"][0].mean()


def test_the_command_line_reports_unequal_weights_in_json(tmp_path, capsys):
    path = tmp_path / "population.toml"
    path.write_text('kind = "classification"\ndataset = "synthetic"\nalpha = 1.0\nbeta = 1.0\nclients = 500\n'
                    "dim = 10\nn_classes = 4\nbatch_size = 10\nseed = 0\npopulation = true\n")
    argv = ["simulate", "--problem", str(path), "--eta", "0.1", "--local-steps", "5", "--rounds", "2", "--replicates",
            "2", "--seed", "0", "--participation", "5", "--json"]
    code, res, err = _json(capsys, argv)
    assert code == 0 and any("Var W = 1.98" in w for w in res["warnings"]) and "warning: unequal" in err
    code, res, err = _json(capsys, [*argv[:-1], "--weighting", "renormalised", "--json"])
    assert code == 0 and not any("Var W" in w for w in res["warnings"])


def test_the_general_sde_of_a_module_warns_when_its_loss_explodes(tmp_path, capsys):
    base = ["sde", "--problem", _files(tmp_path), "--local-steps", "2", "--rounds", "3", "--replicates", "4",
            "--seed", "0", "--variant", "general", "--integrator", "svag", "--ell", "2", "--json"]
    code, res, _ = _json(capsys, [*base, "--eta", "50"])
    assert code == 0 and any(w.startswith("the SDE (general) is diverging") and "by round 1 " in w
                             for w in res["warnings"])
    code, res, _ = _json(capsys, [*base, "--eta", "0.1"])
    assert code == 0 and res["warnings"] == []


@pytest.mark.slow
def test_the_thousand_client_run_of_the_report_says_why_its_loss_rises(tmp_path, capsys):
    # synthetic(1, 1), 1000 clients, m = 10, unbiased: 2.303 -> 3.92 (docs/cross_device.md), Var W = 1.07
    path = tmp_path / "synthetic.toml"
    path.write_text('kind = "classification"\ndataset = "synthetic"\nalpha = 1.0\nbeta = 1.0\nclients = 1000\n'
                    "batch_size = 10\nseed = 0\n")
    code, res, _ = _json(capsys, ["simulate", "--problem", str(path), "--eta", "0.05", "--local-steps", "5",
                                  "--rounds", "20", "--replicates", "8", "--seed", "0", "--participation", "10",
                                  "--json"])
    loss = res["metrics"]["train_loss"]["mean"]
    assert code == 0 and loss[-1] > loss[0]
    assert any("Var W = 1.07" in w and "--weighting renormalised" in w for w in res["warnings"])
