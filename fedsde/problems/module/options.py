"""The options of a module problem that travel together, as small frozen values checked once where they are built
(torch is not imported): what the module is trained on (:class:`ModuleTraining`: loss, ridge, initial weights) and
how a client draws its rows (:class:`ModuleBatches`).  With :class:`~fedsde.problems.evaluation.Evaluation` (the
metrics' rows, vmap or loop) they are what :func:`~fedsde.problems.module.problem.module_problem` and
:func:`~fedsde.problems.module.population.module_population_problem` take, whole or as the keywords of their
fields (the keys of a ``kind = "module"`` problem file, :mod:`fedsde.problems.module.files`)::

    from fedsde.problems import Evaluation, ModuleBatches, ModuleTraining, module_problem
    module_problem(Net, x, y, client, training=ModuleTraining("nll", l2=1e-4), batches=ModuleBatches(16),
                   evaluation=Evaluation(batching="loop"))
    module_problem(Net, x, y, client, loss="nll", l2=1e-4, batch_size=16, batching="loop")   # the same problem
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fedsde import _validate
from fedsde.errors import FedsdeInputError
from fedsde.problems.evaluation import Evaluation

#: the per-row losses (:mod:`fedsde.problems.module.functional`)
LOSSES = ("cross-entropy", "nll", "mse")
#: losses of integer class labels (their targets are labels, their metrics include the accuracy)
LABEL_LOSSES = ("cross-entropy", "nll")
#: how a local step draws its ``b`` rows from the client's ``N_k``
SAMPLINGS = ("without-replacement", "with-replacement")


@dataclass(frozen=True)
class ModuleTraining:
    """What a user's module is trained on: the loss of a row, the ridge and the seed of its initial weights
    (``F_k(w) = (1/N_k) Σ_i ℓ(f_w(x_i), y_i) + (λ/2)‖w‖²``, :mod:`fedsde.problems.module.problem`).

    Parameters
    ----------
    loss : {"cross-entropy", "nll", "mse"}
        Cross-entropy of logits and integer labels, ``nll`` of log-probabilities (a model ending in
        ``log_softmax``), or the squared error of numeric targets.
    l2 : float
        Ridge ``λ >= 0`` (``F`` gets ``(λ/2)‖w‖²``, a step ``λw``).
    init_seed : int
        ``torch.manual_seed(init_seed)`` before the module is built from its class or function (the global RNG
        state is restored afterwards).
    """

    loss: str = "cross-entropy"
    l2: float = 0.0
    init_seed: int = 0
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _validate.choice("loss", self.loss, LOSSES)
        object.__setattr__(self, "l2", _validate.positive_float("l2", self.l2, allow_zero=True))
        object.__setattr__(self, "init_seed", _validate.positive_int("init_seed", self.init_seed, minimum=0))
        object.__setattr__(self, "validated", True)


@dataclass(frozen=True)
class ModuleBatches:
    """How every client draws the rows of a local step.

    Parameters
    ----------
    batch_size : int or "full"
        Rows per local step, or the client's whole data (``"full"`` and ``None`` alike; held as ``None``, as the
        problem's ``batch_size``).  Without replacement a client with fewer rows uses all of them (a
        :class:`~fedsde.problems.module.checks.BatchSizeWarning` says which).
    sampling : {"without-replacement", "with-replacement"}
        A minibatch of distinct rows drawn afresh every step, or rows drawn independently.
    """

    batch_size: int | str | None = "full"
    sampling: str = "without-replacement"
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.batch_size is None or (isinstance(self.batch_size, str) and self.batch_size == "full"):
            object.__setattr__(self, "batch_size", None)
        elif isinstance(self.batch_size, str):
            raise FedsdeInputError(f"batch_size={self.batch_size!r}: must be an integer >= 1 or 'full'")
        else:
            object.__setattr__(self, "batch_size", _validate.positive_int("batch_size", self.batch_size))
        _validate.choice("sampling", self.sampling, SAMPLINGS)
        object.__setattr__(self, "validated", True)


#: the values a module problem's constructors take (``takes_values(types=…)``) and the fields they read
VALUE_TYPES = {"training": ModuleTraining, "batches": ModuleBatches, "evaluation": Evaluation}
VALUE_FIELDS = {"training": ("loss", "l2", "init_seed"), "batches": ("batch_size", "sampling"),
                "evaluation": ("metric_samples", "batching")}

__all__ = ["LABEL_LOSSES", "LOSSES", "SAMPLINGS", "VALUE_FIELDS", "VALUE_TYPES", "ModuleBatches", "ModuleTraining"]
