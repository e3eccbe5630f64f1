"""Data problems at cross-device client counts: the vectorised synthetic(α, β) generator and partitioners equal
client-by-client references, problems built from concatenated arrays, the memory checked before allocating, and
metrics of many-client problems estimated on a subsample within their standard errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsde.errors import FedsdeInputError
from fedsde.problems import ClassificationProblem, load_problem, synthetic_problem
from fedsde.problems.classification import partition as P
from fedsde.problems.metrics import evaluate_metrics, evaluate_metrics_torch, summarise


def reference_synthetic(alpha, beta, *, seed, n_clients, dim=60, n_classes=10, iid=False, test_fraction=0.1,
                        max_samples=None):
    """FedProx's generator client by client (the loop the vectorised generator must reproduce draw for draw)."""
    rng = np.random.default_rng(seed)
    sizes = rng.lognormal(4.0, 2.0, n_clients).astype(np.int64) + 50
    if max_samples is not None:
        sizes = np.minimum(sizes, max_samples)
    cov_sd = np.power(np.arange(1, dim + 1, dtype=np.float64), -1.2) ** 0.5
    u = rng.normal(0.0, alpha, n_clients) if alpha > 0 else np.zeros(n_clients)
    B = rng.normal(0.0, beta, n_clients) if beta > 0 else np.zeros(n_clients)
    if iid:
        W_shared, b_shared = rng.normal(0.0, 1.0, (dim, n_classes)), rng.normal(0.0, 1.0, n_classes)
    out = {"X": [], "y": [], "X_test": [], "y_test": []}
    for k in range(n_clients):
        if iid:
            W, b, v = W_shared, b_shared, np.zeros(dim)
        else:
            W = rng.normal(u[k], 1.0, (dim, n_classes))
            b = rng.normal(u[k], 1.0, n_classes)
            v = rng.normal(B[k], 1.0, dim)
        X = v + rng.standard_normal((int(sizes[k]), dim)) * cov_sd
        y = np.argmax(X @ W + b, axis=1)
        n_test = min(round(test_fraction * X.shape[0]), X.shape[0] - 1)
        out["X"].append(X[n_test:])
        out["y"].append(y[n_test:])
        out["X_test"].append(X[:n_test])
        out["y_test"].append(y[:n_test])
    return {k: np.concatenate(v) for k, v in out.items()}


@pytest.mark.parametrize("kw", [
    dict(alpha=1.0, beta=1.0, seed=0, n_clients=40),  # heavy-tailed sizes: the masked path
    dict(alpha=0.5, beta=0.0, seed=3, n_clients=300, max_samples=50, dim=7, n_classes=4),  # equal sizes
    dict(alpha=0.0, beta=0.0, seed=1, n_clients=25, iid=True, max_samples=200),
    dict(alpha=0.3, beta=2.0, seed=5, n_clients=120, max_samples=60, iid=True, test_fraction=0.0),
], ids=["lognormal", "equal", "iid", "iid-equal"])
def test_vectorised_synthetic_equals_the_client_loop(kw, monkeypatch):
    import fedsde.problems.classification.synthetic as S

    monkeypatch.setattr(S, "BLOCK_DRAWS", 5000)  # many blocks, some of a single client
    a, b = kw.pop("alpha"), kw.pop("beta")
    got = synthetic_problem(a, b, **kw)
    ref = reference_synthetic(a, b, **kw)
    for name, value in ref.items():
        np.testing.assert_array_equal(getattr(got, name), value, err_msg=name)
    assert got.sizes.sum() == ref["y"].size and got.Q == kw["n_clients"]


def _reference_dirichlet(y, Q, alpha, seed, min_size, balance=True):
    rng = np.random.default_rng(seed)
    C = int(y.max()) + 1
    by_class = [np.flatnonzero(y == c) for c in range(C)]
    while True:
        batches = [[] for _ in range(Q)]
        sizes = np.zeros(Q)
        for idx_c in by_class:
            if idx_c.size == 0:
                continue
            idx_c = rng.permutation(idx_c)
            prop = rng.dirichlet(np.full(Q, alpha))
            if balance:
                prop = prop * (sizes < y.size / Q)
            prop = prop / prop.sum() if prop.sum() > 0 else np.full(Q, 1.0 / Q)
            for k, part in enumerate(np.split(idx_c, (np.cumsum(prop) * idx_c.size).astype(np.int64)[:-1])):
                batches[k].append(part)
                sizes[k] += part.size
        if sizes.min() >= min_size:
            return [rng.permutation(np.concatenate(b)) for b in batches]


@pytest.mark.parametrize(("Q", "alpha", "min_size"), [(20, 0.5, 10), (100, 0.3, 1), (7, 5.0, 0)])
def test_vectorised_partitions_equal_the_client_loops(Q, alpha, min_size):
    y = np.random.default_rng(0).integers(0, 10, 6000)
    got = P.dirichlet_partition(y, Q, alpha, seed=4, min_size=min_size)
    ref = _reference_dirichlet(y, Q, alpha, 4, min_size)
    assert len(got) == Q and all(np.array_equal(g, r) for g, r in zip(got, ref, strict=True))
    perm = np.random.default_rng(1).permutation(6000)
    iid = P.iid_partition(6000, Q, seed=1)
    assert all(np.array_equal(g, np.sort(r)) for g, r in zip(iid, np.array_split(perm, Q), strict=True))


def test_problems_from_concatenated_arrays(tmp_path):
    pb = synthetic_problem(1.0, 1.0, seed=2, n_clients=30, max_samples=80)
    same = ClassificationProblem.from_clients(*pb.client_data(), *pb.client_data("test"), model="softmax",
                                              n_classes=pb.n_classes)
    for f in ("X", "y", "sizes", "X_test", "y_test", "test_sizes", "p"):
        np.testing.assert_array_equal(getattr(same, f), getattr(pb, f))
    changed = pb.replace(l2=0.5, metric_samples=128)
    assert changed.X is pb.X and changed.l2 == 0.5 and changed.metric_samples == 128
    X = pb.X.copy()
    X[pb.sizes[0] + 3, 2] = np.nan
    with pytest.raises(FedsdeInputError, match=r"X \(client 1\): contains NaN or inf"):
        ClassificationProblem.from_arrays(X, pb.y, pb.sizes)
    with pytest.raises(FedsdeInputError, match="client 2 has no training samples"):
        ClassificationProblem.from_arrays(pb.X[:5], pb.y[:5], [3, 2, 0])
    with pytest.raises(FedsdeInputError, match="sizes: must be Q >= 1 integers summing to the 5 rows"):
        ClassificationProblem.from_arrays(pb.X[:5], pb.y[:5], [3, 3])
    with pytest.raises(FedsdeInputError, match="metric_samples=4: must be an integer >= 32"):
        pb.replace(metric_samples=4)
    held = pb.padded()[0]
    assert held.shape == (pb.Q, pb.sizes.max(), pb.n_features)
    equal = synthetic_problem(1.0, 1.0, seed=2, n_clients=30, max_samples=20)
    Xp, yp = equal.padded()  # equal sizes: no padding
    np.testing.assert_array_equal(Xp.reshape(-1, equal.n_features), equal.design(equal.X))
    np.testing.assert_array_equal(yp.ravel(), equal.y)


def _write(tmp_path, text: str):
    path = tmp_path / "p.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("body", "what"), [
    ('dataset = "digits"\nmodel = "mlp"\nhidden = 200000', r"model='mlp', hidden=200000 \(d=\d+ weights\)"),
    ('dataset = "synthetic"\ndim = 30000\nclients = 3', r"n_clients=3, dim=30000"),
    ('dataset = "synthetic"\nclients = 200000\nmax_samples = 20\ndim = 5', r"n_clients=200000, dim=5"),
], ids=["hidden", "dim", "clients"])
def test_problems_that_cannot_fit_are_refused_before_allocating(tmp_path, monkeypatch, body, what):
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "64M")
    path = _write(tmp_path, f'kind = "classification"\nbatch_size = 8\nseed = 0\n{body}\n')
    need = r": needs about [\d.]+ [MG]iB of memory but about 64 MiB"
    with pytest.raises(FedsdeInputError, match=what + need) as info:
        load_problem(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "64G")
    if "hidden" not in body:
        return
    assert load_problem(path).hidden == 200000  # fits with more memory (nothing was allocated for the check)


@pytest.fixture(scope="module")
def many():
    """Three thousand clients of twenty samples (54 000 training rows), softmax over ten classes."""
    return synthetic_problem(1.0, 1.0, seed=7, n_clients=3000, max_samples=20, dim=12)


def test_metrics_of_many_clients_on_a_subsample(many):
    start = many.initial_weights()
    w = start + 0.05 * np.random.default_rng(0).standard_normal((2, 3, many.d))
    exact = evaluate_metrics(many, w, start, metric_samples=10**6)
    assert not exact.sampled and exact.sampling["train"] == {"exact": True, "samples": 54000, "of": 54000}
    sub = evaluate_metrics(many, w, start, metric_samples=4096, metric_seed=1)
    assert sub.sampled and sub.sampling["train"]["samples"] == sub.sampling["test"]["samples"] == 4096
    for name in ("train_loss", "grad_norm_sq", "test_accuracy"):
        assert np.all(sub.se[name] > 0)
        assert np.all(np.abs(sub[name] - exact[name]) <= 5 * sub.se[name]), name
    np.testing.assert_array_equal(sub["distance_from_start"], exact["distance_from_start"])
    summ = summarise(sub, axis=-1)
    np.testing.assert_allclose(summ["train_loss"]["sample_se"], sub.se["train_loss"].mean(-1))
    tens = evaluate_metrics_torch(many, torch.from_numpy(w), start, metric_samples=4096, metric_seed=1)
    for name in sub:
        np.testing.assert_array_equal(tens[name].numpy(), sub[name])


def test_the_default_is_exact_below_metric_samples_and_a_subsample_above(many, monkeypatch):
    import fedsde.problems.metrics as M

    w = many.initial_weights()[None]
    assert not evaluate_metrics(many, w).sampled  # 54 000 rows <= METRIC_SAMPLES
    monkeypatch.setattr(M, "METRIC_SAMPLES", 2048)
    vals = evaluate_metrics(many, w)
    assert vals.sampled and vals.sampling["train"]["samples"] == 2048 and vals.sampling["seed"] == 0
    assert evaluate_metrics(many.replace(metric_samples=10**5), w).sampling["train"]["exact"]


def test_cross_device_generator_streams_blocks_and_keeps_the_law(monkeypatch):
    # from PARALLEL_CLIENTS clients on, each block of clients has its own child stream of the seed: the result does
    # not depend on the number of threads, and the features keep their law x_j ~ N(v_j, (j+1)^-1.2) around the
    # client means (here β = 0 and α = 0: v ~ N(0, 1) per client and feature)
    import fedsde.problems.classification.synthetic as S

    monkeypatch.setattr(S, "PARALLEL_CLIENTS", 100)
    monkeypatch.setattr(S, "BLOCK_DRAWS", 1 << 14)  # several blocks
    kw = dict(alpha=0.0, beta=0.0, seed=5, n_clients=400, dim=6, max_samples=60)
    a = synthetic_problem(**kw)
    monkeypatch.setattr(S.os, "sched_getaffinity", lambda _: {0})  # one thread
    b = synthetic_problem(**kw)
    for x, y in ((a.X, b.X), (a.y, b.y), (a.X_test, b.X_test), (a.sizes, b.sizes)):
        np.testing.assert_array_equal(x, y)
    X = np.concatenate([a.X, a.X_test])
    starts = np.cumsum(np.concatenate([[0], a.sizes[:-1]]))
    means = np.stack([a.X[s:s + n].mean(0) for s, n in zip(starts, a.sizes, strict=True)])  # ≈ v_k
    sd_v = means.std(0, ddof=1)
    # the client means spread like N(0, 1) (plus the within-client noise over ~54 rows): 5σ on a 400-sample sd
    within = np.power(np.arange(1, 7), -1.2) / 54
    np.testing.assert_array_less(np.abs(sd_v**2 - (1 + within)), 5 * np.sqrt(2.0 / 399) * (1 + within))
    assert X.shape[1] == 6 and np.isfinite(X).all()
