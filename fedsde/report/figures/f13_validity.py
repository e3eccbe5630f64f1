"""F13 — SVAG validity test on digits (softmax and a tanh MLP): train loss and test accuracy vs t = n·h for
ℓ = 1 (FedAvg), 2, 4, 8, with 95 % bands, in a setting where the SDE tracks FedAvg and one (large server step)
where it does not (:func:`fedsde.validity.validity_test`)."""

from __future__ import annotations

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


def _make(cfg: dict, ctx: RunContext) -> FigureOutput:
    from fedsde.validity import validity_test

    ells = [int(e) for e in cfg["ells"]]
    fig, axes = subplots(4, 2, width=3.6, height=3.0)
    cols = colors(len(ells))
    rows, numbers, verdicts = [], {}, []
    for i, model in enumerate(("softmax", "mlp")):
        pb = problem_for(model, cfg)
        for j, (label, (eta, E, s)) in enumerate(settings(cfg).items()):
            res = validity_test(pb, eta=eta, local_steps=E, rounds=cfg["rounds"], replicates=cfg["replicates"],
                                seed=ctx.seed, server_lr=s, ells=ells, metrics=[m for m, _ in METRICS],
                                tolerance=cfg["tolerance"], record_every=cfg["record_every"], device=ctx.device)
            v = res.verdict
            gap = {m: float(res.metrics[m]["mean"][0, -1] - res.extrapolated[m]["mean"][-1]) for m, _ in METRICS}
            key = f"{model}/{label}"
            numbers[key] = {"eta": eta, "E": E, "server_lr": s, "tracks": v.tracks, "margin": v.margin,
                            "horizon": v.horizon, "worst": v.worst, "fedavg_minus_sde_at_T": gap}
            verdicts.append(f"{model}, {label} (η={eta:g}, E={E}, s={s:g}): "
                            f"{'tracks' if v.tracks else 'does NOT track'} (margin {v.margin:+.3f}; worst "
                            f"{v.worst['metric']} at t={v.worst['time']:.3g}, ℓ={v.worst['ells'][0]} vs "
                            f"{v.worst['ells'][1]}); FedAvg − SDE at T: loss {gap['train_loss']:+.3f}, "
                            f"accuracy {gap['test_accuracy']:+.3f}")
            for k, (m, ylabel) in enumerate(METRICS):
                ax = axes[i, 2 * j + k]
                mean, se = res.metrics[m]["mean"], res.metrics[m]["se"]
                for li, ell in enumerate(ells):
                    lab = "ℓ = 1 (FedAvg)" if ell == 1 else f"ℓ = {ell}"
                    ax.plot(res.times, mean[li], "o-" if ell == 1 else "-", ms=3, color=cols[li], label=lab)
                    ax.fill_between(res.times, mean[li] - 1.96 * se[li], mean[li] + 1.96 * se[li], color=cols[li],
                                    alpha=0.2, lw=0)
                    rows += [[model, label, eta, E, s, ell, m, float(t), float(a), float(b)]
                             for t, a, b in zip(res.times, mean[li], se[li], strict=True)]
                ax.set_xlabel("t = n·h")
                ax.set_ylabel(ylabel)
                verdict = "tracks" if v.tracks else "does not track"
                ax.set_title(f"{model}, {label}: η={eta:g}, E={E}, s={s:g}\nverdict: {verdict} "
                             f"(margin {v.margin:+.3f})", fontsize=8)
                if i == 0 and j == 0 and k == 0:
                    ax.legend(fontsize=7)
    fig.suptitle(f"SVAG validity test on digits (Q = {cfg['clients']}, batch {cfg['batch_size']}, "
                 f"R = {cfg['replicates']} per ℓ; server step s/ℓ, ℓ× rounds; bands 95 %)", fontsize=10)
    fig.tight_layout()
    caption = (
        "SVAG chains lifted to the server round (ℓ× more rounds with server step s/ℓ and displacement "
        "(1+√(2ℓ−1))/2·Â⁽¹⁾ + (1−√(2ℓ−1))/2·Â⁽²⁾ from two independent client rounds) for ℓ = "
        f"{', '.join(map(str, ells))}; ℓ = 1 is FedAvg and ℓ → ∞ is seed 002's SDE (2). Train loss and test "
        f"accuracy of {cfg['replicates']} replicates per ℓ on the grid t = n·h (h = η), 95 % bands. Verdict: "
        f"the gap between successive ℓ must stay within {cfg['tolerance']:g}·|value| + z·s.e. (Bonferroni, "
        "α = 0.05) at every grid time. " + "; ".join(verdicts) + "."
    )
    header = ["model", "setting", "eta", "local_steps", "server_lr", "ell", "metric", "t", "mean", "se"]
    return FigureOutput(fig, caption, {"validity": (header, rows)}, numbers)
