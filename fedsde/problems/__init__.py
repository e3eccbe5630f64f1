"""Client problems: quadratic clients (seed 002, Assumption 6.1), their I/O and generators; logistic/softmax
regression clients on real data (scikit-learn's bundled sets) or FedProx's synthetic(α, β), and partitioners."""

from fedsde.problems.generate import paper_table_problem, random_quadratic_problem
from fedsde.problems.io import load_problem, problem_from_dict, save_problem
from fedsde.problems.logistic import ClassificationProblem, federated_classification, load_dataset
from fedsde.problems.partition import (
    dirichlet_partition,
    iid_partition,
    label_histogram,
    niid2_partition,
    quantity_skew_partition,
    shard_partition,
)
from fedsde.problems.quadratic import QuadraticProblem
from fedsde.problems.synthetic import synthetic_problem

__all__ = [
    "ClassificationProblem",
    "QuadraticProblem",
    "dirichlet_partition",
    "federated_classification",
    "iid_partition",
    "label_histogram",
    "load_dataset",
    "load_problem",
    "niid2_partition",
    "paper_table_problem",
    "problem_from_dict",
    "quantity_skew_partition",
    "random_quadratic_problem",
    "save_problem",
    "shard_partition",
    "synthetic_problem",
]
