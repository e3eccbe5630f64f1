"""``fedsde reproduce``: the main job — the reproduction gallery and its self-contained report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedsde._cli import one_line_help
from fedsde._cli.common import add_json_flag, emit, show_progress


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reproduce",
        help=one_line_help("reproduce"),
        description="Reproduce and correct seed 002's analysis: discrete FedAvg vs its SDE, bounds vs what the "
        "algorithm does, and the quadratic generalisation analysis (printed vs corrected vs exact). Writes "
        "DIR/report.html (self-contained), DIR/report.md, DIR/figures/ (PNG and PDF), DIR/data/ (CSV) and "
        "DIR/summary.json.",
    )
    p.add_argument("--quick", action="store_true", help="small grids (every figure, about a minute on 2 cores)")
    p.add_argument("--out", default="fedsde-results", metavar="DIR", help="output folder (default fedsde-results)")
    p.add_argument("--only", default=None, metavar="F3,F5",
                   help="make only these figures; the claims table then holds only the checks of fedsde claims that "
                   "these figures use (none for most: every claim is checked without --only)")
    p.add_argument("--config", default=None, metavar="FILE",
                   help="TOML file whose fields override the built-in quick/full configuration")
    p.add_argument("--seed", type=int, default=None, metavar="SEED", help="overrides run.seed")
    p.add_argument("--device", default=None, help="torch device for simulations (overrides run.device)")
    p.add_argument("--no-claims", action="store_true", help="skip the claims table (faster)")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="worker processes for the figures (default: the usable cores; 1: one after the other, in "
                   "this process); the numbers are the same for any N")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fedsde.report.config import Field, load_config, parse_only
    from fedsde.report.runner import reproduce

    only = parse_only(args.only)
    cfg = load_config(quick=args.quick, path=args.config)
    if args.seed is not None:
        cfg["run"]["seed"] = Field("int", 0).check("--seed", args.seed)
    if args.device is not None:
        cfg["run"]["device"] = args.device
    _check_device(cfg["run"]["device"])
    claim_ids = None if args.only is None else figure_claims(only)  # --only: the claims its figures use
    with_claims = not args.no_claims and (claim_ids is None or bool(claim_ids))
    res = reproduce(cfg, only, Path(args.out), quick=args.quick, progress=show_progress(args),
                    with_claims=with_claims, jobs=args.jobs, claim_ids=claim_ids)
    lines = [f"fedsde reproduce ({'quick' if args.quick else 'full'}): {len(res.records)} figures in "
             f"{res.wall_time_s:.1f} s → {res.out / 'report.html'}"]
    for r in res.records:
        status = f"FAILED: {r.error.splitlines()[0]}" if r.error else f"{r.wall_time_s:6.1f} s"
        lines.append(f"  {r.spec.id:>3} {r.spec.title[:60]:<60} {status}")
    scan = next((r.output for r in res.records if r.spec.id in ("F3", "F2") and r.output), None)
    if scan is not None:
        lines += ["", _stationary_table(scan.tables["stationary_scan"])]
    if res.claims:
        n_fail = sum(1 for c in res.claims if (c.get("printed") or {}).get("verdict") == "fails")
        which = "" if claim_ids is None else " (those the figures of --only use; every claim without --only)"
        lines.append(f"\nclaims: {len(res.claims)} checked{which}, {n_fail} fail as printed (see report.html)")
    elif claim_ids is not None and not args.no_claims:
        lines.append(f"\nclaims: none checked: the figures of --only ({', '.join(only)}) use no claim (every claim is "
                     "checked without --only, or by fedsde claims)")
    if res.failed:
        lines.append(f"\n{len(res.failed)} figure(s) failed: {', '.join(res.failed)} (details in the report)")
    result = {
        "out": str(res.out), "wall_time_s": res.wall_time_s, "failed": res.failed,
        "figures": {r.spec.id: {"title": r.spec.title, "wall_time_s": r.wall_time_s, "error": r.error,
                                "files": [str(f) for f in r.files],
                                "numbers": None if r.output is None else r.output.numbers} for r in res.records},
        "claims": res.claims,
    }
    emit(args, result, "\n".join(lines))
    sys.stdout.flush()
    return 1 if res.failed else 0


def figure_claims(only) -> tuple[str, ...]:
    """The checks of ``fedsde claims`` that the figures ``only`` use (:attr:`FigureSpec.claims`), in order."""
    from fedsde.report.gallery import GALLERY

    return tuple(dict.fromkeys(cid for fid in only for cid in GALLERY[fid].claims))


def _check_device(device: str) -> None:
    import torch

    from fedsde._validate import device_dtype

    device_dtype(device, torch.float64)


def _stationary_table(table) -> str:
    header, rows = table
    idx = {h: i for i, h in enumerate(header)}
    head = (f"{'eta':>5} {'E':>4} | {'exact mean':>10} {'sim mean':>10} {'bias':>8} | {'exact var':>10} "
            f"{'sim var':>10} {'printed v0':>10} {'corr SDE':>10} | {'printed/exact':>13}")
    out = ["stationary law of FedAvg (server step 1): exact vs simulated vs printed", head, "-" * len(head)]
    for row in rows:
        r = {k: row[i] for k, i in idx.items()}
        out.append(f"{r['eta']:5g} {r['E']:4d} | {r['exact_mean']:10.6f} {r['sim_mean']:10.6f} "
                   f"{r['bias_exact']:8.4f} | {r['exact_var']:10.4e} {r['sim_var']:10.4e} {r['paper_v0_inf']:10.4e} "
                   f"{r['corrected_sde_var']:10.4e} | {r['paper_over_exact']:13.3e}")
    return "\n".join(out)
