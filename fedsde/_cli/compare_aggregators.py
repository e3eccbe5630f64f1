"""``fedsde compare-aggregators``: server rules under the heterogeneity settings of FedAWARE's Table 1.

The experiment itself lives in :mod:`fedsde.report.aggregator_comparison`; this module parses the command line and
writes ``table.md``, ``summary.csv``, ``results.json`` and ``accuracy.png``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import time
from pathlib import Path

from fedsde._atomic import atomic_write_bytes
from fedsde._cli import one_line_help
from fedsde._cli.common import add_json_flag, add_renamed, emit, flag, show_progress, to_jsonable, writable_folder
from fedsde.errors import FedsdeInputError
from fedsde.report.aggregator_comparison import (
    DEFAULT_AGGREGATORS,
    SETTINGS,
    ComparisonConfig,
    file_partition,
    is_regression,
    metric_of,
    plot_accuracy,
    rules_without_data,
    run_comparison,
    summary_rows,
    table_text,
)


def render_outputs(results: dict, rows: list[dict], *, plot: bool = True) -> dict[str, tuple[str, bytes]]:
    """The contents of ``table.md``, ``summary.csv``, ``results.json`` (and ``accuracy.png``), built in memory.

    Returns ``{key: (file name, bytes)}``; nothing is written.
    """
    if not rows:
        raise FedsdeInputError("compare-aggregators: the comparison produced no summary rows; nothing to write")
    cfg = results["config"]
    what = f"problem file {cfg['problem_file']}" if cfg.get("problem_file") else "digits softmax regression"
    metric = metric_of(results)
    header = (f"# {what}, final {metric['label']} after {cfg['rounds']} rounds, "
              f"mean ± std over {cfg['runs']} runs (seed {cfg['seed']}, data seed {cfg['data_seed']})\n\n")
    files = {"table": ("table.md", (header + table_text(results) + "\n").encode())}
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    for r in rows:
        writer.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()})
    files["csv"] = ("summary.csv", buf.getvalue().encode())
    files["json"] = ("results.json", json.dumps(to_jsonable(results)).encode())
    if plot:
        import matplotlib.pyplot as plt

        fig = plot_accuracy(results)
        png = io.BytesIO()
        try:
            fig.savefig(png, format="png", dpi=120)
        finally:
            plt.close(fig)
        files["figure"] = (metric["file"], png.getvalue())
    return files


def write_outputs(results: dict, out: Path, *, plot: bool = True, rows: list[dict] | None = None) -> dict[str, str]:
    """Write ``table.md``, ``summary.csv``, ``results.json`` and ``accuracy.png`` into ``out`` (atomically).

    Every file is rendered in memory first, so a failure leaves no files behind.
    """
    files = render_outputs(results, summary_rows(results) if rows is None else rows, plot=plot)
    return {key: str(atomic_write_bytes(out / name, data)) for key, (name, data) in files.items()}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare-aggregators",
        help=one_line_help("compare-aggregators"),
        description="Compare server rules on digits softmax regression under FedAWARE's statistical / hybrid / "
        "hybrid+ heterogeneity settings.",
    )
    p.add_argument("--quick", action="store_true",
                   help="small configuration (10 clients, 15 rounds) that finishes in well under a minute")
    p.add_argument("--rounds", type=int, default=None, metavar="n")
    p.add_argument("--problem", default=None, metavar="FILE",
                   help="a data-problem file (kind = \"classification\") to compare the rules on, instead of the "
                   "three digits settings (its partition, model and batch size, with --epochs local epochs per "
                   "round); or a least-squares regression file (kind = \"regression\": the training objective F(w) "
                   "is reported instead of the test accuracy, one local epoch by default, and rules that need label "
                   "distributions leave the default list)")
    add_renamed(p, "--replicates", "--runs", type=int, default=None, metavar="R",
                help="independent runs (seeds) per rule, >= 2 (default 3)")
    p.add_argument("--seed", type=int, default=0, metavar="SEED", help="seed of the runs' random streams")
    p.add_argument("--data-seed", type=int, default=0, metavar="SEED", help="seed of the partition and split")
    p.add_argument("--clients", type=int, default=None, metavar="Q", help="number of clients (default 20; --quick 10)")
    p.add_argument("--participation", type=int, default=None, metavar="m",
                   help="clients sampled per round, <= --clients (default 5, or every client when there are "
                   "fewer)")
    p.add_argument("--eta", type=float, default=None, metavar="η", help="client learning rate")
    p.add_argument("--epochs", type=int, default=None, metavar="EPOCHS",
                   help="local epochs per round (default 3; hybrid+ draws E_k from 2..5 every round instead)")
    p.add_argument("--settings", default=",".join(SETTINGS), metavar="S1,S2,…",
                   help=f"subset of {','.join(SETTINGS)}")
    p.add_argument("--aggregators", default=",".join(DEFAULT_AGGREGATORS), metavar="A1,A2,…",
                   help=f"server rules to compare (default {','.join(DEFAULT_AGGREGATORS)})")
    p.add_argument("--out", default="fedsde-results/compare-aggregators", metavar="DIR",
                   help="where table.md, summary.csv, results.json and accuracy.png (train_loss.png for a regression "
                   "file) go")
    p.add_argument("--device", default="cpu", metavar="DEVICE",
                   help="torch device of the simulations (cpu, cuda, cuda:1, …; default cpu); the metrics are "
                   "evaluated on the host")
    p.add_argument("--no-plot", action="store_true", help="skip the figure")
    from fedsde._cli._data_flags import add_data_overrides

    add_data_overrides(p)  # the digits settings' B and λ, or the --problem file's batch_size and l2
    add_json_flag(p)
    p.set_defaults(func=run)


def _names(opt: str, text: str, known, *, lower: bool = False) -> tuple[str, ...]:
    names = tuple(x.strip().lower() if lower else x.strip() for x in text.split(",") if x.strip())
    if not names:
        raise FedsdeInputError(f"{opt}={text!r}: empty; give one or more of {', '.join(known)}")
    for x in names:
        if x not in known:
            raise FedsdeInputError(f"{opt}={text!r}: {x!r} is not one of {', '.join(known)}")
    if len(set(names)) != len(names):
        raise FedsdeInputError(f"{opt}={text!r}: a name is given twice")
    return names


def _configure(args: argparse.Namespace) -> ComparisonConfig:
    """The comparison's configuration from the command line; every check runs here, before anything else."""
    from fedsde.aggregators import AGGREGATORS

    cfg = ComparisonConfig.quick() if args.quick else ComparisonConfig()
    for opt, val in (("--seed", args.seed), ("--data-seed", args.data_seed)):
        if val < 0:
            raise FedsdeInputError(f"{opt}={val}: must be an integer >= 0")
    if args.rounds is not None and args.rounds < 1:
        raise FedsdeInputError(f"--rounds={args.rounds}: must be an integer >= 1")
    if args.replicates is not None and args.replicates < 2:
        raise FedsdeInputError(f"{flag(args, 'replicates')}={args.replicates}: need >= 2 runs for a standard deviation")
    if args.eta is not None and not (math.isfinite(args.eta) and args.eta > 0):
        raise FedsdeInputError(f"--eta={args.eta}: must be finite and > 0")
    if args.clients is not None and args.clients < 1:
        raise FedsdeInputError(f"--clients={args.clients}: must be an integer >= 1")
    if args.participation is not None and args.participation < 1:
        raise FedsdeInputError(f"--participation={args.participation}: must be an integer >= 1")
    epochs = getattr(args, "epochs", None)
    if epochs is not None and epochs < 1:
        raise FedsdeInputError(f"--epochs={epochs}: must be an integer >= 1")
    for attr, val in (("rounds", args.rounds), ("runs", args.replicates), ("n_clients", args.clients),
                      ("participation", args.participation), ("eta", args.eta), ("epochs", epochs)):
        if val is not None:
            setattr(cfg, attr, val)
    if args.participation is None:  # the default adapts to fewer clients; only an explicit value is refused
        cfg.participation = min(cfg.participation, cfg.n_clients)
    if cfg.participation > cfg.n_clients and getattr(args, "problem", None) is None:
        default = "the default with --quick" if args.quick else "the default"
        if args.clients is None:
            raise FedsdeInputError(f"--participation={cfg.participation}: cannot exceed --clients={cfg.n_clients} "
                                   f"({default}); pass more --clients")
        raise FedsdeInputError(f"--participation={cfg.participation}: cannot exceed --clients={cfg.n_clients}")
    cfg.seed, cfg.data_seed = args.seed, args.data_seed
    cfg.device = str(_device(args.device))
    from fedsde._cli._data_flags import data_overrides

    overrides = data_overrides(args)
    if getattr(args, "problem", None) is not None:
        cfg.problem_overrides = overrides
        return _configure_file(args, cfg)
    if overrides.get("batch_size") == "full":
        raise FedsdeInputError("--batch-size='full': the digits settings run epochs of minibatches; give an integer "
                               "(or a --problem module file)")
    cfg.batch_size = overrides.get("batch_size", cfg.batch_size)
    cfg.l2 = overrides.get("l2", cfg.l2)
    cfg.settings = _names("--settings", args.settings, SETTINGS)
    cfg.aggregators = _names("--aggregators", args.aggregators, tuple(sorted(AGGREGATORS)), lower=True)
    return cfg


def _device(device: str):
    """``--device``, checked before any data is loaded."""
    import torch

    from fedsde._validate import device_dtype

    try:
        return device_dtype(device, torch.float64)[0]
    except FedsdeInputError as exc:
        raise FedsdeInputError(str(exc).replace("device=", "--device=", 1)) from None


def _configure_file(args: argparse.Namespace, cfg: ComparisonConfig) -> ComparisonConfig:
    """``--problem FILE``: one setting, the file's data problem (partition, model, batch size)."""
    from fedsde.aggregators import AGGREGATORS
    from fedsde.report.aggregator_comparison import load_data_problem

    for opt, given in (("--settings", args.settings != ",".join(SETTINGS)), ("--clients", args.clients is not None),
                       ("--data-seed", args.data_seed != 0)):
        if given:
            raise FedsdeInputError(f"{opt}: not used with --problem (the file fixes the data, its partition and "
                                   "its seed)")
    from fedsde._cli.common import options_named

    with options_named(args, "batch_size", "l2"):
        problem = load_data_problem(args.problem, cfg.problem_overrides)
    if problem.batch_size is None:
        raise FedsdeInputError(f"--problem={args.problem!r}: batch_size = \"full\": compare-aggregators runs local "
                               "epochs of minibatches; give an integer batch_size (in the file, or --batch-size b)")
    if is_regression(problem) and args.epochs is None:
        cfg.epochs = 1  # local epochs of a regression file's few rows each: one by default
    if args.participation is None:
        cfg.participation = min(cfg.participation, problem.Q)
    elif cfg.participation > problem.Q:
        raise FedsdeInputError(f"--participation={cfg.participation}: cannot exceed the number of clients of "
                               f"--problem ({problem.Q})")
    cfg.problem_file = str(args.problem)
    cfg.n_clients = problem.Q
    cfg.data_seed = int(problem.info.get("seed", cfg.data_seed))
    cfg.partition = file_partition(problem)
    cfg.batch_size = int(problem.batch_size)
    cfg.l2 = problem.l2
    cfg.test_fraction = 0.0 if is_regression(problem) else float(problem.info.get("test_fraction",
                                                                                  cfg.test_fraction))
    cfg.settings = (Path(args.problem).stem,)
    cfg.aggregators = _names("--aggregators", args.aggregators, tuple(sorted(AGGREGATORS)), lower=True)
    if is_regression(problem):  # no labels: rules that need label distributions leave the default list
        from fedsde.aggregators import get_aggregator

        unfit = rules_without_data(problem, {n: get_aggregator(n, **cfg.params.get(n, {})) for n in cfg.aggregators})
        if unfit and args.aggregators != ",".join(DEFAULT_AGGREGATORS):
            raise FedsdeInputError(f"--aggregators={args.aggregators!r}: {', '.join(unfit)} need(s) each client's "
                                   "label distribution, which a regression problem does not have")
        cfg.aggregators = tuple(n for n in cfg.aggregators if n not in unfit)
    return cfg


def run(args: argparse.Namespace) -> int:
    import torch

    cfg = _configure(args)
    out = writable_folder("--out", args.out)
    torch.set_num_threads(1)  # small tensors: one thread is fastest, and fair on shared machines
    t0 = time.perf_counter()
    results = run_comparison(cfg, progress=show_progress(args))
    results["seconds"] = time.perf_counter() - t0
    rows = summary_rows(results)
    paths = write_outputs(results, out, plot=not args.no_plot, rows=rows)
    payload = {"config": results["config"], "summary": rows, "files": paths, "seconds": results["seconds"]}
    human = "\n".join([
        f"final {metric_of(results)['label']} after {cfg.rounds} rounds, mean ± std over {cfg.runs} runs "
        f"(Q={cfg.n_clients}, {cfg.participation} per round, eta={cfg.eta}, seed {cfg.seed}, data seed "
        f"{cfg.data_seed}; {results['seconds']:.1f} s)",
        table_text(results),
        *(f"{k}: {v}" for k, v in paths.items()),
    ])
    return emit(args, payload, human)
