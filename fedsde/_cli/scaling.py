"""``fedsde scaling``: map a FedAvg configuration along a first-order SDE scaling rule and measure what changes."""

from __future__ import annotations

import argparse

import numpy as np

from fedsde._cli import one_line_help
from fedsde._cli._scaling_data import _batch_factor, _cfg_line, _run_data
from fedsde._cli.common import add_json_flag, capture_warnings, check_device, emit, fmt_array, parse_vector, warn
from fedsde.errors import FedsdeInputError
from fedsde.scaling.rules import ALL_RULES, FedAvgConfig, get_rule


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "scaling",
        help=one_line_help("scaling"),
        description="Map (η, E, s, n[, Q, b]) along a scaling rule that keeps the first-order SDE (temperature "
        "s·η·Σ p_k²Σ_k and horizon τ = n·s·η·E) and measure the discrepancy between the two ends: exactly on "
        "quadratic and least-squares regression problems, by simulation (metric curves vs τ with standard errors) on "
        "classification and module problems (your own nn.Module). "
        f"Rules: {', '.join(f'{r.name} ({r.change})' for r in ALL_RULES.values())}.",
    )
    p.add_argument("--problem", required=True, metavar="FILE",
                   help="problem file (.toml or .json): quadratic, regression, classification or module (kind = "
                   "\"module\": your own nn.Module on your data, see docs/own_model.md); classification and module "
                   "problems are the sampled problems below (compared by simulation)")
    p.add_argument("--eta", required=True, type=float, metavar="η", help="client learning rate")
    p.add_argument("--local-steps", required=True, type=int, metavar="E", help="local SGD steps per round")
    p.add_argument("--server-lr", type=float, default=1.0, metavar="s", help="actual server step (default 1)")
    p.add_argument("--rounds", required=True, type=int, metavar="n", help="rounds of the base run")
    p.add_argument("--rule", required=True, choices=[*ALL_RULES, "sqrt"],
                   help="scaling rule (batch: server step ×g, rounds ×1/g with g = f(b)/f(κb), f(b) = (n_k − b)/"
                   "(b(n_k − 1)) for minibatches drawn without replacement, g = κ with replacement; batch-linear: "
                   "×κ whatever the sampling; sqrt: the square-root rule of the adaptive server rules, Malladi et al. "
                   "2022 Def. 4.5: server step ×√κ, 1 − β ×κ, τ ×1/√κ, rounds ×1/κ for noise ×1/κ; needs "
                   "--aggregator fedadam or fedyogi)")
    p.add_argument("--kappa", required=True, metavar="κ[,κ2,…]",
                   help="scaling factor; a comma-separated list gives the discrepancy as a function of κ")
    p.add_argument("--w0", default=None, metavar="w1,w2,…",
                   help="start point (quadratic: default zero; regression and classification: default the problem's "
                   "initial weights)")
    p.add_argument("--new-clients", choices=["copy", "split"], default=None,
                   help="regression problems, rules clients and client-lr: the κQ clients are κ copies of each "
                   "client with weight p_k/κ (copy, default: the temperature is kept exactly) or each client's rows "
                   "split at random (--seed) into κ clients (split: the minibatch noise changes)")
    p.add_argument("--replicates", type=int, default=16, metavar="R", help="sampled problems: runs per end "
                   "(default 16)")
    p.add_argument("--device", default="cpu", metavar="DEVICE",
                   help="sampled problems: torch device of the simulations (cpu, cuda, cuda:1, …; default cpu)")
    p.add_argument("--seed", type=int, default=0,
                   help="sampled problems: simulation seed; regression problems with --new-clients split: seed "
                   "of the split (default 0)")
    p.add_argument("--points", type=int, default=20, metavar="K",
                   help="sampled problems: at most this many τ points on each metric curve (default 20)")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="sampled problems with a κ list: the κ cells run as a fedsde sweep on N worker "
                   "processes (default 1; at most the machine's CPU cores)")
    p.add_argument("--sweep-out", default=None, metavar="DIR",
                   help="sampled problems with a κ list: keep the sweep folder here (resumed if it exists; "
                   "default: a temporary folder)")
    p.add_argument("--z", type=float, default=3.5,
                   help="sampled problems: curves separate where they differ by more than z standard "
                   "errors (3.5)")
    from fedsde._cli._data_flags import add_data_overrides
    from fedsde._cli.common import add_rule_sde_args

    add_data_overrides(p)
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

    if args.workers < 1:
        raise FedsdeInputError(f"--workers={args.workers}: must be an integer >= 1")
    check_device(args.device)
    kappas = _kappas(args.kappa)
    single = "," not in args.kappa
    if args.rule == "sqrt":
        return _run_rule(args, kappas)
    rule = get_rule(args.rule)
    from fedsde._cli._data_flags import problem_from_args

    problem = problem_from_args(args)
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
              "notes": list(r.notes)} | _batch_factor(r.batch, args.rounds) for r in results]
    if single:
        c = cells[0]
        out = head | {"kappa": c["kappa"], "base": _ls_end(results[0].base, keep), "scaled": c["scaled"],
                      "invariants": c["invariants"], "discrepancy": c["discrepancy"], "notes": c["notes"]} | {
                          k: c[k] for k in ("batch_factor",) if k in c}
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
def _run_rule(args: argparse.Namespace, kappas: list[float]) -> int:
    """``--rule sqrt --aggregator fedadam|fedyogi``: the square-root rule mapped and checked on quadratic clients
    (:mod:`fedsde.scaling.sqrt_rule`)."""
    from fedsde._cli.common import rule_from_args
    from fedsde.problems import QuadraticProblem
    from fedsde.scaling.sqrt_rule import SOURCE, sqrt_scaling_check

    agg = rule_from_args(args)
    if agg is None:
        raise FedsdeInputError("--rule sqrt: needs --aggregator fedadam or fedyogi (the rule scales the server's β's "
                               "and τ)")
    from fedsde._cli._data_flags import problem_from_args

    problem = problem_from_args(args)
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
