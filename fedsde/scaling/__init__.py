"""First-order SDE scaling rules for FedAvg: which changes of (η, E, s, Q, b) leave the dynamics unchanged.

Derivation (seed 002, Sec. 3–4, to first order in ``η``).  One round from ``w`` with local steps
``w ← w − η(∇F_k(w) + ξ)``, ``Cov ξ = Σ_k(w)``, and server step ``w' = w + s Σ_k p_k Δ_k`` has

    Δ_k = −η Σ_{m<E} ∇F_k(w_k^{(m)}) − η Σ_{m<E} ξ_m = −ηE ∇F_k(w) − η Σ_{m<E} ξ_m + O(η²E²),

so the server displacement ``w' − w`` has mean ``−s·η·E·∇F(w) + O(s·η²·E²)`` and covariance
``s²·η²·E·Σ_k p_k² Σ_k(w) + O(s²·η³·E²)``.  On the clock ``τ = n·s·η·E`` (one round lasts ``dτ = s·η·E``) these
are the increments of

    dw = −∇F(w) dτ + (s·η·Σ_k p_k² Σ_k(w))^{1/2} dB_τ,

whose only parameters are the *temperature* ``T = s·η·Σ_k p_k² Σ_k`` and the horizon ``τ``; ``E`` has dropped
out.  Any change of ``(η, E, s, Q, b)`` that keeps ``T`` and ``τ`` leaves the SDE unchanged, and the two discrete
runs then differ by the O(η) terms above (weak order one): the rules of :data:`RULES`.  On quadratic clients
the O(η) term is explicit (:func:`first_order_correction`), which gives the rate at which the discrepancy
vanishes as ``η → 0``.

Mapping: :func:`apply_rule` (``FedAvgConfig`` × ``κ`` → ``FedAvgConfig``).  Exact checks on quadratic clients:
:func:`compare_quadratic`.  Simulation checks on data problems: :func:`compare_data`
(common random numbers with paired standard errors; notes when a measured invariant moves beyond
:data:`TEMPERATURE_TOL`).
"""

from fedsde.scaling.data import (
    TEMPERATURE_TOL,
    DataScaling,
    MetricCurves,
    compare_data,
    invariant_notes,
    paired_difference,
    split_clients,
    temperature_trace,
)
from fedsde.scaling.quadratic import (
    EndLaw,
    QuadraticScaling,
    compare_quadratic,
    end_law,
    first_order_coefficients,
    first_order_correction,
    law_discrepancy,
    scaled_problem,
    temperature_matrix,
)
from fedsde.scaling.rules import NAIVE, RULES, FedAvgConfig, ScalingRule, apply_rule, get_rule

__all__ = [
    "NAIVE",
    "RULES",
    "TEMPERATURE_TOL",
    "DataScaling",
    "EndLaw",
    "FedAvgConfig",
    "MetricCurves",
    "QuadraticScaling",
    "ScalingRule",
    "apply_rule",
    "compare_data",
    "compare_quadratic",
    "end_law",
    "first_order_coefficients",
    "first_order_correction",
    "get_rule",
    "invariant_notes",
    "law_discrepancy",
    "paired_difference",
    "scaled_problem",
    "split_clients",
    "temperature_matrix",
    "temperature_trace",
]
