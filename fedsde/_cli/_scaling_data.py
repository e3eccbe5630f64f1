"""``fedsde scaling`` on data problems (classification and module problems, compared by simulation: metric curves vs
τ with standard errors), and the lines and blocks its exact and simulated views share."""

from __future__ import annotations

import numpy as np

from fedsde._cli import cell_commands
from fedsde._cli.common import emit, parse_vector, warn
from fedsde.errors import FedsdeInputError
from fedsde.scaling.rules import FedAvgConfig


def _cfg_line(d: dict) -> str:
    extra = "".join(f"  {k}={d[k]}" for k in ("clients", "batch_size") if k in d)
    return (f"eta={d['eta']:g}  E={d['local_steps']}  s={d['server_lr']:g}  rounds={d['rounds']}{extra}  "
            f"tau horizon={d['horizon']:.6g}")


def _batch_factor(batch, rounds: int, keep: str = "temperature") -> dict:
    """``{"batch_factor": …}`` for the ``batch`` rule (:meth:`fedsde.scaling.batch_rule.BatchFactor.to_dict`: ``g``
    on the server step, whether it is corrected for sampling without replacement, ``exact``), else ``{}``."""
    return {} if batch is None else {"batch_factor": batch.to_dict(rounds, keep)}


def _curves(c) -> dict:
    out = {"tau": c.tau, "rounds": c.rounds}
    for name in c.mean:
        out[name] = {"mean": c.mean[name], "se": c.se[name]}
    return out


def _data_end(c, keep: tuple[str, ...]) -> dict:
    d = c.config.as_dict(keep=keep)
    return d | {"temperature_trace": c.temperature_trace, "horizon": c.config.horizon,
                "tau_per_round": c.config.tau_per_round, "curves": _curves(c), "notes": c.notes}


def _data_single(res, keep) -> dict:
    from fedsde.scaling.data import paired_difference

    taus = [t for t in res.separation.values() if t is not None]
    disc = {}
    _, diffs, ses = paired_difference(res.base, res.scaled)  # paired replicates (common random numbers)
    for name in res.base.mean:
        diff, se = diffs[name], ses[name]
        with np.errstate(divide="ignore", invalid="ignore"):
            zs = np.where(se > 0, np.abs(diff) / se, 0.0)
        disc[name] = {"max_abs_diff": float(np.max(np.abs(diff))), "max_z": float(np.max(zs)),
                      "final_diff": float(diff[-1]), "final_se": float(se[-1])}
    Tb, Ts = res.base.temperature_trace, res.scaled.temperature_trace
    return {"rule": res.rule.name, "kappa": res.kappa, "change": res.rule.change, "keeps": list(res.rule.keeps),
            "base": _data_end(res.base, keep), "scaled": _data_end(res.scaled, keep),
            "invariants": {"temperature_rel_change": abs(Ts - Tb) / Tb if Tb > 0 else None,
                           "horizon_rel_change": abs(res.scaled.config.horizon - res.base.config.horizon)
                           / res.base.config.horizon},
            "separation": res.separation, "first_separation_tau": min(taus) if taus else None, "z": res.z,
            "discrepancy": disc, "notes": list(res.notes)} | _batch_factor(res.batch, res.base.config.rounds,
                                                                             "horizon")


def _run_data(args, problem, rule, kappas: list[float], single: bool) -> int:
    from fedsde.scaling import compare_data
    from fedsde.scaling.data import check_memory, map_end, memory_need

    w0 = parse_vector("--w0", args.w0, problem.d)
    config = FedAvgConfig(eta=args.eta, local_steps=args.local_steps, server_lr=args.server_lr, rounds=args.rounds)
    keep = tuple(k for k in ("clients", "batch_size") if k in rule.changes)
    if single:
        res = compare_data(problem, config, rule, kappas[0], replicates=args.replicates, seed=args.seed, w0=w0,
                           points=args.points, z=args.z, device=args.device, progress=_progress(args))
        out = _data_single(res, keep)
        return emit(args, out, _human_data(out))
    workers = _workers(args.workers)
    # every κ must apply, and the cells that run at once must fit in memory, before any simulation starts
    ends = [map_end(problem, config, rule, k) for k in kappas]
    needs = [memory_need(problem, b, s, replicates=args.replicates, points=args.points) for b, s in ends]
    check_memory(problem, *ends[int(np.argmax(needs))], replicates=args.replicates, points=args.points,
                 concurrent=min(workers, len(kappas)))
    cells = _sweep_kappas(args, kappas, workers)
    curve = {"kappa": kappas, "first_separation_tau": [c["first_separation_tau"] for c in cells]}
    for name in cells[0]["discrepancy"]:
        curve[f"{name}_max_z"] = [c["discrepancy"][name]["max_z"] for c in cells]
        curve[f"{name}_final_diff"] = [c["discrepancy"][name]["final_diff"] for c in cells]
    out = {"rule": rule.name, "change": rule.change, "keeps": list(rule.keeps), "base": cells[0]["base"],
           "cells": [{"kappa": c["kappa"], "scaled": c["scaled"], "invariants": c["invariants"],
                      "separation": c["separation"], "first_separation_tau": c["first_separation_tau"],
                      "discrepancy": c["discrepancy"], "notes": c.get("notes", []),
                      "warnings": list(c.get("warnings") or [])} | {k: c[k] for k in ("batch_factor",) if k in c}
                     for c in cells],
           "discrepancy_vs_kappa": curve}
    # each cell ran with its own record of warnings (in this process or on a worker): report every one, with its κ
    out["warnings"] = [f"kappa={c['kappa']:g}: {m}" for c in cells for m in c.get("warnings") or []]
    return emit(args, out, _human_data_list(out))


def _progress(args) -> bool:
    from fedsde._cli.common import show_progress

    return show_progress(args)


def _workers(requested: int) -> int:
    """``--workers``, capped (with a warning) at the machine's CPU cores."""
    import os

    cores = os.cpu_count() or 1
    if requested > cores:
        warn(f"--workers={requested}: more than the {cores} CPU cores of this machine; running {cores} workers")
        return cores
    return requested


def _sweep_kappas(args, kappas: list[float], workers: int) -> list[dict]:
    """One ``fedsde scaling`` cell per κ through :func:`fedsde.sweep.run`; the cells' results in κ order."""
    import tempfile
    from pathlib import Path

    from fedsde import sweep
    from fedsde.sweep.store import read_cells

    base = {"problem": str(Path(args.problem).resolve()), "eta": args.eta, "local-steps": args.local_steps,
            "server-lr": args.server_lr, "rounds": args.rounds, "rule": args.rule,
            "replicates": args.replicates, "points": args.points, "z": args.z, "device": args.device}
    if args.w0 is not None:
        base["w0"] = args.w0
    from fedsde._cli._data_flags import data_overrides

    base |= {k.replace("_", "-"): v for k, v in data_overrides(args).items()}  # the cells read the file as this run
    # every κ runs with --seed itself (shared seeds): the same base run and client split in every cell, and each
    # cell equal to `fedsde scaling --kappa κ` alone
    spec = {"run": {"command": "scaling", "seed": args.seed, "seeds": "shared"}, "base": base,
            "grid": {"kappa": kappas}}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.sweep_out) if args.sweep_out else Path(tmp) / "sweep"
        resume = bool(args.sweep_out) and out.exists()
        execution = sweep.SweepExecution(workers=workers, resume=resume, progress=_progress(args))
        sweep.run(spec, out, execution, commands=cell_commands())
        recs = read_cells(out)
    by_kappa = {}
    for rec in recs.values():
        if rec.get("status") != "done":
            raise FedsdeInputError(f"--kappa={rec['coords'].get('kappa')}: {rec.get('error', 'cell failed')}")
        by_kappa[float(rec["coords"]["kappa"])] = rec["result"]
    return [by_kappa[float(k)] for k in kappas]


def _human_data(out: dict) -> str:
    lines = [f"rule {out['rule']} (κ = {out['kappa']:g}): {out['change']}"]
    for end in ("base", "scaled"):
        e = out[end]
        lines.append(f"{end:7s} {_cfg_line(e)}  Tr temperature={e['temperature_trace']:.4g}")
    change = out["invariants"]["temperature_rel_change"]
    lines.append("temperature rel. change " + ("undefined (the base run has no gradient noise: temperature 0)"
                                               if change is None else f"{change:.3g}"))
    for name, d in out["discrepancy"].items():
        sep = out["separation"][name]
        lines.append(f"{name:20s} final diff {d['final_diff']:+.4g} ± {d['final_se']:.2g}  max z {d['max_z']:.2f}  "
                     f"separates at tau={'never' if sep is None else f'{sep:.4g}'}")
    lines += [f"note: {n}" for n in out.get("notes", [])]
    return "\n".join(lines)


def _human_data_list(out: dict) -> str:
    c = out["discrepancy_vs_kappa"]
    lines = [f"rule {out['rule']}: {out['change']}", f"base    {_cfg_line(out['base'])}",
             f"{'kappa':>8s} {'first separation tau':>22s}"]
    for k, t in zip(c["kappa"], c["first_separation_tau"], strict=True):
        lines.append(f"{k:8.4g} {'never' if t is None else f'{t:.4g}':>22s}")
    lines += [f"note (κ = {c['kappa']:g}): {n}" for c in out["cells"] for n in c.get("notes", [])]
    return "\n".join(lines)
