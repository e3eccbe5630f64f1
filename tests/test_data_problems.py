"""Data problems from files, metrics of server weights, the simulator's defaults for them, and replicate blocks
sized to the run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedsde.clients.streams import resolve_block_size
from fedsde.errors import FedsdeInputError
from fedsde.problems import (
    ClassificationProblem,
    QuadraticProblem,
    evaluate_metrics,
    is_data_problem,
    load_problem,
    metric_names,
    random_quadratic_problem,
)
from fedsde.problems.metrics import summarise
from fedsde.sim import BLOCK, GaussianQuadraticOracle, minibatch_oracle, simulate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "problems"
BASE = {"kind": "classification", "dataset": "digits", "clients": 5, "partition": "iid", "batch_size": 8, "seed": 0}


def _write(tmp_path, data: dict, suffix: str = ".toml") -> Path:
    import tomli_w

    path = tmp_path / f"p{suffix}"
    path.write_text(tomli_w.dumps(data) if suffix == ".toml" else json.dumps(data))
    return path


def test_example_files_load():
    soft = load_problem(EXAMPLES / "digits_softmax.toml")
    assert isinstance(soft, ClassificationProblem) and is_data_problem(soft)
    assert (soft.model, soft.Q, soft.d, soft.batch_size, soft.hidden) == ("softmax", 10, 650, 16, 0)
    assert soft.info["partition"] == "dirichlet" and soft.info["alpha"] == 0.5
    net = load_problem(EXAMPLES / "digits_mlp.toml")
    assert (net.model, net.hidden, net.d, net.init_seed) == ("mlp", 32, 65 * 32 + 33 * 10, 0)
    assert np.array_equal(net.initial_weights(), net.initial_weights(0))
    quad = load_problem(EXAMPLES / "paper_table.toml")
    assert isinstance(quad, QuadraticProblem) and not is_data_problem(quad)


def test_json_synthetic_and_kind_quadratic(tmp_path):
    pb = load_problem(_write(tmp_path, {"kind": "classification", "dataset": "synthetic", "alpha": 0.5, "beta": 0.5,
                                        "clients": 4, "dim": 5, "n_classes": 3, "max_samples": 60,
                                        "batch_size": 10, "seed": 2, "model": "mlp", "hidden": 3}, ".json"))
    assert (pb.Q, pb.n_classes, pb.model, pb.n_features) == (4, 3, "mlp", 6) and pb.sizes.max() <= 60
    assert pb.info["alpha"] == 0.5 and pb.init_seed == 2
    cancer = load_problem(_write(tmp_path, BASE | {"dataset": "breast_cancer", "weights": "uniform"}))
    assert cancer.model == "logistic" and np.allclose(cancer.p, 0.2)
    q = load_problem(_write(tmp_path, {"kind": "quadratic", "U": [1.0, 2.0], "a": [0.0, 1.0], "Sigma": [1.0, 1.0]}))
    assert isinstance(q, QuadraticProblem) and q.Q == 2


@pytest.mark.parametrize(("change", "match"), [
    ({"colour": "red"}, r"unknown key\(s\) colour"),
    ({"dataset": "mnist"}, r"dataset='mnist': must be one of digits, breast_cancer, synthetic"),
    ({"model": "logistic"}, r"model='logistic': needs two classes, dataset='digits' has 10"),
    ({"hidden": 8}, r"hidden=8: only used with model='mlp'"),
    ({"model": "mlp"}, r"missing key 'hidden'"),
    ({"model": "mlp", "hidden": 0}, r"hidden=0: must be an integer >= 1"),
    ({"batch_size": None}, r"missing key 'batch_size'"),
    ({"batch_size": 2.5}, r"batch_size=2.5: must be an integer >= 1"),
    ({"seed": True}, r"seed=True: must be an integer >= 0"),
    ({"alpha": 0.3}, r"alpha=0.3: not used by partition='iid'"),
    ({"partition": "dirichlet", "alpha": -1.0}, r"alpha=-1.0: must be finite and > 0"),
    ({"partition": "stripes"}, r"partition='stripes': must be one of"),
    ({"test_fraction": 1.0}, r"test_fraction=1.0: must lie in \[0, 1\)"),
    ({"l2": "big"}, r"l2='big': must be a number >= 0"),
    ({"beta": 1.0}, r"dataset='digits' has no key\(s\) beta"),
    ({"standardise": "yes"}, r"standardise='yes': must be true or false"),
    ({"init_seed": 3}, r"init_seed=3: only used with model='mlp'"),
    ({"sampling": "shuffle"}, r"sampling='shuffle': must be one of minibatch, epoch"),
    ({"kind": "ordinal"}, r"kind='ordinal': must be one of quadratic, classification, regression"),
    ({"clients": 5000}, r"n_clients=5000: cannot exceed the number of samples"),
])
def test_invalid_files_give_one_line_errors(tmp_path, change, match):
    data = {k: v for k, v in (BASE | change).items() if v is not None}
    path = _write(tmp_path, data)
    with pytest.raises(FedsdeInputError, match=match) as info:
        load_problem(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


@pytest.mark.parametrize("kind", ["softmax", "mlp", "quadratic"])
def test_metrics_match_per_weight_evaluation(kind):
    rng = np.random.default_rng(0)
    if kind == "quadratic":
        pb = random_quadratic_problem(3, 4, seed=0)
    else:
        pb = load_problem(EXAMPLES / "digits_softmax.toml")
        if kind == "mlp":
            pb = pb.replace(model="mlp", hidden=4)
    start = pb.initial_weights() if kind != "quadratic" else np.zeros(pb.d)
    w = start + 0.1 * rng.standard_normal((3, 70, pb.d))  # more than one evaluation chunk
    vals = evaluate_metrics(pb, w)
    assert tuple(vals) == metric_names(pb)
    assert ("test_accuracy" in vals) == (kind != "quadratic")
    for t, r in [(0, 0), (2, 69)]:
        v = w[t, r]
        np.testing.assert_allclose(vals["train_loss"][t, r], pb.loss(v), rtol=1e-12)
        np.testing.assert_allclose(vals["grad_norm_sq"][t, r], np.sum(pb.grad(v) ** 2), rtol=1e-10)
        np.testing.assert_allclose(vals["distance_from_start"][t, r], np.linalg.norm(v - start), rtol=1e-12)
        if kind != "quadratic":
            assert vals["test_accuracy"][t, r] == pb.accuracy(v)
    summ = summarise(vals)
    np.testing.assert_allclose(summ["train_loss"]["se"], vals["train_loss"].std(1, ddof=1) / np.sqrt(70))
    only = evaluate_metrics(pb, w[0], w0=np.ones(pb.d), names=["distance_from_start"])
    np.testing.assert_allclose(only["distance_from_start"], np.linalg.norm(w[0] - 1.0, axis=-1))
    with pytest.raises(FedsdeInputError, match="w: shape"):
        evaluate_metrics(pb, w[..., :-1])
    if kind == "quadratic":
        with pytest.raises(FedsdeInputError, match="not defined for this problem"):
            evaluate_metrics(pb, w, names=["test_accuracy"])


def test_simulate_uses_the_problem_batch_size():
    pb = load_problem(EXAMPLES / "digits_softmax.toml")
    kw = dict(eta=0.1, local_steps=2, rounds=2, replicates=6, seed=4)
    a = simulate(pb, **kw)
    b = simulate(pb, oracle_factory=minibatch_oracle(16), **kw)
    assert np.array_equal(a.weights, b.weights) and a.config["oracle"]["batch_size"] == 16
    with pytest.raises(FedsdeInputError, match="batch_size"):
        simulate(pb.replace(batch_size=None), **kw)


class _Recorder:
    """Oracle factory that records the shape of every tensor handed to the oracle."""

    def __init__(self):
        self.shapes = set()

    def __call__(self, problem, nblocks, device, dtype):
        inner = GaussianQuadraticOracle(problem, nblocks, device, dtype)
        shapes = self.shapes

        class Spy:
            def sample(self, x, streams):
                shapes.add(tuple(x.shape))
                return inner.sample(x, streams)

        return Spy()


def test_runs_compute_only_the_replicates_they_ask_for():
    pb = random_quadratic_problem(3, 2, seed=1)
    rec = _Recorder()
    simulate(pb, eta=0.1, local_steps=2, rounds=1, replicates=16, seed=0, oracle_factory=rec)
    assert rec.shapes == {(1, 3, 16, 2)}
    assert resolve_block_size(None, 16) == 16 and resolve_block_size(None, 1000) == BLOCK
    assert resolve_block_size(7, 1000) == 7
    with pytest.raises(FedsdeInputError, match="block_size=0"):
        resolve_block_size(0, 10)


@pytest.mark.parametrize("data", [False, True])
def test_bit_identical_chunk_invariant_and_prefix(data):
    pb = load_problem(EXAMPLES / "digits_softmax.toml") if data else random_quadratic_problem(3, 2, seed=1)
    R = 300 if not data else 140
    kw = dict(eta=0.05, local_steps=2, rounds=2, seed=11, participation=2 if not data else 4)
    whole = simulate(pb, replicates=R, **kw)
    assert np.array_equal(whole.weights, simulate(pb, replicates=R, **kw).weights)
    assert np.array_equal(whole.weights, simulate(pb, replicates=R, chunk_size=BLOCK, **kw).weights)
    assert np.array_equal(whole.weights[:, :BLOCK + 5], simulate(pb, replicates=BLOCK + 5, **kw).weights)
    small = simulate(pb, replicates=20, **kw)  # below one block: its own streams, same law
    assert np.array_equal(small.weights, simulate(pb, replicates=20, chunk_size=7, **kw).weights)
    assert small.config["block_size"] == 20 and whole.config["block_size"] == BLOCK
    assert np.array_equal(small.weights[:, :10], simulate(pb, replicates=20, block_size=20, **kw).weights[:, :10])


def test_float32_and_epoch_sampling_run():
    pb = load_problem(EXAMPLES / "digits_softmax.toml").replace(sampling="epoch")
    res = simulate(pb, eta=0.1, local_steps=3, rounds=2, replicates=4, seed=0, dtype=torch.float32)
    assert res.config["oracle"]["sampling"] == "epoch" and np.all(np.isfinite(res.weights))


def test_batches_handed_over_by_epoch_steps_override_a_whole_batch_oracle():
    from fedsde.clients.data_oracles import MinibatchOracle
    from fedsde.sim import ReplicateStreams

    pb = load_problem(EXAMPLES / "digits_softmax.toml")
    orc = MinibatchOracle(pb, 1, "cpu", torch.float64, batch_size=10**6)
    x = torch.zeros((1, pb.Q, 4, pb.d), dtype=torch.float64)
    orc.begin_round()
    full = orc.sample(x, ReplicateStreams(0, 0, 1, "cpu", block=4))
    np.testing.assert_allclose(full[0, :, 0].numpy(), pb.client_grad(np.zeros(pb.d)), atol=1e-13)
    orc.begin_round(torch.full((4, pb.Q), 2), 2)  # EpochSteps-style batches of 2
    small = orc.sample(x, ReplicateStreams(0, 0, 1, "cpu", block=4))
    assert not torch.allclose(small, full)
