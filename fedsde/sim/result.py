"""What :func:`fedsde.sim.simulate` returns: the recorded server weights (or their moments), client drift and the
metrics of the recorded weights."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from fedsde._samples import ReplicateMoments
from fedsde.sim.moments import StreamingMoments


@dataclass(frozen=True)
class MetricRequest:
    """Which metrics of a run to evaluate, and on what: ``names`` (default every metric the problem defines),
    ``samples`` (rows of the evaluation subsample; ``None``: the problem's own choice) and ``groups`` (the subsample's
    groups for the standard error of ‖∇F‖², module problems), with ``chosen_by`` saying who chose the subsample
    (reported in ``sampling``)."""

    names: Sequence[str] | None = None
    samples: int | str | None = None
    groups: int | None = None
    chosen_by: str | None = None


@dataclass
class SimulationResult(ReplicateMoments):
    """Server weights (and optionally client drift and metrics) recorded during a simulation.

    Attributes
    ----------
    rounds : ndarray of int, shape (T,)
        Recorded round indices (round 0 is the start).
    weights : ndarray, shape (T, R, d)
        Server weights of every replicate at the recorded rounds.
    drift_rounds : ndarray of int, shape (T_d,)
        Rounds whose local training was recorded (empty unless ``record_drift``).
    drift : ndarray, shape (T_d, E_max, R, Q) or None
        ``‖w_k^{(i)} − w_n‖`` after local step ``i = 1..E_max`` (``E_max`` = most local steps); entries past a
        client's ``τ_k`` repeat its final value.
    config : dict
        The arguments of the run (for records).
    streamed : StreamingMoments or None
        With ``moments_only=True``: the moments accumulated over chunks (``weights`` is then None).
    metric_request : MetricRequest or None
        The metrics and the evaluation subsample that ``simulate(…, metrics=…)`` used (:meth:`evaluate`'s default).
    metrics : MetricValues or None
        With ``simulate(…, metrics=…)``: name → values of shape (T, R) at the recorded rounds, with ``se`` and
        ``sampling`` (:class:`fedsde.problems.metrics.MetricValues`); :meth:`metric_summary` gives their means and
        standard errors over replicates.
    """

    rounds: np.ndarray
    weights: np.ndarray | None
    drift_rounds: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    drift: np.ndarray | None = None
    config: dict = field(default_factory=dict)
    streamed: StreamingMoments | None = None
    metrics: dict | None = None
    metric_request: MetricRequest | None = None

    def evaluate(self, problem, names: Sequence[str] | None = None, w0=None, *, progress: bool = False,
                 request: MetricRequest | None = None):
        """The metrics of the recorded weights on ``problem`` (:func:`fedsde.problems.metrics.evaluate_metrics`):
        name → values (T, R), with ``se`` and ``sampling``; ``w0`` is the start of ``distance_from_start`` (default the
        problem's initial weights where it has them, else zero); ``progress``: a bar on stderr.  ``request``: the
        evaluation subsample (:class:`MetricRequest`; default the run's own, :attr:`metric_request`, else the
        problem's).  A module problem's metrics run in
        torch in the run's precision on its device; the others in float64 NumPy."""
        from fedsde._progress import counting
        from fedsde.errors import FedsdeInputError
        from fedsde.problems.metrics import evaluate_metrics, evaluate_metrics_torch
        from fedsde.problems.module import is_module_problem

        if self.weights is None:
            raise FedsdeInputError("metrics: the run kept moments only (moments_only=True); the metrics need the "
                                   "weights of every replicate")
        if request is None:
            request = MetricRequest() if self.metric_request is None else self.metric_request
        req = request if names is None else replace(request, names=list(names))
        names = req.names
        T, R = self.weights.shape[:2]
        W = np.swapaxes(self.weights, 0, 1)  # replicate-major (R, T, d), the order `fedsde simulate` evaluates in
        with counting(T * R, "metrics", enabled=progress, unit="model"):
            if is_module_problem(problem):  # your own model: in the run's precision, where it ran
                import torch

                dtype = getattr(torch, str(self.config.get("dtype", "float64")))
                got = evaluate_metrics_torch(problem, torch.as_tensor(W).to(self.config.get("device", "cpu"), dtype),
                                             w0, names, metric_samples=req.samples, metric_groups=req.groups)
                vals = got.mapped(lambda v: v.double().cpu().numpy())
            else:
                vals = evaluate_metrics(problem, W, w0, names, metric_samples=req.samples)
        if vals.sampling and req.chosen_by is not None:
            vals.sampling["chosen_by"] = req.chosen_by
        return vals.mapped(lambda v: v.T)

    def metric_summary(self) -> dict[str, dict[str, np.ndarray]]:
        """``metrics`` as name → ``{"mean": (T,), "se": (T,)}`` over replicates (and ``sample_se`` for metrics
        estimated on a subsample; :func:`fedsde.problems.metrics.summarise`): what ``fedsde simulate --json``
        reports as ``metrics``."""
        from fedsde.errors import FedsdeInputError
        from fedsde.problems.metrics import MetricValues, summarise

        if self.metrics is None:
            raise FedsdeInputError("metrics: this run has none; pass metrics=True (or names) to simulate, or call "
                                   "evaluate(problem)")
        m = self.metrics
        if not isinstance(m, MetricValues):
            m = MetricValues(m)
        return summarise(m.mapped(lambda v: np.asarray(v).T), axis=0)
