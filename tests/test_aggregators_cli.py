"""``--aggregator`` of ``fedsde exact`` / ``fedsde simulate`` and the ``compare-aggregators`` command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_moments_within

from fedsde.aggregators import feddisco_weights
from fedsde.cli import main
from fedsde.exact import aggregator_stationary_law
from fedsde.problems import load_problem
from fedsde.sim import simulate

ROOT = Path(__file__).resolve().parents[1]
TABLE = str(ROOT / "examples" / "problems" / "paper_table.toml")


def _json(capsys):
    out = capsys.readouterr().out
    return json.loads(out)


def test_exact_with_fednova(capsys):
    rc = main(["exact", "--problem", TABLE, "--eta", "0.1", "--client-steps", "1,2,5", "--aggregator", "fednova",
               "--json"])
    assert rc == 0
    out = _json(capsys)
    p = np.full(3, 1 / 3)
    tau = np.array([1, 2, 5])
    np.testing.assert_allclose(out["weights"], p * (p @ tau) / tau)
    st = aggregator_stationary_law(load_problem(TABLE), "fednova", 0.1, tau)
    np.testing.assert_allclose(out["stationary"]["mean"], st.mean)
    np.testing.assert_allclose(out["stationary"]["cov"], st.cov)


def test_exact_without_law_is_a_clear_error(capsys):
    rc = main(["exact", "--problem", TABLE, "--eta", "0.1", "--local-steps", "2", "--aggregator", "fedadam"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "fedadam" in err and "server state" in err and "Traceback" not in err


DISCO_TOML = """\
U = [[1.0, 2.0], [2.0, 0.5], [4.0, 1.0]]
a = [[-1.0, 1.0], [0.0, -1.0], [2.0, 0.5]]
Sigma = [[0.5, 1.0], [1.0, 0.5], [2.0, 1.0]]
p = [1, 2, 1]
label_distributions = [[8, 2, 0], [3, 3, 4], [1, 1, 8]]
"""


def test_feddisco_from_a_problem_file_exact_vs_simulation(tmp_path, capsys):
    path = tmp_path / "disco.toml"
    path.write_text(DISCO_TOML)
    base = ["--problem", str(path), "--eta", "0.1", "--client-steps", "1,2,3", "--aggregator", "feddisco",
            "--w0", "1,-1"]
    assert main(["exact", *base, "--rounds", "8", "--json"]) == 0
    out = _json(capsys)
    np.testing.assert_allclose(out["weights"], feddisco_weights([1, 2, 1], [[8, 2, 0], [3, 3, 4], [1, 1, 8]]))
    mean, cov = np.asarray(out["transient"]["mean"]), np.asarray(out["transient"]["cov"])
    res = simulate(load_problem(path), eta=0.1, local_steps=[1, 2, 3], rounds=8, replicates=4000, seed=3,
                   w0=[1.0, -1.0], aggregator="feddisco", record=[8])
    assert_moments_within(res.weights[-1], mean, cov)
    assert main(["simulate", *base, "--rounds", "8", "--replicates", "2000", "--seed", "5", "--json"]) == 0
    sim = _json(capsys)
    z = np.abs(np.asarray(sim["final"]["mean"]) - mean) / np.asarray(sim["final"]["mean_stderr"])
    assert np.all(z < 5)


@pytest.mark.parametrize("cmd", [["exact"], ["simulate", "--rounds", "2", "--replicates", "4", "--seed", "0"]])
def test_feddisco_without_label_distributions_is_a_clear_error(cmd, capsys):
    rc = main([*cmd, "--problem", TABLE, "--eta", "0.1", "--local-steps", "2", "--aggregator", "feddisco"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "add the key label_distributions" in err and TABLE in err and err.count("\n") == 1


def test_simulate_with_aggregator(capsys):
    rc = main(["simulate", "--problem", TABLE, "--eta", "0.1", "--client-steps", "1,2,5", "--aggregator", "scaffold",
               "--rounds", "5", "--replicates", "64", "--seed", "0", "--json"])
    assert rc == 0
    out = _json(capsys)
    assert out["config"]["aggregator"] == "scaffold"
    assert np.isfinite(out["final"]["mean"][0])



def test_aggregator_options_reach_the_variants(capsys):
    """``--aggregator-option`` builds the rule with its parameters: the same numbers as the Python API."""
    from fedsde.aggregators import FedAdam

    argv = ["simulate", "--problem", TABLE, "--eta", "0.05", "--local-steps", "2", "--rounds", "4", "--replicates",
            "16", "--seed", "3", "--aggregator", "fedadam", "--json"]
    assert main([*argv, "--aggregator-option", "variant=flower", "--aggregator-option", "beta1=0.8"]) == 0
    out = _json(capsys)
    assert out["config"]["aggregator_options"] == {"variant": "flower", "beta1": 0.8}
    ref = simulate(load_problem(TABLE), eta=0.05, local_steps=2, rounds=4, replicates=16, seed=3,
                   aggregator=FedAdam(variant="flower", beta1=0.8), record=[4])
    # the CLI streams its moments (per-block sums about a shift), the samples' mean sums in one pass: equal to
    # rounding, not bitwise (docs/determinism.md): 16 replicates, a few ulps each of the largest |w|
    np.testing.assert_allclose(out["final"]["mean"], ref.mean()[-1], rtol=0, atol=1e-13 * np.abs(ref.mean()[-1]).max())
    assert main(argv) == 0 and _json(capsys)["final"]["mean"] != out["final"]["mean"]  # the option mattered
    assert main(["exact", "--problem", TABLE, "--eta", "0.1", "--local-steps", "2", "--aggregator", "fednova",
                 "--aggregator-option", "tau_eff=3", "--json"]) == 0
    np.testing.assert_allclose(_json(capsys)["weights"], np.full(3, 1 / 3) * 3 / 2)  # ω_k = p_k τ_eff / τ_k


@pytest.mark.parametrize(("option", "match"), [
    ("variant", "must be KEY=VALUE"),
    ("bogus=1", "bad parameters \\['bogus'\\]"),
    ("variant=nope", "variant='nope': must be one of"),
    ("beta1=NaN", "not a finite number"),
])
def test_bad_aggregator_options_are_one_line_errors(option, match, capsys):
    rc = main(["simulate", "--problem", TABLE, "--eta", "0.05", "--local-steps", "2", "--rounds", "2",
               "--replicates", "4", "--seed", "0", "--aggregator", "fedadam", "--aggregator-option", option, "--json"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--aggregator-option" in err
    import re

    assert re.search(match, err), err

@pytest.mark.parametrize(("bad", "match"), [
    (["--runs", "1"], "--runs=1"),
    (["--settings", "hybrid,extreme"], "'extreme' is not one of"),
    (["--settings", " , "], "--settings=' , ': empty"),
    (["--aggregators", ""], "--aggregators='': empty"),
    (["--aggregators", "fedavg,fedmagic"], "'fedmagic' is not one of"),
    (["--clients", "4", "--participation", "5"], "--participation=5: cannot exceed --clients=4"),
    (["--epochs", "0"], "--epochs=0: must be an integer >= 1"),
    (["--participation", "11"], "--participation=11: cannot exceed --clients=10 (the default with --quick)"),
    (["--clients", "0"], "--clients=0: must be an integer >= 1"),
    (["--participation", "0"], "--participation=0: must be an integer >= 1"),
    (["--seed", "-1"], "--seed=-1: must be an integer >= 0"),
    (["--data-seed", "-3"], "--data-seed=-3: must be an integer >= 0"),
    (["--eta", "nan"], "--eta=nan"),
    (["--device", "bogus"], "--device='bogus': not a torch device"),
    (["--device", "cpu:x"], "--device='cpu:x'"),
])
def test_compare_aggregators_bad_input(bad, match, tmp_path, capsys, monkeypatch):
    import fedsde.report.aggregator_comparison as experiment

    def never(*args, **kwargs):
        raise AssertionError("the experiment ran before the input was checked")

    monkeypatch.setattr(experiment, "_problem", never)
    rc = main(["compare-aggregators", "--quick", "--out", str(tmp_path), *bad])
    assert rc == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1 and "Traceback" not in err
    assert not any(tmp_path.iterdir())  # no partial result files


def test_compare_aggregators_out_must_be_a_creatable_folder(tmp_path, capsys, monkeypatch):
    import fedsde.report.aggregator_comparison as experiment

    def never(*args, **kwargs):
        raise AssertionError("the experiment ran before --out was checked")

    monkeypatch.setattr(experiment, "_problem", never)
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out, match in ((afile, "exists and is not a folder"), (afile / "sub", "cannot be created")):
        assert main(["compare-aggregators", "--quick", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"--out={str(out)!r}" in err and match in err and err.count("\n") == 1
    monkeypatch.setattr("os.access", lambda *args, **kwargs: False)  # a read-only parent (root ignores modes)
    assert main(["compare-aggregators", "--quick", "--out", str(tmp_path / "new" / "dir")]) == 2
    err = capsys.readouterr().err
    assert "--out=" in err and "not writable" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_compare_aggregators_writes_nothing_when_rendering_fails(tmp_path, capsys, monkeypatch):
    import fedsde._cli.compare_aggregators as cmd

    def broken(results):
        raise RuntimeError("figure failed")

    monkeypatch.setattr(cmd, "plot_accuracy", broken)
    with pytest.raises(RuntimeError, match="figure failed"):
        main(["compare-aggregators", "--quick", "--rounds", "1", "--runs", "2", "--settings", "statistical",
              "--aggregators", "fedavg", "--out", str(tmp_path / "res")])
    assert not (tmp_path / "res").exists()


def test_compare_aggregators_small_run(tmp_path, capsys):
    rc = main(["compare-aggregators", "--quick", "--rounds", "2", "--runs", "2", "--settings", "statistical,hybrid+",
               "--aggregators", "fedavg,fedaware,fednova", "--out", str(tmp_path), "--json"])
    assert rc == 0
    out = _json(capsys)
    assert {r["aggregator"] for r in out["summary"]} == {"fedavg", "fedaware", "fednova"}
    assert out["config"]["seed"] == 0 and out["config"]["runs"] == 2
    for name in ("table.md", "summary.csv", "results.json", "accuracy.png"):
        assert (tmp_path / name).stat().st_size > 0
    rec = json.loads((tmp_path / "results.json").read_text())
    acc = np.asarray(rec["settings"]["hybrid+"]["rules"]["fedaware"]["accuracy"])
    assert acc.shape == (2, 3) and np.all((acc >= 0) & (acc <= 1))
    assert not list(tmp_path.glob(".*.tmp"))


def _accuracies(tmp_path, name: str, capsys, *flags: str, runs: int = 2) -> dict:
    out = tmp_path / name
    assert main(["compare-aggregators", "--quick", "--rounds", "2", "--replicates", str(runs), "--settings",
                 "hybrid+", "--aggregators", "fedavg,scaffold,fedadam", "--out", str(out), "--no-plot", "--json",
                 *flags]) == 0
    assert _json(capsys)["config"]["device"] == (flags[-1] if flags else "cpu")
    rules = json.loads((out / "results.json").read_text())["settings"]["hybrid+"]["rules"]
    return {name: np.asarray(rule["accuracy"]) for name, rule in rules.items()}  # (runs, rounds + 1)


def test_compare_aggregators_device_cpu_is_the_default(tmp_path, capsys):
    plain = _accuracies(tmp_path, "plain", capsys)
    cpu = _accuracies(tmp_path, "cpu", capsys, "--device", "cpu")
    for name, acc in plain.items():
        np.testing.assert_array_equal(cpu[name], acc)


@pytest.mark.cuda
def test_compare_aggregators_on_cuda_agrees_with_the_cpu_in_law(tmp_path, capsys):
    """The GPU draws other random numbers (its own generators): the final test accuracies of 48 runs on each device
    agree in mean within 5 standard errors, plus one test sample in 450 for ties that round differently."""
    cpu = _accuracies(tmp_path, "cpu", capsys, "--device", "cpu", runs=48)
    gpu = _accuracies(tmp_path, "gpu", capsys, "--device", "cuda", runs=48)
    for name in cpu:
        a, b = cpu[name][:, -1], gpu[name][:, -1]
        se = np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
        assert abs(a.mean() - b.mean()) <= 5 * se + 1 / 450, (name, a.mean(), b.mean(), se)


FOUR_CLIENTS = """\
kind = "classification"
dataset = "digits"
model = "softmax"
clients = 4
partition = "dirichlet"
alpha = 0.5
batch_size = 16
seed = 7
"""


def test_compare_aggregators_problem_file_defaults_and_config(tmp_path, capsys):
    path = tmp_path / "four.toml"
    path.write_text(FOUR_CLIENTS)
    base = ["compare-aggregators", "--problem", str(path), "--rounds", "1", "--runs", "2", "--aggregators", "fedavg",
            "--no-plot", "--out", str(tmp_path / "res")]
    # the default participation (5) adapts to the file's 4 clients; --epochs sets the local epochs
    assert main([*base, "--epochs", "2", "--json"]) == 0
    cfg = _json(capsys)["config"]
    assert cfg["participation"] == 4 and cfg["n_clients"] == 4 and cfg["epochs"] == 2
    # the file's partition is echoed, not the built-in settings' Dirichlet(0.1) / 2 shards
    assert cfg["partition"] == {"dataset": "digits", "partition": "dirichlet", "alpha": 0.5, "min_size": 10,
                                "seed": 7}
    assert cfg["data_seed"] == 7
    assert not {"dirichlet_alpha", "shards_per_client", "epochs_range"} & set(cfg)
    # an explicit value larger than the file's clients is refused
    assert main([*base, "--participation", "5"]) == 2
    err = capsys.readouterr().err
    assert "--participation=5: cannot exceed the number of clients of --problem (4)" in err and err.count("\n") == 1


def test_compare_aggregators_default_participation_adapts_to_clients(tmp_path, capsys):
    assert main(["compare-aggregators", "--quick", "--clients", "3", "--rounds", "1", "--runs", "2", "--settings",
                 "statistical", "--aggregators", "fedavg", "--no-plot", "--out", str(tmp_path), "--json"]) == 0
    cfg = _json(capsys)["config"]
    assert cfg["participation"] == 3 and cfg["dirichlet_alpha"] == 0.1 and "partition" not in cfg
