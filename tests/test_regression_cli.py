"""Least-squares regression files through the command line: ``fedsde exact`` against an independent computation,
every command on a regression file, and the validity test's exact reference.

The independent computation enumerates every minibatch of a local step (b-subsets without replacement, ordered
b-tuples with replacement) and lifts the chain to ``ŵ = (w, 1)``: a local step is ``ŵ' = g_S ŵ`` with ``g_S`` affine
in the batch, a round is ``ŵ' = G ŵ`` with ``G = I + s Σ_k ω_k (g_{S_E}…g_{S_1} − I)``, and, the batches being
independent across steps and clients, ``E ŵ'`` and ``E vec(ŵ'ŵ'ᵀ)`` follow from ``E g`` and ``E[g ⊗ g]`` by the
mixed-product rule (client sampling: an average over the equally likely client subsets).  Nothing of the library's
covariance algebra is used.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from fedsde.cli import main

ROOT = Path(__file__).resolve().parents[1]
GRUNFELD = str(ROOT / "examples" / "problems" / "grunfeld.toml")
CSV = ("site,x1,y\nn,0.3,1.2\nn,-1.1,-0.4\nn,1.8,2.9\ne,0.2,0.1\ne,1.0,1.4\ne,-0.6,-1.3\ne,2.2,2.0\n"
       "s,0.9,1.1\ns,-0.3,0.7\ns,1.4,2.2\n")
ROWS = {"n": [(0.3, 1.2), (-1.1, -0.4), (1.8, 2.9)], "e": [(0.2, 0.1), (1.0, 1.4), (-0.6, -1.3), (2.2, 2.0)],
        "s": [(0.9, 1.1), (-0.3, 0.7), (1.4, 2.2)]}


def _files(tmp_path, sampling: str, *, p=None, l2: float = 0.15) -> Path:
    (tmp_path / "rows.csv").write_text(CSV)
    keys = ['kind = "regression"', 'data = "rows.csv"', 'features = ["x1"]', 'target = "y"',
            'client_column = "site"', "intercept = true", "batch_size = 2", f'sampling = "{sampling}"', f"l2 = {l2}"]
    if p is not None:
        keys.append(f"p = {p}")
    path = tmp_path / f"rows_{sampling}.toml"
    path.write_text("\n".join(keys) + "\n")
    return path


# ------------------------------------------------------------------------------------ independent computation
def _step_matrices(rows, b: int, sampling: str, eta: float, l2: float) -> list[np.ndarray]:
    """Every equally likely lifted local step ``g_S`` (3×3: w = (slope, intercept), then the constant 1)."""
    X = np.array([[x, 1.0] for x, _ in rows])
    y = np.array([v for _, v in rows])
    batches = (itertools.combinations(range(len(rows)), b) if sampling == "without-replacement"
               else itertools.product(range(len(rows)), repeat=b))
    out = []
    for S in batches:
        S = list(S)
        A = X[S].T @ X[S] / b + l2 * np.eye(2)  # gradient: mean over the batch rows, plus l2·w
        c = X[S].T @ y[S] / b
        g = np.eye(3)
        g[:2, :2] -= eta * A
        g[:2, 2] = eta * c
        out.append(g)
    return out


def _client_moments(rows, b, sampling, eta, l2, E) -> tuple[np.ndarray, np.ndarray]:
    """``E Ĝ`` and ``E[Ĝ ⊗ Ĝ]`` of ``E`` independent local steps."""
    gs = _step_matrices(rows, b, sampling, eta, l2)
    g1 = np.mean(gs, axis=0)
    g2 = np.mean([np.kron(g, g) for g in gs], axis=0)
    return np.linalg.matrix_power(g1, E), np.linalg.matrix_power(g2, E)


def _round_operators(subsets, s: float, client: dict) -> tuple[np.ndarray, np.ndarray]:
    """``E G`` and ``E[G ⊗ G]`` of one round, averaged over the equally likely participating ``subsets`` (each
    a dict client → weight of its displacement)."""
    I3, I9 = np.eye(3), np.eye(9)
    M1, M2 = np.zeros((3, 3)), np.zeros((9, 9))
    for sub in subsets:
        D1 = {k: s * wk * (client[k][0] - I3) for k, wk in sub.items()}  # E D_k
        M1 += I3 + sum(D1.values())
        T = I9.copy()
        for k, wk in sub.items():
            c = s * wk
            # E[D_k ⊗ D_k] with D_k = c (Ĝ_k − I), and the cross terms with I
            T += np.kron(D1[k], I3) + np.kron(I3, D1[k])
            T += c * c * (client[k][1] - np.kron(client[k][0], I3) - np.kron(I3, client[k][0]) + I9)
        for k, j in itertools.permutations(sub, 2):
            T += np.kron(D1[k], D1[j])  # independent clients
        M2 += T
    return M1 / len(subsets), M2 / len(subsets)


def _independent(sampling, *, eta, E, s, rounds, p=None, l2=0.15, w0=(0.0, 0.0), participation=None) -> dict:
    sizes = {k: len(v) for k, v in ROWS.items()}
    weights = np.array([sizes[k] for k in ROWS], float) if p is None else np.array(p, float)
    omega = dict(zip(ROWS, weights / weights.sum(), strict=True))
    client = {k: _client_moments(ROWS[k], 2, sampling, eta, l2, E) for k in ROWS}
    Q = len(ROWS)
    if participation is None:
        subsets = [omega]
    else:  # a uniform m-subset, weights ω_k Q/m (unbiased)
        subsets = [{k: omega[k] * Q / participation for k in sub}
                   for sub in itertools.combinations(ROWS, participation)]
    M1, M2 = _round_operators(subsets, s, client)
    m = np.array([*w0, 1.0])
    X = np.outer(m, m).reshape(-1)
    for _ in range(rounds):
        m, X = M1 @ m, M2 @ X
    Xm = X.reshape(3, 3)
    out = {"transient": (m[:2], Xm[:2, :2] - np.outer(m[:2], m[:2]))}
    # stationary: the fixed point with the constant entry fixed to 1
    free = np.arange(9) != 8
    xs = np.linalg.solve(np.eye(8) - M2[np.ix_(free, free)], M2[free, 8])
    ms = np.linalg.solve(np.eye(2) - M1[:2, :2], M1[:2, 2])
    Xs = np.append(xs, 1.0).reshape(3, 3)
    out["stationary"] = (ms, Xs[:2, :2] - np.outer(ms, ms))
    return out


def _run(capsys, argv) -> dict:
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _close(a, b, what):
    a, b = np.asarray(a, float), np.asarray(b, float)
    err = np.max(np.abs(a - b)) / np.max(np.abs(b))
    assert err < 1e-8, f"{what}: relative error {err:.3g}\n{a}\nvs\n{b}"


# ------------------------------------------------------------------------------------ fedsde exact
@pytest.mark.parametrize("sampling", ["without-replacement", "with-replacement"])
@pytest.mark.parametrize(("extra", "kw"), [
    ((), {}),
    (("--server-lr", "0.7", "--w0", "0.5,-1"), {"s": 0.7, "w0": (0.5, -1.0)}),
    (("--participation", "2"), {"participation": 2}),
])
def test_exact_json_matches_an_independent_computation(tmp_path, capsys, sampling, extra, kw):
    path = _files(tmp_path, sampling)
    out = _run(capsys, ["exact", "--problem", str(path), "--eta", "0.2", "--local-steps", "3", "--rounds", "4",
                        *extra, "--json"])
    ref = _independent(sampling, eta=0.2, E=3, s=kw.get("s", 1.0), rounds=4, w0=kw.get("w0", (0.0, 0.0)),
                       participation=kw.get("participation"))
    assert out["transient"]["rounds"] == 4
    _close(out["transient"]["mean"], ref["transient"][0], "transient mean")
    _close(out["transient"]["cov"], ref["transient"][1], "transient cov")
    _close(out["stationary"]["mean"], ref["stationary"][0], "stationary mean")
    _close(out["stationary"]["cov"], ref["stationary"][1], "stationary cov")
    # the optimum: ridge least squares with p_k ∝ rows (every row weighs the same)
    X = np.array([[x, 1.0] for rows in ROWS.values() for x, _ in rows])
    y = np.array([v for rows in ROWS.values() for _, v in rows])
    _close(out["optimum"], np.linalg.solve(X.T @ X / len(y) + 0.15 * np.eye(2), X.T @ y / len(y)), "optimum")
    sur = out["surrogate"]
    assert sur["stationary"] is not None and sur["cov_rel_error"] >= 0 and len(sur["transient"]["cov"]) == 2
    # the surrogate shares the mean recursion, so its stationary mean is the exact one
    _close(sur["stationary"]["mean"], ref["stationary"][0], "surrogate mean")


def test_exact_json_with_given_client_weights(tmp_path, capsys):
    path = _files(tmp_path, "with-replacement", p="[1.0, 3.0, 2.0]", l2=0.05)
    out = _run(capsys, ["exact", "--problem", str(path), "--eta", "0.15", "--local-steps", "2", "--rounds", "6",
                        "--json"])
    ref = _independent("with-replacement", eta=0.15, E=2, s=1.0, rounds=6, p=[1.0, 3.0, 2.0], l2=0.05)
    _close(out["weights"], np.array([1, 3, 2]) / 6, "weights")
    _close(out["transient"]["cov"], ref["transient"][1], "transient cov")
    _close(out["stationary"]["cov"], ref["stationary"][1], "stationary cov")


def test_exact_fednova_weights_and_errors(tmp_path, capsys):
    path = _files(tmp_path, "without-replacement")
    out = _run(capsys, ["exact", "--problem", str(path), "--eta", "0.1", "--client-steps", "1,2,3", "--aggregator",
                        "fednova", "--json"])
    p = np.array([3, 4, 3]) / 10
    _close(out["weights"], p * (p @ [1, 2, 3]) / np.array([1, 2, 3]), "FedNova weights")
    for argv, match in ((["--aggregator", "feddisco"], "label_distributions"),
                        (["--aggregator", "fedadam"], "server state"),
                        (["--server-lr", "40"], "spectral radius"),
                        (["--w0", "1,2,3"], "--w0")):
        rc = main(["exact", "--problem", str(path), "--eta", "0.1", "--local-steps", "2", *argv, "--json"])
        err = capsys.readouterr().err
        assert rc == 2 and match in err and err.count("\n") == 1, err


def test_exact_without_stationary_law_gives_the_transient_with_a_note(tmp_path, capsys):
    path = _files(tmp_path, "without-replacement")
    out = _run(capsys, ["exact", "--problem", str(path), "--eta", "0.1", "--local-steps", "2", "--server-lr", "40",
                        "--rounds", "3", "--json"])
    assert out["stationary"] is None and "spectral radius" in out["notes"][0]
    assert out["warnings"] and np.all(np.isfinite(out["transient"]["cov"]))


# ------------------------------------------------------------------------------------ every command
def test_every_command_accepts_a_regression_file(tmp_path, capsys):
    path = str(_files(tmp_path, "without-replacement"))
    base = ["--problem", path, "--eta", "0.1", "--local-steps", "2"]
    sim = _run(capsys, ["simulate", *base, "--rounds", "4", "--replicates", "8", "--seed", "0", "--json"])
    assert set(sim["metrics"]) == {"train_loss", "grad_norm_sq", "distance_from_start"}
    assert np.shape(sim["final"]["cov"]) == (2, 2)
    cmp = _run(capsys, ["compare", *base, "--rounds", "8", "--json"])
    assert cmp["kind"] == "regression" and 0.5 < cmp["slope"]["loss"]["slope"] < 1.5
    val = _run(capsys, ["validity", *base, "--rounds", "4", "--replicates", "16", "--seed", "0", "--json"])
    assert val["verdict"]["reference"] == "exact" and "distance_from_start" in val["verdict"]["skipped"]
    sde = _run(capsys, ["sde", *base, "--rounds", "3", "--paths", "4", "--seed", "0", "--variant", "general",
                        "--json"])
    assert np.all(np.isfinite(sde["final"]["mean"]))
    out = tmp_path / "agg"
    agg = _run(capsys, ["compare-aggregators", "--problem", path, "--rounds", "3", "--runs", "2", "--aggregators",
                        "fedavg,fednova", "--no-plot", "--out", str(out), "--json"])
    assert {r["aggregator"] for r in agg["summary"]} == {"fedavg", "fednova"}
    assert json.loads((out / "results.json").read_text())["metric"] == "train_loss"


@pytest.mark.parametrize("argv", [
    ["derive", "--eta", "0.1", "--local-steps", "2"],
    ["sde", "--eta", "0.1", "--local-steps", "2", "--rounds", "2", "--paths", "4", "--seed", "0"],
])
def test_closed_forms_for_constant_noise_are_refused(tmp_path, capsys, argv):
    path = str(_files(tmp_path, "without-replacement"))
    assert main([*argv, "--problem", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "least_squares" in err and "constant_noise_surrogate" in err


@pytest.mark.parametrize("argv", [
    ["exact", "--eta", "-1", "--local-steps", "2"],
    ["simulate", "--eta", "0.1", "--local-steps", "2", "--rounds", "2", "--replicates", "1", "--seed", "0"],
    ["compare", "--eta", "0.1", "--local-steps", "2", "--rounds", "4", "--paths", "8"],
    ["compare", "--eta", "0.1", "--local-steps", "2", "--rounds", "4", "--variant", "paper"],
    ["validity", "--eta", "0.1", "--local-steps", "2", "--rounds", "0", "--replicates", "4", "--seed", "0"],
    ["compare-aggregators", "--rounds", "2", "--runs", "2", "--aggregators", "feddisco"],
])
def test_bad_input_on_a_regression_file_is_one_line(tmp_path, capsys, argv):
    path = str(_files(tmp_path, "without-replacement"))
    assert main([*argv, "--problem", path, "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err


# ------------------------------------------------------------------------------------ validity, exact reference
@pytest.mark.parametrize(("eta", "E", "s", "outcome"), [(0.02, 1, 1.0, "tracks"), (0.1, 4, 3.0, "does not track")])
def test_validity_exact_reference_on_grunfeld(capsys, eta, E, s, outcome):
    """Grunfeld: small steps track (the SDE's loss path within 1.1 % of the chain's exact one); η = 0.1, E = 4,
    s = 3 overshoots (17 % of the loss's movement), far beyond the 5 % tolerance."""
    out = _run(capsys, ["validity", "--problem", GRUNFELD, "--eta", str(eta), "--local-steps", str(E), "--server-lr",
                        str(s), "--rounds", "10", "--replicates", "300", "--seed", "3", "--json"])
    v = out["verdict"]
    assert v["reference"] == "exact" and v["outcome"] == outcome, v["reason"]
    assert set(v["metrics"]) == {"train_loss", "grad_norm_sq"}


@pytest.mark.parametrize("cmd", [["exact"], ["compare", "--rounds", "3"],
                                 ["validity", "--rounds", "3", "--replicates", "4", "--seed", "0"]])
def test_a_singular_design_is_one_line(tmp_path, capsys, cmd):
    """x2 = 2·x1 and no ridge: the least-squares solution is not unique, which every exact command says."""
    (tmp_path / "d.csv").write_text("site,x1,x2,y\na,1,2,1\na,2,4,3\na,3,6,2\nb,1,2,0\nb,0,0,1\nb,2,4,2\n")
    path = tmp_path / "p.toml"
    path.write_text('kind = "regression"\ndata = "d.csv"\nfeatures = ["x1", "x2"]\ntarget = "y"\n'
                    'client_column = "site"\nbatch_size = 2\n')
    assert main([cmd[0], "--problem", str(path), "--eta", "0.05", "--local-steps", "2", *cmd[1:], "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not unique" in err and "l2 > 0" in err
