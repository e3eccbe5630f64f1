"""Experiment configurations of ``fedsde reproduce``: TOML files shipped in ``fedsde/configs``.

A configuration has a ``[run]`` table (seed, device, problem) and one table per figure (``[F1]`` … ``[F12]``).
``--quick`` starts from ``quick.toml``, otherwise ``full.toml``; ``--config FILE`` overrides fields of that base
(only the fields it names).  Every field is validated against the schema below, with an error naming the field,
the value and the constraint.
"""

from __future__ import annotations

import copy
import math
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from fedsde.errors import FedsdeInputError


@dataclass(frozen=True)
class Field:
    """Schema of one configuration field."""

    kind: str  # "int", "float", "str", "bool", "ints", "floats"
    minimum: float | None = None
    maximum: float | None = None
    exclusive_min: bool = False
    choices: tuple[str, ...] | None = None
    help: str = ""

    def check(self, where: str, value: Any) -> Any:
        if self.kind in ("ints", "floats"):
            if not isinstance(value, list) or not value:
                raise FedsdeInputError(f"{where}={value!r}: must be a non-empty list of numbers")
            scalar = Field(self.kind[:-1], self.minimum, self.maximum, self.exclusive_min)
            return [scalar.check(f"{where}[{i}]", v) for i, v in enumerate(value)]
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise FedsdeInputError(f"{where}={value!r}: must be true or false")
            return value
        if self.kind == "str":
            if not isinstance(value, str):
                raise FedsdeInputError(f"{where}={value!r}: must be a string")
            if self.choices and value not in self.choices:
                raise FedsdeInputError(f"{where}={value!r}: must be one of {', '.join(self.choices)}")
            return value
        if self.kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise FedsdeInputError(f"{where}={value!r}: must be an integer")
        elif self.kind == "float":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise FedsdeInputError(f"{where}={value!r}: must be a number")
            value = float(value)
            if not math.isfinite(value):
                raise FedsdeInputError(f"{where}={value!r}: must be finite")
        if self.minimum is not None:
            bad = value <= self.minimum if self.exclusive_min else value < self.minimum
            if bad:
                op = ">" if self.exclusive_min else ">="
                raise FedsdeInputError(f"{where}={value!r}: must be {op} {self.minimum:g}")
        if self.maximum is not None and value > self.maximum:
            raise FedsdeInputError(f"{where}={value!r}: must be <= {self.maximum:g}")
        return value


POS = Field("float", 0.0, exclusive_min=True)
POS_INT = Field("int", 1)
POS_FLOATS = Field("floats", 0.0, exclusive_min=True)
POS_INTS = Field("ints", 1)
UNIT = Field("float", 0.0, 1.0, exclusive_min=True)

#: the schema of every table; figures read only what is listed here
SCHEMA: dict[str, dict[str, Field]] = {
    "run": {
        "seed": Field("int", 0),
        "device": Field("str"),
        "problem": Field("str", help="'paper_table' or the path of a problem file"),
    },
    "F1": {"eta": POS, "local_steps": POS_INT, "server_lr": POS, "rounds": POS_INT, "replicates": POS_INT,
           "paths": POS_INT, "w0": Field("float")},
    "F2": {"etas": POS_FLOATS, "Es": POS_INTS, "replicates": POS_INT},
    "F3": {"etas": POS_FLOATS, "Es": POS_INTS, "replicates": POS_INT},
    "F4": {"eta": POS, "local_steps": POS_INT, "copies": POS_INTS, "replicates": POS_INT},
    "F5": {"etas": POS_FLOATS, "Es": POS_INTS},
    "F6": {"eta": POS, "local_steps": POS_INT, "rounds": POS_INT, "w0": Field("float")},
    "F7": {"Qs": POS_INTS, "eta": POS, "local_steps": POS_INT, "replicates": POS_INT},
    "F8": {"scale": POS},
    "F9": {"eta_cs": POS_FLOATS, "horizon": POS, "local_steps": POS_INT, "h": POS},
    "F10": {"scale": POS},
    "F11": {"rounds": POS_INT, "seeds": POS_INT, "clients": POS_INT},
    "F12": {"eta": POS, "local_steps": POS_INT, "horizon": POS, "levels": POS_INT},
}

FIGURE_IDS = tuple(k for k in SCHEMA if k != "run")


def _load_toml(path: Path, source: str) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise FedsdeInputError(f"{source}: file {str(path)!r} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise FedsdeInputError(f"{source}: {str(path)!r} is not valid TOML ({exc})") from None


def builtin_config(name: str) -> dict:
    """The shipped configuration ``quick`` or ``full``."""
    with resources.as_file(resources.files("fedsde") / "configs" / f"{name}.toml") as p:
        return _load_toml(p, f"built-in config {name!r}")


def validate(cfg: dict, *, source: str = "config", partial: bool = False) -> dict:
    """Check every table and field against :data:`SCHEMA`; with ``partial``, missing fields are allowed."""
    out: dict = {}
    for table, fields in cfg.items():
        if table not in SCHEMA:
            raise FedsdeInputError(f"{source}: unknown table [{table}] (allowed: {', '.join(SCHEMA)})")
        if not isinstance(fields, dict):
            raise FedsdeInputError(f"{source}: [{table}] must be a table")
        spec = SCHEMA[table]
        out[table] = {}
        for key, value in fields.items():
            if key not in spec:
                raise FedsdeInputError(f"{source}: unknown field {table}.{key} (allowed: {', '.join(spec)})")
            out[table][key] = spec[key].check(f"{table}.{key}", value)
        if not partial:
            missing = [k for k in spec if k not in fields]
            if missing:
                raise FedsdeInputError(f"{source}: [{table}] is missing field(s) {', '.join(missing)}")
    if not partial:
        missing_tables = [t for t in SCHEMA if t not in cfg]
        if missing_tables:
            raise FedsdeInputError(f"{source}: missing table(s) {', '.join(missing_tables)}")
    return out


def load_config(*, quick: bool, path: str | Path | None = None) -> dict:
    """The base configuration (quick or full) with the fields of ``path`` (if given) laid over it."""
    base = validate(builtin_config("quick" if quick else "full"), source="built-in config")
    if path is None:
        return base
    user = validate(_load_toml(Path(path), "--config"), source=f"--config {str(path)!r}", partial=True)
    merged = copy.deepcopy(base)
    for table, fields in user.items():
        merged[table].update(fields)
    return merged


def parse_only(text: str | None) -> tuple[str, ...]:
    """``"F3,F5"`` → ``("F3", "F5")`` (validated); ``None`` → every figure."""
    if text is None:
        return FIGURE_IDS
    ids = tuple(s.strip().upper() for s in text.split(",") if s.strip())
    bad = [i for i in ids if i not in FIGURE_IDS]
    if bad or not ids:
        raise FedsdeInputError(f"--only={text!r}: unknown figure id(s) {', '.join(bad) or '(none)'}; "
                               f"choose from {', '.join(FIGURE_IDS)}")
    return ids
