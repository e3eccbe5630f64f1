"""Renamed keyword arguments: the old name keeps working for one release, with a :class:`DeprecationWarning`.

fedsde's names follow its glossary (``docs/glossary.md``): ``local_steps`` for the local steps of a round,
``replicates`` for independent runs, ``time_steps`` for a list of time steps ``h``.  A public function whose
parameter was renamed is decorated with :func:`renamed`::

    @renamed(paths="replicates")
    def simulate_sde(problem, *, ..., replicates: int, ...): ...

    simulate_sde(pb, ..., paths=64)       # works: DeprecationWarning "… paths= is the old name of replicates= …"
    simulate_sde(pb, ..., replicates=64)  # the name to use
    simulate_sde(pb, ..., paths=64, replicates=64)  # FedsdeInputError: one of the two

A mistake reported by the function names the argument as its caller spelt it: when the old name was used, the
message of a :class:`~fedsde.errors.FedsdeInputError` raised inside names ``paths=…`` rather than
``replicates=…``.
"""

from __future__ import annotations

import functools
import inspect
import re
import warnings
from collections.abc import Callable
from typing import TypeVar, cast

from fedsde.errors import FedsdeInputError

F = TypeVar("F", bound=Callable)

#: the release after which the old names go away
REMOVED_IN = "the next release"


def renamed(**old_to_new: str) -> Callable[[F], F]:
    """Decorator: accept each ``old`` keyword argument as the renamed ``new`` one, for one release.

    Parameters
    ----------
    **old_to_new : str
        ``old="new"`` pairs; ``new`` must be a parameter of the decorated function.

    Notes
    -----
    Calling with ``old=value`` warns (:class:`DeprecationWarning`, naming both names, attributed to the caller's
    line) and passes ``new=value``; giving both names, or the old name while ``new`` is also given positionally,
    raises :class:`~fedsde.errors.FedsdeInputError`.  Positional calls are untouched.  Messages of
    :class:`~fedsde.errors.FedsdeInputError` raised by the call name the old argument (``old=``, ``old[`` or
    ``old:``) when the caller used it.
    """

    def decorate(func: F) -> F:
        params = inspect.signature(func).parameters
        for old, new in old_to_new.items():
            if new not in params:
                raise TypeError(f"renamed({old}={new!r}): {func.__qualname__} has no parameter {new!r}")
            if old in params:
                raise TypeError(f"renamed({old}={new!r}): {func.__qualname__} still has a parameter {old!r}")
        positional = [n for n, p in params.items()
                      if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        slot = {new: positional.index(new) for new in old_to_new.values() if new in positional}
        name = func.__qualname__

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            used = [old for old in old_to_new if old in kwargs]
            if not used:
                return func(*args, **kwargs)
            for old in used:
                new = old_to_new[old]
                if new in kwargs or slot.get(new, len(args)) < len(args):
                    raise FedsdeInputError(f"{name}: {old}= is the old name of {new}=; give {new}= only")
                warnings.warn(f"{name}: {old}= is the old name of {new}= and goes away in {REMOVED_IN}; "
                              f"use {new}=", DeprecationWarning, stacklevel=2)
                kwargs[new] = kwargs.pop(old)
            try:
                return func(*args, **kwargs)
            except FedsdeInputError as exc:
                exc.args = tuple(_as_spelt(a, used, old_to_new) if isinstance(a, str) else a for a in exc.args)
                raise

        wrapper.renamed = dict(old_to_new)  # old → new, for documentation and tests
        return cast(F, wrapper)

    return decorate


def _as_spelt(message: str, used: list[str], old_to_new: dict[str, str]) -> str:
    """``message`` with the arguments the caller gave by their old names named as given (``new=`` → ``old=``)."""
    for old in used:
        message = re.sub(rf"(?<![\w.-]){re.escape(old_to_new[old])}(?=[=\[:])", old, message)
    return message
