"""The rules' SDEs beyond quadratic clients: the rules' SVAG chains (fedsde.sde.rule_svag) and `sde`, `validity`,
`compare`, `map` with --aggregator on the digits softmax and on a module problem, with the refusals that name the
constraint."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedsde.aggregators import FedAdam, FedAvgM, FedNova, FedProx
from fedsde.cli import main
from fedsde.problems.quadratic import QuadraticProblem
from fedsde.sde.rule_svag import rule_svag_chain
from fedsde.sim import simulate

DIGITS = "examples/problems/digits_softmax.toml"
MODULE = "examples/models/digits_cnn.toml"


def _quadratic() -> QuadraticProblem:
    rng = np.random.default_rng(1)
    U = [np.eye(2) * (1 + k) + 0.2 for k in range(5)]
    S = [0.1 * np.eye(2) * (1 + k) for k in range(5)]
    return QuadraticProblem.from_arrays(np.array(U), rng.normal(size=(5, 2)), np.array(S), rng.random(5) + 0.2)


def _json(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("agg", [FedAvgM(0.5), FedNova(), FedProx(0.5), FedAdam()], ids=lambda a: a.name)
@pytest.mark.parametrize("m,weighting", [(None, "unbiased"), (2, "unbiased"), (3, "renormalised"),
                                         (3, "multinomial")])
def test_ell_one_is_the_simulator_bit_for_bit(agg, m, weighting):
    pb, tau = _quadratic(), np.array([2, 3, 5, 4, 1])
    kw = dict(eta=0.1, local_steps=tau, rounds=4, replicates=24, seed=3, server_lr=0.3, participation=m,
              weighting=weighting)
    a = simulate(pb, aggregator=agg, **kw).weights
    b = rule_svag_chain(pb, agg, ell=1, record=range(5), **kw).weights
    assert np.array_equal(a, b)


def test_fedavg_rule_chain_is_fedavgs_svag_chain():
    from fedsde.sde.svag import svag_chain

    pb = _quadratic()
    kw = dict(eta=0.1, local_steps=3, rounds=3, replicates=16, seed=2, server_lr=0.3, record=range(4))
    a = svag_chain(pb, ell=4, **kw).weights
    b = rule_svag_chain(pb, "fedavg", ell=4, **kw).weights
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_svag_steps_have_the_rounds_mean_and_ell_times_its_covariance():
    """One base round (ℓ = 4 SVAG steps of server step s/ℓ) of FedNova under sampling from a fixed w: its mean and
    covariance are those of ℓ steps of the exact law (fedsde.sde.sampled) with step s/ℓ and ℓ times the round's
    covariance, within 5 standard errors (empirical, from the samples' own fourth moments) of 40 000 draws."""
    import dataclasses

    from fedsde.sde.rules import rule_round_law

    pb, tau, s, ell, R = _quadratic(), np.array([2, 3, 5, 4, 1]), 0.6, 4, 40_000
    w0 = np.array([1.0, -0.5])
    w = rule_svag_chain(pb, FedNova(), eta=0.1, local_steps=tau, rounds=1, ell=ell, replicates=R, seed=5,
                        server_lr=s, w0=w0, participation=2, record=[1]).weights[-1]
    law = rule_round_law(pb, FedNova(), 0.1, tau, s / ell, participation=2)
    law = dataclasses.replace(law, noise_cov=ell * law.noise_cov,
                              sampling=dataclasses.replace(law.sampling, C=ell * law.sampling.C))
    m, P = w0.copy(), np.zeros((2, 2))
    for _ in range(ell):
        m, P = law.step(m, P)
    x = w - w.mean(0)
    prods = x[:, :, None] * x[:, None, :]
    assert np.all(np.abs(w.mean(0) - m) < 5 * w.std(0, ddof=1) / np.sqrt(R))
    assert np.all(np.abs(prods.mean(0) - P) < 5 * prods.std(0, ddof=1) / np.sqrt(R))
    assert np.abs(P - law.step(w0, np.zeros((2, 2)))[1]).max() > 0.1 * np.abs(P).max()  # the steps compound


@pytest.mark.parametrize("name,ells,opts", [("fedavgm", "1,2", ["--aggregator-option", "beta=0.5"]),
                                            ("fednova", "1,2", []), ("fedprox", "1,2", []),
                                            ("fedadam", "1,4", ["--server-lr", "0.01"]),
                                            ("fedyogi", "1,4", ["--server-lr", "0.01"])])
def test_validity_aggregator_on_the_digits_softmax(capsys, name, ells, opts):
    out = _json(capsys, ["validity", "--problem", DIGITS, "--aggregator", name, *opts, "--eta", "0.05",
                         "--local-steps", "1", "--rounds", "1", "--replicates", "3", "--seed", "0", "--ells", ells,
                         "--participation", "3", "--final-cov", "none", "--json"])
    assert out["verdict"]["outcome"] in ("tracks", "does not track", "inconclusive")
    assert out["config"]["aggregator"]["name"] == name and out["verdict"]["reference"] == "svag"
    assert out["config"]["participation"] == 3 and out["final_cov"] is None


@pytest.mark.slow
def test_validity_aggregator_on_a_module_problem(capsys):
    out = _json(capsys, ["validity", "--problem", MODULE, "--aggregator", "fedavgm", "--eta", "0.05", "--local-steps",
                         "1", "--rounds", "1", "--replicates", "2", "--seed", "0", "--ells", "1,2", "--final-cov",
                         "none", "--json"])
    assert out["verdict"]["outcome"] in ("tracks", "does not track", "inconclusive")
    assert out["config"]["sde"] == "momentum"


def test_compare_aggregator_on_data_answers_the_rules_question(capsys):
    """The ℓ = 1 row is the rule itself: its train loss is that of the simulator running FedAvgM (not FedAvg's)."""
    from fedsde.problems import load_problem
    from fedsde.problems.metrics import evaluate_metrics

    argv = ["compare", "--problem", DIGITS, "--eta", "0.05", "--local-steps", "1", "--rounds", "2", "--replicates",
            "3", "--seed", "4", "--ells", "1,2,4", "--json"]
    rule = _json(capsys, [*argv, "--aggregator", "fedavgm", "--aggregator-option", "beta=0.5"])
    fedavg = _json(capsys, [*argv, "--mc-substeps", "0"])
    row = next(r for r in rule["rows"] if r["param"] == 1)
    pb = load_problem(DIGITS)
    w = simulate(pb, eta=0.05, local_steps=1, rounds=2, replicates=3, seed=4, aggregator=FedAvgM(0.5),
                 record=[2]).weights
    loss = evaluate_metrics(pb, w, pb.initial_weights(), ["train_loss"])["train_loss"].mean()
    assert row["mean"]["train_loss"] == pytest.approx(loss, rel=1e-9)
    assert rule["aggregator"]["name"] == "fedavgm" and rule["rows"] != fedavg["rows"]


def test_sde_aggregator_runs_on_data_and_module_problems(capsys):
    for problem, name in ((DIGITS, "fednova"), (MODULE, "fedprox")):
        out = _json(capsys, ["sde", "--problem", problem, "--aggregator", name, "--eta", "0.05", "--local-steps", "1",
                             "--rounds", "1", "--replicates", "2", "--seed", "0", "--ell", "2", "--json"])
        assert out["integrator"] == "svag" and out["ell"] == 2 and "train_loss" in out["metrics"]


@pytest.mark.parametrize("argv,needle", [
    (["sde", "--problem", DIGITS, "--aggregator", "fednova", "--variant", "general", "--replicates", "2", "--seed",
      "0"], "leave --variant out"),
    (["compare", "--problem", DIGITS, "--aggregator", "scaffold", "--replicates", "3"], "control variates"),
    (["compare", "--problem", DIGITS, "--aggregator", "fedadagrad", "--replicates", "3"], "fedadagrad"),
    (["compare", "--problem", DIGITS, "--aggregator", "fedaware", "--replicates", "3"], "fedaware"),
    (["compare", "--problem", DIGITS, "--aggregator", "fedavgm", "--replicates", "3", "--mc-substeps", "1"],
     "--mc-substeps=1: not used with --aggregator"),
    (["compare", "--problem", DIGITS, "--aggregator-option", "beta=0.5", "--replicates", "3"],
     "--aggregator-option: needs --aggregator"),
    (["validity", "--problem", DIGITS, "--participation", "3", "--replicates", "3", "--seed", "0"],
     "give --aggregator NAME"),
    (["validity", "--problem", DIGITS, "--aggregator", "feddisco", "--participation", "3", "--replicates", "3",
      "--seed", "0"], "full participation only"),
    (["validity", "--problem", DIGITS, "--aggregator", "fedadam", "--ells", "1,2", "--replicates", "3", "--seed",
      "0"], "square"),
])
def test_refusals_name_the_constraint_in_one_line(capsys, argv, needle):
    base = ["--eta", "0.05", "--local-steps", "1", "--rounds", "1"]
    assert main([*argv, *base]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_map_aggregator_on_the_digits_softmax(tmp_path, capsys):
    out = _json(capsys, ["map", "--problem", DIGITS, "--aggregator", "fedavgm", "--aggregator-option", "beta=0.5",
                         "--eta", "0.05", "--local-steps", "1", "--rounds", "1", "--replicates", "2", "--seed", "1",
                         "--ells", "1,2", "--out", str(tmp_path / "m"), "--json"])
    assert out["aggregator"]["name"] == "fedavgm" and out["aggregator"]["beta"] == 0.5
    assert out["cells"][0]["outcome"] in ("tracks", "does not track", "inconclusive")
    cell = json.loads((tmp_path / "m" / out["cells"][0]["record"]).read_text())
    assert cell["result"]["config"]["aggregator"]["name"] == "fedavgm"
