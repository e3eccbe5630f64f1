"""Typed access to the keys of a problem file (internal): every error names the file, the key, its value and the
constraint, in one line."""

from __future__ import annotations

from typing import Any

from fedsde._validate import choice, positive_float, positive_int
from fedsde.errors import FedsdeInputError


class _Keys:
    """Typed access to the keys of one file; errors name the file, the key, the value and the constraint."""

    def __init__(self, data: dict, source: str):
        self.data, self.source = data, source

    def fail(self, msg: str) -> FedsdeInputError:
        return FedsdeInputError(f"{self.source}: {msg}")

    def has(self, key: str) -> bool:
        return key in self.data

    def choice(self, key: str, choices: tuple[str, ...], default: str | None = None) -> str:
        if key not in self.data:
            if default is None:
                raise self.fail(f"missing key {key!r} (one of {', '.join(choices)})")
            return default
        try:
            return choice(key, self.data[key], choices)
        except FedsdeInputError as exc:
            raise self.fail(str(exc)) from None

    def build(self, make, *args, keys: dict[str, str] | None = None, **kwargs) -> Any:
        """``make(*args, **kwargs)``, a value (or a validator) that checks what it is given, its error naming the
        file (and the file's key where ``keys`` maps a field to it: ``{"n_clients": "clients"}``): the keys read
        with ``raw=True`` are checked there, once."""
        try:
            return make(*args, **kwargs)
        except FedsdeInputError as exc:
            msg = str(exc)
            for field, key in (keys or {}).items():
                if msg.startswith(f"{field}="):
                    msg = key + msg[len(field):]
            raise self.fail(msg) from None

    def integer(self, key: str, default: int | None = None, *, minimum: int = 1, required: bool = False,
                raw: bool = False) -> Any:
        """The key as an integer >= ``minimum``; ``raw``: only its type checked (an integer, not a bool), the rest
        by the value it goes into (:meth:`build`)."""
        if key not in self.data:
            if required:
                raise self.fail(f"missing key {key!r} (an integer >= {minimum})")
            return default
        v = self.data[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(f"{key}={v!r}: must be an integer >= {minimum}")
        if raw:
            return v
        try:
            return positive_int(key, v, minimum=minimum)
        except FedsdeInputError as exc:
            raise self.fail(str(exc)) from None

    def number(self, key: str, default: float, *, allow_zero: bool = False, raw: bool = False) -> float:
        """The key as a finite number > 0 (>= 0 with ``allow_zero``); ``raw``: only its type checked."""
        if key not in self.data:
            return default
        v = self.data[key]
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.fail(f"{key}={v!r}: must be a number {'>= 0' if allow_zero else '> 0'}")
        if raw:
            return v
        try:
            return positive_float(key, v, allow_zero=allow_zero)
        except FedsdeInputError as exc:
            raise self.fail(str(exc)) from None

    def boolean(self, key: str, default: bool) -> bool:
        v = self.data.get(key, default)
        if not isinstance(v, bool):
            raise self.fail(f"{key}={v!r}: must be true or false")
        return v
