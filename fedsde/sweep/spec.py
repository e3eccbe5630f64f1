"""Sweep specs: parsing and validation, the cells of a grid, and each cell's seed.

A spec is a TOML file (or the equivalent dict) with the tables

* ``[run]``: ``command`` (a cell command: a ``fedsde`` subcommand whose whole output is its ``--json`` object,
  see :func:`fedsde.sweep.command.available_commands`), ``seed`` (an integer >= 0; required
  when the command takes ``--seed``) and optionally ``seeds = "derived"`` (default) or ``"shared"``;
* ``[base]``: the command's options shared by every cell, named like its long flags (``local-steps`` or
  ``local_steps``); switches take ``true``/``false``, vectors a list or a comma-separated string;
* ``[grid]``: axes, each a non-empty list of values; the cells are their Cartesian product;
* ``[zip]`` (optional): axes of equal length that vary together along one dimension named ``zip``, or several
  such groups as sub-tables ``[zip.NAME]``, each along its own dimension ``NAME``.

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
import os
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedsde.errors import FedsdeInputError

TABLES = ("run", "base", "grid", "zip")
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
        return int(np.prod(list(self.dims.values()), dtype=np.int64))

    def cells(self) -> Iterator[Cell]:
        """Every cell, in C order over ``dims``."""
        axes = self.axes
        for index in itertools.product(*(range(n) for n in self.dims.values())):
            coords = {a: self.axis_values(a)[i] for dim, i in zip(axes, index, strict=True) for a in axes[dim]}
            seed = self.seed if self.seeds == "shared" else cell_seed(self.seed, coords)
            yield Cell(index, coords, cell_id(coords), seed)

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
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
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


def _axis(where: str, values: Any) -> list:
    if not isinstance(values, list):
        raise FedsdeInputError(f"{where}={values!r}: an axis must be a list of values")
    if not values:
        raise FedsdeInputError(f"{where}=[]: empty axis; give at least one value")
    seen = set()
    for v in values:
        _check_value(where, v)
        key = canonical_json(v)
        if key in seen:
            raise FedsdeInputError(f"{where}: value {v!r} appears twice; the values of an axis must be distinct")
        seen.add(key)
    return list(values)


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
        zips[dim] = {key: _axis(f"{prefix}.{key}", val) for key, val in group.items()}
        lengths = {key: len(vals) for key, vals in zips[dim].items()}
        if len(set(lengths.values())) > 1:
            desc = ", ".join(f"{k} has {n}" for k, n in lengths.items())
            raise FedsdeInputError(f"[{prefix}]: axes that vary together need equal lengths; {desc} values")
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


def load_spec(spec: str | os.PathLike | Mapping | SweepSpec) -> SweepSpec:
    """Read and validate a sweep spec (a TOML file path or a dict with the same tables).

    Besides the structure (known tables, non-empty axes with distinct values, zip axes of equal length, no option
    both in ``[base]`` and an axis), the command must exist and know every option, and every cell's flags must
    parse with the command's own parser; relative paths of ``FILE`` options start from the spec's folder.

    Raises
    ------
    FedsdeInputError
        with a one-line message naming the table, key and constraint.
    """
    if isinstance(spec, SweepSpec):
        return spec
    from fedsde.sweep.command import NOT_CELL_OPTIONS, command_info

    data, root = _read(spec)
    parsed = parse_structure(data)
    info = command_info(parsed.command)
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
    if info.takes_seed and "seed" not in {k.replace("-", "_") for k in _table(data, "run")}:
        raise FedsdeInputError(f"run.seed: required, fedsde {info.name} takes --seed (cell seeds derive from it)")
    spec_obj = SweepSpec(parsed.command, parsed.seed, parsed.base, parsed.grid, parsed.zips, root=root,
                         seeds=parsed.seeds)
    from fedsde.sweep.command import ArgumentError, parse_cell_args

    for cell in spec_obj.cells():
        argv = cell_argv(spec_obj, cell)
        try:
            parse_cell_args(info, argv)
        except ArgumentError as exc:
            where = f"cell {canonical_json(cell.coords)}: " if cell.coords else ""
            raise FedsdeInputError(f"{where}{exc}") from None
    return spec_obj


def cell_argv(spec: SweepSpec, cell: Cell) -> list[str]:
    """The flags of one cell (without ``--json``): base options, the cell's coordinates, its derived seed."""
    from fedsde.sweep.command import command_info, option_argv

    info = command_info(spec.command)
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
