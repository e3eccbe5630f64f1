"""Federated classification problems from the data sets that ship with scikit-learn (no download).

:func:`load_dataset` reads a bundled data set; :func:`federated_classification` standardises it, splits it into
clients with a :class:`~fedsde.problems.classification.partition.Partition` and returns a
:class:`~fedsde.problems.classification.problem.ClassificationProblem` (each client keeps a test split).
"""

from __future__ import annotations

import numpy as np

from fedsde._validate import choice, positive_int, unit_interval
from fedsde.errors import FedsdeInputError
from fedsde.params import takes_values, value_fields
from fedsde.problems.classification.options import Classifier, Minibatches
from fedsde.problems.classification.partition import PARTITIONS, Partition  # noqa: F401 (PARTITIONS: re-exported)
from fedsde.problems.classification.problem import ClassificationProblem

DATASETS = ("digits", "breast_cancer")


def load_dataset(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Features (N, F) and integer labels (N,) of a data set bundled with scikit-learn (no download).

    ``"digits"``: 1797 8×8 images, 10 classes; ``"breast_cancer"``: 569 samples, 30 features, 2 classes.
    """
    choice("dataset", name, DATASETS)
    return _bundled(name)


def _bundled(name: str) -> tuple[np.ndarray, np.ndarray]:
    from fedsde.problems.classification import bundled

    loaders = {"digits": bundled.digits, "breast_cancer": bundled.breast_cancer}
    if name not in loaders:  # a trusted core's caller passed a name it did not check
        raise FedsdeInputError(f"dataset={name!r}: must be one of {', '.join(loaders)}")
    return loaders[name]()


@takes_values(types={"partitioning": Partition, "classifier": Classifier}, partitioning=value_fields(Partition),
              classifier=("model", "l2"))
def federated_classification(
    dataset: str = "digits",
    *,
    partitioning: Partition | None = None,
    seed: int,
    test_fraction: float = 0.25,
    classifier: Classifier | None = None,
    standardise: bool = True,
    weights: str = "size",
) -> ClassificationProblem:
    """A federated logistic/softmax regression problem on a scikit-learn data set.

    The whole data set is partitioned among the clients (``partitioning``, a
    :class:`~fedsde.problems.classification.partition.Partition`); each client's samples are then split at random
    into train (``1 − test_fraction``) and test; the global test set is the union of the clients' test splits.
    Features are standardised with the mean and standard deviation of the pooled training data (constant features
    are left at zero).

    Parameters
    ----------
    dataset : {"digits", "breast_cancer"}
    partitioning : Partition, optional
        The scheme and its parameters (default ``Partition()``: Dirichlet(0.5) label skew among 10 clients); or
        its fields as keywords: ``n_clients``, ``partition`` (``"iid"``, ``"dirichlet"``, ``"shards"``,
        ``"quantity"``, ``"niid2"``), ``alpha``, ``shards_per_client``, ``quantity_beta``, ``n_biased``,
        ``n_uniform``, ``min_size``.
    seed : int
        Seed of the partition and of the train/test split.
    test_fraction : float
        Fraction of each client's samples held out (in ``[0, 1)``; at least one training sample is kept).
    classifier : Classifier, optional
        Its ``model`` (``"logistic"`` or ``"softmax"``; default: logistic for ``breast_cancer``, softmax for
        ``digits``) and ``l2`` (ridge coefficient, 1e-3), also as the keywords ``model=``, ``l2=``
        (:class:`~fedsde.problems.classification.options.Classifier`).
    standardise : bool
    weights : {"size", "uniform"}
        Client weights ``p_k = N_k/N`` or ``1/Q``.
    """
    choice("dataset", dataset, DATASETS)
    seed = positive_int("seed", seed, minimum=0)
    tf = unit_interval("test_fraction", test_fraction)
    choice("weights", weights, ("size", "uniform"))
    return partitioned_problem(dataset, Partition() if partitioning is None else partitioning, seed, tf,
                               standardise=standardise, weights=weights, classifier=classifier)


def partitioned_problem(dataset: str, partitioning: Partition, seed: int, test_fraction: float, *,
                        standardise: bool = True, weights: str = "size", classifier: Classifier | None = None,
                        minibatches: Minibatches | None = None, info: dict | None = None) -> ClassificationProblem:
    """The problem of :func:`federated_classification` from checked input (trusted: the ``dataset`` and ``weights``
    one of theirs, ``test_fraction`` in ``[0, 1)``), with the values a problem file builds (``classifier`` and
    ``minibatches``, whole) and ``info`` added to the provenance it records."""
    X, y = _bundled(dataset)
    ss = np.random.SeedSequence(seed)
    s_part, s_split = (int(s.generate_state(1)[0]) for s in ss.spawn(2))
    parts = partitioning.split(y, seed=s_part)
    rng = np.random.default_rng(s_split)
    train_idx, test_idx = [], []
    for idx in parts:
        idx = rng.permutation(idx)
        n_test = min(round(test_fraction * idx.size), idx.size - 1)
        test_idx.append(idx[:n_test])
        train_idx.append(idx[n_test:])
    tr, te = np.concatenate(train_idx), np.concatenate(test_idx)
    Xtr, Xte = X[tr], X[te]
    if standardise:
        mu, sd = Xtr.mean(0), Xtr.std(0)
        sd = np.where(sd > 0, sd, 1.0)
        Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
    Q = len(parts)
    partition = partitioning.partition
    info = {"dataset": dataset, "partition": partition, "seed": seed, "test_fraction": test_fraction,
            "standardise": bool(standardise), **partitioning.keys(), **(info or {})}
    n_classes = int(y.max()) + 1
    return ClassificationProblem.from_arrays(
        Xtr, y[tr], [i.size for i in train_idx], Xte, y[te], [i.size for i in test_idx], n_classes=n_classes,
        classifier=classifier, minibatches=minibatches, p=None if weights == "size" else np.full(Q, 1.0 / Q),
        name=f"{dataset}/{partition}", info=info,
    )
