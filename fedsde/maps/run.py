"""Running a validity map: the grid's sweep, the refinement of undecided cells, and the map's JSON record.

:func:`run_map` runs every cell as ``fedsde validity … --json`` on the sweep engine (:func:`fedsde.sweep.run`:
in-process, on a Dask LocalCluster of ``workers`` processes or on the cluster at ``scheduler``; one file per
finished cell in ``out``, resumable with ``resume=True``; ``fedsde.sweep.load(out)`` reads them as xarray), then,
with ``refine``, a second sweep in ``out/refine`` over the cells still inconclusive (:mod:`fedsde.maps.refine`),
and returns the map as a JSON-able dict.  Results are read back through the validity command's JSON keys only:
``verdict.outcome``, ``verdict.worst`` (``gap``, ``lower``, ``upper``, ``metric``), ``verdict.replicates_needed``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedsde._progress import progress_bar
from fedsde._validate import positive_float, positive_int
from fedsde.errors import FedsdeInputError
from fedsde.maps.grid import (
    AXES,
    MapGrid,
    cell_kappa,
    check_grid,
    check_memory,
    kappa_threshold,
    sweep_spec,
)
from fedsde.maps.refine import DESIGN, LOOKS, combine_looks, look_alpha, plan_refinement
from fedsde.params import takes_values, value_fields
from fedsde.sweep.options import DEFAULT_EXECUTION, SweepExecution

#: the sweep folder of the refinement look, inside the map's folder
REFINE_DIR = "refine"
#: the claim whose threshold the map draws
CLAIM = "002/eq-2-model"
KAPPA_MEASURE = ("κ = s·λ_max(B), B = Σ_k p_k [I − (I − ηU_k)^E] (data: client Hessians at the optimum, applied by "
                 "Hessian-vector products; a non-convex loss: s·max |λ(B)| at a point of small gradient, see each "
                 "cell's kappa_note); the claim 002/eq-2-model fits κ* on the paper's table problem: the SDE tracks "
                 "FedAvg where κ <= κ*")


def cell_records(out: str | os.PathLike) -> list[dict[str, Any]]:
    """The cells stored in the sweep folder ``out``, in grid order: ``coords``, ``status`` (``done``, ``failed`` or
    ``missing``), ``error``, ``result`` (the command's JSON object, or ``None``), ``warnings`` (the cell's) and
    ``record`` (the cell file, relative to ``out``)."""
    from fedsde.sweep.store import CELLS_DIR, iter_records, read_spec

    rows = []
    for cell, rec in iter_records(out, read_spec(out)):
        rec = rec or {}
        rows.append({"coords": dict(cell.coords), "status": rec.get("status", "missing"),
                     "error": rec.get("error") or "", "result": rec.get("result"),
                     "warnings": list(rec.get("warnings") or ()),
                     "record": f"{CELLS_DIR}/{cell.id}.json"})
    return rows


def _look(row: dict) -> dict:
    """One look at one cell, from its stored record (validity's JSON keys)."""
    result = row["result"] or {}
    verdict = result.get("verdict") or {}
    worst = verdict.get("worst") or {}
    out = {"outcome": verdict.get("outcome") if row["status"] == "done" else None,
           "gap": worst.get("gap"), "lower": worst.get("lower"), "upper": worst.get("upper"),
           "replicates_needed": verdict.get("replicates_needed"), "metric": worst.get("metric"),
           "metric_tolerance": worst.get("tolerance"),
           "replicates": (result.get("config") or {}).get("replicates"), "status": row["status"],
           "record": row["record"], "warnings": row.get("warnings", [])}
    if row["status"] != "done":
        out["error"] = row["error"] or "not run"
    return out


def check_options(problem, options: Mapping[str, Any], reference: str, replicates: int | None,
                  refine: int | None) -> tuple[str, int | None]:
    """The cells' shared options checked against ``problem`` before any cell runs (one line naming the option):
    ``(fedavg, replicates)``, FedAvg's side as the cells resolve it and the replicates the cells are given
    (``None`` where FedAvg is exact: they would not be used)."""
    import warnings

    import torch

    from fedsde._validate import device_dtype
    from fedsde.problems.metrics import metric_names
    from fedsde.validity.exact_fedavg import resolve_fedavg

    ells = options.get("ells")
    if ells is not None:
        ells = [positive_int("ells", e) for e in ells]
        if not ells:
            raise FedsdeInputError("ells=[]: give at least one value")
    if reference == "svag" and ells is not None and len(set(ells)) < 2:
        raise FedsdeInputError(f"ells={ells}: need at least two distinct values of ℓ >= 1 for a verdict against the "
                               "SVAG reference (the Richardson limit of the two largest; e.g. 1,2,4,8)")
    positive_int("record_every", options.get("record_every", 1))
    device_dtype(options.get("device", "cpu"), torch.float64)
    available = metric_names(problem)
    metrics = options.get("metrics")
    names = list(available) if metrics is None else list(dict.fromkeys(["train_loss", *metrics]))
    bad = [m for m in names if m not in available]
    if bad:
        raise FedsdeInputError(f"metrics={bad}: not available for this problem (available: {', '.join(available)})")
    unknown = [m for m in options.get("verdict_metrics") or () if m not in names]
    if unknown:
        raise FedsdeInputError(f"verdict_metrics={unknown}: not recorded (recorded: {', '.join(names)})")
    fedavg = resolve_fedavg(problem, options.get("fedavg"), reference, ells)
    if fedavg == "exact":
        if refine is not None:
            raise FedsdeInputError(f"refine={refine}: FedAvg's side is exact (fedavg='exact'), so every cell is "
                                   "decided at once; refine needs fedavg='sampled'")
        if replicates is not None:
            warnings.warn(f"replicates={replicates}: not used — FedAvg's side is exact (fedavg='exact'); pass "
                          "fedavg='sampled' to sample it", UserWarning, stacklevel=3)
        return fedavg, None
    if replicates is None:
        raise FedsdeInputError("replicates: required where FedAvg is sampled (fedavg='sampled'): an integer >= 2")
    return fedavg, replicates


#: options whose meaning a rule's map sets itself (its reference, ℓ and sampled side)
_RULE_OWN = frozenset({"ells", "fedavg", "reference"})


def _rule_options(problem, rule, options: Mapping[str, Any], replicates: int | None, refine: int | None):
    """``(reference, fedavg, replicates, ells)`` of a map of a rule against its own SDE, checked before any cell runs
    (the rule's side is sampled: ``fedavg='exact'`` is refused and replicates are required)."""
    from fedsde.validity.rules import rule_ells, rule_reference

    if options.get("fedavg") == "exact":
        raise FedsdeInputError("fedavg='exact': FedAvg's exact side has no part in a map of a rule; the rule's side is "
                               "sampled (leave fedavg out)")
    reference = rule_reference(problem, rule, options.get("reference"))
    ells = rule_ells(rule, reference, options.get("ells"))
    shared = {k: v for k, v in options.items() if k not in _RULE_OWN}
    check_options(problem, shared, "svag", replicates if replicates is not None else 2, refine)
    if replicates is None:
        raise FedsdeInputError("replicates: required for a map of a rule (its chains are sampled): an integer >= 2")
    return reference, "sampled", replicates, ells


def _refuse_all_failed(firsts: list[dict], coords: list[dict], out: Path) -> None:
    """A map whose every cell failed is an error (one line: the first cell's), not a map of nothing."""
    if not firsts or any(c["status"] == "done" for c in firsts):
        return
    c = coords[0]
    why = " ".join(str(firsts[0].get("error") or "not run").split())
    raise FedsdeInputError(f"every one of the {len(firsts)} cells failed, so there is no map; the first (eta="
                           f"{c['eta']:g}, local_steps={c['local_steps']}, server_lr={c['server_lr']:g}): {why} "
                           f"(the failed cells are in {str(out)!r}; rerun with --resume once fixed)")


def _key(coords: Mapping) -> tuple:
    return tuple(float(coords[a]) for a in AXES)


def _sweep(spec: dict, out: Path, **kw) -> dict:
    from fedsde.sweep import run as run_sweep

    return run_sweep(spec, out, **kw)


@takes_values(types={"execution": SweepExecution}, execution=value_fields(SweepExecution))
def run_map(
    problem_file: str | os.PathLike,
    grid: MapGrid,
    *,
    rounds: int,
    replicates: int | None,
    seed: int,
    out: str | os.PathLike,
    options: Mapping[str, Any] | None = None,
    refine: int | None = None,
    execution: SweepExecution | None = None,
    commands: Mapping | None = None,
    problem=None,
    rule=None,
) -> dict[str, Any]:
    """The validity map of the problem in ``problem_file`` over ``grid`` (see the module docstring).

    Parameters
    ----------
    problem_file
        A problem file ``fedsde validity --problem`` accepts (quadratic, classification, regression, …).
    grid
        The axes ``η``, ``E``, ``s`` (:class:`~fedsde.maps.grid.MapGrid`).
    rounds, replicates, seed
        Base rounds ``n``, replicates ``R`` per chain of every cell (>= 2; needed where FedAvg is sampled, not used
        where it is exact: ``None``), the map's seed (each cell's derives from it and the cell's coordinates).
    out
        The map's folder: the grid's sweep (``spec.toml``, ``cells/``) and, with ``refine``, ``refine/``.
    options
        Other options of ``fedsde validity``, named like its long flags with ``_``: ``reference``, ``tolerance``,
        ``accuracy_tolerance``, ``alpha``, ``fedavg`` (``exact`` or ``sampled``; default as ``fedsde validity``),
        ``metrics``, ``verdict_metrics`` (lists), ``ells`` (list of int), ``record_every``, ``device``, ``float32``,
        ``final_cov`` (what each cell computes and stores at the horizon; default ``"none"``).
        ``order`` (1 or 2: the SDE judged against, :mod:`fedsde.sde.order2`).
        They are checked against the problem before any cell runs; a map whose every cell fails is an error
        (:class:`~fedsde.errors.FedsdeInputError`, naming the first cell's), not a map.
    refine
        Replicates per chain to spend on the undecided cells (:mod:`fedsde.maps.refine`); ``None``: one look.
    execution
        How the cells of both sweeps run (:class:`~fedsde.sweep.SweepExecution`: ``workers``, ``scheduler``,
        ``gpu_workers``, ``resume``, ``max_cells``, ``progress``; default in this process, with progress bars),
        passed whole to :func:`fedsde.sweep.run` (``max_cells`` is checked here first, from the axis lengths).
        Each field may be given instead as the keyword of its name, the call of earlier releases
        (:func:`fedsde.params.takes_values`).
    commands
        As :func:`fedsde.sweep.run`.
    problem
        The problem of ``problem_file`` when already loaded (its cached optimum and Hessians are reused for ``κ``);
        the cells load the file themselves.
    rule
        The server rule of ``options["aggregator"]`` (with its ``aggregator_option``) as an instance, when the map
        judges a rule against its own SDE (:func:`fedsde.validity.rules.rule_validity_test`): its reference and
        default ``ℓ`` are the rule's, its side is always sampled; ``κ`` stays FedAvg's step measure.

    Returns
    -------
    dict
        ``cells`` (one per cell, in grid order: ``eta``, ``local_steps``, ``server_lr``, ``outcome``, ``gap``,
        ``lower``, ``upper``, ``replicates_needed``, ``kappa``, and ``metric`` (the decisive one, whose gap ``gap``
        is) with its ``metric_tolerance``, ``replicates``, ``look``, ``looks``, ``status``, ``record``,
        ``warnings``), ``grid``, ``tolerance``, ``accuracy_tolerance``, ``alpha`` (the map's error level) and
        ``alpha_per_look``, ``problem``, ``reference``, ``fedavg`` (FedAvg's side: ``exact`` or ``sampled``),
        ``ells``, ``rounds``, ``replicates`` (``None`` where FedAvg is exact), ``seed``,
        ``kappa_threshold`` with ``claim`` and ``kappa_measure``, ``counts`` (cells per outcome), ``refine``,
        ``sweep`` (the grid's sweep summary), ``memory_estimate_bytes`` and ``out``.
    """
    from fedsde.problems import load_problem
    from fedsde.problems.metrics import metric_names
    from fedsde.validity.core import DEFAULT_ELLS
    from fedsde.validity.reference import check_order, resolve_reference

    execution = execution or DEFAULT_EXECUTION
    check_grid(grid, execution.max_cells)
    rounds = positive_int("rounds", rounds)
    if replicates is not None:
        replicates = positive_int("replicates", replicates, minimum=2)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise FedsdeInputError(f"seed={seed!r}: must be an integer >= 0")
    if refine is not None:
        refine = positive_int("refine", refine)
    options = {k: v for k, v in dict(options or {}).items() if v is not None}
    alpha = float(options.pop("alpha", 0.05))
    if not 0.0 < alpha < 1.0:
        raise FedsdeInputError(f"alpha={alpha!r}: must be in (0, 1)")
    tolerance = positive_float("tolerance", options.get("tolerance", 0.05))
    accuracy_tolerance = positive_float("accuracy_tolerance", options.get("accuracy_tolerance", 0.01))
    path = Path(problem_file).absolute()
    problem = load_problem(path) if problem is None else problem
    if rule is None:
        reference = resolve_reference(problem, options.get("reference"))
        order = check_order(problem, options.get("order", 1), reference)
        fedavg, replicates = check_options(problem, options, reference, replicates, refine)
        ells = sorted({int(e) for e in options.get("ells") or DEFAULT_ELLS[reference]})
    else:
        order = 1
        reference, fedavg, replicates, ells = _rule_options(problem, rule, options, replicates, refine)
    recorded = options.get("metrics") or metric_names(problem)
    concurrent = 1 if execution.scheduler is not None else execution.workers
    from fedsde._samples import resolve_final_cov

    final_cov = resolve_final_cov("final_cov", options.get("final_cov", "none"), problem.d)
    memory = check_memory(problem, grid, concurrent=concurrent, rounds=rounds, replicates=replicates or 2, ells=ells,
                          final_cov=final_cov,
                          record_every=int(options.get("record_every", 1)), metrics=len(recorded) + 1,
                          exact=reference == "exact")
    per_look = look_alpha(alpha, refine is not None)
    kw = {"execution": execution, "commands": commands}
    spec = sweep_spec(str(path), grid, rounds=rounds, replicates=replicates, seed=seed,
                      options={**options, "alpha": per_look})
    out = Path(out)
    summary = _sweep(spec, out, **kw)
    firsts = [_look(row) for row in cell_records(out)]
    coords = list(grid.cells())
    _refuse_all_failed(firsts, coords, out)
    refined: dict[int, dict] = {}
    refine_info = None
    if refine is not None:
        plan, spent = plan_refinement(firsts, refine)
        refine_info = {"budget": refine, "looks": LOOKS, "alpha_per_look": per_look, "design": DESIGN,
                       "spent": spent, "cells": len(plan), "folder": REFINE_DIR, "sweep": None}
        if plan:
            zips = {a: [coords[i][a] for i, _ in plan] for a in AXES} | {"replicates": [r for _, r in plan]}
            base = {k: v for k, v in spec["base"].items() if k != "replicates"}
            spec2 = {"run": {"command": "validity", "seed": int(seed)}, "base": base, "zip": zips}
            refine_info["sweep"] = _sweep(spec2, out / REFINE_DIR, **kw)
            by_key = {_key(row["coords"]): row for row in cell_records(out / REFINE_DIR)}
            for i, _ in plan:
                look = _look(by_key[_key(coords[i])])
                refined[i] = {**look, "record": f"{REFINE_DIR}/{look['record']}"}
    kappa_star = kappa_threshold()
    cells = []
    bar = progress_bar(len(coords), "map: κ", unit="cell", enabled=execution.progress)  # a Hessian's worth per cell
    for i, (c, first) in enumerate(zip(coords, firsts, strict=True)):
        kappa, why = cell_kappa(problem, c)
        bar.update()
        row = {**c, **combine_looks(first, refined.get(i)), "kappa": kappa}
        if why:
            row["kappa_note"] = why
        cells.append(row)
    bar.close()
    if refine_info is not None:
        refine_info["decided"] = sum(1 for r in cells if r["look"] == 2 and r["outcome"] != "inconclusive")
    counts = {o: sum(r["outcome"] == o for r in cells) for o in ("tracks", "does not track", "inconclusive")}
    counts["failed"] = sum(r["outcome"] is None for r in cells)
    return {"problem": {"file": str(path), "kind": type(problem).__name__, "Q": int(problem.Q),
                        "d": int(problem.d)}, "aggregator": None if rule is None else rule.describe(),
            "grid": grid.to_dict(), "tolerance": tolerance, "accuracy_tolerance": accuracy_tolerance,
            "alpha": alpha, "alpha_per_look": per_look, "reference": reference, "fedavg": fedavg, "ells": ells,
            "rounds": rounds, "order": order,
            "replicates": replicates, "seed": seed, "kappa_threshold": kappa_star, "claim": CLAIM,
            "kappa_measure": KAPPA_MEASURE, "cells": cells, "counts": counts, "refine": refine_info,
            "sweep": summary, "memory_estimate_bytes": memory, "out": str(out)}
