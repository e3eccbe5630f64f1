"""Closed-form laws of the discrete FedAvg chain on quadratic clients (no sampling)."""

from fedsde.exact.aggregators import (
    NoExactLawError,
    aggregator_round_law,
    aggregator_round_weights,
    aggregator_stationary_law,
    aggregator_transient_moments,
    surrogate_optimum,
)
from fedsde.exact.moments import Moments, StationaryLaw, stationary_law, transient_moments
from fedsde.exact.round_law import RoundLaw, client_round_maps, geometric_sum, round_law

__all__ = [
    "Moments",
    "NoExactLawError",
    "RoundLaw",
    "StationaryLaw",
    "aggregator_round_law",
    "aggregator_round_weights",
    "aggregator_stationary_law",
    "aggregator_transient_moments",
    "client_round_maps",
    "geometric_sum",
    "round_law",
    "stationary_law",
    "surrogate_optimum",
    "transient_moments",
]
