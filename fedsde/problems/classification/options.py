"""The options of a classification problem that travel together, as small frozen values checked once where they are
built: the model each client fits (:class:`Classifier`) and how a client draws its minibatches
(:class:`Minibatches`).

:meth:`~fedsde.problems.classification.problem.ClassificationProblem.from_clients` (and ``from_arrays``),
:meth:`~fedsde.problems.populations.base.PopulationProblem.create` and (the model's ``model`` and ``l2``)
:func:`~fedsde.problems.classification.datasets.federated_classification` take them whole or, through
:func:`fedsde.params.takes_values`, as the keywords of their fields (the keys of a ``kind = "classification"`` problem
file, :mod:`fedsde.problems.data_files`)::

    from fedsde.problems import ClassificationProblem, Classifier, Minibatches
    ClassificationProblem.from_clients(Xs, ys, classifier=Classifier("mlp", hidden=16, l2=1e-4),
                                       minibatches=Minibatches(batch_size=16, sampling="epoch"))
    ClassificationProblem.from_clients(Xs, ys, model="mlp", hidden=16, l2=1e-4, batch_size=16, sampling="epoch")
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fedsde import _validate
from fedsde.errors import FedsdeInputError
from fedsde.problems.classification.models import MODEL_TYPES, MODELS, model_type
from fedsde.problems.evaluation import Evaluation

#: how a client's minibatches are drawn: afresh every step, or consecutive batches of a per-epoch permutation
SAMPLINGS = ("minibatch", "epoch")


@dataclass(frozen=True)
class Classifier:
    """The model every client fits and its ridge: ``ℓ`` of a logistic or softmax regression or a one-hidden-layer
    tanh MLP on ``x̃ = (x, 1)``, ``F_k(w) = (1/N_k) Σ_i ℓ(w; x_i, y_i) + (λ/2)‖w‖²``
    (:mod:`fedsde.problems.classification.problem`), and the seed of its starting point.

    Parameters
    ----------
    model : {"logistic", "softmax", "mlp"}, optional
        Default (``None``): logistic for two classes, softmax otherwise, decided where the labels are known
        (:meth:`for_classes`).
    hidden : int, optional
        Hidden units ``H`` of the MLP: required with ``model="mlp"``, refused otherwise.
    fit_intercept : bool
        Append the intercept column (``x̃ = (x, 1)``; the intercept is regularised).
    l2 : float
        Ridge coefficient ``λ >= 0`` (with ``λ = 0`` the optimum may not exist on separable data).
    init_seed : int, optional
        Seed of the MLP's Glorot starting weights (``None``: 0; the linear models start at zero).

    Notes
    -----
    The problem keeps the fields as its attributes (``problem.model``, ``problem.hidden`` (0 for the linear models),
    ``problem.l2``, …); its :attr:`~fedsde.problems.ClassificationProblem.classifier` is the model object built from
    them.
    """

    model: str | None = None
    hidden: int | None = None
    fit_intercept: bool = True
    l2: float = 1e-3
    init_seed: int | None = None
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.model is not None:
            _validate.choice("model", self.model, MODELS)
        if self.model is not None and MODEL_TYPES[self.model].hidden_layer:
            if self.hidden is None:
                raise FedsdeInputError(f"hidden: required for model={self.model!r} (number of hidden units, an "
                                       "integer >= 1)")
            object.__setattr__(self, "hidden", _validate.positive_int("hidden", self.hidden))
        elif self.hidden is not None:
            shown = repr(self.model) if self.model is not None else "None: logistic or softmax by the labels"
            raise FedsdeInputError(f"hidden={self.hidden!r}: only allowed with model='mlp' (model={shown})")
        object.__setattr__(self, "fit_intercept", bool(self.fit_intercept))
        object.__setattr__(self, "l2", _validate.positive_float("l2", self.l2, allow_zero=True))
        if self.init_seed is not None:
            object.__setattr__(self, "init_seed", _validate.positive_int("init_seed", self.init_seed, minimum=0))
        object.__setattr__(self, "validated", True)

    def for_classes(self, n_classes: int) -> tuple[str, int]:
        """The model's name for ``n_classes`` labels (the default chosen; a logistic model refused unless
        ``n_classes == 2``) and its hidden units (0 for the linear models)."""
        model = self.model or ("logistic" if n_classes == 2 else "softmax")
        MODEL_TYPES[model].check_classes(n_classes)
        return model, self.hidden or 0


@dataclass(frozen=True)
class Minibatches:
    """How every client draws the samples of a local step.

    Parameters
    ----------
    batch_size : int, optional
        Minibatch size ``b`` of every client (capped at ``N_k``), read by the simulator's default gradient oracle;
        ``None``: none given (pass ``EpochSteps`` or an oracle to the simulator).
    sampling : {"minibatch", "epoch"}
        Minibatches drawn afresh every step (without replacement within a batch; the covariance of seed 002, Sec. 3),
        or consecutive batches of a per-epoch permutation.
    """

    batch_size: int | None = None
    sampling: str = "minibatch"
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.batch_size is not None:
            object.__setattr__(self, "batch_size", _validate.positive_int("batch_size", self.batch_size))
        _validate.choice("sampling", self.sampling, SAMPLINGS)
        object.__setattr__(self, "validated", True)


#: the values a problem is built with when none is given (checked once, here)
DEFAULTS = (Classifier(), Minibatches(), Evaluation())
#: what :meth:`~fedsde.problems.ClassificationProblem.replace` may change
REPLACEABLE = ("model", "hidden", "l2", "p", "batch_size", "sampling", "init_seed", "metric_samples", "name", "info")


def values_of(problem) -> tuple[Classifier, Minibatches, Evaluation]:
    """The values a classification problem was built with (kept by it; for one built field by field, made from its
    attributes and checked)."""
    if "options" not in problem._cache:
        problem._cache["options"] = (
            Classifier(problem.model, problem.hidden or None, problem.fit_intercept, problem.l2, problem.init_seed),
            Minibatches(problem.batch_size, problem.sampling), Evaluation(problem.metric_samples))
    return problem._cache["options"]


def changed_values(problem, changes: dict) -> tuple[Classifier, Minibatches, Evaluation]:
    """The values of a copy of ``problem`` with the fields ``changes`` (of :data:`REPLACEABLE`): a value whose fields
    change is built again from the problem's fields and the changes (checked together: a model without a hidden
    layer drops ``hidden``), the others are the problem's own (trusted)."""
    bad = sorted(set(changes) - set(REPLACEABLE))
    if bad:
        raise FedsdeInputError(f"replace: unknown field(s) {', '.join(bad)} (allowed: {', '.join(REPLACEABLE)})")
    classifier, minibatches, evaluation = values_of(problem)
    kw = {"model": problem.model, "hidden": problem.hidden or None, "l2": problem.l2, "init_seed": problem.init_seed,
          "batch_size": problem.batch_size, "sampling": problem.sampling, "metric_samples": problem.metric_samples}
    if not getattr(model_type(changes.get("model", problem.model)), "hidden_layer", False):
        kw["hidden"] = None
    kw |= changes
    if changes.keys() & {"model", "hidden", "l2", "init_seed"}:
        classifier = Classifier(kw["model"], kw["hidden"], problem.fit_intercept, kw["l2"], kw["init_seed"])
    if changes.keys() & {"batch_size", "sampling"}:
        minibatches = Minibatches(kw["batch_size"], kw["sampling"])
    if "metric_samples" in changes:
        evaluation = Evaluation(kw["metric_samples"])
    return classifier, minibatches, evaluation


#: the values a classification problem's constructors take (``takes_values(types=…)``) and the fields they read
VALUE_TYPES = {"classifier": Classifier, "minibatches": Minibatches, "evaluation": Evaluation}
VALUE_FIELDS = {"classifier": ("model", "hidden", "fit_intercept", "l2", "init_seed"),
                "minibatches": ("batch_size", "sampling"), "evaluation": ("metric_samples",)}

__all__ = ["DEFAULTS", "REPLACEABLE", "SAMPLINGS", "VALUE_FIELDS", "VALUE_TYPES", "Classifier", "Minibatches",
           "changed_values", "values_of"]
