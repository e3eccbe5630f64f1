"""Exception types raised at fedsde's public boundaries.

Every user-facing mistake raises :class:`FedsdeInputError` (a ``ValueError``) whose message names the
argument, the offending value and the constraint it violates.  The command line turns these into a
one-line message and a non-zero exit status, without a traceback.
"""

from __future__ import annotations


class FedsdeInputError(ValueError):
    """Bad input at a public boundary (argument, value and constraint are named in the message)."""


class NoExactLawError(FedsdeInputError):
    """The server rule has no exact one-round law of the form ``round_law(..., weights=ω)`` (quadratic clients).

    Raised by :meth:`fedsde.aggregators.Aggregator.exact_weights` and the functions of :mod:`fedsde.exact` built on
    it; the message names the rule and why (server state, a local solver other than plain SGD, weights that depend
    on the sampled clients, or a rule not linear in the client displacements).
    """


class NoStationaryLawError(FedsdeInputError):
    """The chain (or SDE) has no stationary law for the given parameters."""


class SimulationDivergedError(RuntimeError):
    """A simulation produced NaN or inf; the message names the round and client where it happened."""


class DivergenceWarning(RuntimeWarning):
    """A run grew far beyond its start and the optimum (it is probably diverging); the message says where.

    Issued (once per run) by the simulator and the SDE integrator while they go on; the command line reports it
    on stderr and in the JSON ``warnings`` list, and turns it into an error (exit 2) under ``--strict``.
    """


class TrainingWarning(RuntimeWarning):
    """A run that does not train as asked: its train loss ended above its start, or its participation weights are
    so unequal that its steps are unreliable; the message names the likely cause and the remedies
    (:mod:`fedsde.sim.health`).  Reported like :class:`DivergenceWarning`.
    """
