"""One adapter for the wide entry points: the fields of their values also as the old keywords
(:func:`takes_values`)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar, cast

import numpy as np

from fedsde.errors import FedsdeInputError
from fedsde.params.options import Equivalence, Integrator, Recording
from fedsde.params.run import Precision, Replication, Schedule

F = TypeVar("F", bound=Callable)

#: the value parameters and their classes
VALUE_TYPES: dict[str, type] = {"schedule": Schedule, "replication": Replication, "precision": Precision,
                                "recording": Recording, "integrator": Integrator, "equivalence": Equivalence}


def value_fields(cls: type) -> tuple[str, ...]:
    """The fields of a value class that a caller gives (``validated`` is the value's own)."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.init)


#: every field of a :class:`Replication` and of a :class:`Precision` (what most entry points read)
REPLICATION_FIELDS = value_fields(Replication)
PRECISION_FIELDS = value_fields(Precision)


def _is_default(value, default) -> bool:
    if value is default:
        return True
    return np.ndim(value) == 0 and not callable(value) and default is not None and value == default


@functools.cache
def _default_value(cls: type):
    """The value built from the defaults alone (``Precision()``: float64 on the CPU, as checked), or ``None`` for a
    class with required fields; its fields are the defaults a function that does not read them accepts."""
    if any(f.init and f.default is dataclasses.MISSING for f in dataclasses.fields(cls)):
        return None
    return cls()


def _unused_ok(value, cls: type, f) -> bool:
    """Field ``f`` of ``value`` holds its default, as given or as the value checks it (``"cpu"`` → a device)."""
    current = getattr(value, f.name)
    base = _default_value(cls)
    return _is_default(current, f.default) or (base is not None and _is_default(current, getattr(base, f.name)))


def takes_values(positional: Sequence[str] = (), types: Mapping[str, type] | None = None,
                 joins: Mapping[str, Sequence[str]] | None = None, **uses: Sequence[str]) -> Callable[[F], F]:
    """Decorator: a function that takes values (``schedule``, ``replication``, ``precision``) also takes the old
    keywords of the fields it reads, folded into the values once, at the call.

    Parameters
    ----------
    positional : sequence of str, optional
        Old positional parameters, in order, that stood where the first value parameter now stands
        (``f(problem, eta, local_steps, rounds)``): a call whose argument there is not a value passes them on as
        those keywords.
    types : mapping of str to type, optional
        Value parameters beyond :data:`VALUE_TYPES` and their classes (frozen dataclasses checked in
        ``__post_init__``), e.g. ``types={"sampling": ClientSampling}`` for a value a few functions share.
    **uses : sequence of str
        ``schedule=("eta", "local_steps", "rounds", "server_lr")``: the value parameter (a name of
        :data:`VALUE_TYPES`, a parameter of the decorated function) and the fields the function reads.

    Notes
    -----
    * ``f(problem, eta=…, rounds=…, …)``: the fields given as keywords build the value (validated there: errors name
      the keyword, e.g. ``eta=-1: must be finite and > 0``); ``f(problem, schedule=Schedule(…))`` passes it whole.
    * A value given both ways (``schedule=`` with ``eta=``) is refused (:class:`~fedsde.errors.FedsdeInputError`),
      as is a value whose fields the function does not read set away from their defaults (``Schedule(h=…)`` to
      the simulator), and a value of the wrong class.
    * A value parameter with no default must be given one of the two ways (``TypeError`` otherwise, as Python
      says of a missing argument); one whose default is ``None`` stays ``None`` when nothing is given, and when
      its required fields are missing or ``None`` (their old defaults: ``seed=0`` without ``replicates=`` has
      nothing to replicate, as before).
    * The wrapper's signature lists the old keywords after the function's own (``help()`` shows both).
    """

    kinds = {**VALUE_TYPES, **(types or {})}
    joined = {k: set(v) for k, v in (joins or {}).items()}

    def decorate(func: F) -> F:
        sig = inspect.signature(func)
        params = sig.parameters
        name = func.__qualname__
        for param, fields in uses.items():
            if param not in kinds or param not in params:
                raise TypeError(f"takes_values({param}=…): {name} has no value parameter {param!r}")
            unknown = set(fields) - set(value_fields(kinds[param]))
            clash = set(fields) & set(params)
            if unknown or clash:
                raise TypeError(f"takes_values({param}=…): {sorted(unknown or clash)} are not free fields of "
                                f"{kinds[param].__name__} for {name}")
        order = list(params)
        old_order = tuple(positional)
        first = min(order.index(p) for p in uses)
        first_cls = kinds[order[first]]

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if old_order and len(args) > first and not isinstance(args[first], first_cls):
                old = args[first:]
                if len(old) > len(old_order):
                    raise TypeError(f"{name}() takes at most {first + len(old_order)} positional arguments")
                clash = [k for k in old_order[:len(old)] if k in kwargs]
                if clash:
                    raise TypeError(f"{name}() got multiple values for argument {clash[0]!r}")
                args = args[:first]
                kwargs.update(zip(old_order, old, strict=False))
            for param, fields in uses.items():
                cls = kinds[param]
                slot = order.index(param)
                positional = slot < len(args) and params[param].kind != inspect.Parameter.KEYWORD_ONLY
                whole = args[slot] if positional else kwargs.get(param)
                given = {f: kwargs.pop(f) for f in fields if f in kwargs}
                if params[param].default is None:  # an optional value: its old keywords' None is "not given"
                    given = {f: v for f, v in given.items() if v is not None}
                if given and whole is not None and isinstance(whole, cls) and set(given) <= joined.get(param, set()):
                    whole = dataclasses.replace(whole, **given)  # checked again, with the keywords of old calls
                    if positional:
                        args = (*args[:slot], whole, *args[slot + 1:])
                    else:
                        kwargs[param] = whole
                elif given:
                    if whole is not None:
                        raise FedsdeInputError(
                            f"{name}: {', '.join(f'{f}=' for f in given)} and {param}= both given; give the "
                            f"{cls.__name__} or its fields, not both")
                    missing = [f.name for f in dataclasses.fields(cls)
                               if f.init and f.default is dataclasses.MISSING and f.name not in given]
                    if missing and params[param].default is None:
                        continue  # an optional value without its required fields: none (e.g. a seed, no replicates)
                    if missing:
                        raise TypeError(f"{name}() missing keyword argument(s): "
                                        f"{', '.join(repr(m) for m in missing)} (or {param}=)")
                    whole = cls(**given)
                    if positional:  # given as None in its place: the value takes it
                        args = (*args[:slot], whole, *args[slot + 1:])
                    else:
                        kwargs[param] = whole
                elif whole is None:
                    if params[param].default is inspect.Parameter.empty:
                        keys = ", ".join(f"{f}=" for f in fields)
                        raise TypeError(f"{name}() missing argument {param!r} (or the keywords {keys})")
                    continue
                elif not isinstance(whole, cls):
                    home = "fedsde.params" if cls in VALUE_TYPES.values() else cls.__module__
                    raise FedsdeInputError(f"{param}={whole!r}: must be a {home}.{cls.__name__}")
                for f in dataclasses.fields(cls):
                    if f.init and f.name not in fields and not _unused_ok(whole, cls, f):
                        raise FedsdeInputError(f"{param}.{f.name}={getattr(whole, f.name)!r}: not used by {name}; "
                                               "leave it at its default")
            return func(*args, **kwargs)

        legacy = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY,
                                    default=None if f.default is dataclasses.MISSING else f.default)
                  for param, fields in uses.items() for f in dataclasses.fields(kinds[param])
                  if f.name in fields]
        kept = [p for p in params.values() if p.kind != inspect.Parameter.VAR_KEYWORD]
        tail = [p for p in params.values() if p.kind == inspect.Parameter.VAR_KEYWORD]
        wrapper.__signature__ = sig.replace(parameters=[*kept, *legacy, *tail])
        wrapper.values_fields = {k: tuple(v) for k, v in uses.items()}  # for documentation and tests
        wrapper.value_types = {k: kinds[k] for k in uses}
        return cast(F, wrapper)

    return decorate
