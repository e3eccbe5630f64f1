"""F13 — Does seed 002's SDE track FedAvg on digits (softmax and a tanh MLP)?  FedAvg (``ℓ = 1``) against the SDE
(Richardson limit of the SVAG chains) in a small-step setting and with a large server step: train loss and test
accuracy vs ``t = n·h`` with 95 % bands, and the gap ``d(t)/tol`` with its simultaneous bounds, the outcome of
the equivalence test (:func:`fedsde.validity.validity_test`) in each title."""

from __future__ import annotations

import numpy as np

from fedsde._tolerances import Z95
from fedsde.report.figures.common import colors, one_torch_thread, subplots
from fedsde.report.gallery import FigureOutput, RunContext

METRICS = (("train_loss", "train loss F(w)"), ("test_accuracy", "test accuracy"))


def problem_for(model: str, cfg: dict):
    """The digits problem of the figure (Dirichlet(0.5) label skew over ``clients``)."""
    from fedsde.problems import data_problem_from_dict

    spec = {"kind": "classification", "dataset": "digits", "model": model, "clients": cfg["clients"],
            "partition": "dirichlet", "alpha": 0.5, "batch_size": cfg["batch_size"], "seed": 0}
    if model == "mlp":
        spec["hidden"] = cfg["hidden"]
    return data_problem_from_dict(spec, source=f"F13 {model}")


def settings(cfg: dict) -> dict:
    return {"tracking": (cfg["eta"], cfg["local_steps"], cfg["server_lr"]),
            "large s": (cfg["bad_eta"], cfg["bad_local_steps"], cfg["bad_server_lr"])}


def make(cfg: dict, ctx: RunContext) -> FigureOutput:
    with one_torch_thread():
        return _make(cfg, ctx)


def _curves(ax, res, m: str, ylabel: str, cols) -> list:
    """FedAvg and the SVAG chains with 95 % bands, the SDE (Richardson limit) dashed; the table rows."""
    mean, se = res.metrics[m]["mean"], res.metrics[m]["se"]
    rows = []
    for li, ell in enumerate(res.ells):
        lab = "ℓ = 1 (FedAvg)" if ell == 1 else f"ℓ = {ell}"
        ax.plot(res.times, mean[li], "o-" if ell == 1 else "-", ms=3, lw=1.6 if ell == 1 else 0.8, color=cols[li],
                label=lab)
        ax.fill_between(res.times, mean[li] - Z95 * se[li], mean[li] + Z95 * se[li], color=cols[li], alpha=0.15,
                        lw=0)
        rows += [[ell, m, float(t), float(a), float(b)] for t, a, b in zip(res.times, mean[li], se[li], strict=True)]
    sde = res.sde[m]
    ax.plot(res.times, sde["mean"], "k--", lw=1.2, label="SDE (Richardson)")
    ax.fill_between(res.times, sde["mean"] - Z95 * sde["se"], sde["mean"] + Z95 * sde["se"], color="k", alpha=0.1,
                    lw=0)
    ax.set_xlabel("t = n·h")
    ax.set_ylabel(ylabel)
    return rows


def _gaps(ax, res) -> list:
    """``d(t)/tol`` of every judged metric with its simultaneous bounds; 1 is the tolerance."""
    rows = []
    for c, col in zip(res.verdict.curves, ("C0", "C3"), strict=False):
        tol = c["tolerance"]
        lo, up = np.asarray(c["lower"]) / tol, np.minimum(np.asarray(c["upper"]) / tol, 1e6)
        ax.plot(res.times, np.asarray(c["gap"]) / tol, "o-", ms=3, color=col, label=f"{c['metric']} (tol {tol:g})")
        ax.fill_between(res.times, lo, up, color=col, alpha=0.2, lw=0)
        rows += [[c["metric"], float(t), float(g), float(a), float(b), tol]
                 for t, g, a, b in zip(res.times, c["gap"], c["lower"], c["upper"], strict=True)]
    ax.axhline(1.0, color="k", lw=0.8, ls=":")
    top = max(3.0, 1.2 * max(float(np.max(np.asarray(c["gap"]) / c["tolerance"])) for c in res.verdict.curves))
    ax.set_ylim(0.0, top)
    ax.set_xlabel("t = n·h")
    ax.set_ylabel("d(t) / tolerance")
    return rows


def _make(cfg: dict, ctx: RunContext) -> FigureOutput:
    from fedsde.validity import validity_test

    ells = [int(e) for e in cfg["ells"]]
    acc_tol = float(cfg.get("accuracy_tolerance", 0.01))
    fig, axes = subplots(3, 4, width=3.7, height=2.9)
    cols = colors(len(ells))
    rows, gap_rows, numbers, verdicts = [], [], {}, []
    for i, model in enumerate(("softmax", "mlp")):
        pb = problem_for(model, cfg)
        for j, (label, (eta, E, s)) in enumerate(settings(cfg).items()):
            res = validity_test(pb, eta=eta, local_steps=E, rounds=cfg["rounds"], replicates=cfg["replicates"],
                                seed=ctx.seed, server_lr=s, ells=ells, metrics=[m for m, _ in METRICS],
                                reference="svag", tolerance=cfg["tolerance"], accuracy_tolerance=acc_tol,
                                record_every=cfg["record_every"], device=ctx.device)
            v, w = res.verdict, res.verdict.worst
            gap = {m: float(res.metrics[m]["mean"][0, -1] - res.sde[m]["mean"][-1]) for m, _ in METRICS}
            key = f"{model}/{label}"
            numbers[key] = {"eta": eta, "E": E, "server_lr": s, "outcome": v.outcome, "tracks": v.tracks,
                            "reference": v.reference, "margin": v.margin, "horizon": v.horizon, "worst": w,
                            "replicates_needed": v.replicates_needed, "regime": v.regime,
                            "fedavg_minus_sde_at_T": gap}
            needed = "" if v.replicates_needed is None else f"; ≈{v.replicates_needed} replicates would decide"
            verdicts.append(f"{model}, {label} (η={eta:g}, E={E}, s={s:g}): {v.outcome.upper()} — worst "
                            f"{w['metric']} d = {w['gap']:.3g} in [{w['lower']:.3g}, {w['upper']:.3g}] vs tolerance "
                            f"{w['tolerance']:g} (margin {v.margin:+.2f}; 1/ℓ regime {v.regime}{needed})")
            r = 2 * i + j
            for k, (m, ylabel) in enumerate(METRICS):
                rows += [[model, label, eta, E, s, *row] for row in _curves(axes[r, k], res, m, ylabel, cols)]
            gap_rows += [[model, label, *row] for row in _gaps(axes[r, 2], res)]
            axes[r, 0].set_title(f"{model}, {label}: η={eta:g}, E={E}, s={s:g}", fontsize=9, loc="left")
            axes[r, 2].set_title(f"{v.outcome.upper()} (reference: {v.reference})\nworst {w['metric']}: d = "
                                 f"{w['gap']:.3g} ∈ [{w['lower']:.3g}, {w['upper']:.3g}], tol {w['tolerance']:g}",
                                 fontsize=8)
            if r == 0:
                axes[r, 0].legend(fontsize=6)
                axes[r, 2].legend(fontsize=6)
    fig.suptitle(f"FedAvg vs seed 002's SDE on digits (Q = {cfg['clients']}, batch {cfg['batch_size']}, "
                 f"R = {cfg['replicates']} per ℓ; SDE: Richardson limit of ℓ = {ells[-2]}, {ells[-1]})\nbands: 95 % "
                 "on the curves, simultaneous bounds on d; dotted line: the tolerance", fontsize=10)
    fig.tight_layout()
    caption = (
        f"FedAvg (ℓ = 1) against seed 002's SDE (2) on digits, {cfg['replicates']} replicates per chain. The SDE's "
        f"value is the Richardson limit of the SVAG chains ℓ = {ells[-2]}, {ells[-1]} (dashed; chains ℓ = "
        f"{', '.join(map(str, ells))} lifted to the server round: ℓ× more rounds with server step s/ℓ). Right "
        "column: the gap d(t) over its tolerance — for the train loss |E F_FedAvg − E F_SDE| divided by the range "
        f"of the SDE's loss path (tolerance {cfg['tolerance']:g}), for the test accuracy in accuracy units "
        f"(tolerance {acc_tol:g}) — with simultaneous Student-t bounds (Bonferroni over metrics and times, α = "
        "0.05); the SDE tracks where every upper bound stays below 1, does not track where a lower bound exceeds "
        "it, and is inconclusive otherwise (margin = 1 − upper/tol at the worst time). " + "; ".join(verdicts) + "."
    )
    header = ["model", "setting", "eta", "local_steps", "server_lr", "ell", "metric", "t", "mean", "se"]
    gap_header = ["model", "setting", "metric", "t", "d", "lower", "upper", "tolerance"]
    return FigureOutput(fig, caption, {"validity": (header, rows), "gaps": (gap_header, gap_rows)}, numbers)
