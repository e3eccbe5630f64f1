"""Data problems described in problem files (TOML/JSON), read by :func:`fedsde.problems.load_problem`.

A data-problem file has ``kind = "classification"`` (least-squares files, ``kind = "regression"``, are described
in :mod:`fedsde.problems.regression.files`); it names a data set, a model, a partition among clients and
the clients' minibatch size, and builds a :class:`~fedsde.problems.classification.problem.ClassificationProblem`.
Example (``examples/problems/digits_softmax.toml``)::

    kind = "classification"
    dataset = "digits"          # digits | breast_cancer | synthetic (FedProx synthetic(α, β))
    model = "softmax"           # logistic | softmax | mlp
    clients = 10
    partition = "dirichlet"     # iid | dirichlet | shards | quantity | niid2
    alpha = 0.5
    batch_size = 16
    seed = 0

Keys (every other key is an error):

| key | meaning (default) |
|---|---|
| ``kind`` | ``"classification"`` (required) |
| ``dataset`` | ``digits`` (1797 images, 10 classes), ``breast_cancer`` (569, 2 classes), ``synthetic`` (required) |
| ``model`` | ``logistic`` (two classes only), ``softmax``, ``mlp`` (default: logistic for breast_cancer, softmax) |
| ``hidden`` | hidden units of the mlp (required with ``model = "mlp"``, refused otherwise) |
| ``batch_size`` | minibatch size of every client, capped at its sample count (required) |
| ``seed`` | seed of the partition, the train/test split and the synthetic data (required) |
| ``init_seed`` | seed of the MLP's initial weights (default: ``seed``) |
| ``clients`` | number of clients ``Q`` (10; synthetic 30; niid2: ``n_biased + n_uniform``) |
| ``l2`` | ridge coefficient ``λ >= 0`` (1e-3) |
| ``test_fraction`` | held-out fraction of every client's samples, in [0, 1) (0.25; synthetic 0.1) |
| ``weights`` | client weights ``size`` (``p_k = N_k/N``) or ``uniform`` (``size``) |
| ``sampling`` | ``minibatch`` (fresh batch every step) or ``epoch`` (per-epoch permutation) |
| ``name`` | free text |
| ``partition`` | digits/breast_cancer: ``iid``, ``dirichlet``, ``shards``, ``quantity``, ``niid2`` (``dirichlet``) |
| ``alpha`` | dirichlet: concentration α > 0 (0.5); synthetic: model heterogeneity α >= 0 (1.0) |
| ``min_size`` | dirichlet/quantity: least samples per client (10) |
| ``shards_per_client`` | shards: shards per client (2) |
| ``quantity_beta`` | quantity: Dirichlet concentration of the client sizes (1.0) |
| ``n_biased``, ``n_uniform`` | niid2: clients with C/5 classes and with all classes (5, 1) |
| ``standardise`` | digits/breast_cancer: standardise with the pooled training statistics (true) |
| ``beta`` | synthetic: data heterogeneity β >= 0 (1.0) |
| ``iid`` | synthetic: the IID variant (false) |
| ``dim``, ``n_classes`` | synthetic: features (60) and classes (10) |
| ``max_samples`` | synthetic: cap on a client's sample count (none) |
| ``population`` | a client population (:mod:`fedsde.problems.populations.base`; synthetic: true from 10⁴ clients) |

With ``population`` commands that sample participants (``fedsde simulate``) read only the participants' rows and
estimate the metrics on a subsample of clients; other commands get the same data materialised (refused up front
when they do not fit in memory).  Synthetic clients are then produced on demand, each from ``seed`` and its index
(:mod:`fedsde.problems.populations.synthetic`); the clients of a bundled set are slices of its partition
(:class:`~fedsde.problems.populations.base.ArrayPopulation`).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from fedsde._validate import unit_interval
from fedsde.errors import FedsdeInputError
from fedsde.problems._file_keys import _Keys
from fedsde.problems.classification.datasets import partitioned_problem
from fedsde.problems.classification.models import check_model_memory
from fedsde.problems.classification.options import Classifier, Minibatches
from fedsde.problems.classification.partition import PARTITIONS, SCHEME_KEYS, Partition
from fedsde.problems.classification.problem import MODELS, ClassificationProblem
from fedsde.problems.classification.synthetic import SyntheticData

if TYPE_CHECKING:
    from fedsde.problems.regression.problem import RegressionProblem

DATASETS = ("digits", "breast_cancer", "synthetic")
_COMMON = ("kind", "dataset", "model", "hidden", "batch_size", "seed", "init_seed", "clients", "l2", "population",
           "test_fraction", "weights", "sampling", "name")
_SKLEARN = ("partition", "alpha", "min_size", "shards_per_client", "quantity_beta", "n_biased", "n_uniform",
            "standardise")
_SYNTHETIC = ("alpha", "beta", "iid", "dim", "n_classes", "max_samples")
#: synthetic files of at least this many clients are populations produced on demand unless ``population = false``
POPULATION_CLIENTS = 10_000
_N_CLASSES = {"digits": 10, "breast_cancer": 2}
_N_FEATURES = {"digits": 64, "breast_cancer": 30}


def data_problem_from_dict(data: dict, *, source: str = "problem", base_dir=None,
                           population: bool = False) -> ClassificationProblem | RegressionProblem:
    """Build a :class:`ClassificationProblem` from the keys of a data-problem file (see the module docstring), or a
    :class:`~fedsde.problems.regression.problem.RegressionProblem` when ``kind = "regression"``
    (:func:`fedsde.problems.regression.files.regression_problem_from_dict`; ``base_dir`` is the folder that a
    ``data`` path is relative to, default the working directory).  ``population=True``: a file with ``population``
    gives a :class:`~fedsde.problems.populations.base.PopulationProblem` (else its materialised problem).

    Raises :class:`FedsdeInputError` (one line naming the key, its value and the constraint) for unknown keys,
    bad values, keys that do not apply to the chosen data set / partition / model, and model–data mismatches.
    """
    k = _Keys(data, source)
    if data.get("kind") == "regression":
        from fedsde.problems.regression.files import regression_problem_from_dict

        return regression_problem_from_dict(data, source=source, base_dir=base_dir)
    if data.get("kind") != "classification":
        raise k.fail(f"kind={data.get('kind')!r}: must be 'classification' or 'regression' for a data problem")
    dataset = k.choice("dataset", DATASETS)
    synthetic = dataset == "synthetic"
    allowed = set(_COMMON) | set(_SYNTHETIC if synthetic else _SKLEARN)
    unknown = sorted(set(data) - allowed)
    if unknown:
        why = (f"dataset={dataset!r} has no key(s) {', '.join(unknown)}" if set(unknown) & set(_SKLEARN + _SYNTHETIC)
               else f"unknown key(s) {', '.join(unknown)}")
        raise k.fail(f"{why} (allowed: {', '.join(sorted(allowed))})")

    seed = k.integer("seed", minimum=0, required=True)
    integer, number = partial(k.integer, raw=True), partial(k.number, raw=True)
    law = _synthetic_law(k) if synthetic else None  # the law of the clients, its keys checked once
    n_classes = law.n_classes if synthetic else _N_CLASSES[dataset]
    model = data.get("model", "logistic" if n_classes == 2 else "softmax")
    if model == "logistic" and n_classes != 2:
        raise k.fail(f"model='logistic': needs two classes, dataset={dataset!r} has {n_classes} (use 'softmax' "
                     "or 'mlp')")
    if model != "mlp" and k.has("hidden") and model in MODELS:  # (a model none of these: the Classifier's error)
        raise k.fail(f"hidden={data['hidden']!r}: only used with model='mlp' (model={model!r})")
    if model != "mlp" and k.has("init_seed") and model in MODELS:
        raise k.fail(f"init_seed={data['init_seed']!r}: only used with model='mlp' (linear models start at zero)")
    mlp = model == "mlp"
    # the keys of the model and of the minibatches, typed here and checked once by the values they build
    classifier = k.build(Classifier, model, integer("hidden", required=mlp), True, number("l2", 1e-3, allow_zero=True),
                         integer("init_seed", seed, minimum=0) if mlp else None)
    minibatches = k.build(Minibatches, integer("batch_size", required=True), data.get("sampling", "minibatch"))
    weights = k.choice("weights", ("size", "uniform"), "size")
    settings = {"model": model, "batch_size": minibatches.batch_size, "sampling": minibatches.sampling}
    info = settings | ({"hidden": classifier.hidden, "init_seed": classifier.init_seed} if mlp else {})

    try:
        # the model's weights are checked against the memory available before any data is built (the data
        # themselves once the client sizes are drawn)
        n_features = (law.dim if synthetic else _N_FEATURES[dataset]) + 1
        check_model_memory(n_features, n_classes, model, classifier.hidden or 0)
        values = {"classifier": classifier, "minibatches": minibatches, "info": info}
        name = str(data["name"]) if "name" in data else None
        if synthetic:
            problem = _synthetic(k, law, seed, weights, name, **values)
        else:
            tf = k.build(unit_interval, "test_fraction", number("test_fraction", 0.25, allow_zero=True))
            if k.boolean("population", False):  # the partition's clients as a population (slices of its arrays)
                from fedsde.problems.populations.base import ArrayPopulation

                whole = _sklearn(k, dataset, seed, tf, weights)
                problem = _population(ArrayPopulation(whole), weights, whole.p,
                                      name=whole.name if name is None else name,
                                      provenance=whole.info | {"population": "slices"}, **values)
            else:
                problem = _sklearn(k, dataset, seed, tf, weights, **values)
                # a file's weights normalised once more, as they always were: the same numbers, bit for bit
                problem = problem.replace(p=problem.p, name=problem.name if name is None else name)
        if hasattr(problem, "population") and not population:
            problem = problem.materialise()
    except FedsdeInputError as exc:
        msg = str(exc)
        raise FedsdeInputError(msg if msg.startswith(source) else f"{source}: {msg}") from None
    return problem


def _sklearn(k: _Keys, dataset: str, seed: int, test_fraction: float, weights: str,
             **values) -> ClassificationProblem:
    """The problem of a bundled set split by the file's partition (checked once, by the :class:`Partition` its keys
    build), with the file's checked ``classifier``, ``minibatches`` and ``info`` (trusted)."""
    partition = k.data.get("partition", "dirichlet")
    known = partition in PARTITIONS  # (another name: the Partition's error, below)
    own = SCHEME_KEYS[partition] if known else ()
    for key in ("alpha", "min_size", "shards_per_client", "quantity_beta", "n_biased", "n_uniform"):
        if known and k.has(key) and key not in own:
            raise k.fail(f"{key}={k.data[key]!r}: not used by partition={partition!r} "
                         f"(its keys: {', '.join(own) or 'none'})")
    if partition == "niid2" and k.has("clients"):
        raise k.fail("clients: not used by partition='niid2' (it has n_biased + n_uniform clients)")
    integer, number = partial(k.integer, raw=True), partial(k.number, raw=True)
    partitioning = k.build(
        Partition, partition, keys={"n_clients": "clients"}, n_clients=integer("clients", 10),
        alpha=number("alpha", 0.5), shards_per_client=integer("shards_per_client", 2),
        quantity_beta=number("quantity_beta", 1.0), n_biased=integer("n_biased", 5),
        n_uniform=integer("n_uniform", 1, minimum=0), min_size=integer("min_size", 10, minimum=0))
    return partitioned_problem(dataset, partitioning, seed, test_fraction, standardise=k.boolean("standardise", True),
                               weights=weights, **values)


def _synthetic_law(k: _Keys) -> SyntheticData:
    """The law of a synthetic file's clients, its keys (``clients`` is its ``n_clients``) checked once by the value
    they build."""
    integer, number = partial(k.integer, raw=True), partial(k.number, raw=True)
    return k.build(SyntheticData, number("alpha", 1.0, allow_zero=True), number("beta", 1.0, allow_zero=True),
                   integer("clients", 30), integer("dim", 60), integer("n_classes", 10, minimum=2),
                   k.boolean("iid", False), number("test_fraction", 0.1, allow_zero=True),
                   integer("max_samples", None, minimum=2), keys={"n_clients": "clients"})


def _synthetic(k: _Keys, law: SyntheticData, seed: int, weights: str, name: str | None, **values):
    """The problem of a synthetic file: its clients drawn from ``law`` and ``seed`` (on demand from
    :data:`POPULATION_CLIENTS` clients on, or as the key ``population`` asks), with the file's checked values."""
    from fedsde.problems.classification.synthetic import synthetic_data_problem
    from fedsde.problems.populations.synthetic import SyntheticPopulation

    if k.boolean("population", law.n_clients >= POPULATION_CLIENTS):
        population = SyntheticPopulation.from_data(law, seed)
        return _population(population, weights, np.ones(law.n_clients), name=law.name if name is None else name,
                           provenance=population.describe(), **values)
    p = None if weights == "size" else [1.0] * law.n_clients
    return synthetic_data_problem(law, seed, p=p, name=name, **values)


def _population(population, weights: str, uniform, *, classifier: Classifier, minibatches: Minibatches, name: str,
                provenance: dict, info: dict):
    """The :class:`~fedsde.problems.populations.base.PopulationProblem` of a file's checked values (its weights:
    ``N_k/N``, or ``uniform`` normalised; then normalised once more, as a file's always were: the same numbers, bit
    for bit) and the ``info`` of its keys added to the ``provenance`` of its clients."""
    from fedsde.problems.populations.base import PopulationProblem

    problem = PopulationProblem.create(population, classifier=classifier, minibatches=minibatches,
                                       p=None if weights == "size" else uniform, name=name,
                                       info=provenance | info)
    return problem.with_weights(problem.p)
