"""Server aggregation rules, vectorised over replicates (see :mod:`fedsde.aggregators.base`).

| name | rule | source |
|---|---|---|
| ``fedavg`` | ``w + s Σ ω_k Δ_k`` | McMahan et al. 2017; seed 002 |
| ``fedavgm`` | server heavy-ball / Nesterov momentum | Hsu et al. 2019 |
| ``fedadam``, ``fedyogi``, ``fedadagrad`` | adaptive server steps | Reddi et al. 2021 |
| ``fedprox`` | proximal local solver, FedAvg server | Li et al. 2020 |
| ``scaffold`` | control variates (options I/II) | Karimireddy et al. 2020 |
| ``fednova`` | normalised averaging | seed 003 |
| ``feddisco`` | discrepancy-aware weights for a base rule | seed 004 |
| ``fedaware`` | per-client momenta, min-norm weights | seeds 000/001 |

Each rule declares what it can do (:class:`~fedsde.aggregators.base.Aggregator`: ``exact_weights``,
``server_recursion``, ``stateful``, ``check_problem``, ``sde_kind`` …); :mod:`fedsde.exact`, :mod:`fedsde.theory`
and :mod:`fedsde.sde.rules` read these and never compare names.  :mod:`fedsde.aggregators.registry` maps names to
classes.
"""

from __future__ import annotations

from fedsde.aggregators.base import (
    SDE_KINDS,
    Aggregator,
    MomentumForm,
    RoundContext,
    ServerRecursion,
    linear_recursion,
)
from fedsde.aggregators.fedadagrad import FedAdagrad
from fedsde.aggregators.fedadam import FedAdam
from fedsde.aggregators.fedavg import FedAvg
from fedsde.aggregators.fedavgm import FedAvgM
from fedsde.aggregators.fedaware import FedAWARE
from fedsde.aggregators.feddisco import FedDisco, disco_weights_from_discrepancy, discrepancies, feddisco_weights
from fedsde.aggregators.fednova import FedNova
from fedsde.aggregators.fedprox import FedProx
from fedsde.aggregators.fedyogi import FedYogi
from fedsde.aggregators.min_norm import min_norm_weights
from fedsde.aggregators.registry import AGGREGATORS, get_aggregator, register
from fedsde.aggregators.scaffold import Scaffold
from fedsde.aggregators.sde_forms import SampledWeights

__all__ = [
    "AGGREGATORS",
    "SDE_KINDS",
    "Aggregator",
    "FedAWARE",
    "FedAdagrad",
    "FedAdam",
    "FedAvg",
    "FedAvgM",
    "FedDisco",
    "FedNova",
    "FedProx",
    "FedYogi",
    "MomentumForm",
    "RoundContext",
    "SampledWeights",
    "Scaffold",
    "ServerRecursion",
    "disco_weights_from_discrepancy",
    "discrepancies",
    "feddisco_weights",
    "get_aggregator",
    "linear_recursion",
    "min_norm_weights",
    "register",
]
