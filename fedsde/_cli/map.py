"""``fedsde map``: the validity test over a grid of (η, E, s) on the sweep engine, drawn as a map with a report."""

from __future__ import annotations

import argparse
import math

from fedsde._cli import one_line_help
from fedsde._cli._data_flags import add_data_overrides
from fedsde._cli._resources import check_workers
from fedsde._cli.common import add_json_flag, emit, show_progress, writable_folder

REFERENCES = ("exact", "svag")
#: choices of ``--fedavg`` (as :data:`fedsde.validity.exact_fedavg.FEDAVG_MODES`)
FEDAVG_MODES = ("exact", "sampled")


def register(sub: argparse._SubParsersAction) -> None:
    from fedsde.sweep.spec import MAX_CELLS  # light: numpy and the standard library

    p = sub.add_parser(
        "map",
        help=one_line_help("map"),
        description="For which client steps η, local steps E and server steps s does seed 002's SDE describe FedAvg "
        "on this problem? Runs the validity test (fedsde validity) in every cell of the grid η × E × s on the sweep "
        "engine (one stored file per cell in --out, resumable with --resume, on Dask with --workers/--scheduler, "
        "loadable with fedsde.sweep.load(DIR)), and writes DIR/map.png and map.pdf (cells coloured by outcome with "
        "the gap and its interval, the line κ = κ* of the claim 002/eq-2-model), DIR/map.json and a self-contained "
        "DIR/report.html. --refine BUDGET gives the inconclusive cells a second look on fresh replicates, with the "
        "family level α split over the two looks (Bonferroni), so the map's error level stays α.",
    )
    p.add_argument("--problem", required=True, metavar="FILE",
                   help="problem file (.toml/.json): quadratic clients or a data problem (kind = \"classification\", "
                   "\"regression\" or \"module\": your own nn.Module on your data, see docs/own_model.md)")
    p.add_argument("--eta", required=True, metavar="η1,η2,…", help="client steps η (the map's columns)")
    p.add_argument("--local-steps", required=True, metavar="E1,E2,…", help="local steps E (the map's rows)")
    p.add_argument("--server-lr", default="1", metavar="s1,s2,…",
                   help="server steps s, one map panel each (default 1: plain FedAvg)")
    p.add_argument("--rounds", type=int, required=True, metavar="n", help="base rounds of every cell (t = n·h)")
    p.add_argument("--replicates", type=int, default=None, metavar="R",
                   help="independent chains per ℓ (>= 2); needed where FedAvg is sampled (--fedavg sampled, the "
                   "default unless FedAvg's moments close and the reference is exact), not used where it is exact")
    p.add_argument("--seed", type=int, required=True, metavar="SEED",
                   help="the map's seed (each cell's derives from it and the cell's η, E, s)")
    p.add_argument("--out", required=True, metavar="DIR", help="the map's folder (created; a sweep folder)")
    p.add_argument("--reference", choices=REFERENCES, default=None,
                   help="the SDE's value: exact (default where one exists: quadratic and least-squares clients) or "
                   "svag (Richardson limit of SVAG chains; default for other problems)")
    p.add_argument("--fedavg", choices=FEDAVG_MODES, default=None,
                   help="FedAvg's side of every cell (as fedsde validity --fedavg): exact (its exact moments, where "
                   "they close: quadratic and least-squares clients with the exact reference; no replicates) or "
                   "sampled (R Monte-Carlo chains); default exact where the moments close and no SVAG chain is asked "
                   "for, else sampled")
    p.add_argument("--ells", default=None, metavar="ℓ1,ℓ2,…", help="SVAG parameters (as fedsde validity --ells)")
    p.add_argument("--tolerance", type=float, default=0.05, metavar="tol",
                   help="largest accepted gap d as a fraction of the SDE's movement (default 0.05)")
    p.add_argument("--accuracy-tolerance", type=float, default=0.01, metavar="tol",
                   help="largest accepted gap of the test accuracy, in accuracy units (default 0.01)")
    p.add_argument("--alpha", type=float, default=0.05, metavar="α",
                   help="family level of each cell's test (default 0.05; with --refine split as α/2 per look)")
    p.add_argument("--metrics", default=None, metavar="m1,m2,…", help="metrics to record (as fedsde validity)")
    p.add_argument("--verdict-metrics", default=None, metavar="m1,m2,…",
                   help="metrics the verdict judges (default all recorded)")
    p.add_argument("--record-every", type=int, default=1, metavar="m", help="grid spacing in base rounds")
    p.add_argument("--device", default="cpu", help="torch device of every cell (cpu, cuda, …)")
    add_data_overrides(p)
    p.add_argument("--final-cov", choices=("full", "diag", "none"), default="none",
                   help="what every cell computes and stores at the horizon (as fedsde validity --final-cov): the d×d "
                   "covariance of the final weights, the d variances, or nothing (default none: small cells)")
    p.add_argument("--order", type=int, choices=(1, 2), default=1,
                   help="the SDE every cell judges FedAvg against (as fedsde validity --order): 1, seed 002's "
                   "first-order SDE (default); 2, the order-2 SDE (docs/order2.md; quadratic and least-squares "
                   "clients)")
    p.add_argument("--refine", type=int, default=None, metavar="BUDGET",
                   help="replicates per chain (summed over cells) for a second look at the inconclusive cells, on "
                   "fresh replicates, cheapest first; both looks at level α/2 (see docs/map.md)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, default=1, metavar="N",
                       help="1 (default): cells in-process; N > 1: a Dask LocalCluster of N single-threaded processes")
    where.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                       help="run the cells on the Dask cluster whose scheduler listens at this address")
    p.add_argument("--resume", action="store_true", help="continue the map in --out (finished cells are kept)")
    from fedsde._cli.common import add_rule_sde_args

    add_rule_sde_args(p, "every cell judges the rule against (fedsde validity --aggregator: the rule's own chains "
                      "against the exact law of its SDE on quadratic clients, else the Richardson limit of its SVAG "
                      "chains; κ stays FedAvg's step measure)")
    p.add_argument("--max-cells", type=int, default=MAX_CELLS, metavar="N",
                   help=f"refuse a grid of more than N cells before anything runs (default {MAX_CELLS})")
    add_json_flag(p)
    p.set_defaults(func=run)


def _numbers(option: str, text: str, cast):
    from fedsde.errors import FedsdeInputError

    try:
        vals = [cast(x) for x in str(text).replace(" ", "").split(",") if x]
    except ValueError:
        raise FedsdeInputError(f"{option}={text!r}: must be comma-separated numbers") from None
    if not vals:
        raise FedsdeInputError(f"{option}={text!r}: give at least one value")
    return vals


def _integer(text: str) -> int:
    """One integer written as ``4`` or ``4.0`` (``ValueError`` for anything else: ``1.5``, ``nan``, ``inf``)."""
    try:
        return int(text)
    except ValueError:
        v = float(text)
        if not math.isfinite(v) or v != int(v):
            raise ValueError(text) from None
        return int(v)


def _integers(option: str, text: str) -> list[int]:
    """Comma-separated integers >= 1 (one-line error naming ``option`` otherwise)."""
    from fedsde.errors import FedsdeInputError

    try:
        vals = _numbers(option, text, _integer)
    except FedsdeInputError as err:
        if "at least one" in str(err):
            raise
        vals = None
    if vals is None or any(v < 1 for v in vals):
        raise FedsdeInputError(f"{option}={text!r}: must be comma-separated integers >= 1")
    return vals


def _check_options(args: argparse.Namespace):
    """The options every cell shares, checked before anything runs (one line naming the flag); the sweeps'
    :class:`~fedsde.sweep.SweepExecution`, built (and checked) once."""
    from fedsde._cli.common import check_device
    from fedsde._validate import positive_float
    from fedsde.errors import FedsdeInputError

    if args.rounds < 1:
        raise FedsdeInputError(f"--rounds={args.rounds}: must be an integer >= 1")
    if args.replicates is not None and args.replicates < 2:
        raise FedsdeInputError(f"--replicates={args.replicates}: must be an integer >= 2 (a standard error needs two)")
    if args.seed < 0:
        raise FedsdeInputError(f"--seed={args.seed}: must be an integer >= 0")
    if args.refine is not None and args.refine < 1:
        raise FedsdeInputError(f"--refine={args.refine}: must be an integer >= 1 (replicates to spend)")
    if not 0.0 < args.alpha < 1.0:
        raise FedsdeInputError(f"--alpha={args.alpha}: must be in (0, 1)")
    positive_float("--tolerance", args.tolerance)
    positive_float("--accuracy-tolerance", args.accuracy_tolerance)
    if args.record_every < 1:
        raise FedsdeInputError(f"--record-every={args.record_every}: must be an integer >= 1")
    from fedsde.sweep import SweepExecution

    execution = SweepExecution(workers=args.workers, scheduler=args.scheduler, resume=args.resume,
                               max_cells=args.max_cells, progress=show_progress(args))
    check_device(args.device)
    return execution


#: keywords of :func:`fedsde.maps.run_map` whose errors the command line renames to their flags
_OPTION_NAMES = ("ells=", "metrics=", "verdict_metrics=", "refine=", "replicates", "fedavg=", "reference=", "order=")


def run(args: argparse.Namespace) -> int:
    from fedsde._cli import cell_commands
    from fedsde._cli.validity import _names
    from fedsde.errors import FedsdeInputError
    from fedsde.maps import MapGrid, run_map

    axes = {"eta": _numbers("--eta", args.eta, float), "local_steps": _integers("--local-steps", args.local_steps),
            "server_lr": _numbers("--server-lr", args.server_lr, float)}
    try:
        grid = MapGrid(**{k: tuple(v) for k, v in axes.items()})
    except FedsdeInputError as err:
        raise FedsdeInputError(f"--{str(err).replace('_', '-', 1)}") from None
    execution = _check_options(args)
    out = writable_folder("--out", args.out)
    check_workers(args)
    ells = None if args.ells is None else _integers("--ells", args.ells)
    options = {"reference": args.reference, "fedavg": args.fedavg, "ells": ells, "tolerance": args.tolerance,
               "accuracy_tolerance": args.accuracy_tolerance, "alpha": args.alpha,
               "metrics": _names("--metrics", args.metrics),
               "verdict_metrics": _names("--verdict-metrics", args.verdict_metrics),
                "record_every": args.record_every, "device": args.device, "final_cov": args.final_cov,
                "order": args.order if args.order != 1 else None}
    from fedsde._cli._data_flags import data_overrides, problem_from_args
    from fedsde._cli.common import rule_from_args, rule_sampling_from_args
    from fedsde.report.map_report import write_outputs

    problem = problem_from_args(args)
    options |= data_overrides(args)  # every cell reads the file with the same --batch-size/--l2
    rule = rule_from_args(args)
    participation, weighting = rule_sampling_from_args(args, rule)
    if rule is not None:
        from fedsde.sde.rules import NoSDEError

        if rule.sde_kind is None:
            raise NoSDEError(rule.sde_refusal)
        if args.order != 1:
            raise FedsdeInputError(f"--order={args.order}: with --aggregator the SDE is the rule's own first-order "
                                   "SDE; leave --order out")
        rule.check_problem(problem, args.problem)
        options |= {"aggregator": args.aggregator, "aggregator_option": list(args.aggregator_option) or None,
                    "participation": participation,
                    "weighting": None if participation is None else weighting}
    try:
        record = run_map(args.problem, grid, rounds=args.rounds, replicates=args.replicates, seed=args.seed, out=out,
                         options=options, refine=args.refine, execution=execution, commands=cell_commands(),
                         problem=problem, rule=rule)
    except FedsdeInputError as err:
        msg = str(err)
        if msg.startswith(_OPTION_NAMES):  # run_map names its keyword; the command line names the flag
            name, rest = msg[:len(msg) - len(msg.lstrip("abcdefghijklmnopqrstuvwxyz_"))], msg
            raise FedsdeInputError("--" + name.replace("_", "-") + rest[len(name):]) from None
        raise
    # the cells' warnings (also those of cells run in other processes) are the map's; under --strict they are an
    # error before the map's files are written, so nothing is left as if the map were complete
    from fedsde._cli.common import run_warnings

    record["warnings"] = list(dict.fromkeys(w for c in record["cells"] for w in c.get("warnings") or ()))
    failed = record["counts"]["failed"]
    if failed:
        from fedsde._cli.common import warn

        warn(f"{failed} of {len(record['cells'])} cells failed; their errors are in {out}/map.json and "
             f"fedsde.sweep.load({str(out)!r}).error; rerun them with --resume")
    if args.strict and (record["warnings"] or run_warnings()):
        return emit(args, record, "")  # raises the one-line --strict error
    record["files"] = write_outputs(record, out, problem, progress=show_progress(args))
    return emit(args, record, human_report(record))


def human_report(record: dict) -> str:
    """The grid as text: one block per server step, rows E, columns η, each cell's outcome and gap."""
    short = {"tracks": "tracks", "does not track": "NOT", "inconclusive": "?", None: "failed"}
    grid = record["grid"]
    cells = {(c["server_lr"], c["local_steps"], c["eta"]): c for c in record["cells"]}
    ks = record.get("kappa_threshold")
    rule = record.get("aggregator")
    lines = [f"validity map{'' if not rule else ' of ' + rule['name'] + ' against its own SDE'}: "
             f"{record['problem']['file']} ({len(record['cells'])} cells, tolerance "
             f"{record['tolerance']:g}, α = {record['alpha']:g}, reference {record['reference']}"
             f"{', order-2 SDE' if record.get('order') == 2 else ''}; κ* = "
             + (f"{ks:.3g})" if ks is not None else "none)")]
    for s in grid["server_lr"]:
        lines.append(f"server step s = {s:g}   (outcome d̂; NOT: does not track, ?: inconclusive)")
        lines.append("E \\ η".ljust(8) + "".join(f"{e:<18g}" for e in grid["eta"]))
        for E in grid["local_steps"]:
            row = []
            for eta in grid["eta"]:
                c = cells[(s, E, eta)]
                gap = "" if c.get("gap") is None else f" {c['gap']:.3g}"
                row.append(f"{short.get(c.get('outcome'), '?')}{gap}".ljust(18))
            lines.append(f"{E:<8d}" + "".join(row))
    n = record["counts"]
    lines.append(f"{n['tracks']} track, {n['does not track']} do not, {n['inconclusive']} inconclusive, "
                 f"{n['failed']} failed")
    if record.get("refine"):
        r = record["refine"]
        lines.append(f"refined {r['cells']} cells ({r['spent']} of {r['budget']} replicates), {r.get('decided', 0)} "
                     "decided at the second look")
    lines += [f"{name}: {path}" for name, path in record.get("files", {}).items()]
    return "\n".join(lines)
