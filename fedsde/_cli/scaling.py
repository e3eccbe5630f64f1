"""``fedsde scaling``: map a FedAvg configuration along a first-order SDE scaling rule and measure what changes."""

from __future__ import annotations

import argparse

import numpy as np

from fedsde._cli import cell_commands, one_line_help
from fedsde._cli.common import add_json_flag, capture_warnings, check_device, emit, fmt_array, parse_vector, warn
from fedsde.errors import FedsdeInputError
from fedsde.scaling.rules import RULES, FedAvgConfig, get_rule


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "scaling",
        help=one_line_help("scaling"),
        description="Map (η, E, s, n[, Q, b]) along a scaling rule that keeps the first-order SDE (temperature "
        "s·η·Σ p_k²Σ_k and horizon τ = n·s·η·E) and measure the discrepancy between the two ends: exactly on "
        "quadratic and least-squares regression problems, by simulation (metric curves vs τ with standard errors) on "
        "classification problems. "
        f"Rules: {', '.join(f'{r.name} ({r.change})' for r in RULES.values())}.",
    )
    p.add_argument("--problem", required=True, metavar="FILE",
                   help="quadratic, regression or classification problem (.toml or .json)")
    p.add_argument("--eta", required=True, type=float, metavar="η", help="client learning rate")
    p.add_argument("--local-steps", required=True, type=int, metavar="E", help="local SGD steps per round")
    p.add_argument("--server-lr", type=float, default=1.0, metavar="s", help="actual server step (default 1)")
    p.add_argument("--rounds", required=True, type=int, metavar="n", help="rounds of the base run")
    p.add_argument("--rule", required=True, choices=[*RULES, "sqrt"],
                   help="scaling rule (sqrt: the square-root rule of the adaptive server rules, Malladi et al. 2022 "
                   "Def. 4.5: server step ×√κ, 1 − β ×κ, τ ×1/√κ, rounds ×1/κ for noise ×1/κ; needs --aggregator "
                   "fedadam or fedyogi)")
    p.add_argument("--kappa", required=True, metavar="κ[,κ2,…]",
                   help="scaling factor; a comma-separated list gives the discrepancy as a function of κ")
    p.add_argument("--w0", default=None, metavar="w1,w2,…",
                   help="start point (quadratic: default zero; regression and classification: default the problem's "
                   "initial weights)")
    p.add_argument("--new-clients", choices=["copy", "split"], default=None,
                   help="regression problems, rules clients and client-lr: the κQ clients are κ copies of each "
                   "client with weight p_k/κ (copy, default: the temperature is kept exactly) or each client's rows "
                   "split at random (--seed) into κ clients (split: the minibatch noise changes)")
    p.add_argument("--replicates", type=int, default=16, metavar="R", help="classification problems: runs per end "
                   "(default 16)")
    p.add_argument("--device", default="cpu", metavar="DEVICE",
                   help="classification problems: torch device of the simulations (cpu, cuda, cuda:1, …; default cpu)")
    p.add_argument("--seed", type=int, default=0,
                   help="classification problems: simulation seed; regression problems with --new-clients split: seed "
                   "of the split (default 0)")
    p.add_argument("--points", type=int, default=20, metavar="K",
                   help="classification problems: at most this many τ points on each metric curve (default 20)")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="classification problems with a κ list: the κ cells run as a fedsde sweep on N worker "
                   "processes (default 1; at most the machine's CPU cores)")
    p.add_argument("--sweep-out", default=None, metavar="DIR",
                   help="classification problems with a κ list: keep the sweep folder here (resumed if it exists; "
                   "default: a temporary folder)")
    p.add_argument("--z", type=float, default=3.5,
                   help="classification problems: curves separate where they differ by more than z standard "
                   "errors (3.5)")
    from fedsde._cli.common import add_rule_sde_args

    add_rule_sde_args(p, "the scaling rule maps (--rule sqrt: an adaptive rule; the first-order rules: fedavg)",
                      sampling=False)
    add_json_flag(p)
    p.set_defaults(func=run)


def _kappas(text: str) -> list[float]:
    vals = parse_vector("--kappa", text)
    bad = vals[vals <= 0]
    if bad.size:
        raise FedsdeInputError(f"--kappa={text!r}: every κ must be > 0 (got {bad[0]:g})")
    return vals.tolist()


def run(args: argparse.Namespace) -> int:
    # the warnings of this run only (also when it runs as a sweep cell, in this process or on a worker): emit reports
    # them in the JSON "warnings" and on stderr, and a κ list collects those of its cells
    with capture_warnings():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from fedsde.problems import load_problem

    if args.workers < 1:
        raise FedsdeInputError(f"--workers={args.workers}: must be an integer >= 1")
    check_device(args.device)
    kappas = _kappas(args.kappa)
    single = "," not in args.kappa
    if args.rule == "sqrt":
        return _run_rule(args, kappas)
    rule = get_rule(args.rule)
    problem = load_problem(args.problem)
    from fedsde._cli.common import rule_from_args

    agg = rule_from_args(args)
    if agg is not None and (_is_regression(problem) or _is_data(problem)):
        raise FedsdeInputError(f"--aggregator={args.aggregator}: the rules' exact chains are built on quadratic "
                               "clients; a data or regression file runs FedAvg")
    if _is_regression(problem):
        return _run_regression(args, problem, rule, kappas, single)
    if args.new_clients is not None:
        raise FedsdeInputError(f"--new-clients={args.new_clients}: only for regression problems (quadratic clients "
                               "are copied, classification clients split)")
    if _is_data(problem):
        return _run_data(args, problem, rule, kappas, single)
    w0 = parse_vector("--w0", args.w0, problem.d)
    config = FedAvgConfig(eta=args.eta, local_steps=args.local_steps, server_lr=args.server_lr, rounds=args.rounds,
                          clients=problem.Q)
    from fedsde.scaling import compare_quadratic

    if agg is not None:
        from fedsde.sde.rules import rule_kind

        rule_kind(agg)  # one line for a rule without a linear or momentum SDE
        agg.check_problem(problem, args.problem)
    results = [compare_quadratic(problem, config, rule, k, w0=w0, aggregator=agg) for k in kappas]
    for res in results:
        for name, end in (("base", res.base), (f"kappa={res.kappa:g}", res.scaled)):
            if end.stationary_mean is None:
                warn(f"{name}: the chain has no stationary law (spectral radius of I - s*B is "
                     f"{end.spectral_radius:.4g} >= 1 with s={end.config.server_lr:g}); its stationary discrepancy "
                     "is reported as null")
    keep = tuple(k for k in ("clients", "batch_size") if k in rule.changes)
    if single:
        res = results[0]
        out = {"rule": rule.name, "kappa": res.kappa, "change": rule.change, "keeps": list(rule.keeps),
               "base": _end(res.base, keep), "scaled": _end(res.scaled, keep),
               "invariants": _invariants(res.base, res.scaled),
               "discrepancy": {"stationary": res.stationary, "transient": res.transient, "max_rel": res.max_rel}}
        if agg is not None:
            out["aggregator"] = agg.describe()
        return emit(args, out, _human_single(out))
    rows = []
    for res in results:
        rows.append({"kappa": res.kappa, "scaled": _end(res.scaled, keep),
                     "invariants": _invariants(res.base, res.scaled),
                     "discrepancy": {"stationary": res.stationary, "transient": res.transient,
                                     "max_rel": res.max_rel}})
    curve = {"kappa": kappas, "max_rel": [r.max_rel for r in results]}
    for part in ("stationary", "transient"):
        for key in results[0].stationary:
            curve[f"{part}_{key}"] = [getattr(r, part)[key] for r in results]
    out = {"rule": rule.name, "change": rule.change, "keeps": list(rule.keeps),
           "base": _end(results[0].base, keep), "cells": rows, "discrepancy_vs_kappa": curve}
    if agg is not None:
        out["aggregator"] = agg.describe()
    return emit(args, out, _human_list(out))


def _is_data(problem) -> bool:
    try:
        from fedsde.problems import is_data_problem
    except ImportError:  # pragma: no cover - older trees
        from fedsde.problems import ClassificationProblem

        return isinstance(problem, ClassificationProblem)
    return bool(is_data_problem(problem))


def _is_regression(problem) -> bool:
    from fedsde.problems import RegressionProblem

    return isinstance(problem, RegressionProblem)


def _end(end, keep: tuple[str, ...]) -> dict:
    d = end.config.as_dict(keep=keep)
    return d | {"temperature": end.temperature, "horizon": end.config.horizon,
                "tau_per_round": end.config.tau_per_round, "spectral_radius": end.spectral_radius,
                "stationary_mean": end.stationary_mean, "stationary_cov": end.stationary_cov,
                "transient_mean": end.transient_mean, "transient_cov": end.transient_cov}


def _invariants(base, scaled) -> dict:
    Tb, Ts = base.temperature, scaled.temperature
    return {"temperature_rel_change": float(np.linalg.norm(Ts - Tb) / np.linalg.norm(Tb)),
            "horizon_rel_change": abs(scaled.config.horizon - base.config.horizon) / base.config.horizon}


def _cfg_line(d: dict) -> str:
    extra = "".join(f"  {k}={d[k]}" for k in ("clients", "batch_size") if k in d)
    return (f"eta={d['eta']:g}  E={d['local_steps']}  s={d['server_lr']:g}  rounds={d['rounds']}{extra}  "
            f"tau horizon={d['horizon']:.6g}")


def _human_single(out: dict) -> str:
    disc = out["discrepancy"]
    lines = [f"rule {out['rule']} (κ = {out['kappa']:g}): {out['change']}",
             f"base    {_cfg_line(out['base'])}",
             f"scaled  {_cfg_line(out['scaled'])}",
             f"temperature s·η·Σp²Σ   base {fmt_array(out['base']['temperature'])}",
             f"                       rel. change {out['invariants']['temperature_rel_change']:.3g}"]
    for end in ("base", "scaled"):
        e = out[end]
        sm = "none (chain diverges)" if e["stationary_mean"] is None else fmt_array(e["stationary_mean"])
        lines.append(f"{end:7s} stationary mean {sm}   at horizon mean {fmt_array(e['transient_mean'])}")
    for part in ("stationary", "transient"):
        lines.append(f"discrepancy ({part}): " + "  ".join(f"{k}={v:.3g}" for k, v in disc[part].items()))
    lines.append(f"max relative discrepancy: {disc['max_rel']:.3g}")
    return "\n".join(lines)


def _human_list(out: dict) -> str:
    lines = [f"rule {out['rule']}: {out['change']}", f"base    {_cfg_line(out['base'])}",
             f"{'kappa':>8s} {'max_rel':>10s} {'stat.loss':>10s} {'stat.cov':>10s} {'mean/sd':>10s}"]
    c = out["discrepancy_vs_kappa"]
    for i, k in enumerate(c["kappa"]):
        lines.append(f"{k:8.4g} {c['max_rel'][i]:10.3g} {c['stationary_excess_loss_rel'][i]:10.3g} "
                     f"{c['stationary_cov_rel'][i]:10.3g} {c['stationary_mean_shift_sd'][i]:10.3g}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ least-squares regression
_LS_MODEL = ("least squares, exact moments of minibatch FedAvg (fedsde.exact.least_squares); temperature "
             "s·η·Σ_k p_k²Σ_k(w*) at the optimum")


def _run_regression(args, problem, rule, kappas: list[float], single: bool) -> int:
    """Both ends from the exact least-squares laws (:func:`fedsde.scaling.compare_least_squares`): the keys of the
    quadratic route, plus ``notes`` and, for rules that multiply the clients, ``new_clients``."""
    from fedsde.scaling.least_squares import compare_least_squares

    w0 = parse_vector("--w0", args.w0, problem.d)
    config = FedAvgConfig(eta=args.eta, local_steps=args.local_steps, server_lr=args.server_lr, rounds=args.rounds)
    new_clients = args.new_clients or "copy"
    results = compare_least_squares(problem, config, rule, kappas, w0=w0, new_clients=new_clients, seed=args.seed)
    ends = [("base", results[0].base)] + [(f"kappa={r.kappa:g}", r.scaled) for r in results]
    for name, end in ends:
        if end.no_stationary is not None:
            warn(f"{name}: the chain has no stationary law ({end.no_stationary}); its stationary discrepancy is "
                 "reported as null")
    keep = tuple(k for k in ("clients", "batch_size") if k in rule.changes)
    head = {"rule": rule.name, "change": rule.change, "keeps": list(rule.keeps), "model": _LS_MODEL}
    if "clients" in rule.changes:
        head["new_clients"] = new_clients
    cells = [{"kappa": r.kappa, "scaled": _ls_end(r.scaled, keep), "invariants": _invariants(r.base, r.scaled),
              "discrepancy": {"stationary": r.stationary, "transient": r.transient, "max_rel": r.max_rel},
              "notes": list(r.notes)} for r in results]
    if single:
        c = cells[0]
        out = head | {"kappa": c["kappa"], "base": _ls_end(results[0].base, keep), "scaled": c["scaled"],
                      "invariants": c["invariants"], "discrepancy": c["discrepancy"], "notes": c["notes"]}
        return emit(args, out, f"{_LS_MODEL}\n{_human_single(out)}{_notes_text(out['notes'])}")
    curve = {"kappa": kappas, "max_rel": [r.max_rel for r in results]}
    for part in ("stationary", "transient"):
        for key in results[0].stationary:
            curve[f"{part}_{key}"] = [getattr(r, part)[key] for r in results]
    out = head | {"base": _ls_end(results[0].base, keep), "cells": cells, "discrepancy_vs_kappa": curve,
                  "notes": [f"kappa={c['kappa']:g}: {n}" for c in cells for n in c["notes"]]}
    return emit(args, out, f"{_LS_MODEL}\n{_human_list(out)}{_notes_text(out['notes'])}")


def _ls_end(end, keep: tuple[str, ...]) -> dict:
    return _end(end, keep) | {"second_moment_radius": end.second_moment_radius}


def _notes_text(notes: list[str]) -> str:
    return "".join(f"\nnote: {n}" for n in notes)


# ---------------------------------------------------------------------------------------------- data problems
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
            "discrepancy": disc, "notes": list(res.notes)}


def _run_data(args, problem, rule, kappas: list[float], single: bool) -> int:
    from fedsde.scaling import compare_data
    from fedsde.scaling.data import check_memory, map_end, memory_need

    w0 = parse_vector("--w0", args.w0, problem.d)
    config = FedAvgConfig(eta=args.eta, local_steps=args.local_steps, server_lr=args.server_lr, rounds=args.rounds)
    keep = tuple(k for k in ("clients", "batch_size") if k in rule.changes)
    if single:
        res = compare_data(problem, config, rule, kappas[0], replicates=args.replicates, seed=args.seed, w0=w0,
                           points=args.points, z=args.z, device=args.device)
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
                      "warnings": list(c.get("warnings") or [])} for c in cells],
           "discrepancy_vs_kappa": curve}
    # each cell ran with its own record of warnings (in this process or on a worker): report every one, with its κ
    out["warnings"] = [f"kappa={c['kappa']:g}: {m}" for c in cells for m in c.get("warnings") or []]
    return emit(args, out, _human_data_list(out))


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
    # every κ runs with --seed itself (shared seeds): the same base run and client split in every cell, and each
    # cell equal to `fedsde scaling --kappa κ` alone
    spec = {"run": {"command": "scaling", "seed": args.seed, "seeds": "shared"}, "base": base,
            "grid": {"kappa": kappas}}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.sweep_out) if args.sweep_out else Path(tmp) / "sweep"
        resume = bool(args.sweep_out) and out.exists()
        sweep.run(spec, out, workers=workers, resume=resume, progress=False, commands=cell_commands())
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
    lines.append(f"temperature rel. change {out['invariants']['temperature_rel_change']:.3g}")
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


def _run_rule(args: argparse.Namespace, kappas: list[float]) -> int:
    """``--rule sqrt --aggregator fedadam|fedyogi``: the square-root rule mapped and checked on quadratic clients
    (:mod:`fedsde.scaling.sqrt_rule`)."""
    from fedsde._cli.common import rule_from_args
    from fedsde.problems import QuadraticProblem, load_problem
    from fedsde.scaling.sqrt_rule import SOURCE, sqrt_scaling_check

    agg = rule_from_args(args)
    if agg is None:
        raise FedsdeInputError("--rule sqrt: needs --aggregator fedadam or fedyogi (the rule scales the server's β's "
                               "and τ)")
    problem = load_problem(args.problem)
    if not isinstance(problem, QuadraticProblem):
        raise FedsdeInputError("--rule sqrt: checked on quadratic clients (the adaptive SDE is built on their exact "
                               "round law)")
    w0 = parse_vector("--w0", args.w0, problem.d)
    cells = [sqrt_scaling_check(problem, agg, eta=args.eta, local_steps=args.local_steps, server_lr=args.server_lr,
                                rounds=args.rounds, kappa=k, replicates=args.replicates, seed=args.seed, w0=w0)
             for k in kappas]
    out = cells[0] if len(cells) == 1 else {"rule": "sqrt", "source": SOURCE, "cells": cells}
    lines = [f"rule sqrt ({SOURCE}): noise ×1/κ, server step ×√κ, 1 − β ×κ, τ ×1/√κ, rounds ×1/κ"]
    for c in cells:
        b, sc = c["base"], c["scaled"]
        lines += [f"κ = {c['kappa']:g}: base s={b['server_lr']:g} n={b['rounds']} β=({b['beta1']:g}, {b['beta2']:g}) "
                  f"τ={b['tau']:g} → s={sc['server_lr']:g} n={sc['rounds']} β=({sc['beta1']:g}, {sc['beta2']:g}) "
                  f"τ={sc['tau']:g} (t = {b['time']:.4g})",
                  f"  E F(w_T): base {b['loss_mean']:.6g} ± {b['loss_se']:.2g}, scaled {sc['loss_mean']:.6g} ± "
                  f"{sc['loss_se']:.2g}; difference {c['loss_difference']:+.3g} ± {c['loss_difference_se']:.2g} "
                  f"(s.e.); SDE coefficients equal to {c['sde_invariance']:.1e} (relative)"]
    return emit(args, out, "\n".join(lines))
