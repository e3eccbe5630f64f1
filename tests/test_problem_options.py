"""The options of the data problems as frozen values (fedsde.problems: Classifier, Minibatches, Evaluation,
ModuleTraining, ModuleBatches, Partition): checked once where built, passed whole; the old keyword calls of every
constructor build the same problem (same arrays, settings, gradients and runs, bit for bit); a value given both ways,
a field a constructor does not read and a wrong class are refused; the classmethods take values as the functions
do; each field is checked once per call."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest
from test_params import _count_validations, _same
from torch import nn

from fedsde.errors import FedsdeInputError
from fedsde.problems import (
    ClassificationProblem,
    Classifier,
    Evaluation,
    Minibatches,
    ModuleBatches,
    ModuleTraining,
    Partition,
    PopulationProblem,
    dirichlet_partition,
    federated_classification,
    iid_partition,
    load_problem,
    niid2_partition,
    quantity_skew_partition,
    shard_partition,
)
from fedsde.problems.module.population import module_population_problem
from fedsde.problems.module.problem import module_problem
from fedsde.problems.populations.synthetic import SyntheticPopulation
from fedsde.sim import simulate

RUN = dict(eta=0.1, local_steps=2, rounds=2, replicates=3, seed=0)
#: every attribute a problem's constructor sets from its keywords
SETTINGS = ("model", "l2", "hidden", "fit_intercept", "init_seed", "batch_size", "sampling", "metric_samples", "name",
            "info", "loss_name", "batching", "cache_bytes")


def _problem_state(pb) -> dict:
    """What makes two problems the same problem: their rows, weights, settings, start, loss and gradient."""
    out = {a: getattr(pb, a) for a in SETTINGS if hasattr(pb, a)}
    if not hasattr(pb, "population"):
        out |= {a: np.asarray(getattr(pb, a)) for a in ("X", "y", "sizes", "X_test", "y_test")}
    w = pb.initial_weights() + 0.1 * np.random.default_rng(0).normal(size=pb.d)
    return out | {"p": pb.p, "summary": pb.summary(), "w0": pb.initial_weights(), "loss": pb.loss(w),
                  "grad": pb.grad(w)}


def _clients():
    rng = np.random.default_rng(0)
    Xs = [rng.normal(size=(n, 4)) for n in (20, 30, 25)]
    return Xs, [rng.integers(0, 3, size=x.shape[0]) for x in Xs]


def _net():
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Dropout(0.2), nn.Linear(8, 2))


def _rows():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(60, 5))
    return x, (x[:, 0] > 0).astype(np.int64), np.repeat(["a", "b", "c"], 20)


def _population():
    return SyntheticPopulation(0.5, 0.5, n_clients=12, dim=6, n_classes=3, seed=2)


# --- the values ----------------------------------------------------------------------------------------------------

def test_the_classifier_checks_the_hidden_layer_and_resolves_the_model_by_the_labels():
    assert Classifier("mlp", hidden=np.int64(4)).hidden == 4 and Classifier("mlp", hidden=4).validated
    with pytest.raises(FedsdeInputError, match=r"^hidden: required for model='mlp'"):
        Classifier("mlp")
    with pytest.raises(FedsdeInputError, match=r"^hidden=4: only allowed with model='mlp' \(model='softmax'\)$"):
        Classifier("softmax", hidden=4)
    with pytest.raises(FedsdeInputError, match=r"^hidden=4: only allowed with model='mlp' \(model=None"):
        Classifier(hidden=4)
    assert Classifier().for_classes(2) == ("logistic", 0) and Classifier().for_classes(5) == ("softmax", 0)
    assert Classifier("mlp", hidden=3).for_classes(2) == ("mlp", 3)
    with pytest.raises(FedsdeInputError, match="model='logistic': needs binary labels, found n_classes=3"):
        Classifier("logistic").for_classes(3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        Classifier().l2 = 0.0


def test_module_batches_hold_the_whole_client_as_none_and_a_partition_its_schemes_keys():
    assert ModuleBatches().batch_size is None and ModuleBatches(None).batch_size is None
    assert ModuleBatches(np.int64(8), "with-replacement").batch_size == 8
    with pytest.raises(FedsdeInputError, match=r"^batch_size=0: must be an integer >= 1$"):
        ModuleBatches(0)
    assert Partition("dirichlet", alpha=1).keys() == {"alpha": 1.0, "min_size": 10}
    assert Partition("niid2").keys() == {"n_biased": 5, "n_uniform": 1} and Partition("iid").keys() == {}
    with pytest.raises(FedsdeInputError, match=r"^n_biased \+ n_uniform: need at least one client$"):
        Partition("niid2", n_biased=0, n_uniform=0)
    with pytest.raises(FedsdeInputError, match=r"^quantity_beta=-1: must be finite and > 0$"):
        Partition("quantity", quantity_beta=-1)


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "shards", "quantity", "niid2"])
def test_a_partition_splits_as_its_partitioner(scheme):
    y = np.random.default_rng(3).integers(0, 10, size=400)
    p = Partition(scheme, n_clients=6, alpha=0.3, shards_per_client=3, quantity_beta=2.0, n_biased=3, n_uniform=2,
                  min_size=5)
    direct = {"iid": lambda: iid_partition(y.size, 6, seed=7),
              "dirichlet": lambda: dirichlet_partition(y, 6, 0.3, seed=7, min_size=5),
              "shards": lambda: shard_partition(y, 6, 3, seed=7),
              "quantity": lambda: quantity_skew_partition(y.size, 6, 2.0, seed=7, min_size=5),
              "niid2": lambda: niid2_partition(y, 3, 2, seed=7)}[scheme]()
    _same(p.split(y, seed=7), direct)


# --- old keyword calls and value calls: the same problem ------------------------------------------------------------

def test_from_clients_and_from_arrays_build_the_same_problem_both_ways():
    Xs, ys = _clients()
    old = ClassificationProblem.from_clients(Xs, ys, Xs, ys, model="mlp", hidden=5, l2=1e-3, init_seed=4,
                                             batch_size=8, sampling="epoch", metric_samples=64, fit_intercept=False,
                                             name="x", info={"a": 1}, p=[1, 2, 3])
    new = ClassificationProblem.from_clients(Xs, ys, Xs, ys, classifier=Classifier("mlp", 5, False, 1e-3, 4),
                                             minibatches=Minibatches(8, "epoch"), evaluation=Evaluation(64),
                                             name="x", info={"a": 1}, p=[1, 2, 3])
    _same(_problem_state(old), _problem_state(new))
    _same(simulate(old, **RUN).weights, simulate(new, **RUN).weights)
    X, y = np.concatenate(Xs), np.concatenate(ys)
    a = ClassificationProblem.from_arrays(X, y, [20, 30, 25], model="softmax", l2=0.1, batch_size=4, name="y")
    b = ClassificationProblem.from_arrays(X, y, [20, 30, 25], classifier=Classifier("softmax", l2=0.1),
                                          minibatches=Minibatches(4), name="y")
    _same(_problem_state(a), _problem_state(b))
    _same(_problem_state(a.replace(model="mlp", hidden=3, sampling="epoch")),
          _problem_state(ClassificationProblem.from_arrays(X, y, [20, 30, 25], classifier=Classifier("mlp", 3, l2=0.1),
                                                           minibatches=Minibatches(4, "epoch"), name="y")))


def test_a_population_problem_is_the_same_both_ways():
    old = PopulationProblem.create(_population(), model="mlp", hidden=4, l2=1e-2, batch_size=5, metric_samples=100,
                                   init_seed=1, cache_bytes=1 << 20)
    new = PopulationProblem.create(_population(), classifier=Classifier("mlp", 4, l2=1e-2, init_seed=1),
                                   minibatches=Minibatches(5), evaluation=Evaluation(100), cache_bytes=1 << 20)
    _same(_problem_state(old), _problem_state(new))
    _same(_problem_state(old.materialise()), _problem_state(new.materialise()))
    _same(simulate(old, **RUN, participation=4).weights, simulate(new, **RUN, participation=4).weights)


@pytest.mark.parametrize("scheme", ["dirichlet", "niid2"])
def test_federated_classification_is_the_same_both_ways(scheme):
    old = federated_classification("digits", n_clients=4, partition=scheme, seed=3, alpha=0.3, min_size=5,
                                   n_biased=2, n_uniform=2, model="softmax", l2=1e-2, weights="uniform")
    new = federated_classification("digits", partitioning=Partition(scheme, 4, 0.3, n_biased=2, n_uniform=2,
                                                                    min_size=5),
                                   seed=3, classifier=Classifier("softmax", l2=1e-2), weights="uniform")
    _same(_problem_state(old), _problem_state(new))
    assert old.info == {"dataset": "digits", "partition": scheme, "seed": 3, "test_fraction": 0.25,
                        "standardise": True, **({"alpha": 0.3, "min_size": 5} if scheme == "dirichlet" else
                                                {"n_biased": 2, "n_uniform": 2})}


def test_a_module_problem_is_the_same_both_ways():
    x, y, client = _rows()
    kw = dict(x_test=x[:10], y_test=y[:10], p=[1, 1, 2], name="m", info={"k": 2})
    old = module_problem(_net, x, y, client, loss="cross-entropy", batch_size=7, sampling="with-replacement", l2=1e-3,
                         init_seed=5, batching="loop", metric_samples=40, **kw)
    new = module_problem(_net, x, y, client, training=ModuleTraining("cross-entropy", 1e-3, 5),
                         batches=ModuleBatches(7, "with-replacement"), evaluation=Evaluation(40, "loop"), **kw)
    _same(_problem_state(old), _problem_state(new))
    _same(simulate(old, **RUN).weights, simulate(new, **RUN).weights)
    full = module_problem(_net, x, y, client, batch_size="full", batching="loop")
    assert full.batch_size is None
    _same(_problem_state(full), _problem_state(module_problem(_net, x, y, client, batches=ModuleBatches(None),
                                                              evaluation=Evaluation(batching="loop"))))
    _same(_problem_state(old.replace(init_seed=6, l2=0.5, batch_size=None)),
          _problem_state(module_problem(_net, x, y, client, training=ModuleTraining(l2=0.5, init_seed=6),
                                        batches=ModuleBatches(sampling="with-replacement"),
                                        evaluation=Evaluation(40, "loop"), **kw)))


def test_a_module_population_is_the_same_both_ways():
    def net():
        return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))

    old = module_population_problem(net, _population(), batch_size=4, l2=1e-3, init_seed=2, metric_samples=64,
                                    batching="loop", sampling="with-replacement")
    new = module_population_problem(net, _population(), training=ModuleTraining(l2=1e-3, init_seed=2),
                                    batches=ModuleBatches(4, "with-replacement"), evaluation=Evaluation(64, "loop"))
    assert new.metric_samples == 64 and new.batching == "loop"
    _same(_problem_state(old), _problem_state(new))
    _same(simulate(old, **RUN, participation=4).weights, simulate(new, **RUN, participation=4).weights)
    _same(_problem_state(old.replace(metric_samples=100)), _problem_state(new.replace(metric_samples=100)))
    with pytest.raises(FedsdeInputError, match=r"^metric_samples=8: must be an integer >= 32$"):
        new.replace(metric_samples=8)


def test_a_problem_file_builds_what_the_values_build(tmp_path):
    path = tmp_path / "digits.toml"
    path.write_text('kind = "classification"\ndataset = "digits"\nmodel = "mlp"\nhidden = 6\nclients = 4\n'
                    'partition = "shards"\nshards_per_client = 3\nbatch_size = 8\nsampling = "epoch"\nl2 = 1e-3\n'
                    'seed = 2\ninit_seed = 1\n')
    pb = load_problem(path)
    built = federated_classification("digits", partitioning=Partition("shards", 4, shards_per_client=3), seed=2,
                                     classifier=Classifier(l2=1e-3))
    built = ClassificationProblem.from_arrays(
        built.X, built.y, built.sizes, built.X_test, built.y_test, built.test_sizes,
        classifier=Classifier("mlp", 6, l2=1e-3, init_seed=1), minibatches=Minibatches(8, "epoch"))
    a, b = _problem_state(pb), _problem_state(built)
    assert pb.info == {"dataset": "digits", "partition": "shards", "seed": 2, "test_fraction": 0.25,
                       "standardise": True, "shards_per_client": 3, "model": "mlp", "batch_size": 8,
                       "sampling": "epoch", "hidden": 6, "init_seed": 1}
    for key in ("info", "name", "summary"):
        a.pop(key), b.pop(key)
    _same(a, b)


# --- the adapter on the constructors, classmethods included ---------------------------------------------------------

#: the constructors that are classmethods (the scan of tests/test_params.py sees module attributes only)
METHODS = {"from_clients": ClassificationProblem.from_clients, "from_arrays": ClassificationProblem.from_arrays,
           "create": PopulationProblem.create}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_a_classmethod_lists_the_old_keywords_and_refuses_a_value_given_both_ways(name):
    f = METHODS[name]
    params = inspect.signature(f).parameters
    assert "cls" not in params and {"classifier", "minibatches", "evaluation"} <= set(params)
    for value, fields in f.values_fields.items():
        defaults = {x.name: x.default for x in dataclasses.fields(f.value_types[value])}
        for field in fields:
            assert params[field].kind is inspect.Parameter.KEYWORD_ONLY and params[field].default == defaults[field]
    for value, field, x in (("classifier", "l2", 0.1), ("minibatches", "batch_size", 4),
                            ("evaluation", "metric_samples", 64)):
        with pytest.raises(FedsdeInputError, match=rf"{field}= and {value}= both given"):
            f(None, **{value: f.value_types[value](), field: x})


def test_a_field_a_constructor_does_not_read_and_a_wrong_class_are_refused():
    Xs, ys = _clients()
    with pytest.raises(FedsdeInputError, match=r"^evaluation.batching='vmap': not used by "
                                               r"ClassificationProblem.from_clients; leave it at its default$"):
        ClassificationProblem.from_clients(Xs, ys, evaluation=Evaluation(batching="vmap"))
    with pytest.raises(FedsdeInputError, match=r"^classifier.hidden=3: not used by federated_classification"):
        federated_classification(seed=0, classifier=Classifier("mlp", hidden=3))
    with pytest.raises(FedsdeInputError, match=r"^minibatches=ModuleBatches\(.*must be a .*options.Minibatches$"):
        ClassificationProblem.from_clients(Xs, ys, minibatches=ModuleBatches(4))
    with pytest.raises(FedsdeInputError, match=r"^seed=-1: must be an integer >= 0$"):
        federated_classification(seed=-1)  # refused here, not deep in numpy's seeding
    x, y, client = _rows()
    with pytest.raises(FedsdeInputError, match=r"^batch_size='all': must be an integer >= 1 or 'full'$"):
        module_problem(_net, x, y, client, batch_size="all")


def _checks(monkeypatch, call, fields) -> dict:
    counts = _count_validations(monkeypatch)
    call()
    return {k: counts[k] for k in fields}


def test_each_field_is_checked_once_per_call_and_not_again_when_passed_whole(monkeypatch):
    Xs, ys = _clients()
    x, y, client = _rows()
    ours = ("model", "hidden", "l2", "init_seed", "batch_size", "sampling", "metric_samples")
    assert _checks(monkeypatch, lambda: ClassificationProblem.from_clients(
        Xs, ys, model="mlp", hidden=3, l2=0.1, init_seed=2, batch_size=4, sampling="epoch", metric_samples=64),
        ours) == dict.fromkeys(ours, 1)
    values = Classifier("mlp", 3, l2=0.1, init_seed=2), Minibatches(4, "epoch"), Evaluation(64)
    assert _checks(monkeypatch, lambda: ClassificationProblem.from_clients(Xs, ys, classifier=values[0],
                                                                           minibatches=values[1],
                                                                           evaluation=values[2]),
                   ours) == dict.fromkeys(ours, 0)
    ours = ("loss", "l2", "init_seed", "batch_size", "sampling", "metric_samples", "batching")
    assert _checks(monkeypatch, lambda: module_problem(_net, x, y, client, loss="cross-entropy", l2=0.1, init_seed=1,
                                                       batch_size=4, batching="loop", metric_samples=64),
                   ours) == dict.fromkeys(ours, 1)
    values = ModuleTraining("cross-entropy", 0.1, 1), ModuleBatches(4), Evaluation(64, "loop")
    assert _checks(monkeypatch, lambda: module_problem(_net, x, y, client, training=values[0], batches=values[1],
                                                       evaluation=values[2]), ours) == dict.fromkeys(ours, 0)
    ours = ("partition", "n_clients", "alpha", "min_size", "shards_per_client", "quantity_beta", "n_biased",
            "n_uniform")
    assert _checks(monkeypatch, lambda: federated_classification(seed=0, partition="dirichlet", n_clients=3, alpha=0.4,
                                                                 min_size=2), ours) == dict.fromkeys(ours, 1)
    value = Partition(n_clients=3, alpha=0.4, min_size=2)
    assert _checks(monkeypatch, lambda: federated_classification(seed=0, partitioning=value),
                   ours) == dict.fromkeys(ours, 0)
