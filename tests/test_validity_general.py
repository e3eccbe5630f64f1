"""The general SDE's integrators against FedAvg (fedsde.validity.general), data problems in the SVAG chain, and the
CLI for them (`sde --integrator svag`, `compare` and `validity` on a data problem)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedsde._samples import FULL_COV_MAX_D
from fedsde.cli import main
from fedsde.problems import QuadraticProblem, data_problem_from_dict
from fedsde.sde import quadratic_sde_coefficients
from fedsde.sde.svag import default_oracle_factory, svag_chain, svag_transient_moments
from fedsde.sim import simulate
from fedsde.validity import validity_test
from fedsde.validity.general import cost_to_error, general_sde_study

DATA = {"kind": "classification", "dataset": "digits", "model": "softmax", "clients": 3, "partition": "iid",
        "batch_size": 8, "seed": 0}


@pytest.fixture(scope="module")
def quad() -> QuadraticProblem:
    U = np.array([[[2.0, 0.5], [0.5, 1.0]], [[1.0, 0.0], [0.0, 3.0]]])
    return QuadraticProblem.from_arrays(U, [[1.0, -1.0], [0.0, 2.0]], [[1.0, 0.5], [0.5, 2.0]], [0.6, 0.4])


@pytest.fixture(scope="module")
def digits():
    return data_problem_from_dict(DATA)


def _expected_loss(pb, m, P):
    return float(pb.loss(pb.optimum) + pb.excess_loss(m, P))


def test_study_on_quadratic_clients_matches_exact_laws(quad):
    """Each SVAG row's E F(w_T) agrees with the chain's exact law, and the Richardson reference with the exact law of
    the corrected SDE, within their standard errors; FedAvg's error is resolved and SVAG's shrinks with the step."""
    eta, E, s, rounds, w0 = 0.1, 3, 1.2, 5, [3.0, 3.0]
    st = general_sde_study(quad, eta=eta, local_steps=E, rounds=rounds, replicates=4000, seed=2, server_lr=s,
                           ells=(1, 2, 4, 8), mc_substeps=(1,), inner_samples=2, metrics=["train_loss"], w0=w0)
    for r in st.rows:
        if r.scheme != "svag":
            continue
        law = svag_transient_moments(quad, eta, E, rounds, s, r.param, w0=w0, record=[rounds])
        exact = _expected_loss(quad, law.final_mean, law.final_cov)
        assert abs(r.mean["train_loss"] - exact) < 5 * r.se["train_loss"]
    sde = quadratic_sde_coefficients(quad, eta, E, s, variant="corrected").moments(rounds * eta, w0)
    ref = st.reference["train_loss"]
    assert abs(ref["mean"] - _expected_loss(quad, sde.mean, sde.cov)) < 5 * ref["se"]
    fed, fine = st.row("svag", 1), st.row("svag", 4)
    assert abs(fed.error["train_loss"]) > 3 * fed.error_se["train_loss"]
    assert abs(fine.error["train_loss"]) < abs(fed.error["train_loss"])
    assert st.row("mc-euler", 1).cost_ratio > 0
    costs = cost_to_error(st, "train_loss", abs(fed.error["train_loss"]) / 2)
    assert costs["svag"] >= st.row("svag", 2).cost_ratio


def test_ell_one_on_a_data_problem_is_the_simulator(digits):
    kw = dict(eta=0.1, local_steps=2, rounds=2, replicates=4, seed=3)
    sv = svag_chain(digits, **kw, ell=1, oracle_factory=default_oracle_factory(digits))
    sim = simulate(digits, **kw, record=[2])
    np.testing.assert_array_equal(sv.final, sim.weights[-1])


def test_validity_on_a_data_problem_records_data_metrics(digits):
    res = validity_test(digits, eta=0.1, local_steps=2, rounds=2, replicates=4, seed=0, ells=[1, 2])
    assert set(res.metrics) == {"train_loss", "grad_norm_sq", "test_accuracy", "distance_from_start"}
    acc = res.metrics["test_accuracy"]["mean"]
    assert acc.shape == (2, 3) and np.all((acc >= 0) & (acc <= 1))
    assert digits.d > FULL_COV_MAX_D  # above the size where a weight covariance defaults to its diagonal
    assert res.final_cov.shape == (2, digits.d) and res.config["final_cov"] == "diag"
    np.testing.assert_allclose(res.final_cov.sum(1), res.final_cov_trace, rtol=1e-12)
    full = validity_test(digits, eta=0.1, local_steps=2, rounds=2, replicates=4, seed=0, ells=[1, 2],
                         final_cov="full")
    assert full.final_cov.shape == (2, digits.d, digits.d)
    np.testing.assert_allclose(np.diagonal(full.final_cov, axis1=1, axis2=2), res.final_cov, rtol=1e-12)


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "digits.json"
    path.write_text(json.dumps(DATA))
    return str(path)


def test_cli_sde_svag_integrator_on_a_data_problem(data_file, capsys):
    argv = ["sde", "--problem", data_file, "--eta", "0.1", "--local-steps", "2", "--variant", "general",
            "--integrator", "svag", "--ell", "2", "--rounds", "2", "--paths", "4", "--seed", "0", "--json"]
    assert main(argv) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["config"]["integrator"] == "svag" and obj["config"]["ell"] == 2
    assert set(obj["metrics"]) >= {"train_loss", "test_accuracy"}
    assert len(obj["metrics"]["train_loss"]["mean"]) == 3


def test_cli_compare_on_a_data_problem(data_file, capsys):
    argv = ["compare", "--problem", data_file, "--eta", "0.1", "--local-steps", "2", "--rounds", "2", "--paths", "4",
            "--ells", "1,2,4", "--mc-substeps", "0", "--json"]
    assert main(argv) == 0
    obj = json.loads(capsys.readouterr().out)
    assert {r["scheme"] for r in obj["rows"]} == {"svag"} and len(obj["rows"]) == 3
    assert set(obj["reference"]) == {"train_loss", "test_accuracy"}
    assert set(obj["rows"][0]["ci95"]) == {"train_loss", "test_accuracy"}
    assert main([*argv, "--variant", "paper"]) == 2
    assert "--variant" in capsys.readouterr().err
    assert main([a for a in argv if a not in ("--paths", "4")]) == 2
    assert "--paths" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("model", ["softmax", "mlp"])
def test_verdict_flips_on_digits(model):
    """F13's two settings: a small step is not rejected (16 replicates cannot resolve test accuracy to one point:
    inconclusive, with the replicates that would decide, or tracks); a large server step (s = 8) does not track."""
    spec = {**DATA, "model": model, "clients": 5, "partition": "dirichlet", "alpha": 0.5, "batch_size": 16}
    pb = data_problem_from_dict(spec | ({"hidden": 16} if model == "mlp" else {}))
    kw = dict(rounds=5, replicates=16, seed=0, metrics=["train_loss", "test_accuracy"])
    good = validity_test(pb, eta=0.05, local_steps=2, server_lr=1.0, **kw)
    bad = validity_test(pb, eta=0.2, local_steps=5, server_lr=8.0, **kw)
    assert good.verdict.outcome in ("tracks", "inconclusive")
    assert good.verdict.worst["lower"] <= good.verdict.worst["tolerance"]
    assert good.verdict.tracks or good.verdict.replicates_needed > 16
    assert bad.verdict.outcome == "does not track" and bad.verdict.worst["lower"] > bad.verdict.worst["tolerance"]


def test_gallery_figures_f13_f14_on_tiny_settings():
    """F13 and F14 run end to end on tiny settings and state their verdicts and errors in the caption."""
    import matplotlib.pyplot as plt

    from fedsde.problems import paper_table_problem
    from fedsde.report.gallery import GALLERY, RunContext

    ctx = RunContext(seed=0, device="cpu", problem=paper_table_problem(), quick=True)
    f13 = {"clients": 3, "batch_size": 8, "hidden": 4, "rounds": 2, "replicates": 3, "ells": [1, 2],
           "record_every": 1, "tolerance": 0.05, "eta": 0.05, "local_steps": 1, "server_lr": 1.0, "bad_eta": 0.2,
           "bad_local_steps": 2, "bad_server_lr": 8.0}
    out = GALLERY["F13"].maker()(f13, ctx)
    assert set(out.numbers) == {"softmax/tracking", "softmax/large s", "mlp/tracking", "mlp/large s"}
    assert "margin" in out.caption
    assert len(out.tables["validity"][1]) == 2 * 2 * 2 * 2 * 3  # models × settings × metrics × ℓ × times
    plt.close(out.fig)
    f14 = {"clients": 3, "batch_size": 8, "eta": 0.2, "local_steps": 2, "server_lr": 1.0, "rounds": 2,
           "replicates": 4, "ells": [1, 2, 4], "mc_substeps": [1], "inner_samples": 2, "record_every": 1}
    out = GALLERY["F14"].maker()(f14, ctx)
    assert {r["scheme"] for r in out.numbers["rows"]} == {"svag", "mc-euler"}
    assert "Richardson" in out.caption and "nan" not in out.caption
    plt.close(out.fig)
