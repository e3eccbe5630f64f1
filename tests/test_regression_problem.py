"""Least-squares clients: problem files (a user's CSV, Grunfeld, diabetes) and their one-line errors, the
objective and its minibatch noise, and the minibatch oracle the simulator draws from."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedsde.clients.least_squares_oracle import LeastSquaresMinibatchOracle, least_squares_oracle
from fedsde.clients.streams import ReplicateStreams
from fedsde.errors import FedsdeInputError
from fedsde.problems import evaluate_metrics, load_problem, metric_names
from fedsde.problems.io import problem_from_dict, save_problem
from fedsde.problems.regression.problem import RegressionProblem
from fedsde.sim import simulate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "problems"
CSV = "site,x1,x2,y\na,1.0,2.0,3.0\na,0.5,-1.0,1.0\nb,2.0,0.0,-1.0\nb,1.5,1.0,0.5\nb,-1.0,0.5,2.0\n"
BASE = {"kind": "regression", "data": "d.csv", "features": ["x1", "x2"], "target": "y", "client_column": "site",
        "batch_size": 2}


def _write(tmp_path, data: dict, csv_text: str | bytes = CSV, suffix: str = ".toml") -> Path:
    import tomli_w

    csv_path = tmp_path / "d.csv"
    if isinstance(csv_text, bytes):
        csv_path.write_bytes(csv_text)
    else:
        csv_path.write_text(csv_text, encoding="utf-8")
    path = tmp_path / f"p{suffix}"
    path.write_text(tomli_w.dumps(data) if suffix == ".toml" else json.dumps(data))
    return path


def _problem(sampling="without-replacement", l2=0.2, seed=0):
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=(n, 2)) for n in (5, 7, 4)]
    y = [rng.normal(size=n) + k for k, n in enumerate((5, 7, 4))]
    return RegressionProblem.from_clients(X, y, l2=l2, intercept=True, batch_size=3, sampling=sampling,
                                          p=[1.0, 2.0, 1.0])


# ---------------------------------------------------------------------------------------------- files
def test_example_files_load():
    mine = load_problem(EXAMPLES / "my_data.toml")
    assert isinstance(mine, RegressionProblem) and mine.model == "least-squares"
    assert (mine.Q, mine.d, mine.batch_size, mine.sampling) == (3, 3, 4, "without-replacement")
    assert mine.client_names == ("north", "south", "east") and mine.sizes.tolist() == [8, 10, 6]
    assert mine.feature_names == ("x1", "x2", "intercept") and not mine.info["standardise"]
    assert np.allclose(mine.X[:, -1], 1.0) and np.allclose(mine.p, mine.sizes / 24)
    grun = load_problem(EXAMPLES / "grunfeld.toml")
    assert (grun.Q, grun.d, grun.feature_names) == (11, 2, ("value", "capital"))
    assert grun.sizes.tolist() == [20] * 11 and "General Motors" in grun.client_names
    assert abs(grun.X.mean()) < 1e-12 and np.allclose(grun.X.std(0), 1.0) and np.isclose(grun.y.std(), 1.0)
    dia = load_problem(EXAMPLES / "diabetes.toml")
    assert (dia.Q, dia.d, dia.sampling, dia.l2) == (10, 10, "with-replacement", 1e-3)
    assert dia.sizes.sum() == 442 and dia.sizes.min() >= 10 and dia.info["partition"] == "dirichlet"


def test_grunfeld_optimum_is_pooled_least_squares():
    """Equal firm sizes give p_k = 1/11: w* is the pooled OLS fit of invest on value and capital."""
    import statsmodels.api as sm

    grun = load_problem(EXAMPLES / "grunfeld.toml")
    df = sm.datasets.grunfeld.load_pandas().data
    X = df[["value", "capital"]].to_numpy(float)
    y = df["invest"].to_numpy(float)
    Xs, ys = (X - X.mean(0)) / X.std(0), (y - y.mean()) / y.std()
    assert np.allclose(grun.optimum, np.linalg.lstsq(Xs, ys, rcond=None)[0], rtol=1e-12, atol=1e-13)
    assert np.linalg.norm(grun.grad(grun.optimum)) < 1e-13


@pytest.mark.parametrize("partition", ["iid", "dirichlet", "quantity"])
def test_diabetes_partitions(partition):
    extra = {"dirichlet": {"alpha": 0.3, "bins": 4}, "quantity": {"quantity_beta": 2.0}, "iid": {}}[partition]
    data = {"kind": "regression", "dataset": "diabetes", "clients": 6, "partition": partition, "seed": 3,
            "batch_size": 4} | extra
    a, b = problem_from_dict(data), problem_from_dict(data)
    assert a.Q == 6 and a.sizes.sum() == 442 and np.array_equal(a.X, b.X) and a.info["partition"] == partition
    if partition == "iid":
        assert a.sizes.max() - a.sizes.min() <= 1
    other = problem_from_dict(data | {"seed": 4})
    assert not np.array_equal(a.X, other.X)


def test_keys_p_table_w0_and_standardise(tmp_path):
    pb = load_problem(_write(tmp_path, BASE | {"p": {"b": 3.0, "a": 1.0}, "w0": [0.5, -0.5, 1.0],
                                               "intercept": True, "standardize": True,
                                               "sampling": "with-replacement", "l2": 0.1}))
    assert np.allclose(pb.p, [0.25, 0.75]) and np.allclose(pb.initial_weights(), [0.5, -0.5, 1.0])
    assert np.isclose(pb.y.mean(), 0.0) and np.isclose(pb.y.std(), 1.0) and pb.info["standardise"]
    listed = load_problem(_write(tmp_path, BASE | {"p": [1, 3]}, suffix=".json"))
    assert np.allclose(listed.p, [0.25, 0.75]) and np.allclose(listed.y, [3.0, 1.0, -1.0, 0.5, 2.0])
    with pytest.raises(FedsdeInputError, match="not saved as arrays"):
        save_problem(pb, tmp_path / "out.toml")


@pytest.mark.parametrize(("change", "match"), [
    ({"colour": "red"}, r"unknown key\(s\) colour"),
    ({"seed": 1}, r"data \(a CSV file\) has no key\(s\) seed"),
    ({"model": "lasso"}, r"model='lasso': must be one of least-squares"),
    ({"dataset": "grunfeld"}, r"data, dataset: give one of them"),
    ({"data": None}, r"missing key 'data' \(a CSV file\) or 'dataset'"),
    ({"batch_size": None}, r"missing key 'batch_size'"),
    ({"batch_size": 3}, r"batch_size=3: exceeds the 2 rows of client 'a'.*without-replacement"),
    ({"sampling": "bootstrap"}, r"sampling='bootstrap': must be one of without-replacement, with-replacement"),
    ({"l2": -1.0}, r"l2=-1.0: must be finite and >= 0"),
    ({"intercept": "yes"}, r"intercept='yes': must be true or false"),
    ({"standardise": True, "standardize": True}, r"give one spelling only"),
    ({"features": []}, r"features=\[\]: must be a non-empty list of distinct column names"),
    ({"features": ["x1", "z"]}, r"data file .*d.csv': no column\(s\) 'z' \(columns: site, x1, x2, y\)"),
    ({"target": "x1"}, r"a column may play one role only"),
    ({"client_column": None}, r"missing key 'client_column'"),
    ({"data": "nope.csv"}, r"data='nope.csv': no such file"),
    ({"p": [1.0]}, r"p=\[1.0\]: must give 2 weights"),
    ({"p": {"a": 1.0, "c": 2.0}}, r"p: no client\(s\) 'c' in the data"),
    ({"p": [1.0, -2.0]}, r"p\[1\]=-2.0: weights must be finite numbers >= 0"),
    ({"w0": [1.0]}, r"w0=\[1.0\]: must be a list of 2 finite numbers"),
    ({"dataset": "iris", "data": None}, r"dataset='iris': must be one of grunfeld, diabetes"),
])
def test_invalid_files_give_one_line_errors(tmp_path, change, match):
    data = {k: v for k, v in (BASE | change).items() if v is not None}
    path = _write(tmp_path, data)
    with pytest.raises(FedsdeInputError, match=match) as info:
        load_problem(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


@pytest.mark.parametrize(("change", "match"), [
    ({"partition": "shards"}, r"partition='shards': must be one of iid, dirichlet, quantity"),
    ({"alpha": 0.5}, r"alpha=0.5: not used by partition='iid'"),
    ({"seed": None}, r"missing key 'seed'"),
    ({"clients": 500}, r"n_clients=500: cannot exceed the number of samples \(442\)"),
    ({"features": ["age"]}, r"dataset='diabetes' has no key\(s\) features"),
])
def test_invalid_diabetes_files(tmp_path, change, match):
    base = {"kind": "regression", "dataset": "diabetes", "seed": 0, "batch_size": 4}
    data = {k: v for k, v in (base | change).items() if v is not None}
    with pytest.raises(FedsdeInputError, match=match) as info:
        load_problem(_write(tmp_path, data))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("text", "match"), [
    ("site,x1,x2,y\na,1,2,3\na,1,oops,3\n", r"row 2 \(line 3\), column 'x2': 'oops' is not a number"),
    ("site,x1,x2,y\na,1,2,3\nb,1,2,nan\n", r"row 2 \(line 3\), column 'y': 'nan' is not a finite number"),
    ("site,x1,x2,y\na,1,2,3\n\nb,1,,3\n", r"row 2 \(line 4\), column 'x2': empty"),
    ("site,x1,x2,y\na,1,2,3\n,1,2,3\n", r"row 2 \(line 3\), column 'site': empty \(every row needs a client\)"),
    ("site,x1,x2,y\na,1,2\n", r"row 1 \(line 2\): has 3 fields, the header has 4"),
    ("site,x1,x1,y\na,1,2,3\n", r"column name\(s\) 'x1' appear more than once"),
    ("site,x1,x2,y\n", r"has a header but no rows"),
    ("", r"empty \(it needs a header row"),
    (b"site,x1,x2,y\na,1,2,3\nb,1\xe9,2,3\n", r"data file .*d.csv': not UTF-8 text \(byte 0xe9 at offset 24\)"),
])
def test_bad_csv_files_give_one_line_errors_naming_the_file_row_and_column(tmp_path, text, match):
    with pytest.raises(FedsdeInputError, match=match) as info:
        load_problem(_write(tmp_path, BASE | {"batch_size": 1}, text))
    assert "\n" not in str(info.value) and "d.csv" in str(info.value)


def test_batch_may_exceed_a_client_with_replacement(tmp_path):
    pb = load_problem(_write(tmp_path, BASE | {"batch_size": 3, "sampling": "with-replacement"}))
    assert np.allclose(pb.noise_factors(), 1 / 3)
    with pytest.raises(FedsdeInputError, match=r"batch_size=3: exceeds the 2 rows of client 'a'"):
        pb.replace(sampling="without-replacement")


# ---------------------------------------------------------------------------------------------- objective
def test_losses_gradients_and_optimum_match_the_rows():
    pb = _problem()
    Xs, ys = pb.client_data()
    rng = np.random.default_rng(1)
    W = rng.normal(size=(4, pb.d))
    direct = np.stack([[0.5 * np.mean((X @ w - y) ** 2) + 0.5 * pb.l2 * w @ w for X, y in zip(Xs, ys, strict=True)]
                       for w in W])
    assert np.allclose(pb.client_loss(W), direct, rtol=1e-12) and np.allclose(pb.loss(W), direct @ pb.p, rtol=1e-12)
    for k in range(pb.Q):
        assert np.allclose(pb.per_sample_grads(W[0], k).mean(0), pb.client_grad(W[0])[k], rtol=1e-12)
    assert np.allclose(pb.grad(W), pb.client_grad(W).transpose(0, 2, 1) @ pb.p, rtol=1e-10, atol=1e-12)
    assert np.linalg.norm(pb.grad(pb.optimum)) < 1e-13
    assert np.allclose(pb.client_hessian(), [X.T @ X / len(X) + pb.l2 * np.eye(pb.d) for X in Xs], rtol=1e-12)
    assert np.allclose(pb.client_grad(pb.client_optima)[np.arange(3), np.arange(3)], 0.0, atol=1e-12)
    vals = evaluate_metrics(pb, W[None], names=metric_names(pb))
    assert set(vals) == {"train_loss", "grad_norm_sq", "distance_from_start"}
    assert np.allclose(vals["grad_norm_sq"][0], np.sum(pb.grad(W) ** 2, -1))


@pytest.mark.parametrize("sampling", ["without-replacement", "with-replacement"])
def test_minibatch_covariance_equals_enumeration_of_every_batch(sampling):
    pb = _problem(sampling)
    w = np.array([0.3, -0.7, 0.2])
    Sig = pb.minibatch_covariance(w)
    for k, (X, y) in enumerate(zip(*pb.client_data(), strict=True)):
        n, b = len(y), pb.batch_size
        batches = (list(itertools.product(range(n), repeat=b)) if sampling == "with-replacement"
                   else list(itertools.combinations(range(n), b)))
        G = np.array([np.mean(X[list(S)] * (X[list(S)] @ w - y[list(S)])[:, None], 0) + pb.l2 * w for S in batches])
        assert np.allclose(G.mean(0), pb.client_grad(w)[k], rtol=1e-12)
        assert np.allclose(np.cov(G.T, bias=True), Sig[k], rtol=1e-10, atol=1e-14)


# ---------------------------------------------------------------------------------------------- oracle
@pytest.mark.parametrize("sampling", ["without-replacement", "with-replacement"])
def test_oracle_draws_have_the_minibatch_mean_and_covariance(sampling):
    pb = _problem(sampling)
    nb, B = 80, 128
    oracle = LeastSquaresMinibatchOracle(pb, nb, "cpu", torch.float64)
    oracle.begin_round()
    w = torch.tensor([0.3, -0.7, 0.2], dtype=torch.float64)
    x = w.expand(nb, pb.Q, B, pb.d).clone()
    g = oracle.sample(x, ReplicateStreams(3, 0, nb, "cpu")).numpy()  # (nb, Q, B, d)
    Sig = pb.minibatch_covariance(w.numpy())
    for k in range(pb.Q):
        draws = g[:, k].reshape(-1, pb.d)
        R = draws.shape[0]
        z_m = np.abs(draws.mean(0) - pb.client_grad(w.numpy())[k]) / np.sqrt(np.diag(Sig[k]) / R)
        assert z_m.max() < 5
        dev = draws - draws.mean(0)
        prod = dev[:, :, None] * dev[:, None, :]
        z_c = np.abs(prod.mean(0) - Sig[k]) / (prod.std(0, ddof=1) / np.sqrt(R))
        assert z_c.max() < 5, z_c
        assert np.all(5 * prod.std(0, ddof=1).diagonal() / np.sqrt(R) < 0.12 * np.diag(Sig[k]))


@pytest.mark.parametrize(("n", "b"), [(4, 3), (40, 33)])  # Floyd's algorithm; the b smallest of n keys
def test_oracle_without_replacement_never_repeats_a_row(n, b):
    """One-hot rows reveal the batch: counts of 0/1 per row mean no repeats; with replacement some repeat.  Every
    row is drawn with probability b/n."""
    X = [np.eye(n)]
    y = [np.zeros(n)]
    w = torch.ones(n, dtype=torch.float64)
    for sampling, repeats in [("without-replacement", False), ("with-replacement", True)]:
        pb = RegressionProblem.from_clients(X, y, batch_size=b, sampling=sampling)
        oracle = LeastSquaresMinibatchOracle(pb, 4, "cpu", torch.float64)
        g = oracle.sample(w.expand(4, 1, 128, n).clone(), ReplicateStreams(0, 0, 4, "cpu")).numpy()
        counts = np.rint(g * b).astype(int).reshape(-1, n)  # g_j = (times row j was drawn)/b
        assert np.all(counts.sum(-1) == b)
        assert bool((counts > 1).any()) is repeats
        if not repeats:
            freq = counts.mean(0)  # Bernoulli(b/n) per row
            se = np.sqrt(b / n * (1 - b / n) / counts.shape[0])
            assert np.all(np.abs(freq - b / n) < 5 * se)


def test_simulate_is_chunk_invariant_and_trains_participants_only():
    pb = _problem("with-replacement")
    kw = {"eta": 0.1, "local_steps": 3, "rounds": 4, "replicates": 300, "seed": 9,
          "participation": 2, "block_size": 128}
    a = simulate(pb, **kw)
    b = simulate(pb, **kw, chunk_size=128)
    assert np.array_equal(a.weights, b.weights) and np.all(np.isfinite(a.weights))
    c = simulate(pb, **(kw | {"oracle_factory": least_squares_oracle(sampling="without-replacement")}))
    assert not np.array_equal(a.weights, c.weights)
    assert a.config["oracle"]["oracle"] == "least-squares minibatch"
    with pytest.raises(FedsdeInputError, match=r"sampling='epoch': must be one of"):
        least_squares_oracle(sampling="epoch")
