"""``fedsde reproduce``: the main job — the quadratic generalisation analysis of seed 002, Section 6."""

from __future__ import annotations

import argparse
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from fedsde._cli.common import add_json_flag, emit
from fedsde.errors import FedsdeInputError

QUICK = {"etas": (0.01, 0.05, 0.1), "Es": (1, 2, 5, 10, 20), "replicates": 4000}
FULL = {"etas": (0.01, 0.05, 0.1), "Es": (1, 2, 5, 10, 20, 50, 100, 200), "replicates": 40000}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reproduce",
        help="run the main job: stationary bias/variance vs E (exact, simulated, printed)",
        description="Reproduce and correct seed 002's quadratic analysis: stationary bias and variance of "
        "FedAvg vs local steps E for several client learning rates, from the exact law, from simulation, and "
        "from the paper's printed C4 and v0(∞). Writes CSV, PNG and a summary into --out.",
    )
    p.add_argument("--quick", action="store_true", help="small grid and fewer replicates (about a minute)")
    p.add_argument("--out", default="fedsde-results", metavar="DIR", help="output folder (default fedsde-results)")
    p.add_argument("--seed", type=int, default=0, metavar="S")
    p.add_argument("--device", default="cpu", help="torch device for the simulations")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from fedsde.problems import paper_table_problem
    from fedsde.report.output import save_figure, write_csv, write_json
    from fedsde.report.stationary import COLUMNS, log_slopes, plot_stationary, stationary_scan

    if args.seed < 0:
        raise FedsdeInputError(f"--seed={args.seed}: must be >= 0")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise FedsdeInputError(f"--out={args.out!r}: exists and is not a folder")
    cfg = QUICK if args.quick else FULL
    problem = paper_table_problem()
    t0 = time.perf_counter()
    rows = stationary_scan(problem, cfg["etas"], cfg["Es"], replicates=cfg["replicates"], seed=args.seed,
                           progress=not args.json, device=args.device)
    wall = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    # build everything in a scratch folder, then move the finished files into place
    scratch = Path(tempfile.mkdtemp(dir=out, prefix=".partial-"))
    try:
        write_csv(scratch / "data" / "stationary_vs_E.csv", COLUMNS, (r.as_row() for r in rows))
        fig = plot_stationary(rows, problem)
        save_figure(fig, scratch / "figures" / "stationary_vs_E", formats=("png", "pdf"))
        slopes = {}
        for eta in cfg["etas"]:
            rs = sorted((r for r in rows if r.eta == eta), key=lambda r: r.E)
            E = np.array([r.E for r in rs], dtype=float)
            slopes[f"{eta:g}"] = {
                "exact": log_slopes(E, np.array([r.exact_var for r in rs])).tolist(),
                "printed": log_slopes(E, np.array([r.paper_v0_inf for r in rs])).tolist(),
            }
        summary = {
            "problem": problem.to_dict(),
            "grid": {"etas": list(cfg["etas"]), "Es": list(cfg["Es"])},
            "replicates": cfg["replicates"], "seed": args.seed, "quick": bool(args.quick),
            "device": args.device, "threads": torch.get_num_threads(), "wall_time_s": round(wall, 2),
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "numpy": np.__version__},
            "variance_log_slopes_vs_E": slopes,
        }
        write_json(scratch / "summary.json", summary)
        for f in sorted(scratch.rglob("*")):
            if f.is_file():
                target = out / f.relative_to(scratch)
                target.parent.mkdir(parents=True, exist_ok=True)
                f.replace(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    header = (f"{'eta':>5} {'E':>4} | {'exact mean':>10} {'sim mean':>10} {'bias':>8} | {'exact var':>10} "
              f"{'sim var':>10} {'printed v0':>10} {'corr SDE':>10} | {'printed/exact':>13}")
    lines = [f"stationary law of FedAvg on '{problem.name}' (server step 1), {cfg['replicates']} replicates",
             header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r.eta:5g} {r.E:4d} | {r.exact_mean:10.6f} {r.sim_mean:10.6f} {r.bias_exact:8.4f} | "
                     f"{r.exact_var:10.4e} {r.sim_var:10.4e} {r.paper_v0_inf:10.4e} {r.corrected_sde_var:10.4e}"
                     f" | {r.paper_over_exact:13.3e}")
    lines.append(f"wrote {out / 'data' / 'stationary_vs_E.csv'}, {out / 'figures' / 'stationary_vs_E.png'}, "
                 f"{out / 'summary.json'}  ({wall:.1f} s)")
    result = {"rows": [dict(zip(COLUMNS, r.as_row(), strict=True)) for r in rows], "out": str(out),
              "wall_time_s": wall}
    sys.stdout.flush()
    return emit(args, result, "\n".join(lines))
