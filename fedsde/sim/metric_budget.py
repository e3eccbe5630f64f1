"""The evaluation subsample of a run's metrics when nobody chose one: for your own model (``kind = "module"``) as
many rows as keep the metrics within a quarter of the run's local training
(:func:`fedsde.problems.module.metrics.metric_budget`), so that ``simulate(…, metrics=True)`` and ``fedsde simulate``
evaluate the same rows."""

from __future__ import annotations

import numpy as np

from fedsde.sim.result import MetricRequest

#: what ``sampling["chosen_by"]`` says of a subsample sized by :func:`default_metric_request`
BUDGET_REASON = "sized to cost at most a quarter of the run (--metric-samples all: every row)"


def training_work(problem, local_steps, rounds: int, participation: int | None) -> tuple[float, float]:
    """Rows and client steps one replicate runs through the model in local steps over ``rounds`` (expected, for the
    cost model of :func:`fedsde.problems.module.metrics.metric_budget`): ``Σ_k τ_k b_k`` and ``Σ_k τ_k`` per round
    (``b_k``: the batch, at most ``N_k`` without replacement, ``N_k`` for full batches), times ``m/Q`` with ``m``
    participants."""
    from fedsde.clients.steps import EpochSteps, RandomSteps

    sizes = np.asarray(problem.sizes, dtype=np.float64)
    b = getattr(problem, "batch_size", None)
    if b is None:
        batch = sizes
    elif getattr(problem, "sampling", "") == "with-replacement":
        batch = np.full_like(sizes, float(b))
    else:
        batch = np.minimum(sizes, float(b))
    if isinstance(local_steps, EpochSteps):
        steps, batch = (np.asarray(v, dtype=np.float64) for v in local_steps.fixed())
    elif isinstance(local_steps, RandomSteps):
        steps = 0.5 * (local_steps.low + local_steps.high) * np.broadcast_to(
            np.asarray(local_steps.multiplier, dtype=np.float64), sizes.shape)
    else:
        steps = np.broadcast_to(np.asarray(local_steps, dtype=np.float64), sizes.shape)
    share = 1.0 if participation is None else min(1.0, participation / sizes.size)
    return float(rounds * share * np.sum(steps * batch)), float(rounds * share * np.sum(steps))


def default_metric_request(problem, local_steps, rounds: int, participation: int | None, records: int,
                           names=None) -> MetricRequest:
    """The :class:`~fedsde.sim.result.MetricRequest` of a run whose caller named no subsample: the problem's own
    ``metric_samples`` where it has one; for a module problem (not a population) the budget of
    :func:`fedsde.problems.module.metrics.metric_budget` for ``records`` recorded rounds; else every row."""
    from fedsde.problems.module import is_module_problem

    if getattr(problem, "metric_samples", None) is None and is_module_problem(problem) \
            and not hasattr(problem, "population"):
        from fedsde.problems.module.metrics import metric_budget

        rows, steps = training_work(problem, local_steps, rounds, participation)
        m, groups = metric_budget(problem, train_rows=rows, train_steps=steps, records=records)
        return MetricRequest(names, m, groups, BUDGET_REASON)
    return MetricRequest(names)
