"""F14 — the general SDE (2) against discrete FedAvg on a real loss (digits softmax): moments of F(w) over time,
weak error of E F(w_T) and of the test accuracy vs step for the SVAG and Monte-Carlo Euler integrators, with 95 %
intervals and cost (:func:`fedsde.validity.general.general_sde_study`)."""

from __future__ import annotations

import numpy as np

from fedsde.report.figures.common import one_torch_thread, subplots
from fedsde.report.gallery import FigureOutput, RunContext

STYLE = {"svag": ("C0", "o-", "SVAG (step h/ℓ)"), "mc-euler": ("C3", "s--", "MC-coefficient Euler (step h/k)")}


def make(cfg: dict, ctx: RunContext) -> FigureOutput:
    with one_torch_thread():
        return _make(cfg, ctx)


def _make(cfg: dict, ctx: RunContext) -> FigureOutput:
    from fedsde._tolerances import Z95
    from fedsde.problems import data_problem_from_dict
    from fedsde.validity.general import cost_to_error, general_sde_study

    pb = data_problem_from_dict({"kind": "classification", "dataset": "digits", "model": "softmax",
                                 "clients": cfg["clients"], "partition": "dirichlet", "alpha": 0.5,
                                 "batch_size": cfg["batch_size"], "seed": 0}, source="F14")
    st = general_sde_study(pb, eta=cfg["eta"], local_steps=cfg["local_steps"], rounds=cfg["rounds"],
                           replicates=cfg["replicates"], seed=ctx.seed, server_lr=cfg["server_lr"], ells=cfg["ells"],
                           mc_substeps=cfg["mc_substeps"], inner_samples=cfg["inner_samples"],
                           record_every=cfg["record_every"], device=ctx.device)
    fig, axes = subplots(5, width=3.7, height=3.4)
    # (a, b) moments of F(w) over time: mean and standard deviation over replicates
    mo = st.moments["train_loss"]
    for key, col, lab in (("fedavg", "C1", "FedAvg (ℓ = 1)"), ("sde", "C0", "SDE")):
        m, se, sd = (np.asarray(mo[key][k]) for k in ("mean", "se", "std"))
        axes[0].plot(st.times, m, "o-" if key == "fedavg" else "-", ms=3, color=col, label=lab)
        axes[0].fill_between(st.times, m - Z95 * se, m + Z95 * se, color=col, alpha=0.25, lw=0)
        axes[1].plot(st.times, sd, "o-" if key == "fedavg" else "-", ms=3, color=col, label=lab)
    axes[0].set_ylabel("E F(w) (95 % band)")
    axes[0].set_title("mean of the train loss", fontsize=9)
    axes[1].set_ylabel("sd of F(w) over replicates")
    axes[1].set_title("spread of the train loss", fontsize=9)
    for ax in axes[:2]:
        ax.set_xlabel("t = n·h")
        ax.legend(fontsize=7, title="SDE: Richardson ℓ → ∞ (mean), finest ℓ (sd)", title_fontsize=6)
    # (c, d) weak error vs step (signed, with 95 % intervals); the two finest SVAG chains define the reference (open
    # markers): their errors are in a fixed ratio by construction and do not enter the slopes
    fed = st.row("svag", 1)
    ref_ells = st.config["ells"][-2:]
    for ax, m, lab in ((axes[2], "train_loss", "E F(w_T)"), (axes[3], "test_accuracy", "E accuracy(w_T)")):
        lo, hi = 0.0, 0.0
        for scheme, (col, ls, name) in STYLE.items():
            rows = [r for r in st.rows if r.scheme == scheme and not (scheme == "svag" and r.param == 1)]
            if not rows:
                continue
            slope = st.slopes[scheme][m]
            ax.errorbar([r.step for r in rows], [r.error[m] for r in rows],
                        yerr=[Z95 * r.error_se[m] for r in rows], fmt=ls, color=col, ms=4, capsize=2,
                        label=name + ("" if np.isnan(slope) else f", |err| slope {slope:+.2f}"))
            lo = min(lo, *(r.error[m] - Z95 * r.error_se[m] for r in rows))
            hi = max(hi, *(r.error[m] + Z95 * r.error_se[m] for r in rows))
            if scheme == "svag":
                refs = [r for r in rows if r.param in ref_ells]
                ax.plot([r.step for r in refs], [r.error[m] for r in refs], "o", ms=4, mfc="white", color=col, zorder=5,
                        label=f"ℓ = {', '.join(map(str, ref_ells))}: define the reference (not fitted)")
        ax.errorbar([fed.step * 1.04], [fed.error[m]], yerr=[Z95 * fed.error_se[m]], fmt="*", color="C1", ms=9,
                    capsize=2, label="FedAvg (ℓ = 1, step h)")
        lo, hi = min(lo, fed.error[m] - Z95 * fed.error_se[m]), max(hi, fed.error[m] + Z95 * fed.error_se[m])
        span = max(hi - lo, 1e-12)
        ax.set_ylim(lo - 0.05 * span, hi + 0.65 * span)  # room above the data for the legend
        ax.axhline(0.0, color="k", lw=0.6)
        ax.set_xscale("log")
        steps = sorted({r.step for r in st.rows})
        ax.set_xticks(steps, [f"{v:.3g}" for v in steps], fontsize=7)
        ax.minorticks_off()
        ax.set_xlabel("step of the scheme (h/ℓ or h/k)")
        ax.set_ylabel(f"{lab}\nscheme − SDE (95 % CI)", fontsize=9)
        ax.set_title(f"weak error: {m.replace('_', ' ')}", fontsize=9)
        ax.legend(fontsize=6, loc="upper left")
    # (e) cost vs weak error of the train loss
    ax = axes[4]
    for scheme, (col, ls, name) in STYLE.items():
        rows = [r for r in st.rows if r.scheme == scheme]
        ax.plot([r.cost_ratio for r in rows], [abs(r.error["train_loss"]) for r in rows], ls, color=col, label=name)
        for r in rows:
            ax.annotate(("ℓ" if scheme == "svag" else "k") + f"={r.param}", (r.cost_ratio, abs(r.error["train_loss"])),
                        fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.margins(x=0.2, y=0.15)  # room for the point labels inside the axes
    ax.set_xlabel("time per round / FedAvg's (same paths)")
    ax.set_ylabel("|E F(w_T) − SDE|")
    ax.set_title("cost to a weak error", fontsize=9)
    ax.legend(fontsize=6)
    target = 0.5 * abs(fed.error["train_loss"])
    costs = cost_to_error(st, "train_loss", target, z=-Z95)  # error consistent with the target at 95 %
    fig.suptitle(f"General SDE (2) vs FedAvg on digits softmax (Q = {cfg['clients']}, η = {cfg['eta']:g}, "
                 f"E = {cfg['local_steps']}, s = {cfg['server_lr']:g}, T = {st.times[-1]:.3g}, "
                 f"R = {cfg['replicates']})", fontsize=10)
    fig.tight_layout()
    ref = st.reference
    svag_rows = ", ".join(f"ℓ={r.param}: {r.error['train_loss']:+.4f} ± {Z95 * r.error_se['train_loss']:.4f} "
                          f"({r.cost_ratio:.1f}×)" for r in st.rows if r.scheme == "svag")
    mc_rows = ", ".join(f"k={r.param}: {r.error['train_loss']:+.4f} ± {Z95 * r.error_se['train_loss']:.4f} "
                        f"({r.cost_ratio:.0f}×)" for r in st.rows if r.scheme == "mc-euler")
    caption = (
        f"Seed 002's SDE (2) on softmax regression over digits, sampled two ways with {cfg['replicates']} paths: the "
        "SVAG chain (ℓ steps of h/ℓ per round, two client rounds per step) and Euler–Maruyama with Monte-Carlo "
        f"coefficients M̂, V̂ ({cfg['inner_samples']} rollouts per path and step, k substeps). Reference: order-1 "
        f"Richardson limit of the two finest SVAG chains, E F(w_T) = {ref['train_loss']['mean']:.4f} ± "
        f"{Z95 * ref['train_loss']['se']:.4f}, test accuracy {ref['test_accuracy']['mean']:.4f} ± "
        f"{Z95 * ref['test_accuracy']['se']:.4f}. Weak error of E F(w_T) (95 % CI, cost relative to one FedAvg run): "
        f"{svag_rows}" + (f"; Monte-Carlo Euler {mc_rows}" if mc_rows else "") + ". Fitted log–log slope of |error| "
        f"vs step (95 % intervals): SVAG {st.slope_fits['svag']['train_loss'].text('+.2f')}, MC Euler "
        f"{st.slope_fits['mc-euler']['train_loss'].text('+.2f')} (fitted on the steps independent of the reference: "
        f"SVAG ℓ ∈ {{{', '.join(str(e) for e in st.config['ells'] if e not in ref_ells)}}} and every Monte-Carlo "
        f"Euler run; the chains ℓ = {', '.join(map(str, ref_ells))} define the reference, so their errors are in ratio "
        f"{ref_ells[1] / ref_ells[0]:g} by construction and are left out; errors within 2 s.e. are not fitted). "
        "Cost: wall time per base round relative to FedAvg's (same paths), each the minimum over 3 one-round runs "
        "after a warm-up. Largest |test-accuracy error| "
        f"{max(abs(r.error['test_accuracy']) for r in st.rows):.4f} (95 % half-width "
        f"{Z95 * max(r.error_se['test_accuracy'] for r in st.rows):.4f}): "
        + ("within noise at every step" if all(abs(r.error["test_accuracy"]) < Z95 * r.error_se["test_accuracy"]
                                             for r in st.rows) else "resolved at some steps")
        + ". Cost of an SDE path to half "
        f"FedAvg's own weak error ({target:.4f}; cheapest step whose error is within its 95 % interval of it or "
        f"below), relative to FedAvg: SVAG {_num(costs['svag'], '.1f', '×')}, MC Euler "
        f"{_num(costs['mc-euler'], '.0f', '×')}."
    )
    header = ["scheme", "param", "step", "seconds", "cost_ratio", "metric", "mean", "se", "error", "error_se"]
    table = [[r.scheme, r.param, r.step, r.seconds, r.cost_ratio, m, r.mean[m], r.se[m], r.error[m], r.error_se[m]]
             for r in st.rows for m in r.mean]
    moments = [[m, who, float(t), float(a), float(b), float(c)] for m, d in st.moments.items() for who, v in d.items()
               for t, a, b, c in zip(st.times, v["mean"], v["se"], v["std"], strict=True)]
    numbers = {"reference": ref, "slopes": st.slopes, "cost_to_half_fedavg_error": costs,
               "slope_intervals": {s: {m: f.to_dict() for m, f in d.items()} for s, d in st.slope_fits.items()},
               "rows": [{"scheme": r.scheme, "param": r.param, "error": r.error, "error_se": r.error_se,
                         "cost_ratio": r.cost_ratio} for r in st.rows]}
    return FigureOutput(fig, caption, {"weak_error": (header, table),
                                       "moments": (["metric", "who", "t", "mean", "se", "std"], moments)}, numbers)


def _num(x: float, spec: str, unit: str = "") -> str:
    """``x`` formatted, or why there is no number (NaN: fewer than two resolved errors, or target not reached)."""
    return f"{x:{spec}}{unit}" if np.isfinite(x) else "not resolved by the steps tried"
