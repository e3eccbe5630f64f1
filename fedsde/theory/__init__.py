"""Theory as executable checks: constants, bounds (as printed and corrected), empirical sides, CLT diagnostics.

Modules
-------
:mod:`~fedsde.theory.constants`
    ``L``, ``L_∞``, ``μ``, ``Tr Σ_k``, ``V*``, ``τ``, ``F*``, ``w*`` for quadratic clients (on a stated region) and
    for logistic/softmax clients, each a :class:`~fedsde.theory.results.Constant` saying how it was obtained.
:mod:`~fedsde.theory.schedules`
    ``η(t) = c(1+t)^(−b)`` and the integrals of seed 002's Thms 4.5/4.9.
:mod:`~fedsde.theory.bounds_002`
    Seed 002: Thm 4.5, Cor 4.6, Cor 4.7, Thm 4.9, Cor 4.10, Lemma A.1 (``variant="paper" | "corrected"``).
:mod:`~fedsde.theory.empirical`
    Left-hand sides: η-weighted random-time averages from the exact chain or the simulator; client drift.
:mod:`~fedsde.theory.clt`
    Normality of the server update as ``Q`` grows (Thm 5.4): skewness, kurtosis, KS, Mardia, Lyapunov ratio.
:mod:`~fedsde.theory.fednova`, :mod:`~fedsde.theory.feddisco`, :mod:`~fedsde.theory.fedaware`
    The bounds of seeds 003, 004, 000.
:mod:`~fedsde.theory.sampling`
    Exact moments of FedAvg under client sampling (unbiased, renormalised, multinomial) by enumerating the weights.
:mod:`~fedsde.theory.claims`
    The claims registry behind ``fedsde claims`` (imported on demand).
"""

from __future__ import annotations

from fedsde.theory.bounds_002 import (
    BoundInputs,
    cor_4_6,
    cor_4_6_rate,
    cor_4_7,
    cor_4_10,
    lemma_a_1,
    thm_4_5,
    thm_4_9,
)
from fedsde.theory.constants import (
    ConstantsReport,
    classification_constants,
    quadratic_constants,
    quadratic_region_radius,
    v_hat_1,
)
from fedsde.theory.empirical import (
    ChainPath,
    drift_measurements,
    quadratic_exact_path,
    random_time_average,
    simulated_path,
)
from fedsde.theory.results import BoundValue, Constant, Estimate, Verdict, compare_bound
from fedsde.theory.sampling import sampled_moments, weighting_distribution
from fedsde.theory.schedules import PowerSchedule

__all__ = [
    "BoundInputs",
    "BoundValue",
    "ChainPath",
    "Constant",
    "ConstantsReport",
    "Estimate",
    "PowerSchedule",
    "Verdict",
    "classification_constants",
    "compare_bound",
    "cor_4_6",
    "cor_4_6_rate",
    "cor_4_7",
    "cor_4_10",
    "drift_measurements",
    "lemma_a_1",
    "quadratic_constants",
    "quadratic_exact_path",
    "quadratic_region_radius",
    "random_time_average",
    "sampled_moments",
    "simulated_path",
    "thm_4_5",
    "thm_4_9",
    "v_hat_1",
    "weighting_distribution",
]
