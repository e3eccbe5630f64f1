"""``fedsde sweep``: run any command over a grid of options (in-process or on Dask), resumable."""

from __future__ import annotations

import argparse

from fedsde._cli import one_line_help
from fedsde._cli._resources import check_workers
from fedsde._cli.common import add_json_flag, emit, show_progress, warn, writable_folder


def register(sub: argparse._SubParsersAction) -> None:
    from fedsde.sweep.spec import MAX_CELLS  # light: numpy and the standard library

    p = sub.add_parser(
        "sweep",
        help=one_line_help("sweep"),
        description="Run the cells of a sweep spec (TOML: [run] command and seed, [base] options, [grid] axes, "
        "optional [zip] axes that vary together) and store each finished cell in --out. Each cell's seed derives "
        "from the spec's seed and the cell's coordinates, so results do not depend on workers or order. Load the "
        "results with fedsde.sweep.load(DIR) (xarray) or fedsde.sweep.load_frame(DIR) (pandas).",
    )
    p.add_argument("spec", metavar="SPEC", help="sweep spec (TOML)")
    p.add_argument("--out", required=True, metavar="DIR", help="sweep folder (created)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, default=1, metavar="N",
                       help="1 (default): in-process; N > 1: a Dask LocalCluster of N single-threaded processes")
    where.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                       help="run on the Dask cluster whose scheduler listens at this address")
    p.add_argument("--gpu-workers", type=int, default=None, metavar="K",
                   help="with --workers N: K of the N workers get a GPU (each declares the Dask resource GPU=1 and "
                   "sees its own GPU first); default: one per visible CUDA device, at most N, when a cell's --device "
                   "is cuda, else 0. Cells on cuda run only on such workers, on any cluster")
    p.add_argument("--max-cells", type=int, default=MAX_CELLS, metavar="N",
                   help=f"refuse a grid of more than N cells, counted from the axis lengths before anything runs "
                   f"(default {MAX_CELLS})")
    p.add_argument("--resume", action="store_true",
                   help="continue the sweep in --out: skip finished cells, run missing and failed ones (the spec "
                   "must be the stored one)")
    add_json_flag(p)
    p.epilog = ("Exit status: 0 when the sweep ran (failed cells are stored with their error, counted in the "
                "summary and reported as a warning); 2 when the sweep was refused (spec, --out, cluster), or under "
                "--strict when any cell failed or carries warnings.")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fedsde._cli import cell_commands
    from fedsde.sweep import SweepExecution
    from fedsde.sweep import run as run_sweep

    out = writable_folder("--out", args.out)
    check_workers(args)
    execution = SweepExecution(workers=args.workers, scheduler=args.scheduler, gpu_workers=args.gpu_workers,
                               resume=args.resume, max_cells=args.max_cells, progress=show_progress(args))
    summary = run_sweep(args.spec, out, execution, commands=cell_commands())
    lines = [f"{summary['cells']} cells in {summary['out']}: {summary['done']} done, {summary['skipped']} skipped "
             f"(finished earlier), {summary['failed']} failed, {summary['warned']} with warnings "
             f"({summary['wall_s']:.1f} s)"]
    lines += [f"  failed {f['coords']}: {f['error']}" for f in summary["failures"][:10]]
    if summary["failed"]:
        warn(f"{summary['failed']} of {summary['cells']} cells failed; their errors are in "
             f"fedsde.sweep.load({str(summary['out'])!r}).error; rerun them with --resume")
    if args.strict and summary["warned"]:
        warn(f"{summary['warned']} of {summary['cells']} cells carry warnings (--strict)")
    return emit(args, summary, "\n".join(lines))
