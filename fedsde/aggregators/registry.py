"""The registry of server rules by name, and :func:`get_aggregator`.

Each rule's module registers its class with :func:`register` when it is imported (``fedsde.aggregators`` imports
them all), so this module imports none of them and any rule (FedDisco resolving its base rule) can use it.
"""

from __future__ import annotations

from typing import TypeVar

from fedsde.aggregators.base import Aggregator
from fedsde.errors import FedsdeInputError

#: registry of server rules by name
AGGREGATORS: dict[str, type[Aggregator]] = {}

A = TypeVar("A", bound=type[Aggregator])


def register(cls: A) -> A:
    """Class decorator: add ``cls`` to :data:`AGGREGATORS` under ``cls.name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__}: a registered aggregator needs a name")
    AGGREGATORS[cls.name] = cls
    return cls


def get_aggregator(spec: str | Aggregator | type[Aggregator], **kwargs) -> Aggregator:
    """An aggregator instance from a registry name, a class, or an instance (returned as is)."""
    if isinstance(spec, Aggregator):
        return spec
    if isinstance(spec, type) and issubclass(spec, Aggregator):
        cls = spec
    else:
        found = AGGREGATORS.get(str(spec).lower())
        if found is None:
            raise FedsdeInputError(f"aggregator={spec!r}: unknown; choose one of {', '.join(sorted(AGGREGATORS))}")
        cls = found
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise FedsdeInputError(f"aggregator={spec!r}: bad parameters {sorted(kwargs)} ({exc})") from None
