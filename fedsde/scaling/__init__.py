"""First-order SDE scaling rules for FedAvg: which changes of (η, E, s, Q, b) leave the dynamics unchanged.

Derivation (seed 002, Sec. 3–4, to first order in ``η``).  One round from ``w`` with local steps
``w ← w − η(∇F_k(w) + ξ)``, ``Cov ξ = Σ_k(w)``, and server step ``w' = w + s Σ_k p_k Δ_k`` has

    Δ_k = −η Σ_{m<E} ∇F_k(w_k^{(m)}) − η Σ_{m<E} ξ_m = −ηE ∇F_k(w) − η Σ_{m<E} ξ_m + O(η²E²),

so the server displacement ``w' − w`` has mean ``−s·η·E·∇F(w) + O(s·η²·E²)`` and covariance
``s²·η²·E·Σ_k p_k² Σ_k(w) + O(s²·η³·E²)``.  On the clock ``τ = n·s·η·E`` (one round lasts ``dτ = s·η·E``) these
are the increments of

    dw = −∇F(w) dτ + (s·η·Σ_k p_k² Σ_k(w))^{1/2} dB_τ,

whose only parameters are the *temperature* ``T = s·η·Σ_k p_k² Σ_k`` and the horizon ``τ``; ``E`` has dropped
out. Any change of ``(η, E, s, Q, b)`` that keeps ``T`` and ``τ`` leaves the SDE unchanged, and the two discrete
runs then differ by the O(η) terms above (weak order one, at a fixed ``τ``): the rules of :data:`RULES`
(``local-steps``, ``server-client``, ``clients``, ``batch``, ``client-lr``), all linear rules in the sense of Goyal
et al. (2017); ``batch`` puts the finite-population factor ``g = f(b)/f(κb)`` where the linear rule
(``batch-linear``) puts ``κ`` (:mod:`fedsde.scaling.batch_rule`). On quadratic clients the O(η) term is explicit
(:func:`first_order_correction`), which gives the rate at which the discrepancy vanishes as ``η → 0``. Two rules are
exact to every order: ``server-client`` at ``E = 1`` for any loss (the round depends on ``s·η`` only) and
``local-steps`` at ``s = 1`` on quadratic clients with one Hessian; over long horizons the O(η) terms of the others
accumulate where the minima form a manifold (:attr:`ScalingRule.horizon`; :mod:`fedsde.scaling.horizon` shows the
``local-steps`` rule's gap on a logistic loss with identical clients).

Mapping: :func:`apply_rule` (``FedAvgConfig`` × ``κ`` → ``FedAvgConfig``).  Exact checks on quadratic clients:
:func:`compare_quadratic`; on least-squares regression problems (exact minibatch moments):
:func:`compare_least_squares`.  Simulation checks on classification problems: :func:`compare_data`
(common random numbers with paired standard errors; notes when a measured invariant moves beyond
:data:`TEMPERATURE_TOL`; memory estimated and checked before anything runs, :func:`memory_need`).  Long horizons:
:func:`horizon_discrepancy`.
"""

from __future__ import annotations

import importlib

#: public name -> the module of fedsde.scaling that defines it (imported on first use: the command line reads
#: the rules without importing the simulator)
_EXPORTS = {
    "ALL_RULES": "rules",
    "BATCH_LINEAR": "rules",
    "BatchFactor": "batch_rule",
    "batch_factor": "batch_rule",
    "problem_batch_factor": "batch_rule",
    "DataScaling": "data",
    "EndLaw": "quadratic",
    "FedAvgConfig": "rules",
    "HorizonCurves": "horizon",
    "LeastSquaresEnd": "least_squares",
    "LeastSquaresScaling": "least_squares",
    "MetricCurves": "data",
    "NAIVE": "rules",
    "QuadraticScaling": "quadratic",
    "RULES": "rules",
    "ScalingRule": "rules",
    "TEMPERATURE_TOL": "data",
    "apply_rule": "rules",
    "compare_data": "data",
    "compare_least_squares": "least_squares",
    "compare_quadratic": "quadratic",
    "end_law": "quadratic",
    "first_order_coefficients": "quadratic",
    "first_order_correction": "quadratic",
    "get_rule": "rules",
    "horizon_discrepancy": "horizon",
    "invariant_notes": "data",
    "law_discrepancy": "quadratic",
    "memory_need": "data",
    "moment_discrepancy": "quadratic",
    "noisy_logistic_problem": "horizon",
    "paired_difference": "data",
    "quadratic_model": "horizon",
    "scaled_problem": "quadratic",
    "copy_clients": "least_squares_clients",
    "split_rows": "least_squares_clients",
    "split_clients": "data",
    "temperature_matrix": "quadratic",
    "temperature_trace": "data",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"fedsde.scaling.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'fedsde.scaling' has no attribute {name!r}")
