"""``fedsde compare-aggregators``: server rules under the heterogeneity settings of FedAWARE's Table 1.

The experiment itself lives in :mod:`fedsde.report.aggregator_comparison`; this module parses the command line and
writes ``table.md``, ``summary.csv``, ``results.json`` and ``accuracy.png``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import time
from pathlib import Path

from fedsde._atomic import atomic_write_bytes
from fedsde._cli.common import add_json_flag, emit, to_jsonable
from fedsde.errors import FedsdeInputError
from fedsde.report.aggregator_comparison import (
    DEFAULT_AGGREGATORS,
    SETTINGS,
    ComparisonConfig,
    plot_accuracy,
    run_comparison,
    summary_rows,
    table_text,
)


def write_outputs(results: dict, out: Path, *, plot: bool = True) -> dict[str, str]:
    """Write ``table.md``, ``summary.csv``, ``results.json`` and ``accuracy.png`` into ``out`` (atomically)."""
    paths = {}
    cfg = results["config"]
    header = (f"# digits softmax regression, final test accuracy (%) after {cfg['rounds']} rounds, "
              f"mean ± std over {cfg['runs']} runs (seed {cfg['seed']}, data seed {cfg['data_seed']})\n\n")
    atomic_write_bytes(out / "table.md", (header + table_text(results) + "\n").encode())
    paths["table"] = str(out / "table.md")
    buf = io.StringIO()
    rows = summary_rows(results)
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    for r in rows:
        writer.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()})
    atomic_write_bytes(out / "summary.csv", buf.getvalue().encode())
    paths["csv"] = str(out / "summary.csv")
    atomic_write_bytes(out / "results.json", json.dumps(to_jsonable(results)).encode())
    paths["json"] = str(out / "results.json")
    if plot:
        import matplotlib.pyplot as plt

        fig = plot_accuracy(results)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=120)
        plt.close(fig)
        atomic_write_bytes(out / "accuracy.png", buf.getvalue())
        paths["figure"] = str(out / "accuracy.png")
    return paths


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare-aggregators",
        help="compare server rules on digits under FedAWARE's heterogeneity settings",
        description="Compare server rules on digits softmax regression under FedAWARE's statistical / hybrid / "
        "hybrid+ heterogeneity settings.",
    )
    p.add_argument("--quick", action="store_true",
                   help="small configuration (10 clients, 15 rounds) that finishes in well under a minute")
    p.add_argument("--rounds", type=int, default=None, metavar="n")
    p.add_argument("--runs", type=int, default=None, metavar="S", help="runs (seeds) per rule, >= 2 (default 3)")
    p.add_argument("--seed", type=int, default=0, metavar="SEED", help="seed of the runs' random streams")
    p.add_argument("--data-seed", type=int, default=0, metavar="SEED", help="seed of the partition and split")
    p.add_argument("--clients", type=int, default=None, metavar="Q")
    p.add_argument("--participation", type=int, default=None, metavar="m", help="clients sampled per round")
    p.add_argument("--eta", type=float, default=None, metavar="η", help="client learning rate")
    p.add_argument("--settings", default=",".join(SETTINGS), metavar="S1,S2,…",
                   help=f"subset of {','.join(SETTINGS)}")
    p.add_argument("--aggregators", default=",".join(DEFAULT_AGGREGATORS), metavar="A1,A2,…")
    p.add_argument("--out", default="fedsde-results/compare-aggregators", metavar="DIR",
                   help="where table.md, summary.csv, results.json and accuracy.png go")
    p.add_argument("--no-plot", action="store_true", help="skip the figure")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(1)  # small tensors: one thread is fastest, and fair on shared machines
    cfg = ComparisonConfig.quick() if args.quick else ComparisonConfig()
    for attr, val in (("rounds", args.rounds), ("runs", args.runs), ("n_clients", args.clients),
                      ("participation", args.participation), ("eta", args.eta)):
        if val is not None:
            setattr(cfg, attr, val)
    if cfg.rounds < 1:
        raise FedsdeInputError(f"--rounds={cfg.rounds}: must be >= 1")
    if cfg.runs < 2:
        raise FedsdeInputError(f"--runs={cfg.runs}: need >= 2 runs for a standard deviation")
    if cfg.eta <= 0:
        raise FedsdeInputError(f"--eta={cfg.eta}: must be > 0")
    cfg.seed, cfg.data_seed = args.seed, args.data_seed
    cfg.settings = tuple(s.strip() for s in args.settings.split(",") if s.strip())
    cfg.aggregators = tuple(a.strip().lower() for a in args.aggregators.split(",") if a.strip())
    if cfg.participation is not None and cfg.participation > cfg.n_clients:
        raise FedsdeInputError(f"--participation={cfg.participation}: cannot exceed the {cfg.n_clients} clients")
    t0 = time.perf_counter()
    results = run_comparison(cfg, progress=not args.json)
    results["seconds"] = time.perf_counter() - t0
    paths = write_outputs(results, Path(args.out), plot=not args.no_plot)
    rows = summary_rows(results)
    payload = {"config": results["config"], "summary": rows, "files": paths, "seconds": results["seconds"]}
    human = "\n".join([
        f"final test accuracy (%) after {cfg.rounds} rounds, mean ± std over {cfg.runs} runs "
        f"(Q={cfg.n_clients}, {cfg.participation} per round, eta={cfg.eta}, seed {cfg.seed}, data seed "
        f"{cfg.data_seed}; {results['seconds']:.1f} s)",
        table_text(results),
        *(f"{k}: {v}" for k, v in paths.items()),
    ])
    return emit(args, payload, human)
