"""F18 — the SDE of every aggregator: each rule's chain against its own SDE (mean and spread over time), with the
measurements that can fail.

Linear rules (FedAvg, FedProx, FedNova, FedDisco) and server momentum (FedAvgM): the chain's exact moments
(:func:`fedsde.sde.rules.rule_chain_moments`) and the simulated chain (:func:`fedsde.sim.simulate`, the rule's own
code) against the exact law of the rule's first-order SDE.  A linear rule's exact chain is the Euler–Maruyama scheme
of its SDE's moment equations, so its exact weak-error slope is 1 by construction and is no evidence; the evidence
is the round law against the simulator (:func:`fedsde.compare.rule_svag_weak.round_law_vs_simulator`: one round of
the rule's code from ``w₀`` against the exact law of its step, ``z``-scores of the mean and covariance).  FedAvgM's
exact weak error against its first-order SDE (step ``s/(1 − β)``) is a real test (the momentum chain is not that
SDE's scheme); its slope is asymptotic and its local slopes are shown from the coarsest step.  FedAdam: simulated
chain against torchsde paths of its SDE (Malladi et al. 2022), whose Euler substeps are doubled until the change
they make is below the error bar, and the Monte-Carlo weak error of the SVAG chains ``ℓ = k²`` with 95 % intervals
and the slope's bootstrap interval (:func:`fedsde.validity.adaptive.adaptive_weak_error`); with fewer replicates
than resolve every error (``--quick``) the slope is marked indicative.  The problem: three quadratic clients in two
dimensions with unequal local steps, so that the rules' fixed points differ (FedNova's is its own, seed 003).
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
    from fedsde._stats import local_loglog_slopes
    from fedsde.compare.rule_svag_weak import round_law_vs_simulator
    from fedsde.compare.rule_weak import rule_weak_error_vs_step
    from fedsde.sde.rules import rule_chain_moments, rule_sde
    from fedsde.sim import simulate

    pb = rules_problem()
    eta, s, T, R = cfg["eta"], cfg["server_lr"], cfg["horizon"], cfg["sim_replicates"]
    h = s  # η₀ = 1: clock t = n·s
    n = round(T / h)
    w0 = np.array([2.5, 2.5])
    fig, axes = subplots(3, 2, width=4.2, height=3.2)
    axes = axes.ravel()
    rows, fixed, zs, momentum = [], {}, {}, {}
    record = np.unique(np.linspace(0, n, 21).round().astype(int))
    for i, (ax, (label, agg)) in enumerate(zip(axes, _rules(), strict=False)):
        r = rule_sde(pb, agg, eta, TAU, s, h)
        ch = rule_chain_moments(r, n, w0)
        t = ch.rounds * h
        sm, sv = _sde_grid(r.sde, n, w0)
        cm, cv = ch.mean[:, 0], ch.cov[:, 0, 0]
        sim = simulate(pb, eta=eta, local_steps=TAU, rounds=n, replicates=R, seed=ctx.seed + i, server_lr=s, w0=w0,
                       aggregator=agg, record=record).weights[..., 0]
        check = round_law_vs_simulator(pb, agg, eta=eta, local_steps=TAU, server_lr=s, w=w0, replicates=R,
                                       seed=ctx.seed + 100 + i)
        zs[label], fixed[label] = check["max_z"], r.sde.c.tolist()
        ax.fill_between(t, cm - 2 * np.sqrt(cv), cm + 2 * np.sqrt(cv), color="C0", alpha=0.25, lw=0,
                        label="chain (exact) mean ± 2 sd")
        ax.plot(t, cm, "C0-", lw=1.5)
        ax.errorbar(record * h, sim.mean(1), yerr=1.96 * sim.std(1, ddof=1) / np.sqrt(R), fmt="o", ms=2.5,
                    color="C1", lw=0.8, label=f"simulated mean (R = {R}), 95 %")
        ax.plot(t, sm, "k--", lw=1, label="SDE mean")
        ax.plot(t, sm + 2 * np.sqrt(sv), "k:", lw=0.8, label="SDE ± 2 sd")
        ax.plot(t, sm - 2 * np.sqrt(sv), "k:", lw=0.8)
        ax.axhline(r.sde.c[0], color="C3", lw=0.7, label=f"rule's fixed point {r.sde.c[0]:.3f}")
        title = f"{label}: round law vs simulator, max |z| = {check['max_z']:.2f}"
        if r.momentum is not None:
            steps = [cfg["weak_h"] / 2**j for j in range(cfg["levels"])]
            wk = rule_weak_error_vs_step(pb, agg, eta, TAU, t_end=cfg["weak_t"], time_steps=steps, w0=w0,
                                         server_rate=1.0)
            local = local_loglog_slopes(wk.steps, wk.errors)
            momentum = {"label": label, "steps": wk.steps.tolist(), "errors": wk.errors.tolist(), "slope": wk.slope,
                        "local_slopes": local.tolist(), "step_factor": r.effective_server_lr / s}
            title += (f"\nexact weak-error slope {wk.slope:.2f}, local {local[0]:.2f} (h = {steps[0]:g}) → "
                      f"{local[-1]:.2f}: asymptotic")
        rows += [[label, float(x), float(a), float(b), float(np.sqrt(c)), float(np.sqrt(d))]
                 for x, a, b, c, d in zip(t, cm, sm, cv, sv, strict=True)]
        ax.set_title(title, fontsize=7)
        ax.set_xlabel("t = n·s")
        ax.set_ylabel("w₁")
        ax.legend(fontsize=5)
    adam = _adam_panel(axes[5], pb, cfg, ctx)
    fig.suptitle(f"Each rule against its own SDE ('{pb.name}', τ = {TAU.tolist()}, η = {eta:g})", fontsize=10)
    fig.tight_layout()
    opt = pb.optimum
    caption = (
        f"Each aggregator's chain (exact moments, and the rule's own code simulated with R = {R} replicates; FedAdam: "
        f"{adam['replicates']} simulated runs) against its own SDE on three quadratic clients with local steps "
        f"τ = {TAU.tolist()}, η = {eta:g}, server step s = {s:g} (clock t = n·s; FedAdam t = n·s²). A linear rule's "
        "exact chain is the Euler–Maruyama scheme of its SDE's moment equations, so its exact weak-error slope is 1 by "
        "construction and is not shown as evidence; instead one round of each rule's code from w₀ is checked against "
        f"the exact law of its step (R = {R}, largest |z| of the mean and covariance): "
        + ", ".join(f"{k} {v:.2f}" for k, v in zs.items())
        + f". The SDEs are centred at each rule's own fixed point: FedAvg ({fixed['FedAvg'][0]:.4f}, "
        f"{fixed['FedAvg'][1]:.4f}), FedNova ({fixed['FedNova'][0]:.4f}, {fixed['FedNova'][1]:.4f}), x* = "
        f"({opt[0]:.4f}, {opt[1]:.4f}) — FedNova's objective inconsistency (seed 003) is the SDE's stationary mean. "
        f"{momentum['label']}'s first-order SDE has step s/(1 − β) (×{momentum['step_factor']:.3g}); its exact weak "
        f"error (φ = ‖w − w*‖², t = {cfg['weak_t']:g}, noise per unit time fixed) has slope {momentum['slope']:.3f} "
        f"over h = {momentum['steps'][0]:g} … {momentum['steps'][-1]:g}, asymptotic: local slopes "
        + ", ".join(f"{v:.2f}" for v in momentum["local_slopes"])
        + f" from the coarsest step (no sampling error: the interval is the range of the local slopes). FedAdam "
        f"(Malladi et al. 2022 with the round displacement): {adam['caption']}."
    )
    numbers = {"round_law_max_z": zs, "fixed_points": fixed, "optimum": opt.tolist(), "fedavgm": momentum,
               "fedadam": adam["numbers"]}
    return FigureOutput(fig, caption, {"rule_sdes": (["rule", "t", "chain_mean_w1", "sde_mean_w1", "chain_sd_w1",
                                                     "sde_sd_w1"], rows)}, numbers)


def _refined_paths(run, value, substeps: int, cap: int, bar) -> tuple:
    """Double the SDE's Euler substeps until ``E value(run)`` moves by less than ``bar(se)`` (the error bar it is
    compared with; ``se`` that of the change) or ``cap`` is reached: ``(the finest run, its substeps, the record)``."""
    coarse = run(substeps)
    record = []
    while True:
        fine = run(2 * substeps)
        a, b = value(coarse), value(fine)
        diff = float(b.mean() - a.mean())
        se = float(np.hypot(a.std(ddof=1), b.std(ddof=1)) / np.sqrt(a.size))
        record.append({"substeps": [substeps, 2 * substeps], "change": diff, "change_se": se, "bar": bar(se)})
        substeps *= 2
        if abs(diff) <= bar(se) or 2 * substeps > cap:
            return fine, substeps, record
        coarse = fine


def _adam_panel(ax, pb, cfg, ctx: RunContext) -> dict:
    """FedAdam: simulated chain vs refined SDE paths (mean ± 2 sd of w₁) and the SVAG weak error with intervals."""
    from fedsde.aggregators import FedAdam
    from fedsde.compare.rule_svag_weak import slope_summary
    from fedsde.sde.adaptive import adaptive_sde_paths
    from fedsde.sim import simulate
    from fedsde.validity.adaptive import adaptive_weak_error

    agg, s, n, R = FedAdam(), cfg["adam_server_lr"], cfg["adam_rounds"], cfg["adam_replicates"]
    eta, cap = cfg["eta"], cfg["adam_max_substeps"]
    start = pb.optimum + 0.5
    loss = lambda w: np.asarray(pb.loss(w))  # noqa: E731
    chain = simulate(pb, eta=eta, local_steps=TAU, rounds=n, replicates=R, seed=ctx.seed, server_lr=s, w0=start,
                     aggregator=agg).weights
    chain_f = loss(chain[-1])

    def sde_run(sub: int) -> np.ndarray:
        return adaptive_sde_paths(pb, agg, eta=eta, local_steps=TAU, rounds=n, replicates=R, seed=ctx.seed + sub,
                                  server_lr=s, w0=start, substeps=sub)["weights"]

    def gap_bar(se: float) -> float:  # the error bar of the chain − SDE gap at T
        return 1.96 * float(np.hypot(chain_f.std(ddof=1) / np.sqrt(R), se / np.sqrt(2)))

    sde, substeps, refinement = _refined_paths(sde_run, lambda w: loss(w[-1]), cfg["adam_substeps"], cap, gap_bar)
    sde_f = loss(sde[-1])
    gap = float(chain_f.mean() - sde_f.mean())
    t = np.arange(n + 1) * s * s
    for v, col, ls, lab in ((chain[..., 0], "C0", "-", "chain"), (sde[..., 0], "k", "--",
                                                                  f"SDE ({substeps} substeps/round)")):
        m, sd = v.mean(1), v.std(1, ddof=1)
        ax.plot(t, m, ls, color=col, lw=1.2, label=f"{lab} mean ± 2 sd")
        ax.plot(t, m + 2 * sd, ls, color=col, lw=0.6)
        ax.plot(t, m - 2 * sd, ls, color=col, lw=0.6)
    # the weak error's SDE reference (Euler substeps per SVAG step of the finest chain), refined the same way against
    # its own error bar, which is below every weak error's
    ks = list(cfg["adam_ks"])
    kk = max(ks) ** 2

    def ref_run(sub: int) -> np.ndarray:
        return adaptive_sde_paths(pb, agg, eta=eta, local_steps=TAU, rounds=n, replicates=R, seed=ctx.seed + 7 * sub,
                                  server_lr=s, w0=start, substeps=sub * kk, record=[n])["weights"]

    _, sub_w, ref_refinement = _refined_paths(ref_run, lambda w: loss(w[-1]), 1, cfg["adam_ref_max_substeps"],
                                              lambda se: 1.96 * se)
    wk = adaptive_weak_error(pb, agg, eta=eta, local_steps=TAU, rounds=n, replicates=R, seed=ctx.seed + 2,
                             server_lr=s, w0=start, ks=ks, substeps=sub_w, phi="loss")
    ells = [k * k for k in wk.config["ks"]]
    resolved = all(wk.config["resolved"])
    lo, hi = wk.config["slope_interval"]
    cells = ", ".join(f"ℓ = {e}: {x:.3g} ± {1.96 * se:.2g}" for e, x, se in zip(ells, wk.errors, wk.stderr,
                                                                                strict=True))
    quality = "" if resolved else "; indicative only: not every error is resolved from zero at these replicates"
    ax.set_title(f"FedAdam (SDE of Malladi et al.): SVAG slope {wk.slope:.2f} [{lo:.2f}, {hi:.2f}]"
                 + ("" if resolved else " (indicative)") + f"\nchain − SDE at T: {gap:+.3g}", fontsize=7)
    ax.set_xlabel("t = n·s²")
    ax.set_ylabel("w₁")
    ax.legend(fontsize=5)
    changes = ", ".join(f"{r['change']:+.2g}" for r in refinement)
    caption = (f"SVAG weak error of E F(w_T) (R = {R} per chain, SDE reference with {sub_w * kk} Euler "
               f"steps per round) {cells}; in s²/ℓ {slope_summary(wk)}{quality}. Chain − SDE gap of E F at T "
               f"{gap:+.3g}, the SDE paths with {substeps} Euler substeps per round (doubled until the change was "
               f"within the gap's error bar: {changes})")
    return {"replicates": R, "caption": caption,
            "numbers": {"ells": ells, "errors": wk.errors.tolist(), "stderr": wk.stderr.tolist(), "slope": wk.slope,
                        "slope_interval": [lo, hi], "resolved": wk.config["resolved"], "indicative": not resolved,
                        "gap": gap, "sde_substeps": substeps, "refinement": refinement,
                        "weak_error_substeps": sub_w * kk, "weak_error_refinement": ref_refinement}}
