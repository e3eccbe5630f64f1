"""`validity --fedavg exact|sampled`: the exact comparison where FedAvg's moments close (quadratic and least-squares
clients) against independent computations, its refusals, and the 1/ℓ check's power criterion."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import one_line_error
from helpers import run_cli as run

from fedsde.exact import least_squares_transient_moments, transient_moments
from fedsde.problems import QuadraticProblem, load_problem
from fedsde.sde import quadratic_sde_coefficients
from fedsde.validity import ell_ratios, validity_test

ROOT = Path(__file__).resolve().parents[1]
PAPER = str(ROOT / "examples" / "problems" / "paper_table.toml")
GRUNFELD = str(ROOT / "examples" / "problems" / "grunfeld.toml")
U = np.array([[[2.0, 0.5], [0.5, 1.0]], [[1.0, 0.0], [0.0, 3.0]], [[0.5, 0.2], [0.2, 2.0]]])
SIGMA = np.array([[[1.0, 0.3], [0.3, 0.5]], [[0.5, 0.0], [0.0, 2.0]], [[2.0, -0.4], [-0.4, 1.0]]])
W0 = np.array([3.0, 3.0])


@pytest.fixture(scope="module")
def quad() -> QuadraticProblem:
    return QuadraticProblem.from_arrays(U, [[1.0, -1.0], [0.0, 2.0], [-2.0, 0.5]], SIGMA, [0.5, 0.3, 0.2])


@pytest.mark.parametrize("eta, E, s, rounds, outcome", [(0.02, 2, 0.5, 40, "tracks"),
                                                        (0.1, 5, 1.0, 10, "does not track")])
def test_exact_comparison_on_quadratic_clients(quad, eta, E, s, rounds, outcome):
    """The gap is max_t |E F_FedAvg − E F_SDE| / range of E F_SDE computed independently (FedAvg by
    fedsde.exact, the SDE by its OU law); the bounds collapse onto it; nothing is sampled."""
    res = validity_test(quad, eta=eta, local_steps=E, server_lr=s, rounds=rounds, w0=W0,
                        verdict_metrics=["train_loss"])
    v = res.verdict
    fed = transient_moments(quad, eta, E, rounds, s, w0=W0)
    lin = quadratic_sde_coefficients(quad, eta, E, s, variant="corrected")

    def ef(m, C):
        return float(quad.loss(m) + 0.5 * np.trace(quad.hessian @ C))

    f = np.array([ef(m, C) for m, C in zip(fed.mean, fed.cov, strict=True)])
    g = np.array([ef(*lin.moments(n * lin.h, W0)) for n in range(rounds + 1)])
    d = float(np.max(np.abs(f - g)) / np.ptp(g))
    assert res.config["fedavg"] == "exact" and res.config["replicates"] is None and res.values == {}
    assert v.outcome == outcome and v.replicates is None and v.replicates_needed is None and v.tails == {}
    assert v.worst["gap"] == pytest.approx(d, rel=1e-9)
    assert v.worst["lower"] == v.worst["upper"] == pytest.approx(v.worst["gap"], rel=1e-12)
    np.testing.assert_allclose(res.final_mean[0], fed.final_mean, rtol=1e-12)
    np.testing.assert_allclose(res.final_cov[0], fed.final_cov, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(res.metrics["train_loss"]["mean"][0], f, rtol=1e-10)


def test_exact_comparison_on_least_squares_clients(capsys):
    """Grunfeld: FedAvg's exact moments (fedsde.exact) through the CLI; ‖w − w₀‖ has no value on either side."""
    argv = ["validity", "--problem", GRUNFELD, "--eta", "0.15", "--local-steps", "10", "--rounds", "20",
            "--tolerance", "0.12", "--json"]
    code, out, _ = run(capsys, argv)
    obj = json.loads(out)
    v = obj["verdict"]
    assert code == 0 and obj["config"]["fedavg"] == "exact" and v["replicates"] is None
    assert v["outcome"] == "tracks" and v["worst"]["gap"] == pytest.approx(0.10625, abs=1e-4)
    assert v["worst"]["lower"] == v["worst"]["upper"] == v["worst"]["gap"]
    assert "distance_from_start" in v["skipped"] and obj["warnings"] == []
    pb = load_problem(GRUNFELD)
    mom = least_squares_transient_moments(pb, 0.15, 10, 20, 1.0)
    np.testing.assert_allclose(obj["final_mean"][0], mom.final_mean, rtol=1e-10)
    H = pb.hessian()
    ef = [pb.loss(m) + 0.5 * np.trace(H @ C) for m, C in zip(mom.mean, mom.cov, strict=True)]
    np.testing.assert_allclose(obj["metrics"]["train_loss"]["mean"][0], ef, rtol=1e-10)
    # sampled: the same keys, from chains
    code, out, _ = run(capsys, [*argv, "--fedavg", "sampled", "--replicates", "16", "--seed", "0"])
    obj = json.loads(out)
    assert code == 0 and obj["config"]["fedavg"] == "sampled" and obj["verdict"]["replicates"] == 16
    assert "tails" in obj["verdict"] and "replicates_needed_basis" in obj["verdict"]


def test_replicates_are_not_silently_ignored(capsys):
    argv = ["validity", "--problem", PAPER, "--eta", "0.05", "--local-steps", "2", "--rounds", "4", "--w0", "3",
            "--replicates", "8", "--seed", "0", "--json"]
    code, out, _ = run(capsys, argv)
    obj = json.loads(out)
    assert code == 0 and obj["config"]["fedavg"] == "exact"
    assert any("replicates=8: not used" in w for w in obj["warnings"])
    with pytest.warns(UserWarning, match="not used"):
        validity_test(load_problem(PAPER), eta=0.05, local_steps=2, rounds=4, replicates=8, seed=0)


@pytest.mark.parametrize("extra, needles", [
    (["--fedavg", "exact", "--reference", "svag"], ["--fedavg=exact", "SVAG"]),
    (["--fedavg", "exact", "--ells", "1,2"], ["--fedavg=exact", "1/ℓ"]),
    (["--fedavg", "sampled"], ["--replicates=None", "--fedavg sampled"]),
    (["--fedavg", "sampled", "--replicates", "4"], ["--seed", "--fedavg sampled"]),
])
def test_cli_refusals(capsys, extra, needles):
    argv = ["validity", "--problem", PAPER, "--eta", "0.05", "--local-steps", "2", "--rounds", "3", "--json", *extra]
    one_line_error(*run(capsys, argv), *needles)


def test_exact_is_refused_where_the_moments_do_not_close(capsys, tmp_path):
    path = tmp_path / "digits.toml"
    path.write_text('kind = "classification"\ndataset = "digits"\nmodel = "softmax"\nclients = 3\n'
                    'partition = "iid"\nbatch_size = 8\nseed = 0\n')
    argv = ["validity", "--problem", str(path), "--eta", "0.05", "--local-steps", "2", "--rounds", "2",
            "--replicates", "4", "--seed", "0", "--fedavg", "exact", "--json"]
    one_line_error(*run(capsys, argv), "--fedavg=exact", "do not close")


# ---------------------------------------------------------------- the 1/ℓ check: power before "ok"
def _chains(law, R, noise, seed=0, T=6):
    rng = np.random.default_rng(seed)
    ells = [1, 2, 4, 8]
    t = np.arange(T, dtype=float)
    mean = np.array([2.0 - t + law(e) * t for e in ells])
    return ells, t, mean[:, :, None] + noise * rng.standard_normal((4, T, R)) * (t[None, :, None] > 0)


def test_one_over_ell_check_needs_power_to_say_ok():
    """The failure that matters: a D/ℓ² term moving the Richardson limit of ℓ = 4, 8 by the tolerance
    (|D| = tol·scale·32), which shifts the residual of (2, 4, 8) by 3/32·|D|.  Without the power to see it the
    check is "not checked — too few replicates", even where every ratio looks fine."""
    detect = {"train_loss": 0.05 * 5.0}  # tolerance 0.05 of a movement of 5
    ells, t, vals = _chains(lambda e: 0.2 / e, R=400, noise=0.01)
    ok = ell_ratios(ells, t, {"train_loss": vals}, ["train_loss"], alpha=0.05, detect=detect)
    row = next(r for r in ok["ratios"] if r["decisive"])
    assert ok["status"] == "ok" and row["power"] and row["detectable"] == pytest.approx(3 / 32 * 0.25 * 32)
    ells, t, vals = _chains(lambda e: 0.2 / e, R=8, noise=1.0)
    weak = ell_ratios(ells, t, {"train_loss": vals}, ["train_loss"], alpha=0.05, detect=detect)
    assert weak["status"] == "not checked" and weak["note"].startswith("too few replicates")
    assert not any(r["power"] for r in weak["ratios"] if r["decisive"])
    # without detect (the earlier rule) the same numbers said "ok"
    assert ell_ratios(ells, t, {"train_loss": vals}, ["train_loss"], alpha=0.05)["status"] == "ok"
    # a failure beyond noise is still "off"
    ells, t, vals = _chains(lambda e: 0.2 / np.sqrt(e), R=400, noise=0.01)
    assert ell_ratios(ells, t, {"train_loss": vals}, ["train_loss"], alpha=0.05, detect=detect)["status"] == "off"


@pytest.mark.slow
def test_digits_with_eight_replicates_is_not_checked(capsys):
    """Digits softmax, 10 rounds, R = 8, ℓ = 1, 2, 4, 8: the earlier check said "ok" while every decisive ratio had
    the wrong sign; it cannot see a failure of the size that matters, and says so."""
    argv = ["validity", "--problem", str(ROOT / "examples" / "problems" / "digits_softmax.toml"), "--eta", "0.05",
            "--local-steps", "2", "--rounds", "10", "--replicates", "8", "--seed", "0", "--json"]
    code, out, _ = run(capsys, argv)
    v = json.loads(out)["verdict"]
    assert code == 0 and v["regime"] == "not checked" and v["regime_note"].startswith("too few replicates")
    assert "1/ℓ regime not checked — too few replicates" in v["reason"]
    assert not all(r["power"] for r in v["ell_ratios"] if r["decisive"])
