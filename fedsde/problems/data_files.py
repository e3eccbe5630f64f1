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

from typing import TYPE_CHECKING

from fedsde.errors import FedsdeInputError
from fedsde.problems._file_keys import _Keys
from fedsde.problems.classification.datasets import federated_classification
from fedsde.problems.classification.models import check_model_memory
from fedsde.problems.classification.options import Classifier
from fedsde.problems.classification.partition import PARTITIONS, SCHEME_KEYS, Partition
from fedsde.problems.classification.problem import MODELS, SAMPLINGS, ClassificationProblem

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
    batch_size = k.integer("batch_size", required=True)
    n_classes = k.integer("n_classes", 10, minimum=2) if synthetic else _N_CLASSES[dataset]
    model = k.choice("model", MODELS, "logistic" if n_classes == 2 else "softmax")
    if model == "logistic" and n_classes != 2:
        raise k.fail(f"model='logistic': needs two classes, dataset={dataset!r} has {n_classes} (use 'softmax' "
                     "or 'mlp')")
    if model == "mlp":
        hidden = k.integer("hidden", required=True)
    elif k.has("hidden"):
        raise k.fail(f"hidden={data['hidden']!r}: only used with model='mlp' (model={model!r})")
    else:
        hidden = None
    init_seed = k.integer("init_seed", seed, minimum=0)
    if k.has("init_seed") and model != "mlp":
        raise k.fail(f"init_seed={data['init_seed']!r}: only used with model='mlp' (linear models start at zero)")
    l2 = k.number("l2", 1e-3, allow_zero=True)
    test_fraction = k.number("test_fraction", 0.1 if synthetic else 0.25, allow_zero=True)
    if test_fraction >= 1.0:
        raise k.fail(f"test_fraction={test_fraction!r}: must lie in [0, 1)")
    weights = k.choice("weights", ("size", "uniform"), "size")
    sampling = k.choice("sampling", SAMPLINGS, "minibatch")

    try:
        # the model's weights are checked against the memory available before any data is built (the data
        # themselves in synthetic_problem, once the client sizes are drawn)
        n_features = (k.integer("dim", 60) if synthetic else _N_FEATURES[dataset]) + 1
        check_model_memory(n_features, n_classes, model, hidden or 0)
        if synthetic:
            problem = _synthetic(k, seed, n_classes, test_fraction, l2)
            if weights == "uniform":
                problem = problem.with_weights([1.0] * problem.Q)
        else:
            problem = _sklearn(k, dataset, seed, test_fraction, l2, weights)
            if k.boolean("population", False):  # the partition's clients as a population (slices of its arrays)
                from fedsde.problems.populations.base import ArrayPopulation, PopulationProblem

                problem = PopulationProblem.create(ArrayPopulation(problem), model=problem.model, l2=l2,
                                                   p=None if weights == "size" else problem.p, name=problem.name,
                                                   info=problem.info | {"population": "slices"})
        problem = problem.replace(
            model=model, hidden=hidden, batch_size=batch_size, sampling=sampling,
            init_seed=init_seed if model == "mlp" else None,
            name=str(data.get("name", problem.name)),
            info=problem.info | {"model": model, "batch_size": batch_size, "sampling": sampling}
            | ({"hidden": hidden, "init_seed": init_seed} if model == "mlp" else {}),
        )
        if hasattr(problem, "population") and not population:
            problem = problem.materialise()
    except FedsdeInputError as exc:
        msg = str(exc)
        raise FedsdeInputError(msg if msg.startswith(source) else f"{source}: {msg}") from None
    return problem


def _sklearn(k: _Keys, dataset: str, seed: int, test_fraction: float, l2: float,
             weights: str) -> ClassificationProblem:
    partition = k.choice("partition", PARTITIONS, "dirichlet")
    own = SCHEME_KEYS[partition]
    for key in ("alpha", "min_size", "shards_per_client", "quantity_beta", "n_biased", "n_uniform"):
        if k.has(key) and key not in own:
            raise k.fail(f"{key}={k.data[key]!r}: not used by partition={partition!r} "
                         f"(its keys: {', '.join(own) or 'none'})")
    if partition == "niid2" and k.has("clients"):
        raise k.fail("clients: not used by partition='niid2' (it has n_biased + n_uniform clients)")
    partitioning = Partition(
        partition, n_clients=k.integer("clients", 10), alpha=k.number("alpha", 0.5),
        shards_per_client=k.integer("shards_per_client", 2), quantity_beta=k.number("quantity_beta", 1.0),
        n_biased=k.integer("n_biased", 5), n_uniform=k.integer("n_uniform", 1, minimum=0),
        min_size=k.integer("min_size", 10, minimum=0))
    return federated_classification(
        dataset, partitioning=partitioning, seed=seed, test_fraction=test_fraction,
        classifier=Classifier("logistic" if dataset == "breast_cancer" else "softmax", l2=l2),
        standardise=k.boolean("standardise", True), weights=weights,
    )


def _synthetic(k: _Keys, seed: int, n_classes: int, test_fraction: float, l2: float) -> ClassificationProblem:
    from fedsde.problems.classification.synthetic import synthetic_problem
    from fedsde.problems.populations.synthetic import synthetic_population_problem

    Q = k.integer("clients", 30)
    on_demand = k.boolean("population", Q >= POPULATION_CLIENTS)
    pb = (synthetic_population_problem if on_demand else synthetic_problem)(
        k.number("alpha", 1.0, allow_zero=True), k.number("beta", 1.0, allow_zero=True), seed=seed,
        n_clients=k.integer("clients", 30), dim=k.integer("dim", 60), n_classes=n_classes,
        iid=k.boolean("iid", False), test_fraction=test_fraction,
        max_samples=k.integer("max_samples", None, minimum=2), l2=l2,
    )
    return pb
