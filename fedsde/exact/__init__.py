"""Closed-form laws of the discrete FedAvg chain: quadratic clients with constant gradient noise (seed 002,
Assumption 6.1; no sampling), and least-squares clients with real minibatch sampling (state-dependent noise,
:mod:`fedsde.exact.least_squares`), with the constant-noise surrogate and the exact moments of their SDE."""

from fedsde.exact.aggregators import (
    NoExactLawError,
    aggregator_round_law,
    aggregator_round_weights,
    aggregator_stationary_law,
    aggregator_transient_moments,
    surrogate_optimum,
)
from fedsde.exact.least_squares import (
    LeastSquaresRoundLaw,
    LeastSquaresStationaryLaw,
    least_squares_round_law,
    least_squares_stationary_law,
)
from fedsde.exact.least_squares_sde import LeastSquaresSDE, SDEMoments, least_squares_sde, least_squares_sde_moments
from fedsde.exact.least_squares_surrogate import SurrogateGap, constant_noise_surrogate, surrogate_gap
from fedsde.exact.least_squares_transient import least_squares_transient_moments
from fedsde.exact.moments import Moments, StationaryLaw, stationary_law, transient_moments
from fedsde.exact.round_law import RoundLaw, client_round_maps, geometric_sum, round_law

__all__ = [
    "LeastSquaresRoundLaw",
    "LeastSquaresSDE",
    "LeastSquaresStationaryLaw",
    "Moments",
    "NoExactLawError",
    "RoundLaw",
    "SDEMoments",
    "StationaryLaw",
    "SurrogateGap",
    "aggregator_round_law",
    "aggregator_round_weights",
    "aggregator_stationary_law",
    "aggregator_transient_moments",
    "client_round_maps",
    "constant_noise_surrogate",
    "geometric_sum",
    "least_squares_round_law",
    "least_squares_sde",
    "least_squares_sde_moments",
    "least_squares_stationary_law",
    "least_squares_transient_moments",
    "round_law",
    "stationary_law",
    "surrogate_gap",
    "surrogate_optimum",
    "transient_moments",
]
