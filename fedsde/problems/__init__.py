"""Client problems: quadratic clients (seed 002, Assumption 6.1), their I/O and generators; logistic/softmax
regression and one-hidden-layer MLP clients on real data (scikit-learn's bundled sets) or FedProx's synthetic(α, β)
(the models themselves in :mod:`fedsde.problems.classification.models`), client populations produced on demand
(:mod:`fedsde.problems.populations.base`), data problems from files, partitioners, and metrics of
server weights; least-squares regression clients (a user's CSV, Grunfeld, diabetes) with real minibatch
sampling, whose exact moments live in :mod:`fedsde.exact.least_squares`.

The constructors of the data problems take their options as small frozen values, checked once where they are built
(or, as before, as the keywords of their fields): :class:`Classifier` and :class:`Minibatches` (classification and
population problems), :class:`ModuleTraining` and :class:`ModuleBatches` (a user's module), :class:`Evaluation`
(every kind: the metrics' rows, the module's batching), :class:`Partition` (how a bundled set is split among
clients, :func:`federated_classification`) and :class:`SyntheticData` (the law of FedProx's synthetic clients,
:func:`synthetic_problem`)."""

from fedsde.problems import _old_homes
from fedsde.problems.classification.datasets import federated_classification, load_dataset
from fedsde.problems.classification.options import Classifier, Minibatches
from fedsde.problems.classification.partition import (
    Partition,
    dirichlet_partition,
    iid_partition,
    label_histogram,
    niid2_partition,
    quantity_skew_partition,
    shard_partition,
)
from fedsde.problems.classification.problem import ClassificationProblem
from fedsde.problems.classification.synthetic import SyntheticData, synthetic_problem
from fedsde.problems.data_files import data_problem_from_dict
from fedsde.problems.evaluation import Evaluation
from fedsde.problems.io import load_problem, problem_from_dict, save_problem
from fedsde.problems.metrics import METRICS, evaluate_metrics, metric_names
from fedsde.problems.module import is_module_problem
from fedsde.problems.module.options import ModuleBatches, ModuleTraining
from fedsde.problems.populations.base import ClientPopulation, PopulationProblem
from fedsde.problems.populations.synthetic import synthetic_population_problem
from fedsde.problems.quadratic.generate import paper_table_problem, random_quadratic_problem
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.problems.regression.files import regression_problem_from_dict
from fedsde.problems.regression.population import RegressionPopulation
from fedsde.problems.regression.problem import RegressionProblem

_old_homes.install()


def is_data_problem(problem) -> bool:
    """Whether ``problem`` holds per-sample data (a :class:`ClassificationProblem`, a :class:`RegressionProblem`, a
    :class:`~fedsde.problems.module.ModuleProblem` or a client population,
    :class:`~fedsde.problems.populations.base.PopulationProblem`, or a least-squares one,
    :class:`~fedsde.problems.regression.population.RegressionPopulation`) rather than quadratic clients."""
    return (isinstance(problem, ClassificationProblem | RegressionProblem | RegressionPopulation)
            or is_module_problem(problem)
            or hasattr(problem, "population"))


def require_quadratic(problem, what: str, why: str) -> None:
    """Raise a one-line :class:`~fedsde.errors.FedsdeInputError` when ``problem`` is a data problem.

    ``what`` names the command or option that needs quadratic clients, ``why`` says what closed form it needs.
    """
    if is_data_problem(problem):
        from fedsde.errors import FedsdeInputError

        kind = ("regression" if isinstance(problem, RegressionProblem | RegressionPopulation) else
                "module" if is_module_problem(problem) else "classification")
        exact = ("; least-squares problems have exact laws in fedsde.exact.least_squares"
                 if kind == "regression" else "")
        raise FedsdeInputError(
            f"{what}: needs quadratic clients, got a data problem ({problem.name or problem.model}, "
            f"kind={kind!r}): {why}{exact}"
        )


__all__ = [
    "METRICS",
    "ClassificationProblem",
    "Classifier",
    "ClientPopulation",
    "Evaluation",
    "Minibatches",
    "ModuleBatches",
    "ModuleProblem",
    "ModuleTraining",
    "Partition",
    "PopulationProblem",
    "QuadraticProblem",
    "RegressionPopulation",
    "RegressionProblem",
    "SyntheticData",
    "data_problem_from_dict",
    "dirichlet_partition",
    "evaluate_metrics",
    "federated_classification",
    "iid_partition",
    "is_data_problem",
    "label_histogram",
    "load_dataset",
    "load_problem",
    "metric_names",
    "module_problem",
    "niid2_partition",
    "paper_table_problem",
    "problem_from_dict",
    "quantity_skew_partition",
    "random_quadratic_problem",
    "regression_problem_from_dict",
    "require_quadratic",
    "save_problem",
    "shard_partition",
    "synthetic_population_problem",
    "synthetic_problem",
]


def __getattr__(name: str):
    if name in ("ModuleProblem", "module_problem"):  # torch is imported on first use
        from fedsde.problems import module

        return getattr(module, name)
    raise AttributeError(f"module 'fedsde.problems' has no attribute {name!r}")
