"""Federated classification problems from the data sets that ship with scikit-learn (no download).

:func:`load_dataset` reads a bundled data set; :func:`federated_classification` standardises it, splits it into
clients with a partitioner of :mod:`fedsde.problems.classification.partition` and returns a
:class:`~fedsde.problems.classification.problem.ClassificationProblem` (each client keeps a test split).
"""

from __future__ import annotations

import numpy as np

from fedsde._validate import choice, unit_interval
from fedsde.problems.classification.problem import ClassificationProblem

DATASETS = ("digits", "breast_cancer")
PARTITIONS = ("iid", "dirichlet", "shards", "quantity", "niid2")


def load_dataset(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Features (N, F) and integer labels (N,) of a data set bundled with scikit-learn (no download).

    ``"digits"``: 1797 8×8 images, 10 classes; ``"breast_cancer"``: 569 samples, 30 features, 2 classes.
    """
    from fedsde.problems.classification import bundled

    choice("dataset", name, DATASETS)
    return bundled.digits() if name == "digits" else bundled.breast_cancer()


def federated_classification(
    dataset: str = "digits",
    *,
    n_clients: int = 10,
    partition: str = "dirichlet",
    seed: int,
    alpha: float = 0.5,
    shards_per_client: int = 2,
    quantity_beta: float = 1.0,
    n_biased: int = 5,
    n_uniform: int = 1,
    min_size: int = 10,
    test_fraction: float = 0.25,
    model: str | None = None,
    l2: float = 1e-3,
    standardise: bool = True,
    weights: str = "size",
) -> ClassificationProblem:
    """A federated logistic/softmax regression problem on a scikit-learn data set.

    The whole data set is partitioned among the clients (see :mod:`fedsde.problems.classification.partition`); each
    client's samples are then split at random into train (``1 − test_fraction``) and test; the global test set is the
    union of the clients' test splits.  Features are standardised with the mean and standard deviation of the
    pooled training data (constant features are left at zero).

    Parameters
    ----------
    dataset : {"digits", "breast_cancer"}
    n_clients : int
        ``Q`` (ignored for ``partition="niid2"``, which has ``n_biased + n_uniform`` clients).
    partition : {"iid", "dirichlet", "shards", "quantity", "niid2"}
    seed : int
        Seed of the partition and of the train/test split.
    alpha, shards_per_client, quantity_beta, n_biased, n_uniform, min_size
        Parameters of the partitioners.
    test_fraction : float
        Fraction of each client's samples held out (in ``[0, 1)``; at least one training sample is kept).
    model : {"logistic", "softmax"}, optional
        Default: logistic for ``breast_cancer``, softmax for ``digits``.
    l2 : float
        Ridge coefficient.
    standardise : bool
    weights : {"size", "uniform"}
        Client weights ``p_k = N_k/N`` or ``1/Q``.
    """
    from fedsde.problems.classification import partition as part

    X, y = load_dataset(dataset)
    choice("partition", partition, PARTITIONS)
    tf = unit_interval("test_fraction", test_fraction)
    choice("weights", weights, ("size", "uniform"))
    ss = np.random.SeedSequence(seed)
    s_part, s_split = (int(s.generate_state(1)[0]) for s in ss.spawn(2))
    if partition == "iid":
        parts = part.iid_partition(y.size, n_clients, seed=s_part)
    elif partition == "dirichlet":
        parts = part.dirichlet_partition(y, n_clients, alpha, seed=s_part, min_size=min_size)
    elif partition == "shards":
        parts = part.shard_partition(y, n_clients, shards_per_client, seed=s_part)
    elif partition == "quantity":
        parts = part.quantity_skew_partition(y.size, n_clients, quantity_beta, seed=s_part, min_size=min_size)
    else:
        parts = part.niid2_partition(y, n_biased, n_uniform, seed=s_part)
    rng = np.random.default_rng(s_split)
    train_idx, test_idx = [], []
    for idx in parts:
        idx = rng.permutation(idx)
        n_test = min(round(tf * idx.size), idx.size - 1)
        test_idx.append(idx[:n_test])
        train_idx.append(idx[n_test:])
    tr, te = np.concatenate(train_idx), np.concatenate(test_idx)
    Xtr, Xte = X[tr], X[te]
    if standardise:
        mu, sd = Xtr.mean(0), Xtr.std(0)
        sd = np.where(sd > 0, sd, 1.0)
        Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
    Q = len(parts)
    info = {"dataset": dataset, "partition": partition, "seed": seed, "test_fraction": tf,
            "standardise": bool(standardise)}
    if partition == "dirichlet":
        info |= {"alpha": alpha, "min_size": min_size}
    elif partition == "shards":
        info |= {"shards_per_client": shards_per_client}
    elif partition == "quantity":
        info |= {"quantity_beta": quantity_beta, "min_size": min_size}
    elif partition == "niid2":
        info |= {"n_biased": n_biased, "n_uniform": n_uniform}
    n_classes = int(y.max()) + 1
    return ClassificationProblem.from_arrays(
        Xtr, y[tr], [i.size for i in train_idx], Xte, y[te], [i.size for i in test_idx], model=model,
        n_classes=n_classes, l2=l2, p=None if weights == "size" else np.full(Q, 1.0 / Q), name=f"{dataset}/{partition}",
        info=info,
    )
