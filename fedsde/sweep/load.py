"""Reading a sweep folder back: an ``xarray.Dataset`` over the grid, or a tidy ``pandas.DataFrame``.

A cell's JSON result is flattened into variables named by its key path joined with ``_`` (``final.mean`` →
``final_mean``); numbers, booleans and arrays of them become float64 variables (NaN where a cell is missing or
failed), strings object variables.  The ``config`` block (the options again) is left out.  Array dimensions are
named ``d`` (and ``d2``) for vectors whose name ends in ``mean``/``mean_stderr`` and square matrices whose name
ends in ``cov`` (the model dimension d), ``NAME_dimK`` otherwise.
"""

from __future__ import annotations

import json
import os
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


def _value_dims(name: str, shape: tuple[int, ...]) -> tuple[str, ...]:
    if len(shape) == 1 and name.endswith(("mean", "mean_stderr")):
        return ("d",)
    if len(shape) == 2 and shape[0] == shape[1] and name.endswith("cov"):
        return ("d", "d2")
    return tuple(f"{name}_dim{k}" for k in range(len(shape)))


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
    along it), then the result's own dimensions (``d``, ``d2`` for moments, e.g. ``final_mean`` (…, d) and
    ``final_cov`` (…, d, d2) for ``simulate``).  Per cell: ``status`` (``done``, ``failed`` or ``missing``),
    ``error`` (the failure message, empty otherwise), ``cell_seed`` (the derived seed), ``wall_s`` and
    ``n_warnings`` (entries of the result's ``warnings``).  Attributes: command, seed, spec (TOML text),
    spec_sha256 and the counts of cells by status.
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
    for name, vals in leaves.items():
        if any(isinstance(v, str) for v in vals.values()):
            arr = np.full(shape, None, dtype=object)
            for idx, v in vals.items():
                arr[idx] = v if isinstance(v, str) else json.dumps(v if np.ndim(v) == 0 else np.asarray(v).tolist())
            data[name] = (dims, arr)
            continue
        ndim = max(np.ndim(v) for v in vals.values())
        inner = tuple(max(np.shape(v)[k] if np.ndim(v) == ndim else 1 for v in vals.values()) for k in range(ndim))
        arr = np.full(shape + inner, np.nan)
        for idx, v in vals.items():
            v = np.asarray(v, dtype=np.float64)
            if v.ndim == ndim:
                arr[idx + tuple(slice(0, n) for n in v.shape)] = v
        data[name] = (dims + list(_value_dims(name, inner)), arr)
    coords: dict[str, Any] = {}
    for dim, axes in spec.axes.items():
        for axis in axes:
            coords[axis] = (dim, _coord(spec.axis_values(axis)))
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
