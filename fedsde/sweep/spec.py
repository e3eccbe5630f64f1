"""Sweep specs: parsing and validation, the cells of a grid, and each cell's seed.

A spec is a TOML file (or the equivalent dict) with the tables

* ``[run]``: ``command`` (a cell command: a ``fedsde`` subcommand whose whole output is its ``--json`` object,
  see :func:`fedsde.cli.cell_commands`, or a command of the table passed as ``commands``), ``seed`` (an integer
  >= 0; required when the command takes ``--seed``) and optionally ``seeds = "derived"`` (default) or
  ``"shared"``;
* ``[base]``: the command's options shared by every cell, named like its long flags (``local-steps`` or
  ``local_steps``; a renamed option also by its old flag, e.g. ``paths`` for ``replicates``, but not by both);
  switches take ``true``/``false``, vectors a list or a comma-separated string;
* ``[grid]``: axes, each a non-empty list of values; the cells are their Cartesian product;
* ``[zip]`` (optional): axes of equal length that vary together along one dimension named ``zip`` (a value may
  repeat along one axis; no two positions may agree on every axis), or several
  such groups as sub-tables ``[zip.NAME]``, each along its own dimension ``NAME``.

The number of cells is the product of the axis lengths, known before any cell is built; a grid of more than
:data:`MAX_CELLS` is refused unless a larger limit is given, and cells are produced one at a time
(:meth:`SweepSpec.cells`), never held all at once.

A cell is identified by its coordinates (axis name → value).  Its seed is derived from the spec's seed and those
coordinates only (:func:`cell_seed`), so it does not depend on the order cells run in, on the number of workers
or on which cells ran before.  A grid axis called ``seed`` labels independent replicates of the whole grid: its
values enter the coordinates (hence the derived seed); they are not passed to ``--seed`` as they are.
With ``seeds = "shared"`` every cell gets the spec's seed itself: common random numbers across the grid (cells that
differ in one option are then paired, which makes their differences less noisy; use it only where cells are
compared with each other, never to pool cells as independent samples).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from fedsde._io import read_text
from fedsde.errors import FedsdeInputError

TABLES = ("run", "base", "grid", "zip")
#: most cells a sweep takes unless told otherwise (``--max-cells``, ``max_cells=``): one file per cell in one
#: folder, and loading holds every result at once; larger grids are better split into several sweeps
MAX_CELLS = 100_000
_RESERVED = {"json": "is added to every cell", "help": "is not an option of a cell"}


def canonical_json(obj: Any) -> str:
    """Stable text of a JSON-able value (sorted keys, no spaces): the input of every hash of a sweep."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def cell_id(coords: Mapping[str, Any]) -> str:
    """File name stem of a cell: the first 16 hex digits of the SHA-256 of its canonical coordinates."""
    return hashlib.sha256(canonical_json(dict(coords)).encode()).hexdigest()[:16]


def cell_seed(seed: int, coords: Mapping[str, Any]) -> int:
    """The seed of one cell: ``SeedSequence([seed, *words of SHA-256(canonical coordinates)])``, one uint32.

    Depends only on the spec's ``seed`` and the cell's coordinates (not on the grid around it, the order of
    execution or the number of workers).
    """
    digest = hashlib.sha256(canonical_json(dict(coords)).encode()).digest()
    words = np.frombuffer(digest[:16], dtype="<u4").tolist()
    return int(np.random.SeedSequence([int(seed), *words]).generate_state(1, dtype=np.uint32)[0])


@dataclass(frozen=True)
class Cell:
    """One cell: its position along each dimension, its coordinates, id and derived seed."""

    index: tuple[int, ...]
    coords: dict[str, Any]
    id: str
    seed: int


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep spec (keys normalised to ``_``).  Build it with :func:`load_spec`.

    ``dims`` lists the dimensions in order: one per grid axis (named like the axis), then one per zip group;
    ``axes`` maps each dimension to the axes that vary along it (one for a grid axis, several for a zip group).
    """

    command: str
    seed: int
    base: dict[str, Any]
    grid: dict[str, list]
    zips: dict[str, dict[str, list]]
    root: Path = field(default_factory=Path.cwd, compare=False)  # folder that relative file paths start from
    seeds: str = "derived"  # "derived": cell_seed(seed, coordinates); "shared": every cell gets ``seed``
    #: the commands table the spec was checked against (None: the command line's, see fedsde.sweep.command)
    commands: Mapping | None = field(default=None, compare=False, repr=False)

    @property
    def dims(self) -> dict[str, int]:
        sizes = {name: len(vals) for name, vals in self.grid.items()}
        for dim, group in self.zips.items():
            sizes[dim] = len(next(iter(group.values())))
        return sizes

    @property
    def axes(self) -> dict[str, list[str]]:
        return {**{name: [name] for name in self.grid}, **{dim: list(g) for dim, g in self.zips.items()}}

    def axis_values(self, axis: str) -> list:
        if axis in self.grid:
            return self.grid[axis]
        return next(g[axis] for g in self.zips.values() if axis in g)

    @property
    def n_cells(self) -> int:
        """The number of cells: the product of the dimensions' lengths (no cell is built)."""
        return math.prod(self.dims.values())

    def cells(self) -> Iterator[Cell]:
        """Every cell, in C order over ``dims``, one at a time (a grid is never held in memory)."""
        for index in itertools.product(*(range(n) for n in self.dims.values())):
            yield self.cell_at(index)

    def cell_at(self, index: tuple[int, ...]) -> Cell:
        """The cell at ``index`` (one position per dimension, in the order of ``dims``)."""
        axes = self.axes
        coords = {a: self.axis_values(a)[i] for dim, i in zip(axes, index, strict=True) for a in axes[dim]}
        seed = self.seed if self.seeds == "shared" else cell_seed(self.seed, coords)
        return Cell(tuple(index), coords, cell_id(coords), seed)

    def to_dict(self) -> dict[str, Any]:
        """The spec as a plain dict (the content of the stored ``spec.toml``)."""
        zips: dict[str, Any] = dict(self.zips)
        if list(zips) == ["zip"]:
            zips = zips["zip"]
        run: dict[str, Any] = {"command": self.command, "seed": self.seed}
        if self.seeds != "derived":  # only when set: the hash of a spec without it stays as it was
            run["seeds"] = self.seeds
        out: dict[str, Any] = {"run": run, "base": self.base, "grid": self.grid}
        if zips:
            out["zip"] = zips
        return out

    @property
    def sha256(self) -> str:
        """SHA-256 of the canonical spec (what ``--resume`` compares)."""
        return hashlib.sha256(canonical_json(self.to_dict()).encode()).hexdigest()


def _read(spec: str | os.PathLike | Mapping) -> tuple[dict, Path]:
    if isinstance(spec, Mapping):
        return dict(spec), Path.cwd()
    path = Path(spec)
    try:
        text = read_text(path, "sweep spec")  # not UTF-8: one line naming the file and the offset
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        raise FedsdeInputError(f"SPEC={str(path)!r}: cannot read it ({type(exc).__name__})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = " ".join(str(exc).split())
        raise FedsdeInputError(f"SPEC={str(path)!r}: not valid TOML: {msg}") from None
    return data, path.absolute().parent


def _check_value(where: str, value: Any, *, in_list: bool = False) -> None:
    if isinstance(value, bool | int | float | str):
        return
    if isinstance(value, list) and not in_list:
        for v in value:
            _check_value(where, v, in_list=True)
        return
    raise FedsdeInputError(f"{where}={value!r}: must be a number, string, boolean or a list of them")


def _table(data: dict, name: str) -> dict:
    tab = data.get(name, {})
    if not isinstance(tab, Mapping):
        raise FedsdeInputError(f"[{name}]: must be a table, got {tab!r}")
    out: dict[str, Any] = {}
    for key, val in tab.items():
        norm = str(key).replace("-", "_")
        if norm in out:
            raise FedsdeInputError(f"{name}.{key}: given twice (as '-' and '_' spellings)")
        out[norm] = val
    return out


def _axis(where: str, values: Any, *, distinct: bool = True) -> list:
    """The values of one axis, checked; ``distinct=False`` (a zip axis) lets a value repeat (the rows of its
    group must be distinct instead, :func:`_distinct_rows`)."""
    if not isinstance(values, list):
        raise FedsdeInputError(f"{where}={values!r}: an axis must be a list of values")
    if not values:
        raise FedsdeInputError(f"{where}=[]: empty axis; give at least one value")
    seen = set()
    for v in values:
        _check_value(where, v)
        key = canonical_json(v)
        if distinct and key in seen:
            raise FedsdeInputError(f"{where}: value {v!r} appears twice; the values of an axis must be distinct")
        seen.add(key)
    return list(values)


def _distinct_rows(prefix: str, group: dict[str, list]) -> None:
    """The cells along a zip dimension must differ: no two positions with the same value on every axis (a value
    may repeat along one axis, e.g. ``eta = [0.1, 0.1]`` with ``local_steps = [1, 2]``)."""
    seen: dict[str, int] = {}
    for i, row in enumerate(zip(*group.values(), strict=True)):
        key = canonical_json(list(row))
        if key in seen:
            raise FedsdeInputError(f"[{prefix}]: positions {seen[key]} and {i} have the same values "
                                   f"({', '.join(f'{k}={v!r}' for k, v in zip(group, row, strict=True))}); the "
                                   "cells along a zip dimension must differ")
        seen[key] = i


def parse_structure(data: Mapping) -> SweepSpec:
    """Check the tables of a spec (no command-specific checks); see :func:`load_spec`."""
    unknown = sorted(set(data) - set(TABLES))
    if unknown:
        raise FedsdeInputError(f"[{unknown[0]}]: unknown table; a spec has {', '.join(f'[{t}]' for t in TABLES)}")
    run = _table(data, "run")
    bad = sorted(set(run) - {"command", "seed", "seeds"})
    if bad:
        raise FedsdeInputError(f"run.{bad[0]}: unknown key; [run] has command, seed and seeds")
    seeds = run.get("seeds", "derived")
    if seeds not in ("derived", "shared"):
        raise FedsdeInputError(f"run.seeds={seeds!r}: must be 'derived' (a seed per cell from the spec's seed and "
                               "the cell's coordinates) or 'shared' (every cell gets the spec's seed)")
    command = run.get("command")
    if not isinstance(command, str) or not command:
        raise FedsdeInputError(f"run.command={command!r}: required, the name of a fedsde command (e.g. 'simulate')")
    seed = run.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise FedsdeInputError(f"run.seed={seed!r}: must be an integer >= 0")
    base = {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in _table(data, "base").items()}
    for key, val in base.items():
        _check_value(f"base.{key}", val)
    grid = {key: _axis(f"grid.{key}", val) for key, val in _table(data, "grid").items()}
    raw_zip = _table(data, "zip")
    if raw_zip and all(isinstance(v, Mapping) for v in raw_zip.values()):
        groups = {dim: _table(raw_zip, dim) for dim in raw_zip}
    elif any(isinstance(v, Mapping) for v in raw_zip.values()):
        raise FedsdeInputError("[zip]: give either axes (one group along dimension 'zip') or sub-tables "
                               "[zip.NAME] of axes, not both")
    else:
        groups = {"zip": raw_zip} if raw_zip else {}
    zips: dict[str, dict[str, list]] = {}
    for dim, group in groups.items():
        prefix = "zip" if dim == "zip" and group is raw_zip else f"zip.{dim}"
        if not group:
            raise FedsdeInputError(f"[{prefix}]: empty group; give at least one axis")
        zips[dim] = {key: _axis(f"{prefix}.{key}", val, distinct=False) for key, val in group.items()}
        lengths = {key: len(vals) for key, vals in zips[dim].items()}
        if len(set(lengths.values())) > 1:
            desc = ", ".join(f"{k} has {n}" for k, n in lengths.items())
            raise FedsdeInputError(f"[{prefix}]: axes that vary together need equal lengths; {desc} values")
        _distinct_rows(prefix, zips[dim])
    places: dict[str, str] = {key: "[base]" for key in base}
    for key in grid:
        if key in places:
            raise FedsdeInputError(f"{key}: given in both {places[key]} and [grid]; give it in one place")
        places[key] = "[grid]"
    for dim, group in zips.items():
        if dim in grid:
            raise FedsdeInputError(f"[zip.{dim}]: dimension name is also a grid axis; rename the group")
        for key in group:
            if key in places:
                raise FedsdeInputError(f"{key}: given in both {places[key]} and [zip]; give it in one place")
            places[key] = "[zip]"
    return SweepSpec(command=command, seed=seed, base=base, grid=grid, zips=zips, seeds=seeds)


def check_size(spec: SweepSpec, max_cells: int = MAX_CELLS) -> None:
    """Refuse a grid of more than ``max_cells`` cells, counted from the axis lengths (one line: count, limit)."""
    if isinstance(max_cells, bool) or not isinstance(max_cells, int) or max_cells < 1:
        raise FedsdeInputError(f"--max-cells={max_cells!r}: must be an integer >= 1")
    n = spec.n_cells
    if n > max_cells:
        shape = " × ".join(f"{dim} {k}" for dim, k in spec.dims.items())
        raise FedsdeInputError(f"grid: {n} cells ({shape}), more than the limit of {max_cells}; split it into "
                               "several sweeps or raise the limit (fedsde sweep --max-cells N, max_cells= in Python)")


def load_spec(spec: str | os.PathLike | Mapping | SweepSpec, *, commands: Mapping | None = None,
              max_cells: int = MAX_CELLS) -> SweepSpec:
    """Read and validate a sweep spec (a TOML file path or a dict with the same tables).

    Besides the structure (known tables, non-empty axes with distinct values, zip axes of equal length, no option
    both in ``[base]`` and an axis) and the size (at most ``max_cells`` cells, counted without building them), the
    command must be in the table ``commands`` (default: the ``fedsde`` command line's, see
    :mod:`fedsde.sweep.command`) and know every option, and the cells' flags must parse with the command's own
    parser: every value of every axis is parsed (the other options at their first values), and every combination
    of switches and repeated flags present or absent across dimensions, which is what a parser's verdict on a cell
    depends on; relative paths of ``FILE`` options start from the spec's folder.

    Raises
    ------
    FedsdeInputError
        with a one-line message naming the table, key and constraint (for a cell: its coordinates).
    """
    if isinstance(spec, SweepSpec):
        if commands is None or commands is spec.commands:
            check_size(spec, max_cells)
            return spec
        parsed, root, seed_given = spec, spec.root, True
    else:
        data, root = _read(spec)
        parsed = parse_structure(data)
        seed_given = "seed" in {k.replace("-", "_") for k in _table(data, "run")}
    check_size(parsed, max_cells)
    from fedsde.sweep.command import NOT_CELL_OPTIONS, command_info

    info = command_info(parsed.command, commands)
    for where, keys in (("base", parsed.base), ("grid", parsed.grid),
                        *((f"zip.{d}" if d != "zip" else "zip", g) for d, g in parsed.zips.items())):
        for key in keys:
            if key == "seed" and where == "base":
                raise FedsdeInputError("base.seed: the seed goes in [run] (each cell gets one derived from it)")
            if key == "seed" and where != "base":
                if not info.takes_seed:
                    raise FedsdeInputError(f"{where}.seed: fedsde {info.name} takes no --seed, so a seed axis "
                                           "would repeat the same cell")
                if parsed.seeds == "shared":
                    raise FedsdeInputError(f"{where}.seed: with run.seeds = 'shared' every cell gets the same seed, "
                                           "so a seed axis would repeat the same cell; use seeds = 'derived'")
                continue
            if key in _RESERVED:
                raise FedsdeInputError(f"{where}.{key}: --{key} {_RESERVED[key]}")
            if key in NOT_CELL_OPTIONS and key in info.options:
                raise FedsdeInputError(f"{where}.{key}: --{key.replace('_', '-')} {NOT_CELL_OPTIONS[key]}; "
                                       "not allowed in a sweep cell")
            if key not in info.options:
                flags = ", ".join(sorted("--" + k.replace("_", "-") for k in info.options
                                         if k not in ("seed", *_RESERVED, *NOT_CELL_OPTIONS)))
                raise FedsdeInputError(f"{where}.{key}: unknown option of fedsde {info.name}; its options: {flags}")
    named: dict[int, str] = {}  # an option renamed with its old name kept answers to two keys: one of them only
    for key in (*parsed.base, *parsed.grid, *(k for g in parsed.zips.values() for k in g)):
        action = info.options.get(key)
        if action is not None and named.setdefault(id(action), key) != key:
            raise FedsdeInputError(f"{named[id(action)]}, {key}: the same option of fedsde {info.name} "
                                   f"({' or '.join(action.option_strings)}: the first its name, the others old "
                                   "names); give it once")
    if info.takes_seed and not seed_given:
        raise FedsdeInputError(f"run.seed: required, fedsde {info.name} takes --seed (cell seeds derive from it)")
    spec_obj = replace(parsed, root=root, commands=commands)
    from fedsde.sweep.command import ArgumentError, parse_cell_args

    for index in _telling_cells(spec_obj, info):
        cell = spec_obj.cell_at(index)
        argv = cell_argv(spec_obj, cell)
        try:
            parse_cell_args(info, argv)
        except ArgumentError as exc:
            where = f"cell {canonical_json(cell.coords)}: " if cell.coords else ""
            raise FedsdeInputError(f"{where}{exc}") from None
    return spec_obj


def _telling_cells(spec: SweepSpec, info) -> list[tuple[int, ...]]:
    """Indices of the cells whose flags tell whether every cell's flags parse, in C order.

    A parser rejects a cell for a value (its type, its choices, its count: one value at a time) or for which
    options are present (required ones, mutually exclusive ones).  Flags of one option depend on its value only,
    and an option is absent only as a switch set false or an empty list.  So the first cell, each value of each
    dimension with the others at their first values, and one cell per combination of presence patterns across the
    dimensions where presence varies, cover every way a cell can fail; the first failing cell in C order is
    among them.
    """
    from fedsde.sweep.command import option_argv

    dims, axes = list(spec.dims.items()), spec.axes
    zero = (0,) * len(dims)
    picks = {zero}
    patterns: list[dict[tuple, int]] = []  # per dimension: presence pattern → first index showing it
    for k, (dim, n) in enumerate(dims):
        seen: dict[tuple, int] = {}
        for i in range(n):
            if i:
                picks.add((*zero[:k], i, *zero[k + 1:]))
            pattern = tuple(a == "seed" or bool(option_argv(info, a, spec.axis_values(a)[i])) for a in axes[dim])
            seen.setdefault(pattern, i)
        patterns.append(seen)
    varying = [k for k, seen in enumerate(patterns) if len(seen) > 1]
    for combo in itertools.product(*(list(patterns[k].values()) for k in varying)):
        index = list(zero)
        for k, i in zip(varying, combo, strict=True):
            index[k] = i
        picks.add(tuple(index))
    return sorted(picks)


def cell_argv(spec: SweepSpec, cell: Cell) -> list[str]:
    """The flags of one cell (without ``--json``): base options, the cell's coordinates, its derived seed."""
    from fedsde.sweep.command import command_info, option_argv

    info = command_info(spec.command, spec.commands)
    options = {**spec.base, **{k: v for k, v in cell.coords.items() if k != "seed"}}
    argv: list[str] = []
    positional = [a.dest for a in info.positionals]
    for key in positional:
        if key in options:
            argv += option_argv(info, key, options[key])
    for key, value in options.items():
        if key in positional:
            continue
        action = info.options[key]
        if action.metavar == "FILE" and isinstance(value, str) and not Path(value).is_absolute():
            value = str(spec.root / value)
        argv += option_argv(info, key, value)
    if info.takes_seed:
        argv.append(f"--seed={cell.seed}")
    return argv
