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
"""

from __future__ import annotations

from fedsde.aggregators.base import Aggregator, RoundContext
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
from fedsde.aggregators.scaffold import Scaffold
from fedsde.errors import FedsdeInputError

#: registry of server rules by name
AGGREGATORS: dict[str, type[Aggregator]] = {
    "fedavg": FedAvg,
    "fedavgm": FedAvgM,
    "fedadam": FedAdam,
    "fedyogi": FedYogi,
    "fedadagrad": FedAdagrad,
    "fedprox": FedProx,
    "scaffold": Scaffold,
    "fednova": FedNova,
    "feddisco": FedDisco,
    "fedaware": FedAWARE,
}


def get_aggregator(spec: str | Aggregator | type[Aggregator], **kwargs) -> Aggregator:
    """An aggregator instance from a registry name, a class, or an instance (returned as is)."""
    if isinstance(spec, Aggregator):
        return spec
    if isinstance(spec, type) and issubclass(spec, Aggregator):
        cls = spec
    else:
        cls = AGGREGATORS.get(str(spec).lower())
        if cls is None:
            raise FedsdeInputError(f"aggregator={spec!r}: unknown; choose one of {', '.join(sorted(AGGREGATORS))}")
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise FedsdeInputError(f"aggregator={spec!r}: bad parameters {sorted(kwargs)} ({exc})") from None


__all__ = [
    "AGGREGATORS",
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
    "RoundContext",
    "Scaffold",
    "disco_weights_from_discrepancy",
    "discrepancies",
    "feddisco_weights",
    "get_aggregator",
    "min_norm_weights",
]
