"""``fedsde scaling`` on least-squares regression problems: both ends from the exact minibatch moments, checked
against the exact laws of the hand-scaled configuration, ``server-client`` at E = 1 exact, the temperature where a
rule keeps it only approximately, the command as a user runs it on the example files."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fedsde.cli import main
from fedsde.errors import FedsdeInputError
from fedsde.exact import least_squares_stationary_law, least_squares_transient_moments
from fedsde.problems import RegressionProblem, load_problem
from fedsde.scaling import FedAvgConfig, compare_least_squares, copy_clients, split_rows

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "problems"
MY_DATA = str(EXAMPLES / "my_data.toml")  # 3 sites of 8, 10 and 6 rows, d = 3 (intercept), b = 4 without replacement
GRUNFELD = str(EXAMPLES / "grunfeld.toml")  # 11 firms of 20 rows, d = 2, b = 5 without replacement
RULES = ("local-steps", "server-client", "clients", "batch", "client-lr")


@pytest.fixture(scope="module")
def my_data() -> RegressionProblem:
    return load_problem(MY_DATA)


def _rows(problem: RegressionProblem):
    """Per-client features (without the intercept column) and targets, read back from the problem."""
    Xs, ys = problem.client_data()
    return [x[:, :-1] for x in Xs], ys


def _hand_problem(problem: RegressionProblem, *, copies: int = 1, batch_size: int | None = None):
    """The scaled problem built by hand from the rows: each client's rows ``copies`` times, weights p_k/copies."""
    Xs, ys = _rows(problem)
    return RegressionProblem.from_clients(
        [x for x in Xs for _ in range(copies)], [y for y in ys for _ in range(copies)], intercept=True,
        p=np.repeat(problem.p, copies) / copies, batch_size=batch_size or problem.batch_size,
        sampling=problem.sampling, l2=problem.l2)


def _hand_laws(problem, eta, E, s, n, w0):
    st = least_squares_stationary_law(problem, eta, E, s)
    tr = least_squares_transient_moments(problem, eta, E, n, s, w0=w0, record=[n])
    return st.mean, st.cov, tr.final_mean, tr.final_cov


def _hand_discrepancy(H, w_star, mb, Pb, ms, Ps) -> dict:
    def loss(m, P):
        u = m - w_star
        return 0.5 * u @ H @ u + 0.5 * np.trace(H @ P)

    return {"excess_loss_rel": abs(loss(ms, Ps) - loss(mb, Pb)) / loss(mb, Pb),
            "cov_rel": np.linalg.norm(Ps - Pb) / np.linalg.norm(Pb),
            "mean_shift_sd": np.linalg.norm(ms - mb) / np.sqrt(np.trace(Pb))}


def _hand_temperature(problem, eta, s, w) -> np.ndarray:
    """``s·η·Σ_k p_k² κ_k Cov_i(g_i)`` from the per-row gradients, κ_k the finite-population factor."""
    Xs, ys = problem.client_data()
    T = np.zeros((problem.d, problem.d))
    b = problem.batch_size
    for k, (X, y) in enumerate(zip(Xs, ys, strict=True)):
        n = y.size
        g = X * (X @ w - y)[:, None] + problem.l2 * w
        C = np.cov(g.T, bias=True)
        fac = 1.0 / b if problem.sampling == "with-replacement" else (n - b) / (b * (n - 1)) if n > b else 0.0
        T += problem.p[k] ** 2 * fac * C
    return s * eta * T


# (rule, κ, base (η, E, s, n), hand-scaled (η, E, s, n), copies, batch size of the scaled end)
CASES = [
    ("local-steps", 2, (0.05, 2, 1.0, 12), (0.05, 4, 1.0, 6), 1, None),
    ("server-client", 2, (0.05, 2, 1.0, 12), (0.025, 2, 2.0, 12), 1, None),
    ("clients", 2, (0.05, 2, 1.0, 12), (0.05, 2, 2.0, 6), 2, None),
    ("batch-linear", 1.5, (0.05, 2, 1.0, 12), (0.05, 2, 1.5, 8), 1, 6),
    ("client-lr", 2, (0.05, 2, 1.0, 12), (0.1, 2, 1.0, 6), 2, None),
]


@pytest.mark.parametrize(("rule", "kappa", "base", "hand", "copies", "b"), CASES, ids=[c[0] for c in CASES])
def test_each_rule_against_the_hand_scaled_configuration(my_data, rule, kappa, base, hand, copies, b):
    w0 = np.array([0.5, -0.5, 0.25])
    eta, E, s, n = base
    res = compare_least_squares(my_data, FedAvgConfig(eta=eta, local_steps=E, server_lr=s, rounds=n), rule, kappa,
                                w0=w0)
    cfg = res.scaled.config
    assert (cfg.eta, cfg.local_steps, cfg.server_lr, cfg.rounds) == pytest.approx(hand, rel=1e-15)
    other = _hand_problem(my_data, copies=copies, batch_size=b)
    assert res.scaled.problem.Q == other.Q and res.scaled.problem.batch_size == other.batch_size
    ref_b = _hand_laws(my_data, eta, E, s, n, w0)
    ref_s = _hand_laws(other, *hand, w0)
    got_b = (res.base.stationary_mean, res.base.stationary_cov, res.base.transient_mean, res.base.transient_cov)
    got_s = (res.scaled.stationary_mean, res.scaled.stationary_cov, res.scaled.transient_mean,
             res.scaled.transient_cov)
    for got, ref in zip(got_b + got_s, ref_b + ref_s, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-14)
    # the discrepancy from the hand formula, with H and w* solved from the rows
    Xs, ys = my_data.client_data()
    H = sum(p * X.T @ X / len(y) for p, X, y in zip(my_data.p, Xs, ys, strict=True))
    w_star = np.linalg.solve(H, sum(p * X.T @ y / len(y) for p, X, y in zip(my_data.p, Xs, ys, strict=True)))
    for part, (i, j) in (("stationary", (0, 1)), ("transient", (2, 3))):
        want = _hand_discrepancy(H, w_star, ref_b[i], ref_b[j], ref_s[i], ref_s[j])
        for key, value in want.items():
            assert getattr(res, part)[key] == pytest.approx(value, rel=1e-8, abs=1e-13), (part, key)
    assert res.max_rel > 1e-3  # none of these is exact: the comparison above is not vacuous
    # the temperature of each end at w*, from the rows' gradients
    np.testing.assert_allclose(res.base.temperature, _hand_temperature(my_data, eta, s, w_star), rtol=1e-12)
    np.testing.assert_allclose(res.scaled.temperature, _hand_temperature(other, hand[0], hand[2], w_star),
                               rtol=1e-12)


@pytest.mark.parametrize("kappa", [0.5, 2, 3])
def test_server_client_at_one_local_step_is_exact(kappa):
    problem = load_problem(GRUNFELD)
    res = compare_least_squares(problem, FedAvgConfig(eta=0.02, local_steps=1, server_lr=1.0, rounds=64),
                                "server-client", kappa)
    for part in (res.stationary, res.transient):
        assert part["excess_loss_rel"] < 1e-13 and part["cov_rel"] < 1e-13 and part["mean_shift_sd"] < 1e-12
        assert part["w2_rel"] < 1e-7  # the square root of a rounding-level W₂²
    # with two local steps the client step η/κ changes ηE: O(η), far from rounding
    two = compare_least_squares(problem, FedAvgConfig(eta=0.02, local_steps=2, server_lr=1.0, rounds=64),
                                "server-client", kappa)
    assert two.max_rel > 1e-2


def test_local_steps_on_identical_clients_keeps_the_mean_but_not_the_law(my_data):
    """At s = 1 on identical clients the mean path is exact; the iterate-dependent minibatch noise is not."""
    Xs, ys = _rows(my_data)
    same = RegressionProblem.from_clients([Xs[0]] * 3, [ys[0]] * 3, intercept=True, batch_size=4)
    gaps = []
    for eta in (0.05, 0.025):
        res = compare_least_squares(same, FedAvgConfig(eta=eta, local_steps=2, server_lr=1.0, rounds=16),
                                    "local-steps", 2)
        assert res.stationary["mean_shift_sd"] < 1e-10 and res.transient["mean_shift_sd"] < 1e-10
        gaps.append(res.stationary["cov_rel"])
    assert gaps[0] > 1e-4 and gaps[1] < gaps[0] / 2  # far above rounding, and it shrinks with η


def test_kappa_one_is_the_base_itself(my_data):
    cfg = FedAvgConfig(eta=0.05, local_steps=2, server_lr=1.0, rounds=12)
    for rule in RULES:
        res = compare_least_squares(my_data, cfg, rule, 1)
        assert res.max_rel == 0.0 and res.notes == []


def test_temperature_kept_by_copies_and_with_replacement_but_not_by_batch_without(my_data):
    grunfeld = load_problem(GRUNFELD)
    cfg = FedAvgConfig(eta=0.02, local_steps=4, server_lr=1.0, rounds=64)

    def rel(res):
        Tb, Ts = np.trace(res.base.temperature), np.trace(res.scaled.temperature)
        return (Ts - Tb) / Tb

    for rule in ("clients", "client-lr"):
        res = compare_least_squares(grunfeld, cfg, rule, 4)
        np.testing.assert_allclose(res.scaled.temperature, res.base.temperature, rtol=1e-13)
        assert len(res.notes) == 1 and "copies" in res.notes[0]
    # every firm has 20 rows: b = 5 → 10 multiplies each client's temperature by (20 − 10)/(20 − 5) = 2/3 under the
    # linear rule
    res = compare_least_squares(grunfeld, cfg, "batch-linear", 2)
    assert rel(res) == pytest.approx(-1.0 / 3.0, rel=1e-12)
    assert len(res.notes) == 1 and "-33.3% for every client" in res.notes[0]
    # κb = n_k: full-batch steps, no noise at all
    res = compare_least_squares(grunfeld, cfg, "batch-linear", 4)
    assert rel(res) == -1.0 and "11 of 11 clients then take full-batch steps" in res.notes[0]
    # the corrected rule: g = f(5)/f(10) = (15/95)/(10/190) = 3 on the server step, rounds 96 → 32, T kept exactly
    res = compare_least_squares(grunfeld, replace(cfg, rounds=96), "batch", 2)
    assert res.scaled.config.server_lr == pytest.approx(3.0, rel=1e-15) and res.scaled.config.rounds == 32
    assert abs(rel(res)) < 1e-13 and res.batch.exact and res.batch.factor == pytest.approx(3.0, rel=1e-15)
    assert len(res.notes) == 1 and "× g = 3 (not κ = 2" in res.notes[0]
    # rounds 64/3 is not whole: 21 rounds with s × 3 keep the temperature, and the horizon moves by 63/64 − 1
    res = compare_least_squares(grunfeld, cfg, "batch", 2)
    assert res.scaled.config.rounds == 21 and abs(rel(res)) < 1e-13
    assert res.scaled.config.horizon / res.base.config.horizon == pytest.approx(63 / 64, rel=1e-14)
    assert "the horizon τ moves by -1.562%" in res.notes[0]
    with pytest.raises(FedsdeInputError, match="no minibatch noise is left at the scaled end"):
        compare_least_squares(grunfeld, cfg, "batch", 4)
    # with replacement the minibatch covariance is ∝ 1/b and both rules keep the temperature exactly (g = κ)
    wr = my_data.replace(sampling="with-replacement")
    for rule in ("batch", "batch-linear"):
        res = compare_least_squares(wr, FedAvgConfig(eta=0.05, local_steps=2, server_lr=1.0, rounds=12), rule, 2)
        assert abs(rel(res)) < 1e-13 and res.scaled.config.server_lr == 2.0
        assert res.notes == ([] if rule == "batch-linear" else [res.batch.sentence(12)])
        assert "with replacement" in (res.notes or ["with replacement"])[0]


def test_split_rows_keeps_the_objective_and_reports_the_temperature(my_data):
    small = my_data.replace(batch_size=2)  # every part of a split in two has >= 3 rows
    parts = split_rows(small, 2, seed=3)
    assert parts.Q == 6 and sorted(parts.sizes.tolist()) == [3, 3, 4, 4, 5, 5]
    np.testing.assert_allclose(parts.p, np.repeat(my_data.p, 2) * parts.sizes / np.repeat(my_data.sizes, 2))
    np.testing.assert_allclose(parts.optimum, my_data.optimum, rtol=1e-12)
    np.testing.assert_allclose(parts.hessian(), my_data.hessian(), rtol=1e-12)
    again = split_rows(small, 2, seed=3)
    assert np.array_equal(again.X, parts.X) and not np.array_equal(split_rows(small, 2, seed=4).X, parts.X)
    copies = copy_clients(my_data, 3)
    assert copies.Q == 9 and np.array_equal(copies.client_data()[0][4], my_data.client_data()[0][1])
    np.testing.assert_allclose(copies.optimum, my_data.optimum, rtol=1e-12)
    # the split's temperature moves, by the hand computation's amount
    cfg = FedAvgConfig(eta=0.05, local_steps=2, server_lr=1.0, rounds=12)
    res = compare_least_squares(small, cfg, "clients", 2, new_clients="split", seed=3)
    w_star = my_data.optimum
    Tb = np.trace(_hand_temperature(small, 0.05, 1.0, w_star))
    Ts = np.trace(_hand_temperature(split_rows(small, 2, seed=3), 0.05, 2.0, w_star))
    assert np.trace(res.scaled.temperature) == pytest.approx(Ts, rel=1e-12) and abs(Ts / Tb - 1) > 0.05
    assert any(f"{(Ts - Tb) / Tb:+.2%}" in n for n in res.notes) and "split at random (seed 3)" in res.notes[0]
    with pytest.raises(FedsdeInputError, match=r"splits the 6 rows of client 'east' into 2 clients, fewer than"):
        compare_least_squares(my_data, cfg, "clients", 2, new_clients="split")


@pytest.mark.parametrize(
    ("rule", "kappa", "match"),
    [
        ("batch", 2, "maps batch_size=4 to 8, more than the 6 rows of client 'east'"),
        ("clients", 1.5, "must be a whole number >= 1"),
        ("client-lr", 0.5, "must be a whole number >= 1"),
        ("local-steps", 5, "rounds=12 to 12/5"),
        ("server-client", 0.02, ">= 2: local SGD diverges"),
    ],
)
def test_rules_that_cannot_apply_are_one_line_errors(capsys, rule, kappa, match):
    argv = ["scaling", "--problem", MY_DATA, "--eta", "0.05", "--local-steps", "2", "--rounds", "12", "--rule", rule,
            "--kappa", str(kappa), "--json"]
    assert main(argv) == 2
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert cap.out == "" and len(lines) == 1 and match in lines[0], cap.err


def test_memory_is_checked_before_any_law(capsys, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("computed a law before the memory check")

    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "1K")
    monkeypatch.setattr("fedsde.exact.least_squares_stationary_law", refuse)
    monkeypatch.setattr("fedsde.exact.least_squares_transient_moments", refuse)
    assert main(["scaling", "--problem", MY_DATA, "--eta", "0.05", "--local-steps", "2", "--rounds", "12", "--rule",
                 "clients", "--kappa", "1,2,4"]) == 2
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and "exact least-squares laws (24 rows × d=3): needs about" in line
    assert "rows times the features" in line


def test_help_lists_the_regression_route(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["scaling", "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "least-squares regression" in text and "--new-clients {copy,split}" in text


def test_json_has_the_keys_of_the_quadratic_route(capsys):
    argv = ["--eta", "0.02", "--local-steps", "4", "--rounds", "64", "--rule", "clients", "--kappa", "2", "--json"]
    assert main(["scaling", "--problem", str(EXAMPLES / "paper_table.toml"), *argv]) == 0
    quad = json.loads(capsys.readouterr().out)
    assert main(["scaling", "--problem", GRUNFELD, *argv]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert set(obj) >= set(quad) | {"notes", "new_clients", "model"}
    for end in ("base", "scaled"):
        assert set(obj[end]) >= set(quad[end]) | {"second_moment_radius"}
    assert set(obj["discrepancy"]["stationary"]) == set(quad["discrepancy"]["stationary"])
    assert obj["scaled"]["clients"] == 22 and obj["scaled"]["server_lr"] == 2.0 and obj["new_clients"] == "copy"
    ref = compare_least_squares(load_problem(GRUNFELD), FedAvgConfig(eta=0.02, local_steps=4, server_lr=1.0,
                                                                     rounds=64), "clients", 2)
    assert obj["discrepancy"]["max_rel"] == pytest.approx(ref.max_rel, rel=1e-12)
    assert obj["invariants"]["temperature_rel_change"] < 1e-13 and obj["invariants"]["horizon_rel_change"] < 1e-14


def test_kappa_list_and_human_output(capsys):
    argv = ["scaling", "--problem", GRUNFELD, "--eta", "0.02", "--local-steps", "4", "--rounds", "64", "--rule",
            "batch-linear", "--kappa", "1,2,4"]
    assert main([*argv, "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    curve = obj["discrepancy_vs_kappa"]
    assert curve["kappa"] == [1.0, 2.0, 4.0] and curve["max_rel"][0] == 0.0 and curve["max_rel"][1] > 0.1
    assert [c["scaled"]["batch_size"] for c in obj["cells"]] == [5, 10, 20]
    assert obj["notes"][0].startswith("kappa=2: the temperature") and obj["cells"][0]["notes"] == []
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "least squares, exact moments" in out and "note: kappa=4: the temperature" in out


def test_diverging_scaled_chain_is_a_warning(capsys):
    argv = ["scaling", "--problem", GRUNFELD, "--eta", "0.02", "--local-steps", "4", "--rounds", "64", "--rule",
            "clients", "--kappa", "32", "--json"]
    assert main(argv) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["scaled"]["stationary_mean"] is None and obj["discrepancy"]["stationary"]["cov_rel"] is None
    assert any("kappa=32: the chain has no stationary law" in w for w in obj["warnings"])
    assert np.all(np.isfinite(obj["scaled"]["transient_cov"]))  # the horizon law is still there


def test_new_clients_is_only_for_regression(capsys):
    assert main(["scaling", "--problem", str(EXAMPLES / "paper_table.toml"), "--eta", "0.02", "--local-steps", "4",
                 "--rounds", "64", "--rule", "clients", "--kappa", "2", "--new-clients", "split"]) == 2
    assert "--new-clients=split: only for regression problems" in capsys.readouterr().err


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("name", ["grunfeld", "diabetes", "my_data"])
def test_example_regression_files_run_every_rule(capsys, name, rule):
    argv = ["scaling", "--problem", str(EXAMPLES / f"{name}.toml"), "--eta", "0.02", "--local-steps", "4", "--rounds",
            "64", "--rule", rule, "--kappa", "2", "--json"]
    refused = name == "my_data" and rule == "batch"  # b = 4 → 8 exceeds the 6 rows of 'east'
    assert main(argv) == (2 if refused else 0)
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err
    if refused:
        assert len(cap.err.strip().splitlines()) == 1
    else:
        obj = json.loads(cap.out)
        assert np.isfinite(obj["discrepancy"]["max_rel"]) and obj["discrepancy"]["max_rel"] > 0
