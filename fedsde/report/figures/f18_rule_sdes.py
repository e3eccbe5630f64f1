"""F18 — the SDE of every aggregator: each rule's chain against its own SDE (mean and spread over time) and the
weak-error slope.

Linear rules (FedAvg, FedProx, FedNova, FedDisco) and server momentum (FedAvgM): exact moments of the chain
(:func:`fedsde.sde.rules.rule_chain_moments`) against the exact OU law of the rule's first-order SDE, and the exact
weak error against the step (:func:`fedsde.compare.rule_weak.rule_weak_error_vs_step`).  FedAdam: simulated chain
(:func:`fedsde.sim.simulate`) against torchsde paths of its SDE (Malladi et al. 2022), and the Monte-Carlo weak
error of the SVAG chains ``ℓ = k²`` with 95 % intervals (:func:`fedsde.validity.adaptive.adaptive_weak_error`).
The problem: three quadratic clients in two dimensions with unequal local steps, so that the rules' fixed points
differ (FedNova's is its own, seed 003).
"""

from __future__ import annotations

import numpy as np

from fedsde.report.figures.common import one_torch_thread, subplots
from fedsde.report.gallery import FigureOutput, RunContext

TAU = np.array([2, 4, 7])


def rules_problem():
    """Three clients in 2-d, rotated curvatures, label skew (for FedDisco); the F18 problem."""
    from fedsde.problems.quadratic.problem import QuadraticProblem

    rng = np.random.default_rng(18)
    U, S = [], []
    for k in range(3):
        th = 0.6 * k
        R = np.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]])
        U.append(R @ np.diag([1.0 + k, 0.5]) @ R.T)
        S.append(R @ np.diag([2.0, 1.0 + k]) @ R.T)
    return QuadraticProblem.from_arrays(np.array(U), np.array([[1.0, -1.0], [-1.5, 0.5], [0.5, 2.0]]), np.array(S),
                                        [0.5, 0.3, 0.2], name="F18 three clients",
                                        label_distributions=rng.dirichlet(np.full(4, 0.5), 3))


def _rules():
    from fedsde.aggregators import FedAvgM, FedDisco, FedNova, FedProx, get_aggregator

    return [("FedAvg", get_aggregator("fedavg")), ("FedProx μ=0.5", FedProx(0.5)), ("FedNova", FedNova()),
            ("FedDisco (FedNova)", FedDisco("fednova")), ("FedAvgM β=0.8", FedAvgM(0.8))]


def make(cfg: dict, ctx: RunContext) -> FigureOutput:
    with one_torch_thread():
        return _make(cfg, ctx)


def _sde_grid(sde, rounds: int, w0):
    """Exact means and variances of w₁ under the OU at t = 0, h, …, rounds·h (one transition, applied repeatedly)."""
    Phi, K = sde.transition(sde.h)
    m, P = np.asarray(w0, dtype=np.float64), np.zeros((sde.d, sde.d))
    means, variances = [], []
    for _ in range(rounds + 1):
        means.append(m[0])
        variances.append(P[0, 0])
        m, P = sde.c + Phi @ (m - sde.c), Phi @ P @ Phi.T + K
    return np.array(means), np.array(variances)


def _make(cfg: dict, ctx: RunContext) -> FigureOutput:
    from fedsde.compare.rule_weak import rule_weak_error_vs_step
    from fedsde.sde.rules import rule_chain_moments, rule_sde

    pb = rules_problem()
    eta, s, T = cfg["eta"], cfg["server_lr"], cfg["horizon"]
    h = s  # η₀ = 1: clock t = n·s
    n = round(T / h)
    w0 = np.array([2.5, 2.5])
    fig, axes = subplots(3, 2, width=4.2, height=3.2)
    axes = axes.ravel()
    rows, slopes, fixed = [], {}, {}
    steps = [cfg["weak_h"] / 2**j for j in range(cfg["levels"])]
    for ax, (label, agg) in zip(axes, _rules(), strict=False):
        r = rule_sde(pb, agg, eta, TAU, s, h)
        ch = rule_chain_moments(r, n, w0)
        t = ch.rounds * h
        sm, sv = _sde_grid(r.sde, n, w0)
        cm, cv = ch.mean[:, 0], ch.cov[:, 0, 0]
        ax.fill_between(t, cm - 2 * np.sqrt(cv), cm + 2 * np.sqrt(cv), color="C0", alpha=0.25, lw=0,
                        label="chain mean ± 2 sd")
        ax.plot(t, cm, "C0-", lw=1.5)
        ax.plot(t, sm, "k--", lw=1, label="SDE mean")
        ax.plot(t, sm + 2 * np.sqrt(sv), "k:", lw=0.8, label="SDE ± 2 sd")
        ax.plot(t, sm - 2 * np.sqrt(sv), "k:", lw=0.8)
        ax.axhline(r.sde.c[0], color="C3", lw=0.7, label=f"rule's fixed point {r.sde.c[0]:.3f}")
        wk = rule_weak_error_vs_step(pb, agg, eta, TAU, t_end=cfg["weak_t"], time_steps=steps, w0=w0,
                                     server_rate=1.0)
        slopes[label], fixed[label] = wk.slope, r.sde.c.tolist()
        rows += [[label, float(x), float(a), float(b), float(np.sqrt(c)), float(np.sqrt(d))]
                 for x, a, b, c, d in zip(t, cm, sm, cv, sv, strict=True)]
        step = f", step s/(1−β) = {r.effective_server_lr:g}" if r.momentum is not None else ""
        ax.set_title(f"{label}: weak-error slope {wk.slope:.3f}{step}", fontsize=8)
        ax.set_xlabel("t = n·s")
        ax.set_ylabel("w₁")
        ax.legend(fontsize=6)
    adam = _adam_panel(axes[5], pb, cfg, ctx, w0)
    fig.suptitle(f"Each rule against its own SDE ('{pb.name}', τ = {TAU.tolist()}, η = {eta:g})", fontsize=10)
    fig.tight_layout()
    opt = pb.optimum
    caption = (
        f"Each aggregator's chain (exact moments; FedAdam: {adam['replicates']} simulated runs) against its own "
        f"SDE on three quadratic clients with local steps τ = {TAU.tolist()}, η = {eta:g}, server step s = {s:g} "
        f"(clock t = n·s; FedAdam t = n·s²). Exact weak-error slopes as h → 0 (h = {steps[0]:g} … {steps[-1]:g}, "
        "φ = ‖w − w*‖², noise per unit time fixed): "
        + ", ".join(f"{k} {v:.3f}" for k, v in slopes.items())
        + f". The SDEs are centred at each rule's own fixed point: FedAvg ({fixed['FedAvg'][0]:.4f}, "
        f"{fixed['FedAvg'][1]:.4f}), FedNova ({fixed['FedNova'][0]:.4f}, {fixed['FedNova'][1]:.4f}), x* = "
        f"({opt[0]:.4f}, {opt[1]:.4f}) — FedNova's objective inconsistency (seed 003) is the SDE's stationary mean. "
        f"FedAvgM's first-order SDE has step s/(1 − β). FedAdam (Malladi et al. 2022 with the round "
        f"displacement): SVAG weak error of E F(w_T) {adam['caption']}."
    )
    numbers = {"slopes": slopes, "fixed_points": fixed, "optimum": opt.tolist(), "fedadam": adam["numbers"]}
    return FigureOutput(fig, caption, {"rule_sdes": (["rule", "t", "chain_mean_w1", "sde_mean_w1", "chain_sd_w1",
                                                     "sde_sd_w1"], rows)}, numbers)


def _adam_panel(ax, pb, cfg, ctx: RunContext, w0) -> dict:
    """FedAdam: simulated chain vs SDE paths (mean ± 2 sd of w₁) and the SVAG weak error with 95 % intervals."""
    from fedsde.aggregators import FedAdam
    from fedsde.sde.adaptive import adaptive_sde_paths
    from fedsde.sim import simulate
    from fedsde.validity.adaptive import adaptive_weak_error

    agg, s, n, R = FedAdam(), cfg["adam_server_lr"], cfg["adam_rounds"], cfg["adam_replicates"]
    eta = cfg["eta"]
    start = pb.optimum + 0.5
    chain = simulate(pb, eta=eta, local_steps=TAU, rounds=n, replicates=R, seed=ctx.seed, server_lr=s, w0=start,
                     aggregator=agg).weights[..., 0]
    sde = adaptive_sde_paths(pb, agg, eta=eta, local_steps=TAU, rounds=n, replicates=R, seed=ctx.seed + 1,
                             server_lr=s, w0=start, substeps=cfg["adam_substeps"])["weights"][..., 0]
    t = np.arange(n + 1) * s * s
    for v, col, ls, lab in ((chain, "C0", "-", "chain"), (sde, "k", "--", "SDE")):
        m, sd = v.mean(1), v.std(1, ddof=1)
        ax.plot(t, m, ls, color=col, lw=1.2, label=f"{lab} mean ± 2 sd")
        ax.plot(t, m + 2 * sd, ls, color=col, lw=0.6)
        ax.plot(t, m - 2 * sd, ls, color=col, lw=0.6)
    wk = adaptive_weak_error(pb, agg, eta=eta, local_steps=TAU, rounds=n, replicates=R, seed=ctx.seed + 2,
                             server_lr=s, w0=start, ks=cfg["adam_ks"], substeps=cfg["adam_substeps"], phi="loss")
    ells = [k * k for k in wk.config["ks"]]
    cells = ", ".join(f"ℓ = {e}: {x:.3g} ± {1.96 * se:.2g}" for e, x, se in zip(ells, wk.errors, wk.stderr,
                                                                                strict=True))
    ax.set_title(f"FedAdam (SDE of Malladi et al.): SVAG slope {wk.slope:.2f}", fontsize=8)
    ax.set_xlabel("t = n·s²")
    ax.set_ylabel("w₁")
    ax.legend(fontsize=6)
    return {"replicates": R, "caption": f"{cells} (slope in s²/ℓ {wk.slope:.2f}, Monte Carlo, 95 % intervals)",
            "numbers": {"ells": ells, "errors": wk.errors.tolist(), "stderr": wk.stderr.tolist(),
                        "slope": wk.slope}}
