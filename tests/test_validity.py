"""The SVAG chain (fedsde.sde.svag) and the validity test (fedsde.validity): exact laws, FedAvg at ℓ = 1, verdicts."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fedsde.cli import main
from fedsde.errors import FedsdeInputError
from fedsde.exact import transient_moments
from fedsde.problems import QuadraticProblem, save_problem
from fedsde.sde import quadratic_sde_coefficients
from fedsde.sde.svag import svag_chain, svag_coefficients, svag_round_law, svag_transient_moments
from fedsde.sim import simulate
from fedsde.validity import GapPath, bonferroni_quantile, richardson_limit, validity_test, validity_verdict
from tests.helpers import assert_moments_within, brute_round

W0 = [3.0, 3.0]


@pytest.fixture(scope="module")
def problem() -> QuadraticProblem:
    """Three clients in d = 2 with full (non-diagonal) curvatures and noise covariances."""
    U = np.array([[[2.0, 0.5], [0.5, 1.0]], [[1.0, 0.0], [0.0, 3.0]], [[0.5, 0.2], [0.2, 2.0]]])
    Sigma = np.array([[[1.0, 0.3], [0.3, 0.5]], [[0.5, 0.0], [0.0, 2.0]], [[2.0, -0.4], [-0.4, 1.0]]])
    return QuadraticProblem.from_arrays(U, [[1.0, -1.0], [0.0, 2.0], [-2.0, 0.5]], Sigma, [0.5, 0.3, 0.2])


def expected_loss(pb: QuadraticProblem, m: np.ndarray, P: np.ndarray) -> float:
    """E F(w) for w ~ (m, P): Σ_k p_k ½[(m − a_k)ᵀU_k(m − a_k) + tr(U_k P)]."""
    return float(sum(pb.p[k] * 0.5 * ((m - pb.a[k]) @ pb.U[k] @ (m - pb.a[k]) + np.trace(pb.U[k] @ P))
                     for k in range(pb.Q)))


@pytest.mark.parametrize("ell", [1, 2, 3, 8, 50])
def test_coefficients_have_unit_sum_and_square_sum_ell(ell):
    c1, c2 = svag_coefficients(ell)
    assert c1 + c2 == pytest.approx(1.0, abs=1e-15)
    assert c1**2 + c2**2 == pytest.approx(ell, rel=1e-14)
    if ell == 1:
        assert (c1, c2) == (1.0, 0.0)


def test_ell_one_is_fedavg_number_for_number(problem):
    kw = dict(eta=0.1, local_steps=np.array([2, 3, 1]), rounds=7, replicates=40, seed=11, server_lr=0.7, w0=W0)
    sim = simulate(problem, **kw, record=[7])
    sv = svag_chain(problem, **kw, ell=1)
    np.testing.assert_array_equal(sv.final, sim.weights[-1])
    big = dict(kw, replicates=130)  # two blocks of 128, the second padded
    np.testing.assert_array_equal(svag_chain(problem, **big, ell=1).final,
                                  simulate(problem, **big, record=[7]).weights[-1])


def test_round_law_against_two_independent_brute_force_rounds(problem):
    """Mean map of FedAvg at s/ℓ; noise = (s/ℓ)²(c₁² + c₂²)·(noise of one round), from a step-by-step unrolling."""
    eta, E, s, ell = 0.1, 3, 0.8, 4
    law = svag_round_law(problem, eta, E, s, ell)
    clients = brute_round(problem, eta, E, s)
    F = sum(problem.p[k] * clients[k][0] for k in range(problem.Q))
    g = sum(problem.p[k] * clients[k][1] for k in range(problem.Q))
    C = sum(problem.p[k] ** 2 * clients[k][2] for k in range(problem.Q))  # Cov of one Â
    c1, c2 = svag_coefficients(ell)
    w = np.array([0.4, -1.2])
    m, P = law.step(w, np.zeros((2, 2)))
    np.testing.assert_allclose(m, w + (s / ell) * (F @ w + g - w), rtol=1e-12)
    np.testing.assert_allclose(P, (s / ell) ** 2 * (c1**2 + c2**2) * C, rtol=1e-12)


@pytest.mark.parametrize("ell", [2, 4])
def test_chain_moments_match_exact_linear_gaussian_law(problem, ell):
    rounds = 6
    res = svag_chain(problem, eta=0.1, local_steps=3, rounds=rounds, ell=ell, replicates=4000, seed=5,
                     server_lr=0.8, w0=W0)
    law = svag_transient_moments(problem, 0.1, 3, rounds, 0.8, ell, w0=W0, record=[rounds])
    assert_moments_within(res.final, law.final_mean, law.final_cov)


def test_exact_moments_at_ell_one_are_fedavg(problem):
    a = svag_transient_moments(problem, 0.1, 3, 5, 0.8, 1, w0=W0)
    b = transient_moments(problem, 0.1, 3, 5, 0.8, w0=W0)
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-13)
    np.testing.assert_allclose(a.cov, b.cov, rtol=1e-12, atol=1e-15)


def test_exact_law_converges_to_corrected_sde_at_rate_one_over_ell(problem):
    eta, E, s, rounds = 0.1, 3, 0.8, 5
    lin = quadratic_sde_coefficients(problem, eta, E, s, variant="corrected")
    target = lin.moments(rounds * lin.h, W0)
    ells = [4, 8, 16, 32, 64]
    err_m, err_c = [], []
    for ell in ells:
        law = svag_transient_moments(problem, eta, E, rounds, s, ell, w0=W0, record=[rounds])
        err_m.append(np.linalg.norm(law.final_mean - target.mean))
        err_c.append(np.linalg.norm(law.final_cov - target.cov))
    for err in (err_m, err_c):
        slope = np.polyfit(np.log(ells), np.log(err), 1)[0]
        assert slope == pytest.approx(-1.0, abs=0.05)
        assert err[-2] / err[-1] == pytest.approx(2.0, rel=0.05)


def _loss_gaps(problem, eta, E, s, rounds=10):
    out = []
    for ell in (1, 2, 4, 8):
        mo = svag_transient_moments(problem, eta, E, rounds, s, ell, w0=W0)
        out.append([expected_loss(problem, mo.mean[i], mo.cov[i]) for i in range(rounds + 1)])
    out = np.asarray(out)
    return np.abs(np.diff(out, axis=0)).max() / np.abs(out).max()


def test_verdict_flips_between_tracking_and_non_tracking_settings(problem):
    # exact relative gaps of E F between successive ℓ: 0.7 % (tracks) and 11 % (does not) against tol = 5 %
    assert _loss_gaps(problem, 0.05, 2, 0.5) < 0.01
    assert _loss_gaps(problem, 0.2, 5, 1.5) > 0.1
    kw = dict(rounds=10, replicates=1000, seed=3, w0=W0, tolerance=0.05, verdict_metrics=["train_loss"],
              fedavg="sampled")
    good = validity_test(problem, eta=0.05, local_steps=2, server_lr=0.5, **kw)
    bad = validity_test(problem, eta=0.2, local_steps=5, server_lr=1.5, **kw)
    assert good.verdict.tracks and good.verdict.margin > 0.02
    assert not bad.verdict.tracks and bad.verdict.margin < -0.02
    assert bad.verdict.worst["ells"] == [1, None]  # FedAvg against ℓ → ∞ (the SDE), not successive ℓ
    assert good.verdict.horizon == pytest.approx(0.5)  # T = 10 rounds · h, h = η = 0.05
    # means at ℓ = 1 are FedAvg's exact E F within noise
    law = transient_moments(problem, 0.2, 5, 10, 1.5, w0=W0)
    ef = expected_loss(problem, law.final_mean, law.final_cov)
    assert abs(bad.metrics["train_loss"]["mean"][0, -1] - ef) < 5 * bad.metrics["train_loss"]["se"][0, -1]


def test_verdict_rule_on_synthetic_numbers():
    """The three outcomes from known gap paths: simultaneous Student-t intervals against a tolerance on d."""
    times = np.array([0.0, 1.0, 2.0, 3.0])
    sde = np.array([3.0, 2.0, 1.5, 1.0])  # range 2
    se = np.array([0.0, 0.01, 0.01, 0.01])
    zero = np.zeros(4)

    def verdict(est, se=se, R=30, **kw):
        return validity_verdict(times, {"train_loss": GapPath(np.asarray(est), se, sde, zero)}, replicates=R,
                                reference="exact", **kw)

    ok = verdict([0.0, 0.02, 0.01, -0.01])
    q = bonferroni_quantile(0.05, 3, 29)
    assert ok.outcome == "tracks" and ok.tracks and ok.comparisons == 3 and ok.z == pytest.approx(q)
    assert ok.horizon == 3.0 and ok.replicates_needed is None and ok.worst["ells"] == [1, None]
    assert ok.worst["gap"] == pytest.approx(0.01) and ok.worst["time"] == 1.0  # 0.02 / range 2
    assert ok.worst["upper"] == pytest.approx((0.02 + q * 0.01) / 2)
    assert ok.margin == pytest.approx(1 - ok.worst["upper"] / 0.05)
    bad = verdict([0.0, 0.02, 0.3, 0.25])  # d = 0.15 at t = 2, far beyond noise
    assert bad.outcome == "does not track" and not bad.tracks and bad.horizon == 1.0 and bad.worst["time"] == 2.0
    assert bad.worst["lower"] == pytest.approx((0.3 - q * 0.01) / 2) and bad.worst["lower"] > 0.05
    unsure = verdict([0.0, 0.02, 0.1, 0.05], se=np.array([0.0, 0.02, 0.02, 0.02]), R=5)  # d = 0.05 at t = 2
    # d̂ = tol exactly: at the point estimate no R′ decides; the planning gap (held tol/4 away) gives a number
    assert unsure.outcome == "inconclusive" and unsure.replicates_needed > 5
    assert unsure.replicates_needed_basis.startswith("planning gap")
    near = verdict([0.0, 0.02, 0.09, 0.05], se=np.array([0.0, 0.02, 0.02, 0.02]), R=5)
    assert near.outcome == "inconclusive" and near.replicates_needed > 5 and "replicates" in near.reason
    with pytest.raises(FedsdeInputError, match="alpha"):
        validity_test(QuadraticProblem.from_arrays([1.0], [0.0], [1.0]), eta=0.1, local_steps=1, rounds=2,
                      replicates=4, seed=0, alpha=1.5, fedavg="sampled")


def test_richardson_limit_is_exact_for_order_one_errors():
    ells = [1, 2, 4, 8]
    mean = np.array([[3.0 + 2.0 / e, -1.0 + 0.5 / e] for e in ells])
    m, s = richardson_limit(ells, mean, np.full_like(mean, 0.1))
    np.testing.assert_allclose(m, [3.0, -1.0], rtol=1e-14)
    np.testing.assert_allclose(s, np.hypot(2 * 0.1, 0.1))


def test_inputs_are_validated(problem):
    with pytest.raises(FedsdeInputError, match="ell"):
        svag_chain(problem, eta=0.1, local_steps=2, rounds=2, ell=0, replicates=4, seed=0)
    with pytest.raises(FedsdeInputError, match="metrics"):
        validity_test(problem, eta=0.1, local_steps=2, rounds=2, metrics=["test_accuracy"])
    with pytest.raises(FedsdeInputError, match="oracle_factory"):
        svag_chain(object.__new__(type("P", (), {"Q": 1, "d": 1, "p": np.ones(1)})), eta=0.1, local_steps=1,
                   rounds=1, ell=2, replicates=2, seed=0)


def test_cli_json_contract_and_errors(problem, tmp_path, capsys):
    path = tmp_path / "q.toml"
    save_problem(problem, path)
    argv = ["validity", "--problem", str(path), "--eta", "0.05", "--local-steps", "2", "--server-lr", "0.5",
            "--rounds", "4", "--ells", "1,2,4", "--replicates", "50", "--seed", "1", "--w0", "3,3",
            "--tolerance", "0.1", "--json"]
    assert main(argv) == 0
    obj = json.loads(capsys.readouterr().out)
    assert set(obj) >= {"ells", "times", "metrics", "final_mean", "final_cov", "verdict"}
    assert obj["ells"] == [1, 2, 4] and len(obj["times"]) == 5
    assert np.shape(obj["metrics"]["train_loss"]["mean"]) == (3, 5)
    assert np.shape(obj["metrics"]["train_loss"]["se"]) == (3, 5)
    assert np.shape(obj["final_cov"]) == (3, 2, 2)
    assert obj["verdict"]["tolerance"] == 0.1 and isinstance(obj["verdict"]["tracks"], bool)
    for bad, msg in ((["--ells", "0,2"], "--ells"), (["--replicates", "1"], "--replicates")):
        assert main([*argv, *bad]) == 2
        assert msg in capsys.readouterr().err


def test_float32_and_progress_run(problem):
    res = validity_test(problem, eta=0.05, local_steps=2, rounds=2, replicates=8, seed=0, ells=[1, 2],
                        dtype=torch.float32, progress=False)
    assert np.all(np.isfinite(res.metrics["train_loss"]["mean"]))
