"""Server rules compared under the heterogeneity settings of FedAWARE's Table 1 (``fedsde compare-aggregators`` and
gallery figure F11).

Softmax regression on scikit-learn's digits (1797 8×8 images, 10 classes), split among ``Q`` clients, ``m`` of
them sampled per round (uniformly, weights renormalised over the sample), local SGD with epoch-wise shuffled
minibatches (seed 000 §5, App. C.1; reference/seed-fedaware.md §2.2):

* ``statistical``: pathological shards (2 per client, equal sizes), ``E`` epochs of batch ``B`` for everyone, so
  every client runs the same number of steps;
* ``hybrid``: Dirichlet(0.1) label skew with unequal client sizes ("hetero-dir"), fixed ``E`` and ``B``, so
  ``τ_k = E⌈N_k/B⌉`` differs between clients;
* ``hybrid+``: the hybrid partition with ``E_k ~ U{2..5}`` and ``B_k ~ U{B..N_k − 1}`` redrawn every round.

With ``--problem FILE`` (a data-problem file, :mod:`fedsde.problems.data_files`) the comparison runs on that
problem instead of the three settings: one setting named after the file, ``E`` epochs of the file's batch size,
minibatches drawn as the file says (``sampling``).  A least-squares regression file (``kind = "regression"``,
:mod:`fedsde.problems.regression.files`) has no test set and no labels: the comparison reports the training
objective ``F(w)`` instead of the test accuracy (lower is better: ``best`` is the smallest over rounds), and FedDisco,
whose weights need label distributions, is left out of the default rules (named explicitly, it is refused).

The partition is fixed by ``--data-seed``; the runs of one rule differ by their random streams (replicates
``r = 0..R−1`` of :func:`fedsde.sim.simulate` with ``--seed``; every rule sees the same participants in every
round).  The table reports the test accuracy of the global model after the last round (mean ± std over runs), the
CSV adds the best accuracy over rounds (the statistic of seed 000's Table 1), the PNG shows accuracy against the
round index ``n``, and the JSON record keeps every setting, seed and hyper-parameter.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np

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
    problem_file: str | None = None
    #: problem-file keys set over the file's (``--batch-size``, ``--l2``; :data:`fedsde.problems.io.OVERRIDABLE`)
    problem_overrides: dict = field(default_factory=dict)
    partition: dict | None = None
    device: str = "cpu"
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


#: what the comparison reports: test accuracy (classification) or the training objective (least squares)
METRICS = {
    "test_accuracy": {"key": "accuracy", "label": "test accuracy (%)", "scale": 100.0, "better": "max",
                      "file": "accuracy.png"},
    "train_loss": {"key": "train_loss", "label": "train loss F(w)", "scale": 1.0, "better": "min",
                   "file": "train_loss.png"},
}


def is_regression(problem) -> bool:
    """Whether ``problem`` holds least-squares regression clients (reported by their training objective)."""
    return getattr(problem, "model", None) == "least-squares"


def metric_of(results: dict) -> dict:
    """The reported metric's description (:data:`METRICS`) of a comparison's results."""
    return METRICS[results.get("metric", "test_accuracy")]


def _problem(setting: str, cfg: ComparisonConfig):
    from fedsde.problems import federated_classification

    if cfg.problem_file is not None:
        return load_data_problem(cfg.problem_file, cfg.problem_overrides)
    if setting == "statistical":
        return federated_classification(
            "digits", n_clients=cfg.n_clients, partition="shards", shards_per_client=cfg.shards_per_client,
            seed=cfg.data_seed, test_fraction=cfg.test_fraction, l2=cfg.l2)
    return federated_classification(
        "digits", n_clients=cfg.n_clients, partition="dirichlet", alpha=cfg.dirichlet_alpha, min_size=10,
        seed=cfg.data_seed, test_fraction=cfg.test_fraction, l2=cfg.l2)


def _steps(setting: str, problem, cfg: ComparisonConfig):
    from fedsde.sim import EpochSteps

    if cfg.problem_file is not None:
        return EpochSteps(tuple(problem.sizes), cfg.epochs, problem.batch_size)
    if setting == "hybrid+":
        return EpochSteps(tuple(problem.sizes), cfg.epochs_range, (cfg.batch_size, None))
    return EpochSteps(tuple(problem.sizes), cfg.epochs, cfg.batch_size)


def load_data_problem(path: str, overrides: dict | None = None):
    """The data problem of ``--problem FILE`` (with ``overrides`` of its keys, as
    :func:`fedsde.problems.load_problem`); a one-line error for a quadratic file or a classification problem without a
    test set."""
    from fedsde.problems import is_data_problem, load_problem

    problem = load_problem(path, overrides=overrides)
    if not is_data_problem(problem):
        raise FedsdeInputError(f"--problem={path!r}: compare-aggregators needs a data problem (kind = "
                               "\"classification\": it reports test accuracy; or kind = \"regression\": the "
                               "training objective)")
    if is_regression(problem):
        return problem
    if not getattr(problem, "uses_labels", True):  # a module problem with mse: no accuracy
        raise FedsdeInputError(f"--problem={path!r}: compare-aggregators reports test accuracy, which needs "
                               "loss = \"cross-entropy\"")
    if len(problem.y_test) == 0:
        raise FedsdeInputError(f"--problem={path!r}: the problem has no test samples (test_fraction = 0); the "
                               "comparison reports test accuracy")
    return problem


#: keys of a data problem's ``info`` that describe its data set and partition
_PARTITION_INFO = ("dataset", "partition", "alpha", "beta", "iid", "min_size", "shards_per_client", "quantity_beta",
                   "n_biased", "n_uniform", "seed")


def file_partition(problem) -> dict:
    """The data set and partition settings of a problem file (those it was built with), e.g. ``{"dataset":
    "digits", "partition": "dirichlet", "alpha": 0.5, "min_size": 10, "seed": 0}``."""
    return {k: problem.info[k] for k in _PARTITION_INFO if k in problem.info}


def _config_record(cfg: ComparisonConfig) -> dict:
    """``cfg`` as recorded with the results: with a problem file, its own partition settings replace the built-in
    settings' (``dirichlet_alpha``, ``shards_per_client``, ``epochs_range``), which it does not use."""
    rec = asdict(cfg)
    if cfg.problem_file is None:
        rec.pop("partition")
        rec.pop("problem_overrides")
    else:
        for key in ("dirichlet_alpha", "shards_per_client", "epochs_range"):
            rec.pop(key)
    return rec


def run_comparison(cfg: ComparisonConfig, *, progress: bool = True) -> dict:
    """Run every (setting, rule) pair; returns accuracies per round and run, and the summary."""
    import torch

    from fedsde._progress import progress_bar
    from fedsde.aggregators import AGGREGATORS, get_aggregator
    from fedsde.sim import simulate

    for opt, val in (("--seed", cfg.seed), ("--data-seed", cfg.data_seed)):
        if not isinstance(val, int | np.integer) or val < 0:
            raise FedsdeInputError(f"{opt}={val!r}: must be an integer >= 0")
    settings_known = tuple(cfg.settings[:1]) if cfg.problem_file is not None else SETTINGS  # one, named by the file
    for opt, names, known in (("--settings", cfg.settings, settings_known), ("--aggregators", cfg.aggregators,
                                                                             tuple(sorted(AGGREGATORS)))):
        if not names:
            raise FedsdeInputError(f"{opt}: empty; give one or more of {', '.join(known)}")
        for name in names:
            if name not in known:
                raise FedsdeInputError(f"{opt}: {name!r} is not one of {', '.join(known)}")
    if not isinstance(cfg.n_clients, int | np.integer) or cfg.n_clients < 1:
        raise FedsdeInputError(f"--clients={cfg.n_clients!r}: must be an integer >= 1")
    if not isinstance(cfg.participation, int | np.integer) or not 1 <= cfg.participation <= cfg.n_clients:
        raise FedsdeInputError(f"--participation={cfg.participation!r}: must be an integer in [1, --clients="
                               f"{cfg.n_clients}]")
    aggs = {name: get_aggregator(name, **cfg.params.get(name, {})) for name in cfg.aggregators}
    problems = {setting: _problem(setting, cfg) for setting in cfg.settings}  # data errors before any run
    regression = any(is_regression(pb) for pb in problems.values())
    for setting, problem in problems.items():
        if regression:
            unfit = rules_without_data(problem, aggs)
            if unfit:
                raise FedsdeInputError(f"--aggregators: {', '.join(unfit)} need(s) data that a regression problem "
                                       f"does not have ({next(iter(unfit.values()))})")
            continue
        if len(problem.y_test) == 0:
            raise FedsdeInputError(f"--clients={cfg.n_clients}: the {setting!r} partition leaves no test samples "
                                   "(too many clients for the data); use fewer clients")
    metric = "train_loss" if regression else "test_accuracy"
    key = METRICS[metric]["key"]
    results: dict = {"config": _config_record(cfg), "metric": metric, "settings": {}}
    bar = progress_bar(len(cfg.settings) * len(aggs), "compare-aggregators", unit="run", enabled=progress)
    try:
        for setting in cfg.settings:
            problem = problems[setting]
            steps = _steps(setting, problem, cfg)
            entry = {"problem": problem.summary(), "local_steps": asdict(steps), "rules": {}}
            for name, agg in aggs.items():
                bar.set_postfix_str(f"{setting}/{name}")
                t0 = time.perf_counter()
                res = simulate(
                    problem, eta=cfg.eta, local_steps=steps, rounds=cfg.rounds, replicates=cfg.runs,
                    seed=cfg.seed, server_lr=cfg.server_lr.get(name, 1.0), participation=cfg.participation,
                    weighting="renormalised", aggregator=agg, block_size=1, dtype=torch.float64,
                    oracle_factory=_oracle(problem, cfg), device=cfg.device,
                )
                # (T, R): test accuracy, or the training objective of least-squares clients
                acc = np.asarray(problem.loss(res.weights) if regression else problem.accuracy(res.weights))
                entry["rules"][name] = {
                    key: acc.T,  # (runs, T)
                    "final": acc[-1],
                    "best": acc.min(0) if regression else acc.max(0),
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


def rules_without_data(problem, rules: dict) -> dict[str, str]:
    """name → why, for the rules of ``rules`` (name → :class:`~fedsde.aggregators.Aggregator`) that need data the
    problem does not carry (:meth:`~fedsde.aggregators.Aggregator.check_problem`, e.g. FedDisco's label
    distributions on a regression problem)."""
    out = {}
    for name, agg in rules.items():
        try:
            agg.check_problem(problem, problem.name or "problem")
        except FedsdeInputError as exc:
            out[name] = str(exc)
    return out


def _oracle(problem, cfg: ComparisonConfig):
    """Minibatches with the round's epoch batch sizes: as the file says (``sampling``), else shuffled epochs."""
    from fedsde.sim import minibatch_oracle

    if is_regression(problem):
        from fedsde.clients.least_squares_oracle import least_squares_oracle

        return least_squares_oracle(sampling=problem.sampling)
    if hasattr(problem, "functional"):  # a module problem: its own oracle, with the epochs' batch sizes
        from fedsde.clients.module_oracle import module_oracle

        return module_oracle()
    return minibatch_oracle(sampling=problem.sampling if cfg.problem_file else "epoch")


def summary_rows(results: dict) -> list[dict]:
    """One row per (rule, setting): mean and std (ddof=1) of the final and of the best value of the reported metric
    (accuracy in %, or the training objective of least-squares clients)."""
    scale = metric_of(results)["scale"]
    rows = []
    for setting, entry in results["settings"].items():
        for name, r in entry["rules"].items():
            fin, best = scale * np.asarray(r["final"]), scale * np.asarray(r["best"])
            rows.append({
                "setting": setting, "aggregator": name, "runs": fin.size,
                "final_mean": fin.mean(), "final_std": fin.std(ddof=1) if fin.size > 1 else 0.0,
                "best_mean": best.mean(), "best_std": best.std(ddof=1) if best.size > 1 else 0.0,
                "final_per_run": " ".join(f"{v:.2f}" if scale != 1.0 else f"{v:.6g}" for v in fin),
            })
    return rows


def table_text(results: dict) -> str:
    """The final-value table (rules × settings, mean ± std; accuracy in %)."""
    rows = summary_rows(results)
    settings = list(results["settings"])
    names = list(dict.fromkeys(r["aggregator"] for r in rows))
    pct = metric_of(results)["scale"] != 1.0
    cell = {(r["aggregator"], r["setting"]): (f"{r['final_mean']:6.2f} ± {r['final_std']:4.2f}" if pct else
                                              f"{r['final_mean']:.5g} ± {r['final_std']:.2g}") for r in rows}
    w = max([15, *map(len, cell.values())])
    head = f"| {'aggregator':<10} | " + " | ".join(f"{s:^{w}}" for s in settings) + " |"
    sep = "|" + "-" * 12 + "|" + "|".join("-" * (w + 2) for _ in settings) + "|"
    lines = [head, sep] + [
        f"| {n:<10} | " + " | ".join(f"{cell[(n, s)]:^{w}}" for s in settings) + " |" for n in names
    ]
    return "\n".join(lines)


def plot_accuracy(results: dict):
    """Test accuracy (or the training objective of least-squares clients; mean ± sd over runs) against the round
    index, one panel per setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(results["settings"])
    rounds = np.asarray(results["rounds"])
    info = metric_of(results)
    key, scale = info["key"], info["scale"]
    fig, axes = plt.subplots(1, len(settings), figsize=(4.6 * len(settings), 4.0), sharey=True, squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, setting in zip(axes[0], settings, strict=True):
        for i, (name, r) in enumerate(results["settings"][setting]["rules"].items()):
            acc = scale * np.asarray(r[key])  # (runs, T)
            mean, sd = acc.mean(0), acc.std(0)
            ax.plot(rounds, mean, color=cmap(i), lw=1.4, label=name)
            ax.fill_between(rounds, mean - sd, mean + sd, color=cmap(i), alpha=0.15, lw=0)
        ax.set_title(setting)
        ax.set_xlabel("round n")
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel(info["label"])
    if info["better"] == "max":
        lo = min(float(np.percentile(100 * np.asarray(r["accuracy"])[:, len(rounds) // 4:], 1))
                 for e in results["settings"].values() for r in e["rules"].values())
        axes[0, 0].set_ylim(max(0.0, lo - 5), 100)
    else:
        axes[0, 0].set_yscale("log")
    axes[0, -1].legend(loc="lower right" if info["better"] == "max" else "upper right", fontsize=8, ncol=2)
    cfg = results["config"]
    what = f"{cfg['problem_file']}" if cfg.get("problem_file") else "digits softmax regression"
    fig.suptitle(f"{what}, Q={cfg['n_clients']} clients, {cfg['participation']} per round, "
                 f"η={cfg['eta']}; mean ± std over {cfg['runs']} runs", fontsize=10)
    fig.tight_layout()
    return fig
