"""How a data problem is evaluated, one value shared by every kind (:class:`Evaluation`): on how many rows its
metrics are estimated and, for a user's module, how a batch of its passes is computed."""

from __future__ import annotations

from dataclasses import dataclass, field

from fedsde import _validate

#: how a module's passes over (replicate, client) entries run (:mod:`fedsde.problems.module.batching`)
BATCHINGS = ("auto", "vmap", "loop")
#: the fewest rows a metric subsample may have (two per group of :data:`fedsde.problems.metrics.GROUPS`)
MIN_METRIC_SAMPLES = 32


@dataclass(frozen=True)
class Evaluation:
    """How a problem's metrics and passes are computed; none of it changes the objective ``F``.

    Taken whole (``evaluation=``) or as its fields' keywords by the constructors of the data problems:
    :meth:`~fedsde.problems.ClassificationProblem.from_clients` and ``from_arrays``,
    :meth:`~fedsde.problems.PopulationProblem.create` (``metric_samples`` only),
    :func:`~fedsde.problems.module_problem` and
    :func:`~fedsde.problems.module.population.module_population_problem` (both fields).  The problem file keys of
    the same names (``metric_samples``, ``batching``) build it.

    Parameters
    ----------
    metric_samples : int, optional
        Rows above which the metrics of :mod:`fedsde.problems.metrics` are estimated on a seeded subsample of this
        size (at least 32; ``None``: the problem's default, :data:`fedsde.problems.metrics.METRIC_SAMPLES`, or what
        a command's metric budget sets for a module).
    batching : {"auto", "vmap", "loop"}
        How a user's module evaluates a batch of (replicate, client) entries: one ``torch.func.vmap`` pass, a loop,
        or the faster of the two timed on the first call of every shape (:mod:`fedsde.problems.module.batching`).
    """

    metric_samples: int | None = None
    batching: str = "auto"
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.metric_samples is not None:
            object.__setattr__(self, "metric_samples", _validate.positive_int(
                "metric_samples", self.metric_samples, minimum=MIN_METRIC_SAMPLES))
        _validate.choice("batching", self.batching, BATCHINGS)
        object.__setattr__(self, "validated", True)


__all__ = ["BATCHINGS", "MIN_METRIC_SAMPLES", "Evaluation"]
