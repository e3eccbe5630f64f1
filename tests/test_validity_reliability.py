"""No silent divergence and no silently ignored options in `validity`, `sde --variant general` and `compare` on
data and quadratic problems; the size of `validity --json`; the weak-error slopes and cost ratios of the general
SDE study; the F13/F14 checks of `reproduce --config`."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from helpers import one_line_error
from helpers import run_cli as run

from fedsde.cli import main
from fedsde.errors import DivergenceWarning, FedsdeInputError
from fedsde.problems import data_problem_from_dict
from fedsde.sde.svag import default_oracle_factory, svag_chain
from fedsde.validity.general import SchemeRow, general_sde_study

ROOT = Path(__file__).resolve().parents[1]
PAPER = str(ROOT / "examples" / "problems" / "paper_table.toml")
DATA_TOML = """kind = "classification"
dataset = "digits"
model = "softmax"
clients = 3
partition = "iid"
batch_size = 8
seed = 0
"""
BLOWUP = ["--eta", "1e6", "--local-steps", "2", "--rounds", "2", "--seed", "0", "--json"]


@pytest.fixture(scope="module")
def data_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("pb") / "digits3.toml"
    path.write_text(DATA_TOML)
    return str(path)


# ---------------------------------------------------------------- divergence on data problems: the blow-up watch
@pytest.mark.parametrize("cmd", [
    ["validity", "--ells", "1,2", "--replicates", "2"],
    ["sde", "--variant", "general", "--integrator", "svag", "--ell", "2", "--paths", "2"],
    ["compare", "--ells", "1,2,4", "--paths", "2", "--mc-substeps", "0"],
])
def test_blow_up_on_a_data_problem_is_reported_and_strict_fails(capsys, data_file, cmd):
    argv = [cmd[0], "--problem", data_file, *cmd[1:], *BLOWUP]
    code, out, err = run(capsys, argv)
    assert code == 0
    obj = json.loads(out)
    assert any("blowing up" in w and "base round 1" in w for w in obj["warnings"]), obj["warnings"]
    assert "warning: " in err and "blowing up" in err
    code, out, err = run(capsys, [*argv, "--strict"])
    one_line_error(code, out, err, "--strict:", "blowing up")


def test_svag_chain_watch_and_non_finite_error(data_file):
    pb = data_problem_from_dict({"kind": "classification", "dataset": "digits", "model": "softmax", "clients": 3,
                                 "partition": "iid", "batch_size": 8, "seed": 0})
    kw = {"local_steps": 2, "rounds": 2, "ell": 2, "replicates": 2, "seed": 0,
          "oracle_factory": default_oracle_factory(pb)}
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        svag_chain(pb, eta=0.05, **kw)
        assert not [w for w in log if issubclass(w.category, DivergenceWarning)]
        svag_chain(pb, eta=1e6, **kw)
    div = [w for w in log if issubclass(w.category, DivergenceWarning)]
    assert len(div) == 1 and "SVAG chain (ell=2) is blowing up" in str(div[0].message)


# ---------------------------------------------------------------- known divergence refused up front (quadratic)
VAL = ["validity", "--problem", PAPER, "--local-steps", "5", "--rounds", "3", "--ells", "1,2", "--replicates", "2",
       "--seed", "0", "--json"]


@pytest.mark.parametrize("eta, needle", [("50", "eta*max_eig(U_k) = 200 >= 2"), ("0.6", "local SGD diverges")])
def test_validity_refuses_local_divergence(capsys, eta, needle):
    one_line_error(*run(capsys, [*VAL, "--eta", eta]), needle)


def test_validity_refuses_an_unstable_server_recursion(capsys):
    # B = 0.4360 for η = 0.05, E = 5 on the paper's problem: ρ(I − sB) > 1 for s > 4.58 (ℓ = 1)
    one_line_error(*run(capsys, [*VAL, "--eta", "0.05", "--server-lr", "5"]), "rho(I − s·B)", "server_lr=5")
    # without ℓ = 1 the chains run at s/ℓ: s = 10 is unstable at ℓ = 2 (s/ℓ = 5), named as such
    argv = [*VAL, "--eta", "0.05", "--server-lr", "10"]
    argv[argv.index("1,2")] = "2,4"
    one_line_error(*run(capsys, argv), "SVAG chain ell=2", "s/ell = 5")


@pytest.mark.parametrize("ells", ["1,1", "2", "4,4,4"])
def test_validity_needs_two_distinct_ells(capsys, ells):
    # the SVAG reference needs two values of ℓ (its Richardson limit); the exact reference needs none besides FedAvg
    argv = [*VAL, "--eta", "0.05", "--reference", "svag"]
    argv[argv.index("1,2")] = ells
    one_line_error(*run(capsys, argv), f"--ells='{ells}'", "at least two distinct values")


# ---------------------------------------------------------------- --final-cov full|diag|none
def test_final_cov_options(capsys):
    base = [*VAL, "--eta", "0.05"]
    objs = {}
    for how in ("full", "diag", "none"):
        code, out, _ = run(capsys, [*base, *([] if how == "full" else ["--final-cov", how])])
        assert code == 0
        objs[how] = json.loads(out)
        assert objs[how]["config"]["final_cov"] == how
    full = np.array(objs["full"]["final_cov"])
    d = len(objs["full"]["final_mean"][0])
    assert full.shape == (2, d, d)
    # the variances are computed as such (no d × d array): the diagonal to rounding (another summation order)
    np.testing.assert_allclose(np.array(objs["diag"]["final_cov"]), np.diagonal(full, axis1=1, axis2=2),
                               rtol=1e-12)
    for how in ("full", "diag", "none"):  # the total variance is always there
        np.testing.assert_allclose(objs[how]["final_cov_trace"], np.trace(full, axis1=1, axis2=2), rtol=1e-12)
    assert "final_cov" in objs["none"] and objs["none"]["final_cov"] is None
    with pytest.raises(SystemExit) as exc:  # argparse: one line, exit 2
        main([*base, "--final-cov", "upper"])
    assert exc.value.code == 2 and "--final-cov" in capsys.readouterr().err


# ---------------------------------------------------------------- sde: options that do not apply
@pytest.mark.parametrize("extra, flag", [
    (["--variant", "corrected", "--ell", "3"], "--ell=3"),
    (["--variant", "general", "--integrator", "svag", "--method", "exact"], "--method=exact"),
    (["--variant", "general", "--integrator", "svag", "--inner-samples", "4"], "--inner-samples=4"),
    (["--variant", "general", "--integrator", "svag", "--substeps", "2"], "--substeps=2"),
    (["--variant", "general", "--ell", "2"], "--ell=2"),
])
def test_sde_refuses_options_that_do_not_apply(capsys, extra, flag):
    argv = ["sde", "--problem", PAPER, "--eta", "0.05", "--local-steps", "2", "--rounds", "2", "--paths", "2",
            "--seed", "0", "--json", *extra]
    one_line_error(*run(capsys, argv), flag)


def test_sde_general_config_has_the_same_keys_for_both_integrators(capsys):
    argv = ["sde", "--problem", PAPER, "--eta", "0.05", "--local-steps", "2", "--rounds", "2", "--paths", "2",
            "--seed", "0", "--json", "--variant", "general"]
    cfgs = {}
    for integ in ("mc-euler", "svag"):
        code, out, _ = run(capsys, [*argv, "--integrator", integ])
        assert code == 0
        cfgs[integ] = json.loads(out)["config"]
        assert cfgs[integ]["integrator"] == integ and cfgs[integ]["paths"] == 2 and "replicates" not in cfgs[integ]
    common = {"variant", "integrator", "paths", "eta", "server_lr", "h", "rounds", "seed", "device", "dtype",
              "block_size"}
    assert common <= set(cfgs["mc-euler"]) and common <= set(cfgs["svag"])


def test_problem_help_says_data_problems_where_accepted(capsys):
    for cmd, data in (("validity", True), ("sde", True), ("simulate", True), ("compare", True), ("exact", False)):
        with pytest.raises(SystemExit):
            main([cmd, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert ("quadratic clients or a data problem" in text) is data, cmd
        if data:  # data problems start at the problem's initial weights, not at zero
            assert "--w0" in text and "initial weights" in text and "start point (default zero)" not in text, cmd


# ---------------------------------------------------------------- slopes and cost ratios of the general study
def _row(ell, err, scheme="svag"):
    return SchemeRow(scheme=scheme, param=ell, step=0.1 / ell, seconds=1.0, cost_ratio=1.0, mean={"m": 0.0},
                     se={"m": 0.0}, error={"m": err}, error_se={"m": 1e-6})


def test_slopes_leave_out_the_reference_chains():
    from fedsde.validity.general import weak_error_slopes

    # errors of ℓ = 1, 2 with slope 2 in the step; those of the reference chains ℓ = 4, 8 lie on another line
    rows = [_row(1, 1.0), _row(2, 0.25), _row(4, 1e-3), _row(8, 5e-4), _row(1, 0.5, "mc-euler"),
            _row(2, 0.25, "mc-euler")]
    sl = weak_error_slopes(rows, ["m"], reference_ells=[4, 8])
    assert sl["svag"]["m"] == pytest.approx(2.0) and sl["mc-euler"]["m"] == pytest.approx(1.0)
    # one independent point: no slope (null in JSON)
    assert np.isnan(weak_error_slopes(rows[1:], ["m"], reference_ells=[4, 8])["svag"]["m"])


def test_study_cost_ratios_and_slopes_on_data(data_file):
    pb = data_problem_from_dict({"kind": "classification", "dataset": "digits", "model": "softmax", "clients": 3,
                                 "partition": "iid", "batch_size": 8, "seed": 0})
    st = general_sde_study(pb, eta=0.1, local_steps=2, rounds=2, replicates=4, seed=0, ells=(1, 2, 4),
                           mc_substeps=(), metrics=["train_loss"])
    # only ℓ = 1 is independent of the reference (ℓ = 2, 4): no slope, whatever the numbers
    assert np.isnan(st.slopes["svag"]["train_loss"])
    assert "minimum" in st.config["timing"] and "independent" in st.config["slope_points"]
    # cost ratios are wall-clock ratios (their size lives in benchmarks/): here only that they are measured
    assert all(np.isfinite(st.row("svag", ell).cost_ratio) and st.row("svag", ell).cost_ratio > 0 for ell in (1, 2, 4))
    # standard errors of the errors: the reference chains are coupled to E_ref = 2·E_4 − E_2 (not independent of it)
    m = "train_loss"
    se1, se2, se4 = (st.row("svag", ell).se[m] for ell in (1, 2, 4))
    assert st.reference[m]["se"] == pytest.approx(np.hypot(2 * se4, se2))
    assert st.row("svag", 1).error_se[m] == pytest.approx(np.hypot(se1, st.reference[m]["se"]))
    assert st.row("svag", 2).error_se[m] == pytest.approx(2 * np.hypot(se2, se4))  # E_2 − E_ref = −2(E_4 − E_2)
    assert st.row("svag", 4).error_se[m] == pytest.approx(np.hypot(se2, se4))  # E_4 − E_ref = −(E_4 − E_2)


# ---------------------------------------------------------------- reproduce --config: F13/F14 (cases in
# tests/test_reliability.py::test_reproduce_config_refused_before_anything_runs)
def test_f14_ells_need_three_values():
    from fedsde.report.config import check_constraints, load_config

    cfg = load_config(quick=True)
    with pytest.raises(FedsdeInputError, match=r"F14\.ells"):
        check_constraints({**cfg, "F14": {**cfg["F14"], "ells": [1, 2]}}, ["F14"], None)

# ---------------------------------------------------------------- claim 002/eq-2-model: fit and held-out sets
def test_claim_eq_2_model_fits_on_one_set_and_judges_another(monkeypatch):
    import fedsde.theory.claims.validity_002 as mod
    from fedsde.theory.claims.base import CheckOptions

    claim = next(c for c in mod.CLAIMS if c.id == "002/eq-2-model")
    assert "Fit: the table problem" in claim.problem and "Held out:" in claim.problem and "digits" in claim.problem
    assert "drawn settings" in claim.problem and "grunfeld" in claim.problem
    # the exact settings only (fast): digits replaced by a tracking Monte-Carlo member
    fake = {"kappa": 0.03, "d": 0.02, "upper": 0.03, "time": 0.4, "outcome": "tracks", "rounds": 10,
            "replicates": 16, "margin": 0.4, "regime": "not checked", "loss_drop": 0.7}
    monkeypatch.setattr(mod, "digits_setting", lambda opt: fake)
    monkeypatch.setattr(mod, "REAL_DATA", ("grunfeld",))  # diabetes (d = 10) costs a minute: `fedsde claims` runs it
    res = mod.check_eq_2_model(CheckOptions())
    d = res.details
    fit, held = d["fit"], d["held_out"]
    assert len(fit) == 2 * len(mod.FIT_SETTINGS) and len(held) > 0 and not set(fit) & set(held)
    k_star, first = d["threshold"], d["first_fit_failure"]
    assert k_star < first
    assert all(v["outcome"] == "tracks" for v in fit.values() if v["kappa"] <= k_star)  # the threshold rule
    assert any(v["outcome"] != "tracks" for v in fit.values() if v["kappa"] == first)
    below = [v for v in held.values() if v["kappa"] <= k_star]
    assert below and res.corrected.verdict == ("holds" if all(v["outcome"] == "tracks" for v in below) else "fails")
    assert f"κ* = {k_star:.3g}" in res.corrected.reason and res.printed.verdict == "fails"
    n_ok = sum(v["margin"] > 0 for v in {**fit, **held}.values())
    assert f"({n_ok} of {len(fit) + len(held)} settings track)" in res.printed.reason
    assert d["reference_check"]["deviation"] < d["reference_check"]["tolerance"]


def test_claim_eq_2_model_without_a_threshold_is_only_observed(monkeypatch):
    import fedsde.theory.claims.validity_002 as mod
    from fedsde.theory.claims.base import CheckOptions

    monkeypatch.setattr(mod, "TOLERANCE", 1e-4)  # nothing tracks: no threshold can be fitted
    monkeypatch.setattr(mod, "digits_setting", lambda opt: {"kappa": 0.03, "d": 0.02, "outcome": "does not track",
                                                            "margin": -1.0})
    res = mod.check_eq_2_model(CheckOptions())
    assert res.details["threshold"] is None and res.corrected.verdict == "fails"
    assert res.corrected.reason.startswith("observed on") and res.corrected.margin <= 0


# ---------------------------------------------------------------- verdict inputs, seeds, labels
@pytest.mark.parametrize("kw", [{"alpha": float("nan")}, {"tolerance": float("nan")}, {"alpha": 1.5},
                                {"verdict_metrics": ["grad_norm_sq"], "metrics": ["train_loss"]}])
def test_verdict_inputs_are_checked_before_any_chain_runs(kw, monkeypatch):
    import fedsde.validity.core as core
    from fedsde.problems import paper_table_problem

    def no_chain(*a, **k):
        raise AssertionError("a chain ran before the verdict's inputs were checked")

    monkeypatch.setattr(core, "run_svag_chain", no_chain)
    with pytest.raises(FedsdeInputError):
        core.validity_test(paper_table_problem(), eta=0.05, local_steps=2, rounds=3, replicates=4, seed=0,
                           ells=(1, 2), **kw)


def test_a_generator_seed_is_drawn_once_for_every_ell_and_recorded():
    import torch

    from fedsde.problems import paper_table_problem
    from fedsde.validity import validity_test

    kw = dict(eta=0.05, local_steps=2, rounds=3, replicates=8, ells=(1, 2))
    res = validity_test(paper_table_problem(), seed=torch.Generator().manual_seed(5), **kw)
    again = validity_test(paper_table_problem(), seed=res.config["seed"], **kw)  # the recorded seed reproduces it
    np.testing.assert_array_equal(res.values["train_loss"], again.values["train_loss"])


def test_human_output_names_the_smallest_ell_when_fedavg_is_not_run(capsys):
    table = str(Path(__file__).resolve().parents[1] / "examples" / "problems" / "paper_table.toml")
    assert main(["validity", "--problem", table, "--eta", "0.05", "--local-steps", "2", "--rounds", "3",
                 "--replicates", "8", "--seed", "1", "--ells", "2,4"]) == 0
    out = capsys.readouterr().out
    assert "ℓ=2 − SDE at T" in out and "the ℓ=2 chain" in out and "FedAvg" not in out
