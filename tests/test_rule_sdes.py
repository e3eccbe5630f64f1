"""Each server rule's own SDE (fedsde.sde.rules) against an independent construction: the rule's one-round mean map
by finite differences of the expected local-SGD iterates, the round noise by explicit matrix powers, and the
stationary covariance by a Kronecker solve of the Lyapunov equation (all to 1e-8)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedsde.aggregators import FedAvgM, FedDisco, FedNova, FedProx, get_aggregator
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.sde.rules import NoSDEError, rule_chain_moments, rule_sde

TOL = 1e-8


def _problem(seed=3, Q=3, d=3) -> QuadraticProblem:
    rng = np.random.default_rng(seed)
    U, S = [], []
    for _ in range(Q):
        G = rng.normal(size=(d, d))
        U.append(G @ G.T / d + 0.4 * np.eye(d))
        H = rng.normal(size=(d, d))
        S.append(0.1 * H @ H.T)
    return QuadraticProblem.from_arrays(np.array(U), rng.normal(size=(Q, d)), np.array(S), rng.random(Q) + 0.2,
                                        label_distributions=rng.random((Q, 5)))


def _client_mean_step(pb, k, w, eta, tau, mu):
    """E[x_τ] − w by running the expected local recursion x ← x − η(U(x − a) + μ(x − w))."""
    x = w.copy()
    for _ in range(tau):
        x = x - eta * (pb.U[k] @ (x - pb.a[k]) + mu * (x - w))
    return x - w


def _client_noise(pb, k, eta, tau, mu):
    """Cov of the displacement: η² Σ_m P^m Σ_k P^mᵀ with explicit matrix powers."""
    P = np.eye(pb.d) - eta * (pb.U[k] + mu * np.eye(pb.d))
    return eta**2 * sum(np.linalg.matrix_power(P, m) @ pb.Sigma[k] @ np.linalg.matrix_power(P, m).T
                        for m in range(tau))


def _independent(pb, omega, eta, tau, mu, s_eff, h):
    """Drift matrix, fixed point and diffusion of w' = w + s Σ ω_k Δ_k by finite differences of its mean map."""
    w = np.zeros(pb.d)

    def step(x):
        return sum(omega[k] * _client_mean_step(pb, k, x, eta, tau[k], mu) for k in range(pb.Q))

    base = step(w)
    B = -np.column_stack([step(w + e) - base for e in np.eye(pb.d)])  # step(x) = −B(x − c), linear
    c = np.linalg.solve(B, base + B @ w)
    N = sum(omega[k] ** 2 * _client_noise(pb, k, eta, tau[k], mu) for k in range(pb.Q))
    A, D = (s_eff / h) * B, (s_eff**2 / h) * N
    d = pb.d
    P = np.linalg.solve(np.kron(np.eye(d), A) + np.kron(A, np.eye(d)), D.reshape(-1)).reshape(d, d)
    return A, c, D, P


TAU = np.array([2, 5, 9])
ETA, S, H = 0.07, 0.6, 0.05


def _check(r, A, c, D, P):
    for got, want in ((r.sde.A, A), (r.sde.c, c), (r.sde.diffusion_cov, D), (r.sde.stationary().cov, P)):
        np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL * max(1.0, np.abs(want).max()))


def test_fednova_sde_is_centred_at_its_own_fixed_point():
    pb = _problem()
    p = pb.p
    omega = p * np.sum(p * TAU) / TAU  # seed 003 eq. (20), τ_eff = Σ p_k τ_k
    r = rule_sde(pb, "fednova", ETA, TAU, S, H)
    _check(r, *_independent(pb, omega, ETA, TAU, 0.0, S, H))
    fedavg = rule_sde(pb, "fedavg", ETA, TAU, S, H)
    assert np.linalg.norm(r.sde.c - fedavg.sde.c) > 1e-3  # not FedAvg's fixed point
    # the drift vanishes at c_rule and the chain's stationary mean is c_rule
    assert np.allclose(r.sde.drift(r.sde.c), 0.0, atol=1e-12)
    m = rule_chain_moments(r, 3000, np.zeros(pb.d), record=[3000])
    np.testing.assert_allclose(m.mean[-1], r.sde.c, atol=1e-10)


@pytest.mark.parametrize("mu", [0.0, 0.5])
def test_fedprox_sde_from_the_proximal_round(mu):
    pb = _problem(4)
    r = rule_sde(pb, FedProx(mu), ETA, TAU, S, H)
    _check(r, *_independent(pb, pb.p, ETA, TAU, mu, S, H))


def test_feddisco_sde_uses_the_disco_weights():
    pb = _problem(5)
    agg = FedDisco("fednova")
    agg.bind(pb)
    q = agg.static_weights()
    omega = agg.linear_weights(pb.p, TAU.astype(float), TAU.astype(float), p=pb.p)
    assert np.allclose(omega, q * np.sum(q * TAU) / TAU)
    r = rule_sde(pb, FedDisco("fednova"), ETA, TAU, S, H)
    _check(r, *_independent(pb, omega, ETA, TAU, 0.0, S, H))


@pytest.mark.parametrize("beta,damp", [(0.9, 0.0), (0.5, 0.5)])
def test_fedavgm_first_order_sde_has_step_s_over_one_minus_beta(beta, damp):
    pb = _problem(6)
    r = rule_sde(pb, FedAvgM(beta, dampening=damp), ETA, TAU, S, H)
    s_eff = S * (1 - damp) / (1 - beta)
    assert r.effective_server_lr == pytest.approx(s_eff, rel=1e-14)
    _check(r, *_independent(pb, pb.p, ETA, TAU, 0.0, s_eff, H))


def test_momentum_chain_law_matches_the_unrolled_heavy_ball():
    pb = _problem(7, Q=2, d=2)
    r = rule_sde(pb, FedAvgM(0.8), ETA, np.array([3, 4]), 0.3, H)
    law = r.law
    # unrolled: mean by the deterministic recursion, covariance by propagating the noise of every round
    w, v = np.ones(2), np.zeros(2)
    B, c, N, s = law.B, r.sde.c, law.noise_cov, 0.3
    Tw = []  # (∂w_n/∂ε_j, ∂v_n/∂ε_j)
    for _ in range(25):
        Tw = [(dw + s * (0.8 * dv - B @ dw), 0.8 * dv - B @ dw) for dw, dv in Tw]
        Tw.append((s * np.eye(2), np.eye(2)))
        v = 0.8 * v - B @ (w - c)
        w = w + s * v
    cov = sum(dw @ N @ dw.T for dw, _ in Tw)
    m = rule_chain_moments(r, 25, np.ones(2), record=[25])
    np.testing.assert_allclose(m.mean[-1], w, rtol=1e-12)
    np.testing.assert_allclose(m.cov[-1], cov, rtol=1e-10)


def test_underdamped_sde_shape_and_centre():
    pb = _problem(8, Q=2, d=2)
    r = rule_sde(pb, FedAvgM(0.9), ETA, np.array([3, 4]), 0.01, 0.1)
    ud = r.underdamped()
    assert ud.A.shape == (4, 4)
    np.testing.assert_allclose(ud.A[2:, :2], (0.01 / 0.01) * r.law.B)
    np.testing.assert_allclose(ud.A[2:, 2:], (0.1 / 0.1) * np.eye(2))
    assert ud.stationary() is not None


@pytest.mark.parametrize("name", ["scaffold", "fedaware"])
def test_rules_with_state_are_refused_with_the_reason(name):
    with pytest.raises(NoSDEError, match="undefined"):
        rule_sde(_problem(), name, ETA, TAU, S, H)


def test_adaptive_rules_are_not_linear():
    with pytest.raises(NoSDEError, match="adaptive"):
        rule_sde(_problem(), "fedadam", ETA, TAU, S, H)


def test_kinds_are_declared():
    kinds = {n: get_aggregator(n).sde_kind for n in ("fedavg", "fedprox", "fednova", "fedavgm", "fedadam",
                                                     "scaffold", "fedaware")}
    assert kinds == {"fedavg": "linear", "fedprox": "linear", "fednova": "linear", "fedavgm": "momentum",
                     "fedadam": "adaptive", "scaffold": None, "fedaware": None}
    assert FedNova(server_momentum=0.5).sde_kind == "momentum"
    assert FedNova(momentum=0.5).sde_kind is None


def _write(tmp_path, pb):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"U": pb.U.tolist(), "a": pb.a.tolist(), "Sigma": pb.Sigma.tolist(),
                                "p": pb.p.tolist()}))
    return str(path)


def test_derive_aggregator_json_matches_independent(tmp_path, capsys):
    from fedsde.cli import main

    pb = _problem(9)
    path = _write(tmp_path, pb)
    rc = main(["derive", "--problem", path, "--aggregator", "fednova", "--eta", str(ETA), "--client-steps",
               "2,5,9", "--server-lr", str(S), "--h", str(H), "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    omega = pb.p * np.sum(pb.p * TAU) / TAU
    A, c, D, P = _independent(pb, omega, ETA, TAU, 0.0, S, H)
    for got, want in ((out["drift"]["A"], A), (out["drift"]["c"], c), (out["diffusion_cov"], D),
                      (out["stationary"]["cov"], P), (out["stationary"]["mean"], c)):
        np.testing.assert_allclose(np.array(got), want, rtol=TOL, atol=TOL)
    rc = main(["derive", "--problem", path, "--aggregator", "fedavgm", "--aggregator-option", "beta=0.75", "--eta",
               str(ETA), "--client-steps", "2,5,9", "--server-lr", "0.2", "--h", str(H), "--json"])
    out = json.loads(capsys.readouterr().out)
    A, c, D, P = _independent(pb, pb.p, ETA, TAU, 0.0, 0.2 / 0.25, H)
    np.testing.assert_allclose(np.array(out["drift"]["A"]), A, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(np.array(out["diffusion_cov"]), D, rtol=TOL, atol=TOL)
    assert out["effective_server_lr"] == pytest.approx(0.8)


def test_derive_refuses_a_rule_without_sde_in_one_line(tmp_path, capsys):
    from fedsde.cli import main

    path = _write(tmp_path, _problem())
    rc = main(["derive", "--problem", path, "--aggregator", "scaffold", "--eta", "0.1", "--local-steps", "3"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "control variates" in err


# ------------------------------------------------------------------ weak order, exact (no Monte Carlo)
RULES = [("fedavg", {}), ("fedprox", {"mu": 0.5}), ("fednova", {}), ("feddisco", {"base": "fednova"}),
         ("fedavgm", {"beta": 0.5}), ("fedavgm", {"beta": 0.9}), ("fedavgm", {"beta": 0.9, "variant": "nesterov"}),
         ("fednova", {"server_momentum": 0.7})]


@pytest.mark.parametrize("name,opts", RULES)
def test_weak_order_one_of_each_linear_and_momentum_rule(name, opts):
    from fedsde.compare.rule_weak import rule_weak_error_vs_step

    pb = _problem(11, Q=3, d=2)
    hs = [0.004 / 2**j for j in range(4)]
    for phi in ("dist2", "loss"):
        c = rule_weak_error_vs_step(pb, get_aggregator(name, **opts), 0.05, np.array([2, 4, 7]), t_end=1.0,
                                    time_steps=hs, w0=np.full(2, 2.0), phi=phi)
        assert 0.9 <= c.slope <= 1.1, (name, opts, phi, c.slope, c.errors)


def test_underdamped_sde_keeps_order_one_where_the_first_order_sde_fails():
    from fedsde.compare.rule_weak import underdamped_weak_error_vs_step

    pb = _problem(12, Q=3, d=2)
    hs = [0.1 / 2**j for j in range(4)]
    c, first = underdamped_weak_error_vs_step(pb, 0.05, np.array([2, 4, 7]), t_end=2.0, time_steps=hs,
                                              friction=2.0, w0=np.full(2, 2.0))
    assert 0.9 <= c.slope <= 1.1
    assert first.min() > 20 * c.errors.min()  # 1 − β ∝ √s: the first-order SDE's error does not vanish


def test_compare_aggregator_reports_the_slopes(tmp_path, capsys):
    from fedsde.cli import main

    path = _write(tmp_path, _problem(13, Q=3, d=2))
    rc = main(["compare", "--problem", path, "--aggregator", "fednova", "--eta", "0.05", "--client-steps", "2,4,7",
               "--server-lr", "0.01", "--h", "0.01", "--rounds", "50", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["sde"] == "linear"
    assert all(0.9 <= v["slope"] <= 1.1 for v in out["weak_error"].values())
    assert out["stationary"]["w2"] < 1e-2


def test_validity_aggregator_linear_rule_tracks_and_stateful_rule_is_refused(tmp_path, capsys):
    from fedsde.cli import main

    path = _write(tmp_path, _problem(14, Q=3, d=2))
    rc = main(["validity", "--problem", path, "--aggregator", "fednova", "--eta", "0.05", "--client-steps", "2,5,9",
               "--server-lr", "0.05", "--rounds", "20", "--replicates", "400", "--seed", "0", "--w0", "1,1",
               "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["verdict"]["outcome"] == "tracks" and out["verdict"]["reference"] == "exact"
    rc = main(["validity", "--problem", path, "--aggregator", "scaffold", "--eta", "0.05", "--local-steps", "3",
               "--rounds", "5", "--replicates", "10", "--seed", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and "control variates" in err and len(err.strip().splitlines()) == 1


def test_sde_paths_of_a_rule_match_its_exact_law_within_5_se(tmp_path, capsys):
    from fedsde.cli import main

    pb = _problem(15, Q=3, d=2)
    path = _write(tmp_path, pb)
    rc = main(["sde", "--problem", path, "--aggregator", "fednova", "--eta", "0.05", "--client-steps", "2,5,9",
               "--server-lr", "0.5", "--rounds", "10", "--replicates", "4000", "--seed", "3", "--method", "exact",
               "--w0", "1,1", "--json"])
    out = json.loads(capsys.readouterr().out)
    law = rule_sde(pb, "fednova", 0.05, np.array([2, 5, 9]), 0.5).sde.moments(10 * 0.05, [1.0, 1.0])
    se = np.sqrt(np.diag(law.cov) / 4000)
    assert rc == 0 and np.all(np.abs(np.array(out["final"]["mean"]) - law.mean) < 5 * se)
    rc = main(["sde", "--problem", path, "--aggregator", "fedavgm", "--eta", "0.1", "--client-steps", "2,5,9",
               "--server-lr", "1.0", "--rounds", "2", "--replicates", "4", "--seed", "0", "--strict"])
    assert rc == 2 and "unstable" in capsys.readouterr().err


def test_derive_client_steps_without_aggregator_is_fedavgs_corrected_sde(tmp_path, capsys):
    from fedsde.cli import main
    from fedsde.sde.coefficients import quadratic_sde_coefficients

    pb = _problem(16)
    path = _write(tmp_path, pb)
    rc = main(["derive", "--problem", path, "--eta", "0.05", "--client-steps", "2,5,9", "--server-lr", "0.3",
               "--json"])
    out = json.loads(capsys.readouterr().out)
    ref = quadratic_sde_coefficients(pb, 0.05, np.array([2, 5, 9]), 0.3, None, "corrected")
    assert rc == 0
    np.testing.assert_allclose(out["drift"]["A"], ref.A, rtol=1e-12)
    np.testing.assert_allclose(out["diffusion_cov"], ref.diffusion_cov, rtol=1e-12)
    rc = main(["derive", "--problem", path, "--variant", "paper", "--aggregator", "fednova", "--eta", "0.05",
               "--local-steps", "3"])
    assert rc == 2 and "--variant=paper" in capsys.readouterr().err


def test_scaling_aggregator_runs_the_rules_chain_at_both_ends(tmp_path, capsys):
    from fedsde.cli import main

    path = _write(tmp_path, _problem(17, Q=3, d=2))
    base = ["scaling", "--problem", path, "--rule", "local-steps", "--kappa", "2", "--eta", "0.02", "--local-steps",
            "2", "--server-lr", "0.5", "--rounds", "20", "--json"]
    outs = {}
    for name in (None, "fednova", "fedavgm"):
        rc = main(base + ([] if name is None else ["--aggregator", name]))
        assert rc == 0
        outs[name] = json.loads(capsys.readouterr().out)
    # equal local steps: FedNova is FedAvg, at both ends
    for part in ("stationary", "transient"):
        assert outs["fednova"]["discrepancy"][part] == pytest.approx(outs[None]["discrepancy"][part], rel=1e-9)
    assert outs["fedavgm"]["aggregator"]["name"] == "fedavgm"
    assert outs["fedavgm"]["discrepancy"]["max_rel"] != pytest.approx(outs[None]["discrepancy"]["max_rel"])
    assert main([*base, "--aggregator", "fedaware"]) == 2
