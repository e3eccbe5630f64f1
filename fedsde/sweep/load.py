"""Reading a sweep folder back: an ``xarray.Dataset`` over the grid, or a tidy ``pandas.DataFrame``.

A cell's JSON result is flattened into variables named by its key path joined with ``_`` (``final.mean`` →
``final_mean``); numbers, booleans and arrays of them become float64 variables (NaN where a cell is missing or
failed), strings object variables.  The ``config`` block (the options again) is left out.

Dimensions of the arrays (:func:`value_dims`): only keys known to hold weights use the model dimension, ``d`` for
vectors (``final_mean``, ``final_mean_stderr``, ``stationary_mean``, ``w0``, …) and ``d``, ``d2`` for d × d
matrices (``final_cov``, ``stationary_cov``, ``temperature``, …); the known commands' other arrays get named
dimensions (:data:`COMMAND_DIMS`: ``ell`` × ``time`` for ``validity``, ``round`` for ``simulate``'s metric
curves, ``tau`` and ``kappa`` for ``scaling``); any other array gets dimensions of its own, ``NAME_dimK``, so two
quantities never share a dimension because their lengths happen to agree.  Cells whose arrays differ in length
along a dimension (a ``problem`` axis over problems of different d, say) are padded with NaN to the longest, and
``DIM_size`` records each cell's own length.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from fedsde.sweep.spec import SweepSpec
from fedsde.sweep.store import iter_records, read_spec

#: per-cell bookkeeping variables (besides the results)
STATUS_MISSING, STATUS_DONE, STATUS_FAILED = "missing", "done", "failed"
_SKIP = ("config", "warnings")


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        for key, val in obj.items():
            if prefix == "" and key in _SKIP:
                continue
            out.update(_flatten(val, f"{prefix}_{key}" if prefix else str(key)))
        return out
    if isinstance(obj, str):
        return {prefix: obj}
    if obj is None or isinstance(obj, bool | int | float):
        return {prefix: np.nan if obj is None else float(obj)}
    if isinstance(obj, list):
        try:
            arr = np.array(obj, dtype=np.float64)  # None → nan; ragged or non-numeric lists raise
        except (TypeError, ValueError):
            return {}
        return {prefix: arr} if arr.size else {}
    return {}


#: vectors over the model weights (last axis: ``d``), by the end of their key path
WEIGHT_VECTOR = re.compile(r"(?:^|_)(?:(?:final|stationary|transient|chain|sde|mc)_mean(?:_stderr)?|w0|optimum"
                           r"|round_law_c|coefficients_c)$")
#: d × d matrices over the model weights (last two axes: ``d``, ``d2``)
WEIGHT_MATRIX = re.compile(r"(?:^|_)(?:(?:final|stationary|transient|chain|sde|mc)_cov|temperature|hessian"
                           r"|round_law_B|round_law_noise_cov|coefficients_A|coefficients_diffusion_cov)$")
#: per command: (key path pattern, names of the leading dimensions, before any weight dimensions)
COMMAND_DIMS: dict[str, list[tuple[re.Pattern, tuple[str, ...]]]] = {
    "validity": [(re.compile(r"metrics_.+_(?:mean|se)"), ("ell", "time")),
                 (re.compile(r"extrapolated_.+_(?:mean|se)"), ("time",)),
                 (re.compile(r"ells"), ("ell",)), (re.compile(r"times|rounds"), ("time",)),
                 (re.compile(r"final_mean|final_cov|final_cov_trace"), ("ell",))],
    "simulate": [(re.compile(r"metrics_.+_(?:mean|se)|metrics_rounds"), ("round",)),
                 (re.compile(r"problem_(?:sizes|test_sizes|p)"), ("client",))],
    "scaling": [(re.compile(r"(?:base|scaled)_curves_.+"), ("tau",)),
                (re.compile(r"discrepancy_vs_kappa_.+"), ("kappa",))],
}
#: per command: the variable whose values label a named dimension (a coordinate when every cell agrees)
COMMAND_COORDS: dict[str, dict[str, str]] = {
    "validity": {"ell": "ells", "time": "times"},
    "simulate": {"round": "metrics_rounds"},
    "scaling": {"tau": "base_curves_tau", "kappa": "discrepancy_vs_kappa_kappa"},
}


def value_dims(command: str, name: str, shape: tuple[int, ...]) -> tuple[str, ...]:
    """Dimension names of the array variable ``name`` (shape without the grid) of a ``command`` cell."""
    ndim = len(shape)
    trailing: tuple[str, ...] = ()
    if ndim >= 2 and shape[-1] == shape[-2] and WEIGHT_MATRIX.search(name):
        trailing = ("d", "d2")
    elif ndim >= 1 and (WEIGHT_VECTOR.search(name) or WEIGHT_MATRIX.search(name)):  # a covariance's diagonal too
        trailing = ("d",)
    leading = next((dims for pat, dims in COMMAND_DIMS.get(command, []) if pat.fullmatch(name)), ())
    if len(leading) + len(trailing) != ndim:
        leading = tuple(f"{name}_dim{k}" for k in range(ndim - len(trailing)))
    return leading + trailing


def _coord(values: list) -> np.ndarray:
    if all(isinstance(v, bool | int | float) for v in values) or all(isinstance(v, str) for v in values):
        return np.array(values)
    return np.array([json.dumps(v) if not isinstance(v, str) else v for v in values], dtype=object)


def _collect(out: str | os.PathLike) -> tuple[SweepSpec, list]:
    spec = read_spec(out)
    return spec, list(iter_records(out, spec))


def load(out: str | os.PathLike):
    """The sweep stored in ``out`` as an ``xarray.Dataset``; works on a half-finished sweep.

    Dimensions: one per grid axis (coordinate: its values), one per zip group (each zip axis is a coordinate
    along it), then the result's own dimensions (see the module docstring: ``d``, ``d2`` for weights, e.g.
    ``final_mean`` (…, d) and ``final_cov`` (…, d, d2) for ``simulate``; ``ell`` × ``time`` for ``validity``
    curves, with coordinates from ``ells`` and ``times`` when every cell has the same).  Per cell: ``status``
    (``done``, ``failed`` or ``missing``), ``error`` (the failure message, empty otherwise), ``cell_seed`` (the
    derived seed), ``wall_s``, ``n_warnings`` (entries of the result's ``warnings``) and, for each result dimension
    whose length differs between the finished cells that have it, ``DIM_size`` (the cell's own length; NaN pads
    the rest, 0 where a cell has no data).  A result variable or dimension whose name is taken by a grid axis or a
    per-cell variable is renamed ``result_NAME``.  Attributes: command, seed, spec (TOML text), spec_sha256 and
    the counts of cells by status.
    """
    import xarray as xr

    spec, pairs = _collect(out)
    dims, shape = list(spec.dims), tuple(spec.dims.values())
    status = np.full(shape, STATUS_MISSING, dtype=object)
    error = np.full(shape, "", dtype=object)
    seed = np.zeros(shape, dtype=np.int64)
    wall = np.full(shape, np.nan)
    n_warn = np.zeros(shape, dtype=np.int64)
    leaves: dict[str, dict[tuple, Any]] = {}
    for cell, rec in pairs:
        seed[cell.index] = cell.seed
        if rec is None:
            continue
        status[cell.index] = rec.get("status", STATUS_FAILED)
        error[cell.index] = rec.get("error") or ""
        wall[cell.index] = rec.get("wall_s", np.nan)
        n_warn[cell.index] = len(rec.get("warnings") or [])
        if rec.get("status") == STATUS_DONE:
            for name, val in _flatten(rec.get("result") or {}).items():
                leaves.setdefault(name, {})[cell.index] = val
    data: dict[str, Any] = {"status": (dims, status.astype(str)), "error": (dims, error.astype(str)),
                            "cell_seed": (dims, seed), "wall_s": (dims, wall), "n_warnings": (dims, n_warn)}
    taken = set(dims) | {a for axes in spec.axes.values() for a in axes} | set(data)
    renamed = {name: f"result_{name}" if name in taken else name for name in leaves}
    numeric: dict[str, tuple[tuple[str, ...], dict[tuple, np.ndarray]]] = {}
    for name, vals in leaves.items():
        if any(isinstance(v, str) for v in vals.values()):
            arr = np.full(shape, None, dtype=object)
            for idx, v in vals.items():
                arr[idx] = v if isinstance(v, str) else json.dumps(v if np.ndim(v) == 0 else np.asarray(v).tolist())
            data[renamed[name]] = (dims, arr)
            continue
        ndim = max(np.ndim(v) for v in vals.values())
        cells = {idx: np.asarray(v, dtype=np.float64) for idx, v in vals.items() if np.ndim(v) == ndim}
        inner = tuple(max(v.shape[k] for v in cells.values()) for k in range(ndim))
        numeric[name] = (value_dims(spec.command, name, inner), cells)
    # a result dimension never takes the name of a grid dimension, axis or variable
    reserved = taken | set(renamed.values())
    dim_name = {dim: f"result_{dim}" if dim in reserved else dim
                for result_dims, _ in numeric.values() for dim in result_dims}
    sizes: dict[str, np.ndarray] = {}  # result dimension → each cell's length along it (0: no data)
    for result_dims, cells in numeric.values():
        for k, dim in enumerate(result_dims):
            per_cell = sizes.setdefault(dim_name[dim], np.zeros(shape, dtype=np.int64))
            for idx, v in cells.items():
                per_cell[idx] = max(per_cell[idx], v.shape[k])
    length = {dim: int(per_cell.max()) for dim, per_cell in sizes.items()}
    for name, (result_dims, cells) in numeric.items():
        names = tuple(dim_name[dim] for dim in result_dims)
        arr = np.full(shape + tuple(length[dim] for dim in names), np.nan)
        for idx, v in cells.items():
            arr[idx + tuple(slice(0, n) for n in v.shape)] = v
        data[renamed[name]] = (dims + list(names), arr)
    ragged = {dim for dim, per_cell in sizes.items() if len(set(per_cell[status == STATUS_DONE].tolist()) - {0}) > 1}
    for dim in sorted(ragged):
        key = f"{dim}_size"
        while key in data:
            key = f"sweep_{key}"
        data[key] = (dims, sizes[dim])
    coords: dict[str, Any] = {}
    for dim, axes in spec.axes.items():
        for axis in axes:
            coords[axis] = (dim, _coord(spec.axis_values(axis)))
    for dim, source in COMMAND_COORDS.get(spec.command, {}).items():
        dim = dim_name.get(dim)
        if dim is None or dim in ragged or source not in numeric or dim in data:
            continue
        values = list(numeric[source][1].values())
        if values and values[0].shape == (length[dim],) and all(np.array_equal(v, values[0]) for v in values):
            coords[dim] = (dim, values[0])
    counts = {s: int(np.sum(status == s)) for s in (STATUS_DONE, STATUS_FAILED, STATUS_MISSING)}
    attrs = {"command": spec.command, "seed": spec.seed, "spec_sha256": spec.sha256,
             "spec": (Path(out) / "spec.toml").read_text(encoding="utf-8"), "cells": spec.n_cells, **counts}
    return xr.Dataset(data, coords=coords, attrs=attrs)


def load_frame(out: str | os.PathLike):
    """The sweep stored in ``out`` as a tidy ``pandas.DataFrame``: one row per cell (missing ones included).

    Columns: the axes (list values as JSON text), ``status``, ``error``, ``cell_seed``, ``wall_s``,
    ``n_warnings``, then the result's scalars and one column per entry of its arrays (``final_mean[0]``,
    ``final_cov[0,0]``, …), named as in :func:`load`.
    """
    import pandas as pd

    _, pairs = _collect(out)
    rows = []
    for cell, rec in pairs:
        row: dict[str, Any] = {k: (json.dumps(v) if isinstance(v, list) else v) for k, v in cell.coords.items()}
        rec = rec or {}
        row |= {"status": rec.get("status", STATUS_MISSING), "error": rec.get("error") or "",
                "cell_seed": cell.seed, "wall_s": rec.get("wall_s", np.nan),
                "n_warnings": len(rec.get("warnings") or [])}
        if rec.get("status") == STATUS_DONE:
            for name, val in _flatten(rec.get("result") or {}).items():
                if isinstance(val, np.ndarray):
                    for idx in np.ndindex(val.shape):
                        row[f"{name}[{','.join(map(str, idx))}]"] = val[idx]
                else:
                    row[name] = val
        rows.append(row)
    return pd.DataFrame(rows)
