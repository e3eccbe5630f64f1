"""The adaptive server rules' SDE (Malladi et al. 2022 with the round displacement), its SVAG test and the
square-root scaling rule."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.integrate
import scipy.stats
import torch

from fedsde.aggregators import FedAdagrad, FedAdam, FedYogi
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.scaling.sqrt_rule import sqrt_scaled, sqrt_sde_invariance
from fedsde.sde.adaptive import adaptive_sde, adaptive_sde_paths, svag_aggregator
from fedsde.sde.rules import NoSDEError, rule_round_law


def _problem() -> QuadraticProblem:
    return QuadraticProblem.from_arrays(np.array([[1.0, 0.5], [2.0, 1.0]]), np.array([[1.0, -1.0], [0.0, 2.0]]),
                                        np.array([[4.0, 8.0], [12.0, 4.0]]), [0.5, 0.5])


S, ETA, E = 0.1, 0.05, 3


@pytest.mark.parametrize("agg", [FedAdam(), FedAdam(variant="bias_corrected"), FedYogi()])
def test_drift_and_diffusion_are_the_formulas(agg):
    pb = _problem()
    sde = adaptive_sde(pb, agg, eta=ETA, local_steps=E, server_lr=S)
    law = rule_round_law(pb, "fedavg", ETA, E, S)
    B, c, N = law.B, law.c, law.noise_cov
    w, m, v = np.array([0.7, 1.3]), np.array([0.2, -0.4]), np.array([0.5, 2.0])
    t = 0.37
    c1, c2 = (1 - agg.beta1) / S**2, (1 - agg.beta2) / S**2
    G = B @ (w - c)
    if agg.variant == "bias_corrected":
        g1, g2 = 1 - math.exp(-c1 * t), 1 - math.exp(-c2 * t)
        dw = -(m / g1) / (S * (np.sqrt(v / g2) + agg.tau))
    else:
        dw = -m / (S * (np.sqrt(v) + agg.tau))
    if agg.name == "fedyogi":
        # E[g² sign(g² − v)] for g ~ N(0, N_ii), by quadrature
        dv = np.array([c2 * scipy.integrate.quad(lambda x, i=i: N[i, i] * x * x * np.sign(N[i, i] * x * x - v[i])
                                                 * scipy.stats.norm.pdf(x), -40, 40, points=[
                                                     -math.sqrt(v[i] / N[i, i]), math.sqrt(v[i] / N[i, i])])[0]
                       for i in range(2)])
    else:
        dv = c2 * (np.diag(N) - v)
    y = torch.as_tensor(np.r_[w, m, v])[None]
    np.testing.assert_allclose(sde.f(t, y)[0].numpy(), np.r_[dw, c1 * (G - m), dv], rtol=1e-9, atol=1e-12)
    root = scipy.linalg.sqrtm(N).real
    g = sde.g(t, y)[0].numpy()
    np.testing.assert_allclose(g[2:4], c1 * S * root, rtol=1e-9)
    assert np.all(g[[0, 1, 4, 5]] == 0)


def test_svag_rule_and_sqrt_rule_parameters():
    agg = FedAdam(beta1=0.9, beta2=0.99, tau=1e-3)
    k2 = svag_aggregator(agg, 2)
    assert (k2.beta1, k2.beta2, k2.tau, k2.v0) == pytest.approx((1 - 0.1 / 4, 1 - 0.01 / 4, 2e-3, 4e-6))
    scaled, s, n = sqrt_scaled(agg, 0.05, 40, 4.0)
    assert (scaled.beta1, scaled.beta2, scaled.tau, s, n) == pytest.approx((0.6, 0.96, 5e-4, 0.1, 10))
    with pytest.raises(ValueError, match="κ <= 1/"):
        sqrt_scaled(agg, 0.05, 40, 20.0)


@pytest.mark.parametrize("agg", [FedAdam(), FedAdam(variant="bias_corrected"), FedYogi(), FedAdam(beta1=0.0)])
def test_sqrt_rule_leaves_the_sde_unchanged(agg):
    assert sqrt_sde_invariance(_problem(), agg, eta=ETA, local_steps=E, server_lr=S, kappa=4.0) < 1e-12


def test_sqrt_rule_fails_where_its_premise_fails():
    # Flower's step correction sits at t + 2s², which moves with s: not invariant
    assert sqrt_sde_invariance(_problem(), FedAdam(variant="flower"), eta=ETA, local_steps=E, server_lr=S,
                               kappa=4.0) > 1e-3


def test_fedadagrad_has_no_sde_and_says_why():
    with pytest.raises(NoSDEError, match="running sum"):
        adaptive_sde(_problem(), FedAdagrad(), eta=ETA, local_steps=E, server_lr=S)


def test_sde_paths_are_seeded_and_start_at_w0():
    kw = dict(eta=ETA, local_steps=E, rounds=4, replicates=5, seed=3, server_lr=S, w0=[0.6, 1.2])
    a, b = adaptive_sde_paths(_problem(), FedAdam(), **kw), adaptive_sde_paths(_problem(), FedAdam(), **kw)
    assert np.array_equal(a["weights"], b["weights"]) and a["weights"].shape == (5, 5, 2)
    assert np.all(a["weights"][0] == np.array([0.6, 1.2]))
    c = adaptive_sde_paths(_problem(), FedAdam(), **{**kw, "record": [4]})
    np.testing.assert_array_equal(c["weights"][0], a["weights"][-1])


def _write(tmp_path):
    pb = _problem()
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"U": pb.U.tolist(), "a": pb.a.tolist(), "Sigma": pb.Sigma.tolist(),
                                "p": pb.p.tolist()}))
    return str(path)


def test_validity_fedadam_gives_one_of_three_outcomes(tmp_path, capsys):
    from fedsde.cli import main

    rc = main(["validity", "--problem", _write(tmp_path), "--aggregator", "fedadam", "--eta", "0.05",
               "--local-steps", "3", "--server-lr", "0.1", "--rounds", "4", "--replicates", "40", "--seed", "0",
               "--ells", "1,4,16", "--w0", "0.6,1.2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["verdict"]["outcome"] in ("tracks", "does not track", "inconclusive")
    assert out["ells"] == [1, 4, 16]


def test_scaling_sqrt_cli(tmp_path, capsys):
    from fedsde.cli import main

    rc = main(["scaling", "--problem", _write(tmp_path), "--rule", "sqrt", "--aggregator", "fedadam", "--eta", "0.05",
               "--local-steps", "3", "--server-lr", "0.05", "--rounds", "8", "--kappa", "4", "--replicates", "20",
               "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["scaled"]["rounds"] == 2 and out["scaled"]["server_lr"] == pytest.approx(0.1)
    assert out["sde_invariance"] < 1e-12 and "Malladi" in out["source"]


def test_sde_cli_adaptive(tmp_path, capsys):
    from fedsde.cli import main

    rc = main(["sde", "--problem", _write(tmp_path), "--aggregator", "fedyogi", "--eta", "0.05", "--local-steps",
               "3", "--server-lr", "0.1", "--rounds", "3", "--replicates", "4", "--seed", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["sde"] == "adaptive" and len(out["final"]["mean"]) == 2


@pytest.mark.slow
def test_svag_chains_approach_the_sde():
    from fedsde.validity.adaptive import adaptive_svag_chain

    pb, R, n = _problem(), 400, 20
    sde = adaptive_sde_paths(pb, FedAdam(), eta=ETA, local_steps=E, rounds=n, replicates=R, seed=5, server_lr=S,
                             w0=[3.0, 3.0], substeps=64, record=[n])["weights"][-1].mean(0)
    gaps = [np.abs(adaptive_svag_chain(pb, FedAdam(), eta=ETA, local_steps=E, rounds=n, k=k, replicates=R, seed=1,
                                       server_lr=S, w0=[3.0, 3.0], record=[n])[-1].mean(0) - sde).max()
            for k in (1, 4)]
    assert gaps[1] < 0.7 * gaps[0]  # measured 0.13 against 0.24


def test_derive_adaptive_prints_the_round_law_it_is_built_on(tmp_path, capsys):
    from fedsde.cli import main

    rc = main(["derive", "--problem", _write(tmp_path), "--aggregator", "fedadam", "--eta", "0.05", "--local-steps",
               "3", "--server-lr", "0.1", "--json"])
    out = json.loads(capsys.readouterr().out)
    law = rule_round_law(_problem(), "fedavg", ETA, E, S)
    assert rc == 0 and out["sde"] == "adaptive" and out["c1"] == pytest.approx(0.1 / 0.01)
    np.testing.assert_allclose(out["noise_cov"], law.noise_cov, rtol=1e-12)
    np.testing.assert_allclose(out["drift"]["c"], law.c, rtol=1e-12)


@pytest.mark.cuda
def test_adaptive_sde_paths_on_cuda_start_at_w0_and_stay_finite():
    res = adaptive_sde_paths(_problem(), FedAdam(), eta=ETA, local_steps=E, rounds=5, replicates=64, seed=0,
                             server_lr=S, w0=[0.6, 1.2], substeps=2, device="cuda")
    assert res["weights"].shape == (6, 64, 2) and np.all(np.isfinite(res["weights"]))
    assert np.all(res["weights"][0] == np.array([0.6, 1.2]))
