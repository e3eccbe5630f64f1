"""Server aggregation rules, vectorised over replicates (see :mod:`fedsde.aggregators.base`)."""

from __future__ import annotations

from fedsde.aggregators.base import Aggregator, RoundContext
from fedsde.aggregators.fedavg import FedAvg
from fedsde.errors import FedsdeInputError

#: registry of server rules by name
AGGREGATORS: dict[str, type[Aggregator]] = {"fedavg": FedAvg}


def get_aggregator(spec: str | Aggregator | type[Aggregator], **kwargs) -> Aggregator:
    """An aggregator instance from a registry name, a class, or an instance (returned as is)."""
    if isinstance(spec, Aggregator):
        return spec
    if isinstance(spec, type) and issubclass(spec, Aggregator):
        return spec(**kwargs)
    cls = AGGREGATORS.get(str(spec).lower())
    if cls is None:
        raise FedsdeInputError(f"aggregator={spec!r}: unknown; choose one of {', '.join(sorted(AGGREGATORS))}")
    return cls(**kwargs)


__all__ = ["AGGREGATORS", "Aggregator", "FedAvg", "RoundContext", "get_aggregator"]
