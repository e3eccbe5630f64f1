"""F17 — Does seed 002's SDE describe FedAvg on a user's own network?  SVAG validity curves for a module problem
(``kind = "module"``; by default the small CNN of ``examples/models/digits_cnn.toml``: GroupNorm, dropout, digits as
1×8×8 images): FedAvg (``ℓ = 1``) and the SVAG chains ``ℓ = 2, 4, 8`` with the SDE (Richardson limit of the two
largest ``ℓ``), train loss and test accuracy against ``t = n·h`` with 95 % bands, at a small and a large server
step, and the gap ``d(t)/tol`` with its simultaneous bounds (:func:`fedsde.validity.validity_test`,
``reference="svag"``).  The federated counterpart of the CIFAR-10 figures of the SVAG paper (Li, Malladi & Arora
2021), which test the SDE on ResNets and VGG.
"""

from __future__ import annotations

from pathlib import Path

from fedsde.errors import FedsdeInputError
from fedsde.report.figures.common import colors, one_torch_thread, subplots
from fedsde.report.figures.f13_validity import METRICS, _curves, _gaps
from fedsde.report.gallery import FigureOutput, RunContext

#: the problem file of the figure when none is configured (relative to the working directory or the source tree)
DEFAULT_PROBLEM = "examples/models/digits_cnn.toml"


def problem_path(value: str) -> Path:
    """``F17.problem`` as a file: as given when absolute, else relative to the working directory, then to the
    source tree (where ``examples/`` lives)."""
    path = Path(value)
    root = Path(__file__).resolve().parents[3]
    candidates = [path] if path.is_absolute() else [Path.cwd() / path, root / path]
    for c in candidates:
        if c.is_file():
            return c
    where = ", ".join(str(c.parent) for c in candidates)
    raise FedsdeInputError(f"F17.problem={value!r}: no such file (looked in {where}); F17 needs a problem file, e.g. "
                           f"{DEFAULT_PROBLEM} of the source tree")


def load(cfg: dict):
    """The figure's problem (:func:`fedsde.problems.load_problem` of :func:`problem_path`)."""
    from fedsde.problems import load_problem

    return load_problem(problem_path(cfg["problem"]))


def describe(pb) -> str:
    """One phrase naming the problem: its name, parameters, clients and minibatch."""
    batch = getattr(pb, "batch_size", None)
    batch = "full batch" if batch in (None, "full") else f"minibatches of {batch}"
    return f"{getattr(pb, 'name', None) or 'the problem'} (d = {pb.d} weights, Q = {pb.Q} clients, {batch})"


def make(cfg: dict, ctx: RunContext) -> FigureOutput:
    with one_torch_thread():
        return _make(cfg, ctx)


def _verdict_sentence(s: float, eta: float, E: int, v, gap: dict) -> str:
    w = v.worst
    needed = "" if v.replicates_needed is None else f"; ≈{v.replicates_needed} replicates would decide"
    return (f"s = {s:g} (η = {eta:g}, E = {E}): {v.outcome.upper()} — worst {w['metric']} d = {w['gap']:.3g} in "
            f"[{w['lower']:.3g}, {w['upper']:.3g}] vs tolerance {w['tolerance']:g} (margin {v.margin:+.2f}; 1/ℓ "
            f"regime {v.regime}{needed}); at t = T FedAvg − SDE is {gap['train_loss']:+.3g} in train loss and "
            f"{gap['test_accuracy']:+.3g} in test accuracy")


def _make(cfg: dict, ctx: RunContext) -> FigureOutput:
    from fedsde.validity import validity_test

    pb = load(cfg)
    ells = [int(e) for e in cfg["ells"]]
    eta, E = float(cfg["eta"]), int(cfg["local_steps"])
    acc_tol = float(cfg["accuracy_tolerance"])
    steps = [float(s) for s in cfg["server_lrs"]]
    fig, axes = subplots(3, len(steps), width=3.7, height=2.9, squeeze=False)
    cols = colors(len(ells))
    rows, gap_rows, numbers, sentences = [], [], {}, []
    for r, s in enumerate(steps):
        res = validity_test(pb, eta=eta, local_steps=E, rounds=cfg["rounds"], replicates=cfg["replicates"],
                            seed=ctx.seed + r, server_lr=s, ells=ells, metrics=[m for m, _ in METRICS],
                            reference="svag", tolerance=cfg["tolerance"], accuracy_tolerance=acc_tol,
                            record_every=cfg["record_every"], device=ctx.device)
        v, w = res.verdict, res.verdict.worst
        gap = {m: float(res.metrics[m]["mean"][0, -1] - res.sde[m]["mean"][-1]) for m, _ in METRICS}
        final = {m: float(res.metrics[m]["mean"][0, -1]) for m, _ in METRICS}
        numbers[f"s={s:g}"] = {"eta": eta, "E": E, "server_lr": s, "outcome": v.outcome, "tracks": v.tracks,
                               "reference": v.reference, "margin": v.margin, "horizon": v.horizon, "worst": w,
                               "replicates_needed": v.replicates_needed, "regime": v.regime,
                               "fedavg_at_T": final, "fedavg_minus_sde_at_T": gap}
        sentences.append(_verdict_sentence(s, eta, E, v, gap))
        for k, (m, ylabel) in enumerate(METRICS):
            rows += [[s, *row] for row in _curves(axes[r, k], res, m, ylabel, cols)]
        gap_rows += [[s, *row] for row in _gaps(axes[r, 2], res)]
        axes[r, 0].set_title(f"s = {s:g} (η = {eta:g}, E = {E})", fontsize=9, loc="left")
        axes[r, 2].set_title(f"{v.outcome.upper()} (reference: {v.reference})\nworst {w['metric']}: d = "
                             f"{w['gap']:.3g} ∈ [{w['lower']:.3g}, {w['upper']:.3g}], tol {w['tolerance']:g}",
                             fontsize=8)
        if r == 0:
            axes[r, 0].legend(fontsize=6)
            axes[r, 2].legend(fontsize=6)
    fig.suptitle(f"FedAvg vs seed 002's SDE on your own network: {describe(pb)}\nR = {cfg['replicates']} per ℓ; "
                 f"SDE: Richardson limit of ℓ = {ells[-2]}, {ells[-1]}; bands 95 %, dotted line: the tolerance",
                 fontsize=10)
    fig.tight_layout()
    caption = (
        f"A user's own nn.Module through fedsde: {describe(pb)}, from the problem file {cfg['problem']}. FedAvg "
        f"(ℓ = 1) against seed 002's SDE (2) at a small and a large server step, {cfg['replicates']} replicates per "
        f"chain, {cfg['rounds']} rounds; the SDE's value is the Richardson limit of the SVAG chains ℓ = {ells[-2]}, "
        f"{ells[-1]} (dashed; chains ℓ = {', '.join(map(str, ells))}: ℓ× more rounds with server step s/ℓ), as "
        "Li, Malladi & Arora (2021) test the SDE of SGD on ResNets and VGG on CIFAR-10. Local steps run the module "
        "in train mode (dropout active, masks drawn per replicate), the metrics in eval mode. Right column: the gap "
        f"d(t) over its tolerance (train loss: relative to the range of the SDE's loss path, tolerance "
        f"{cfg['tolerance']:g}; test accuracy: in accuracy units, tolerance {acc_tol:g}) with simultaneous bounds "
        "(α = 0.05). " + "; ".join(sentences) + "."
    )
    header = ["server_lr", "ell", "metric", "t", "mean", "se"]
    gap_header = ["server_lr", "metric", "t", "d", "lower", "upper", "tolerance"]
    return FigureOutput(fig, caption, {"validity": (header, rows), "gaps": (gap_header, gap_rows)}, numbers)
