"""Closed-form laws of the discrete FedAvg chain on quadratic clients (no sampling)."""

from fedsde.exact.moments import Moments, StationaryLaw, stationary_law, transient_moments
from fedsde.exact.round_law import RoundLaw, client_round_maps, geometric_sum, round_law

__all__ = [
    "Moments",
    "RoundLaw",
    "StationaryLaw",
    "client_round_maps",
    "geometric_sum",
    "round_law",
    "stationary_law",
    "transient_moments",
]
