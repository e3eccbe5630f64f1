"""Run parameters as small frozen values, validated once where they are built and passed whole.

The same client rate, local steps, rounds, replicates, seed, device and dtype travel from a command through every
layer.  A few values group them, as diffrax groups its options (``SaveAt``, ``PIDController``), torchsde its
``options`` and Flower its ``ServerConfig``:

* :class:`Schedule` — FedAvg's schedule: client rate ``η``, local steps ``E`` (or per-client ``τ_k``), ``rounds``,
  server step ``s`` and the SDE's time step ``h`` (seed 002, Section 3: ``t = n·h``, ``s = h·η₀``);
* :class:`Replication` — independent runs: ``replicates``, ``seed`` and how they are cut (chunks, random blocks,
  worker threads), none of which changes a result;
* :class:`Precision` — the torch ``dtype`` and ``device`` of a run;
* :class:`Recording` — what a run keeps (diffrax's ``SaveAt``): recorded rounds, moments only, metrics;
* :class:`Integrator` — how the SDE is integrated (torchsde's ``method`` and options): method, substeps, draws;
* :class:`Equivalence` — the margins and level of the validity test's equivalence test;
* :class:`StepRefinement` — a weak error's refinement in the time step ``h`` at a fixed end time ``t``: ``η``,
  ``E``, the server rate ``η₀ = s/h`` and ``t`` fixed, one FedAvg :class:`Schedule` per step ``h_j``;
* :class:`EtaRefinement` — the refinement of an approximation order: the SDE's ``order`` and the client steps ``η``
  that shrink at a fixed horizon;
* :class:`ClientSampling` — client sampling: ``participation`` (clients per round) and their ``weighting``;
* :class:`SDEReference` — the validity test's SDE side: ``reference``, the SVAG ``ells``, the ``order`` of the SDE
  and common random numbers between the chains (``common_random``);
* :class:`ChainHooks` — what a caller plugs into one SVAG chain (an observer, a progress bar, a name, a clean-up).

Each checks its fields in ``__post_init__`` with the shared validators of :mod:`fedsde._validate` (one-line
:class:`~fedsde.errors.FedsdeInputError` naming the argument, its value and the constraint); a function handed one
trusts it.  The wide entry points take them whole (``simulate(problem, schedule, replication, precision, *, …)``)
and, through :func:`takes_values`, still take today's keywords (``simulate(problem, eta=…, local_steps=…,
rounds=…, replicates=…, seed=…)``), folded into the values once at the boundary::

    from fedsde.params import Replication, Schedule
    sched = Schedule(eta=0.05, local_steps=2, rounds=10)
    simulate(problem, sched, Replication(replicates=64, seed=0))     # the values
    simulate(problem, eta=0.05, local_steps=2, rounds=10, replicates=64, seed=0)   # the same run, old keywords

Values whose fields depend on the run (recorded rounds against ``rounds``, metric names against the problem) are
checked where the run is known, once.  This package imports no torch until a :class:`Precision` or a
``torch.Generator`` seed is built.
"""

from fedsde.params.chains import DEFAULT_SDE_REFERENCE, NO_HOOKS, ChainHooks, SDEReference
from fedsde.params.keywords import PRECISION_FIELDS, REPLICATION_FIELDS, VALUE_TYPES, takes_values, value_fields
from fedsde.params.options import (
    DEFAULT_EQUIVALENCE,
    DEFAULT_INTEGRATOR,
    DEFAULT_RECORDING,
    Equivalence,
    Integrator,
    Recording,
)
from fedsde.params.refinement import EtaRefinement, StepRefinement
from fedsde.params.run import Precision, Replication, Schedule, derive, fedavg_rates, local_steps_of, unpack
from fedsde.params.sampling import FULL_PARTICIPATION, WEIGHTINGS, ClientSampling

__all__ = [
    "DEFAULT_EQUIVALENCE", "DEFAULT_INTEGRATOR", "DEFAULT_RECORDING",
    "PRECISION_FIELDS", "REPLICATION_FIELDS", "VALUE_TYPES", "Equivalence", "Integrator", "Precision", "Recording",
    "Replication", "Schedule", "derive", "fedavg_rates", "local_steps_of", "takes_values",
    "unpack", "value_fields",
]
__all__ += ["EtaRefinement", "StepRefinement"]  # the refinements at a fixed end time

__all__ += ["DEFAULT_SDE_REFERENCE", "FULL_PARTICIPATION", "NO_HOOKS", "WEIGHTINGS", "ChainHooks", "ClientSampling",
            "SDEReference"]
