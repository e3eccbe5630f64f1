"""Each key of a classification or module problem file is checked once per command: the file reader builds the
problem's values once (a classification file's ``Classifier``, ``Minibatches`` and ``Partition``; a module file's
``ModuleTraining``, ``ModuleBatches`` and ``Evaluation``), and the constructors, the problem's ``replace``, the
gradient oracles and the metrics trust them; a direct public call with raw input is still checked (the counter of
tests/test_params.py)."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest

from fedsde.cli import main
from fedsde.clients.data_oracles import MinibatchOracle, minibatch_oracle, minibatches_oracle
from fedsde.errors import FedsdeInputError
from fedsde.problems import Minibatches, load_problem
from fedsde.problems.classification.datasets import federated_classification
from fedsde.problems.metrics import metric_sample
from fedsde.sim import simulate
from tests.test_module_cli import _files
from tests.test_params import CHECKED_ONCE, _count_validations

EXAMPLES = Path(__file__).parents[1] / "examples" / "problems"
#: what a classification file's keys (given or at their defaults) are checked as: the data set, the seed of the
#: partition, the model's and the minibatches' keys and the partition's (its ``n_clients`` is the key ``clients``)
CLASSIFICATION_KEYS = ("dataset", "seed", "model", "l2", "batch_size", "sampling", "test_fraction", "partition",
                       "n_clients", "alpha", "min_size", "shards_per_client", "quantity_beta", "n_biased", "n_uniform")
#: those of a module file (its model and data are the user's own)
MODULE_KEYS = ("loss", "l2", "init_seed", "batch_size", "sampling", "metric_samples", "batching")
#: the run's values, each checked once, and the seed of the metrics' subsample, checked once where it is read
RUN_ONCE = (*CHECKED_ONCE, "metric_seed")
ARGS = ["--local-steps", "2", "--rounds", "3", "--replicates", "8", "--seed", "1", "--json"]


def _counted(monkeypatch, capsys, path, argv) -> tuple[collections.Counter, collections.Counter]:
    """The validator calls, by the argument name they check, of loading the file alone and of the whole command."""
    argv = ["validity", "--problem", str(path), *argv]
    assert main(argv) == 0  # everything the command imports, imported (the counter wraps what is loaded)
    capsys.readouterr()
    counts = _count_validations(monkeypatch)
    load_problem(path)
    loading = collections.Counter(counts)
    counts.clear()
    assert main(argv) == 0
    capsys.readouterr()
    return loading, counts


def _checked_once(loading, command, keys) -> None:
    # the file's keys once each where it is read, then not again; the seed and α of the run are other values
    assert {k: loading[k] for k in keys} == dict.fromkeys(keys, 1), loading
    assert {k: command[k] - loading[k] for k in (*keys, *RUN_ONCE)} == {k: int(k in RUN_ONCE) for k in
                                                                         (*keys, *RUN_ONCE)}, command


def test_a_classification_file_is_checked_once_per_validity_command(monkeypatch, capsys):
    path = EXAMPLES / "digits_softmax.toml"
    loading, command = _counted(monkeypatch, capsys, path, ["--eta", "0.05", *ARGS])
    _checked_once(loading, command, CLASSIFICATION_KEYS)
    assert max(loading.values()) == 1, loading  # nothing else either (the weights N_k/N: not a key)


def test_an_mlp_file_with_uniform_weights_is_checked_once(monkeypatch, capsys, tmp_path):
    path = tmp_path / "cancer_mlp.toml"
    path.write_text('kind = "classification"\ndataset = "breast_cancer"\nmodel = "mlp"\nhidden = 3\ninit_seed = 2\n'
                    'clients = 4\npartition = "shards"\nshards_per_client = 2\nbatch_size = 8\nsampling = "epoch"\n'
                    'weights = "uniform"\ntest_fraction = 0.2\nl2 = 1e-3\nseed = 5\n')
    loading, command = _counted(monkeypatch, capsys, path, ["--eta", "0.05", *ARGS])
    # (the weights 1/Q, not a key, are normalised twice, by the build and by the copy the reader names: as a file's
    # weights always were, so that its numbers stay the same bit for bit)
    _checked_once(loading, command, (*CLASSIFICATION_KEYS, "weights", "hidden", "init_seed"))


def test_a_module_file_is_checked_once_per_validity_command(monkeypatch, capsys, tmp_path):
    path = _files(tmp_path, loss='"cross-entropy"', sampling='"without-replacement"', init_seed="1",
                  metric_samples="32", batching='"loop"')
    argv = ["--eta", "0.1", *ARGS, "--ells", "1,2"]
    loading, command = _counted(monkeypatch, capsys, path, argv)
    _checked_once(loading, command, MODULE_KEYS)
    assert max(loading.values()) == 1, loading


def test_replace_checks_what_changes_and_keeps_the_rest(monkeypatch):
    pb = load_problem(EXAMPLES / "digits_softmax.toml")
    counts = _count_validations(monkeypatch)
    q = pb.replace(batch_size=4)
    assert counts["batch_size"] == counts["sampling"] == 1, counts  # the Minibatches changed, checked whole
    assert counts["model"] == counts["l2"] == counts["p"] == 0, counts  # the classifier and the weights: kept
    assert (q.batch_size, q.model, q.l2, q.minibatches) == (4, pb.model, pb.l2, Minibatches(4))
    assert q.p is pb.p
    w = pb.replace(p=np.arange(1.0, 11.0))
    assert counts["p"] == 1 and np.isclose(w.p.sum(), 1.0)
    with pytest.raises(FedsdeInputError, match=r"l2=-1: must be finite and >= 0"):
        pb.replace(l2=-1)


def test_raw_input_of_the_public_calls_is_still_checked():
    pb = load_problem(EXAMPLES / "digits_softmax.toml")
    with pytest.raises(FedsdeInputError, match=r"batch_size=0: must be an integer >= 1"):
        minibatch_oracle(0)
    with pytest.raises(FedsdeInputError, match=r"sampling='shuffle': must be one of minibatch, epoch"):
        minibatch_oracle(sampling="shuffle")
    with pytest.raises(FedsdeInputError, match=r"batch_size=-2: must be an integer >= 1"):
        MinibatchOracle(pb, 1, "cpu", None, batch_size=-2)
    with pytest.raises(FedsdeInputError, match=r"batch_size= and minibatches= both given"):
        MinibatchOracle(pb, 1, "cpu", None, minibatches=Minibatches(4), batch_size=4)
    with pytest.raises(FedsdeInputError, match=r"dataset='mnist': must be one of digits, breast_cancer"):
        federated_classification("mnist", seed=0)
    with pytest.raises(FedsdeInputError, match=r"test_fraction=1.0: must lie in \[0, 1\)"):
        federated_classification(seed=0, test_fraction=1.0)
    metric_sample(pb, metric_seed=1)  # a plan found again for the same arguments, never for a refused one
    for bad in (True, -1, 1.5):
        with pytest.raises(FedsdeInputError, match=r"metric_seed=.*: must be an integer >= 0"):
            metric_sample(pb, metric_seed=bad)
    with pytest.raises(FedsdeInputError, match=r"metric_samples=8: must be an integer >= 32"):
        metric_sample(pb, metric_samples=8)


def test_the_oracle_of_a_value_and_of_its_keywords_give_the_same_numbers():
    pb = load_problem(EXAMPLES / "digits_softmax.toml")
    kw = dict(eta=0.1, local_steps=2, rounds=2, replicates=4, seed=3)
    old = simulate(pb, oracle_factory=minibatch_oracle(8, "epoch"), **kw)
    new = simulate(pb, oracle_factory=minibatches_oracle(Minibatches(8, "epoch")), **kw)
    assert np.array_equal(old.weights, new.weights) and old.config["oracle"] == new.config["oracle"]
    default = simulate(pb, **kw)  # the problem's own value (batch 16, fresh minibatches)
    assert np.array_equal(default.weights, simulate(pb, oracle_factory=minibatch_oracle(16), **kw).weights)


#: what a synthetic file's keys are checked as: the law of its clients (its ``clients`` is ``n_clients``), the model's
#: and the minibatches' keys
SYNTHETIC_KEYS = ("dataset", "seed", "alpha", "beta", "n_clients", "dim", "n_classes", "test_fraction", "max_samples",
                  "model", "l2", "batch_size", "sampling")
SYNTHETIC = ('kind = "classification"\ndataset = "synthetic"\nclients = 6\ndim = 5\nn_classes = 3\nmax_samples = 40\n'
             'batch_size = 4\nseed = 2\nalpha = 0.5\nbeta = 0.7\ntest_fraction = 0.2\nl2 = 1e-2\n')


def test_a_synthetic_file_is_checked_once_per_validity_command(monkeypatch, capsys, tmp_path):
    path = tmp_path / "synthetic.toml"
    path.write_text(SYNTHETIC + 'model = "mlp"\nhidden = 3\ninit_seed = 4\nsampling = "epoch"\nweights = "uniform"\n')
    loading, command = _counted(monkeypatch, capsys, path, ["--eta", "0.05", *ARGS])
    _checked_once(loading, command, (*SYNTHETIC_KEYS, "hidden", "init_seed", "weights"))
    assert max(loading.values()) == 1, loading  # nothing else either (the uniform weights: normalised once)


@pytest.mark.parametrize("dataset", ["digits", "synthetic"])
def test_a_population_file_is_checked_once_per_validity_command(monkeypatch, capsys, tmp_path, dataset):
    # the population's problem built once from the file's values, then materialised for the command, trusting them
    path = tmp_path / "population.toml"
    if dataset == "digits":
        path.write_text('kind = "classification"\ndataset = "digits"\nclients = 10\npartition = "dirichlet"\n'
                        'batch_size = 8\nsampling = "epoch"\nl2 = 1e-2\nseed = 3\npopulation = true\n')
        keys = (*CLASSIFICATION_KEYS, "n_classes")
    else:
        path.write_text(SYNTHETIC + "population = true\n")
        keys = SYNTHETIC_KEYS
    loading, command = _counted(monkeypatch, capsys, path, ["--eta", "0.05", *ARGS])
    _checked_once(loading, command, (*keys, "cache_bytes"))
    # (the weights N_k/N, not a key, are normalised once more, as a file's always were, and the materialised problem
    # takes them as they are unless that moved them by a rounding error)
    assert max(v for k, v in loading.items() if k != "p") == 1, loading


def test_a_population_replace_checks_what_changes_and_keeps_the_rest(monkeypatch, tmp_path):
    path = tmp_path / "population.toml"
    path.write_text(SYNTHETIC + "population = true\n")
    pb = load_problem(path, population=True)
    counts = _count_validations(monkeypatch)
    q = pb.replace(batch_size=8)
    assert counts["batch_size"] == counts["sampling"] == 1, counts
    assert counts["model"] == counts["l2"] == counts["p"] == counts["cache_bytes"] == 0, counts
    assert (q.batch_size, q.model, q.l2, q.cache_bytes, q.name) == (8, pb.model, pb.l2, pb.cache_bytes, pb.name)
    assert q.p is pb.p and q.rows_cache is pb.rows_cache
    r = q.replace(cache_bytes=1 << 20, model="mlp", hidden=2)
    assert counts["cache_bytes"] == counts["hidden"] == 1 and (r.cache_bytes, r.hidden) == (1 << 20, 2)
    assert r.replace(model="softmax").hidden == 0  # a model without a hidden layer drops it
    with pytest.raises(FedsdeInputError, match=r"cache_bytes=0: must be an integer >= 1"):
        pb.replace(cache_bytes=0)
    with pytest.raises(FedsdeInputError, match=r"replace: unknown field\(s\) bogus \(allowed: .*, cache_bytes\)"):
        pb.replace(bogus=1)


def test_raw_input_of_the_synthetic_generators_is_still_checked():
    from fedsde.problems import Classifier, synthetic_population_problem, synthetic_problem
    from fedsde.problems.classification.synthetic import SyntheticData, synthetic_data_problem
    from fedsde.problems.populations.synthetic import SyntheticPopulation

    with pytest.raises(FedsdeInputError, match=r"n_clients=0: must be an integer >= 1"):
        synthetic_problem(seed=0, n_clients=0)
    with pytest.raises(FedsdeInputError, match=r"seed=-1: must be an integer >= 0"):
        synthetic_problem(seed=-1, n_clients=3, dim=2)
    with pytest.raises(FedsdeInputError, match=r"max_samples=1: must be an integer >= 2"):
        SyntheticPopulation(seed=0, max_samples=1)
    with pytest.raises(FedsdeInputError, match=r"test_fraction=1.0: must lie in \[0, 1\)"):
        SyntheticData(test_fraction=1.0)
    with pytest.raises(FedsdeInputError, match=r"n_classes=1: must be an integer >= 2"):
        synthetic_population_problem(seed=0, n_classes=1)
    # the value and the keywords: the same clients, bit for bit
    law = SyntheticData(0.5, 0.7, n_clients=4, dim=3, n_classes=3, max_samples=30)
    kw = dict(seed=5, n_clients=4, dim=3, n_classes=3, max_samples=30)
    old, new = synthetic_problem(0.5, 0.7, l2=1e-2, **kw), synthetic_data_problem(
        law, 5, classifier=Classifier("softmax", l2=1e-2))
    assert old.name == new.name == "synthetic(0.5,0.7)" and old.info == new.info
    for a in ("X", "y", "sizes", "X_test", "y_test", "test_sizes", "p"):
        assert np.array_equal(getattr(old, a), getattr(new, a))
    lazy, lazy_law = SyntheticPopulation(0.5, 0.7, **kw), SyntheticPopulation.from_data(law, 5)
    assert lazy.describe() == lazy_law.describe()
    assert np.array_equal(lazy.client_rows(3)[0], lazy_law.client_rows(3)[0])
