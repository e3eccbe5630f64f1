"""``fedsde compare-aggregators``: server rules under the heterogeneity settings of FedAWARE's Table 1.

Softmax regression on scikit-learn's digits (1797 8×8 images, 10 classes), split among ``Q`` clients, ``m`` of
them sampled per round (uniformly, weights renormalised over the sample), local SGD with epoch-wise shuffled
minibatches (seed 000 §5, App. C.1; reference/seed-fedaware.md §2.2):

* ``statistical``: pathological shards (2 per client, equal sizes), ``E`` epochs of batch ``B`` for everyone, so
  every client runs the same number of steps;
* ``hybrid``: Dirichlet(0.1) label skew with unequal client sizes ("hetero-dir"), fixed ``E`` and ``B``, so
  ``τ_k = E⌈N_k/B⌉`` differs between clients;
* ``hybrid+``: the hybrid partition with ``E_k ~ U{2..5}`` and ``B_k ~ U{B..N_k − 1}`` redrawn every round.

The partition is fixed by ``--data-seed``; the runs of one rule differ by their random streams (replicates
``r = 0..S−1`` of :func:`fedsde.sim.simulate` with ``--seed``; every rule sees the same participants in every
round).  The table reports the test accuracy of the global model after the last round (mean ± std over runs), the
CSV adds the best accuracy over rounds (the statistic of seed 000's Table 1), the PNG shows accuracy against the
round index ``n``, and the JSON record keeps every setting, seed and hyper-parameter.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from fedsde._cli.common import add_json_flag, emit, to_jsonable
from fedsde.errors import FedsdeInputError

SETTINGS = ("statistical", "hybrid", "hybrid+")
DEFAULT_AGGREGATORS = ("fedavg", "fedavgm", "fedprox", "scaffold", "fednova", "feddisco", "fedaware", "fedadam")


@dataclass
class ComparisonConfig:
    """Everything that defines a comparison run (recorded with the results)."""

    settings: tuple[str, ...] = SETTINGS
    aggregators: tuple[str, ...] = DEFAULT_AGGREGATORS
    n_clients: int = 20
    participation: int = 5
    rounds: int = 200
    runs: int = 3
    seed: int = 0
    data_seed: int = 0
    eta: float = 0.05
    epochs: int = 3
    batch_size: int = 10
    epochs_range: tuple[int, int] = (2, 5)
    dirichlet_alpha: float = 0.1
    shards_per_client: int = 2
    l2: float = 1e-4
    test_fraction: float = 0.25
    server_lr: dict = field(default_factory=lambda: {"fedadam": 0.03})
    params: dict = field(default_factory=lambda: {
        "fedavgm": {"beta": 0.7},
        "fedprox": {"mu": 0.01},
        "scaffold": {"option": "II"},
        "fednova": {"tau_eff": "auto"},
        "feddisco": {"base": "fedavg", "a": 0.5, "b": 0.1},
        "fedaware": {"alpha": 0.5, "variant": "normalized"},
        "fedadam": {"beta1": 0.9, "beta2": 0.99, "tau": 1e-3, "variant": "paper"},
    })

    @classmethod
    def quick(cls) -> ComparisonConfig:
        return cls(n_clients=10, participation=5, rounds=15, runs=3, batch_size=20)


def _problem(setting: str, cfg: ComparisonConfig):
    from fedsde.problems import federated_classification

    if setting == "statistical":
        return federated_classification(
            "digits", n_clients=cfg.n_clients, partition="shards", shards_per_client=cfg.shards_per_client,
            seed=cfg.data_seed, test_fraction=cfg.test_fraction, l2=cfg.l2)
    return federated_classification(
        "digits", n_clients=cfg.n_clients, partition="dirichlet", alpha=cfg.dirichlet_alpha, min_size=10,
        seed=cfg.data_seed, test_fraction=cfg.test_fraction, l2=cfg.l2)


def _steps(setting: str, problem, cfg: ComparisonConfig):
    from fedsde.sim import EpochSteps

    if setting == "hybrid+":
        return EpochSteps(tuple(problem.sizes), cfg.epochs_range, (cfg.batch_size, None))
    return EpochSteps(tuple(problem.sizes), cfg.epochs, cfg.batch_size)


def run_comparison(cfg: ComparisonConfig, *, progress: bool = True) -> dict:
    """Run every (setting, rule) pair; returns accuracies per round and run, and the summary."""
    import torch
    from tqdm.auto import tqdm

    from fedsde.aggregators import get_aggregator
    from fedsde.sim import minibatch_oracle, simulate

    for s in cfg.settings:
        if s not in SETTINGS:
            raise FedsdeInputError(f"--settings: {s!r} is not one of {', '.join(SETTINGS)}")
    if cfg.participation > cfg.n_clients:
        raise FedsdeInputError(f"--participation={cfg.participation}: cannot exceed --clients={cfg.n_clients}")
    aggs = {name: get_aggregator(name, **cfg.params.get(name, {})) for name in cfg.aggregators}
    results: dict = {"config": asdict(cfg), "settings": {}}
    bar = tqdm(total=len(cfg.settings) * len(aggs), desc="compare-aggregators", unit="run", disable=not progress)
    try:
        for setting in cfg.settings:
            problem = _problem(setting, cfg)
            steps = _steps(setting, problem, cfg)
            entry = {"problem": problem.summary(), "local_steps": asdict(steps), "rules": {}}
            for name, agg in aggs.items():
                bar.set_postfix_str(f"{setting}/{name}")
                t0 = time.perf_counter()
                res = simulate(
                    problem, eta=cfg.eta, local_steps=steps, rounds=cfg.rounds, replicates=cfg.runs,
                    seed=cfg.seed, server_lr=cfg.server_lr.get(name, 1.0), participation=cfg.participation,
                    weighting="renormalised", aggregator=agg, block_size=1, dtype=torch.float64,
                    oracle_factory=minibatch_oracle(sampling="epoch"),
                )
                acc = np.asarray(problem.accuracy(res.weights))  # (T, R)
                entry["rules"][name] = {
                    "accuracy": acc.T,  # (runs, T)
                    "final": acc[-1],
                    "best": acc.max(0),
                    "seconds": time.perf_counter() - t0,
                    "aggregator": agg.describe(),
                    "server_lr": cfg.server_lr.get(name, 1.0),
                }
                bar.update(1)
            results["settings"][setting] = entry
    finally:
        bar.close()
    results["rounds"] = np.arange(cfg.rounds + 1)
    return results


def summary_rows(results: dict) -> list[dict]:
    """One row per (rule, setting): mean and std (ddof=1) of the final and of the best accuracy, in %."""
    rows = []
    for setting, entry in results["settings"].items():
        for name, r in entry["rules"].items():
            fin, best = 100 * np.asarray(r["final"]), 100 * np.asarray(r["best"])
            rows.append({
                "setting": setting, "aggregator": name, "runs": fin.size,
                "final_mean": fin.mean(), "final_std": fin.std(ddof=1) if fin.size > 1 else 0.0,
                "best_mean": best.mean(), "best_std": best.std(ddof=1) if best.size > 1 else 0.0,
                "final_per_run": " ".join(f"{v:.2f}" for v in fin),
            })
    return rows


def table_text(results: dict) -> str:
    """The final-accuracy table (rules × settings, mean ± std in %)."""
    rows = summary_rows(results)
    settings = list(results["settings"])
    names = list(dict.fromkeys(r["aggregator"] for r in rows))
    cell = {(r["aggregator"], r["setting"]): f"{r['final_mean']:6.2f} ± {r['final_std']:4.2f}" for r in rows}
    head = f"| {'aggregator':<10} | " + " | ".join(f"{s:^15}" for s in settings) + " |"
    sep = "|" + "-" * 12 + "|" + "|".join("-" * 17 for _ in settings) + "|"
    lines = [head, sep] + [
        f"| {n:<10} | " + " | ".join(f"{cell[(n, s)]:^15}" for s in settings) + " |" for n in names
    ]
    return "\n".join(lines)


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600 files
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_outputs(results: dict, out: Path, *, plot: bool = True) -> dict[str, str]:
    """Write ``table.md``, ``summary.csv``, ``results.json`` and ``accuracy.png`` into ``out`` (atomically)."""
    paths = {}
    cfg = results["config"]
    header = (f"# digits softmax regression, final test accuracy (%) after {cfg['rounds']} rounds, "
              f"mean ± std over {cfg['runs']} runs (seed {cfg['seed']}, data seed {cfg['data_seed']})\n\n")
    _atomic_write(out / "table.md", (header + table_text(results) + "\n").encode())
    paths["table"] = str(out / "table.md")
    buf = io.StringIO()
    rows = summary_rows(results)
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    for r in rows:
        writer.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()})
    _atomic_write(out / "summary.csv", buf.getvalue().encode())
    paths["csv"] = str(out / "summary.csv")
    _atomic_write(out / "results.json", json.dumps(to_jsonable(results)).encode())
    paths["json"] = str(out / "results.json")
    if plot:
        paths["figure"] = str(_plot(results, out / "accuracy.png"))
    return paths


def _plot(results: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(results["settings"])
    rounds = np.asarray(results["rounds"])
    fig, axes = plt.subplots(1, len(settings), figsize=(4.6 * len(settings), 4.0), sharey=True, squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, setting in zip(axes[0], settings, strict=True):
        for i, (name, r) in enumerate(results["settings"][setting]["rules"].items()):
            acc = 100 * np.asarray(r["accuracy"])  # (runs, T)
            mean, sd = acc.mean(0), acc.std(0)
            ax.plot(rounds, mean, color=cmap(i), lw=1.4, label=name)
            ax.fill_between(rounds, mean - sd, mean + sd, color=cmap(i), alpha=0.15, lw=0)
        ax.set_title(setting)
        ax.set_xlabel("round n")
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("test accuracy (%)")
    lo = min(float(np.percentile(100 * np.asarray(r["accuracy"])[:, len(rounds) // 4:], 1))
             for e in results["settings"].values() for r in e["rules"].values())
    axes[0, 0].set_ylim(max(0.0, lo - 5), 100)
    axes[0, -1].legend(loc="lower right", fontsize=8, ncol=2)
    cfg = results["config"]
    fig.suptitle(f"digits softmax regression, Q={cfg['n_clients']} clients, {cfg['participation']} per round, "
                 f"η={cfg['eta']}; mean ± std over {cfg['runs']} runs", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    _atomic_write(path, buf.getvalue())
    return path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare-aggregators",
        help="compare server rules on digits under FedAWARE's heterogeneity settings",
        description=__doc__.split("\n\n")[0],
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
