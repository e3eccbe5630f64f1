"""The options of a run that travel together: what it keeps (:class:`Recording`), how the SDE is integrated
(:class:`Integrator`) and the validity test's margins (:class:`Equivalence`); see :mod:`fedsde.params`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fedsde import _validate
from fedsde._samples import FINAL_COV
from fedsde.errors import FedsdeInputError

#: the SDE's integration methods (:func:`fedsde.sde.simulate_sde`)
METHODS = ("euler", "exact")
#: the general SDE's diffusion estimators from its inner rollouts (:class:`fedsde.sde.models.FedAvgSDE`)
ESTIMATORS = ("compensated", "unbiased")


@dataclass(frozen=True)
class Recording:
    """What a run keeps, as diffrax's ``SaveAt``; each function reads the fields it names in its docstring.

    Parameters
    ----------
    record : sequence of int or bool, optional
        Rounds (``0..rounds``) whose weights are kept (default: the function's own, usually every round).
    record_every : int
        Grid spacing in rounds (the validity test's metric grid).
    record_drift : bool or sequence of int
        Also record the clients' drift ``‖w_k^{(i)} − w_n‖`` at every local step (the simulator).
    moments_only : bool
        Keep only the streamed mean and covariance, not every replicate's weights.
    metrics : bool, sequence of str or MetricRequest, optional
        Metrics of the weights to evaluate (names checked against the problem where it is known).
    full_cov_rounds : sequence of int, optional
        With ``moments_only``: the rounds whose full (d, d) covariance is kept (the SDE).
    final_cov : {"full", "diag", "none"}, optional
        What a final weight covariance keeps (default by ``d``, :data:`fedsde._samples.FULL_COV_MAX_D`).
    on_record : callable, optional
        ``on_record(n, start, w)`` at every recorded round with a chunk's states (the SDE).

    Notes
    -----
    ``record_every``, ``moments_only`` and ``final_cov`` are checked here; the rounds against the run's ``rounds``
    and the metric names against its problem where the run starts, once.
    """

    record: Sequence[int] | bool | None = None
    record_every: int = 1
    record_drift: bool | Sequence[int] = False
    moments_only: bool = False
    metrics: Any = None
    full_cov_rounds: Sequence[int] | None = None
    final_cov: str | None = None
    on_record: Callable | None = None
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "record_every", _validate.positive_int("record_every", self.record_every))
        object.__setattr__(self, "moments_only", bool(self.moments_only))
        if self.final_cov is not None:
            _validate.choice("final_cov", self.final_cov, FINAL_COV)
        if self.on_record is not None and not callable(self.on_record):
            raise FedsdeInputError(f"on_record={self.on_record!r}: must be callable")
        object.__setattr__(self, "validated", True)


@dataclass(frozen=True)
class Integrator:
    """How the SDE is integrated (torchsde's ``method`` and its options).

    Parameters
    ----------
    method : {"euler", "exact"}
        torchsde Euler–Maruyama, or exact OU transitions over each round (linear variants).
    substeps : int
        Euler steps per round (``dt = h/substeps``).
    float32_draws : bool
        Faster float32 Brownian draws (:class:`fedsde.sde.brownian.GridBrownian`).
    inner_samples : int
        The general SDE (``variant="general"``) only, integrated by the Monte-Carlo-coefficient Euler scheme: ``K``
        client rollouts per path and step from which its drift and diffusion are estimated
        (:class:`fedsde.sde.models.FedAvgSDE`; cost ``paths · K · Σ_k τ_k`` stochastic gradients per step).
    estimator : {"compensated", "unbiased"}
        The general SDE only: how the diffusion is estimated from the ``K`` rollouts (``"unbiased"`` needs
        ``K >= 2``; :class:`fedsde.sde.models.FedAvgSDE`).
    """

    method: str = "euler"
    substeps: int = 1
    float32_draws: bool = False
    inner_samples: int = 16
    estimator: str = "compensated"
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _validate.choice("method", self.method, METHODS)
        object.__setattr__(self, "substeps", _validate.positive_int("substeps", self.substeps))
        object.__setattr__(self, "float32_draws", bool(self.float32_draws))
        object.__setattr__(self, "inner_samples", _validate.positive_int("inner_samples", self.inner_samples))
        _validate.choice("estimator", self.estimator, ESTIMATORS)
        if self.estimator == "unbiased" and self.inner_samples < 2:
            raise FedsdeInputError(f"inner_samples={self.inner_samples}: estimator='unbiased' needs at least 2")
        object.__setattr__(self, "validated", True)


@dataclass(frozen=True)
class Equivalence:
    """The validity test's equivalence test: margins, level and the metrics it judges
    (:func:`fedsde.validity.verdict.validity_verdict`).

    Parameters
    ----------
    tolerance : float
        Largest accepted gap relative to the SDE's range (losses, ``‖∇F‖²``, distances).
    accuracy_tolerance : float
        Largest accepted gap of the test accuracy, in accuracy units (0.01: one point).
    alpha : float
        Family level of the simultaneous intervals, in (0, 1).
    verdict_metrics : sequence of str, optional
        Metrics judged (default all recorded; names checked against the problem where it is known).
    """

    tolerance: float = 0.05
    accuracy_tolerance: float = 0.01
    alpha: float = 0.05
    verdict_metrics: Sequence[str] | None = None
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tolerance", _validate.positive_float("tolerance", self.tolerance))
        object.__setattr__(self, "accuracy_tolerance",
                           _validate.positive_float("accuracy_tolerance", self.accuracy_tolerance))
        object.__setattr__(self, "alpha", _validate.unit_interval("alpha", self.alpha, open_left=True))
        object.__setattr__(self, "validated", True)


#: the defaults, built (and checked) once: what a function uses when it is given no value
DEFAULT_RECORDING = Recording()
DEFAULT_INTEGRATOR = Integrator()
DEFAULT_EQUIVALENCE = Equivalence()
