"""``fedsde compare``: discrete chain vs SDE — moments over time, distances between laws, weak error and its order."""

from __future__ import annotations

import argparse

import numpy as np

from fedsde._cli.common import (
    add_json_flag,
    add_problem_args,
    emit,
    known_divergence,
    local_steps_from_args,
    parse_vector,
    warn,
)
from fedsde.problems import QuadraticProblem, load_problem


def register(sub: argparse._SubParsersAction) -> None:
    from fedsde.compare import NOISE_SCALINGS
    from fedsde.sde import VARIANTS

    p = sub.add_parser(
        "compare",
        help="compare the discrete chain with an SDE (moments, distances, weak error vs step)",
        description="Exact comparison (no sampling) of FedAvg on quadratic clients with a linear SDE variant on "
        "the clock t = n·h: means and covariances at round times, Wasserstein-2 distance between the laws, weak "
        "error |E φ(w_n) − E φ(w(n·h))| for φ = ‖w − w*‖² and φ = F(w), and the weak error against the step h at "
        "fixed t and η₀ = s/h with its fitted log–log slope. With --paths, also Monte-Carlo: SDE paths vs the "
        "chain's law (per-coordinate KS, weak errors with confidence intervals). For a data problem "
        "(kind = \"classification\"): discrete FedAvg against the general SDE (2) sampled by the SVAG chain "
        "(--ells) and by Monte-Carlo-coefficient Euler (--mc-substeps), with --paths paths each: moments of the "
        "train loss over time, weak error of E F(w_T) and of the test accuracy vs step with 95 % intervals, cost.",
    )
    add_problem_args(p)
    p.add_argument("--variant", choices=VARIANTS, default="corrected", help="SDE variant (default corrected)")
    p.add_argument("--h", type=float, default=None, metavar="h", help="time step of one round (default η)")
    p.add_argument("--rounds", type=int, required=True, metavar="n", help="compare up to round n (t = n·h)")
    p.add_argument("--w0", default=None, metavar="w1,w2,…",
                   help="start point (default: zero for quadratic clients, the problem's initial weights for a data "
                   "problem)")
    p.add_argument("--record-every", type=int, default=None, metavar="m",
                   help="report the moments every m rounds (default: about 20 records)")
    p.add_argument("--steps", default=None, metavar="h1,h2,…",
                   help="time steps of the weak-error refinement at fixed t = n·h: at least two, each > 0, snapped "
                   "to t/round(t/h_j) so that t is a whole number of rounds, distinct after snapping "
                   "(default h, h/2, …, h/16)")
    p.add_argument("--noise-scaling", choices=NOISE_SCALINGS, default="diffusive",
                   help="how the problem changes as the refinement shrinks h. diffusive (default): the gradient-noise "
                   "covariances are scaled by h_max/h, so the noise injected per unit time is fixed and the chain "
                   "is Euler–Maruyama of one SDE; the right SDE's weak error is O(h) and a wrong diffusion (e.g. "
                   "--variant paper) leaves an error that does not vanish. fixed: the problem as given, a "
                   "small-noise limit in which every SDE with the right drift, even with a wrong diffusion, shows "
                   "slope about 1")
    p.add_argument("--paths", type=int, default=None, metavar="B", help="also simulate B SDE paths")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the Monte-Carlo part")
    p.add_argument("--substeps", type=int, default=1, metavar="k", help="Euler steps per round (Monte-Carlo)")
    p.add_argument("--device", default="cpu", help="torch device for the Monte-Carlo part")
    p.add_argument("--ells", default="1,2,4,8", metavar="ℓ1,ℓ2,…",
                   help="data problems: SVAG parameters of the general SDE (1 = FedAvg; the two largest give the "
                   "reference; default 1,2,4,8)")
    p.add_argument("--mc-substeps", default="1", metavar="k1,k2,…",
                   help="data problems: substeps of the Monte-Carlo-coefficient Euler runs ('0': none; default 1)")
    p.add_argument("--inner-samples", type=int, default=8, metavar="S",
                   help="data problems: Monte-Carlo rollouts per path and step of the Euler runs (default 8)")
    add_json_flag(p)
    p.set_defaults(func=run)


#: most rounds one refinement step may need (t/h_j), to keep a mistyped tiny step from running for hours
MAX_REFINEMENT_ROUNDS = 1_000_000


def _refinement_steps(text: str | None, h: float, t_end: float) -> np.ndarray:
    """The ``--steps`` of the refinement, largest first, snapped so that ``t_end`` is a whole number of rounds."""
    from fedsde.errors import FedsdeInputError

    if not text:
        return h / 2.0 ** np.arange(5)
    raw = parse_vector("--steps", text)
    bad = np.flatnonzero(raw <= 0)
    if bad.size:
        raise FedsdeInputError(f"--steps={text!r}: every step must be finite and > 0 (entry {bad[0] + 1} is "
                               f"{raw[bad[0]]:g})")
    if raw.size < 2:
        raise FedsdeInputError(f"--steps={text!r}: need at least two steps for a slope")
    rounds = [max(1, round(t_end / hj)) for hj in raw]
    big = int(np.argmax(rounds))
    if rounds[big] > MAX_REFINEMENT_ROUNDS:
        raise FedsdeInputError(f"--steps={text!r}: step {raw[big]:g} needs {rounds[big]} rounds to reach "
                               f"t = {t_end:.6g}; at most {MAX_REFINEMENT_ROUNDS} rounds per step")
    seen: dict[int, float] = {}
    for hj, k in zip(raw, rounds, strict=True):
        if k in seen and seen[k] == hj:
            raise FedsdeInputError(f"--steps={text!r}: step {hj:g} is given twice; the steps must be distinct")
        if k in seen:
            raise FedsdeInputError(
                f"--steps={text!r}: steps {seen[k]:g} and {hj:g} both snap to h = {t_end / k:.6g} ({k} rounds to "
                f"t = {t_end:.6g}, which must be a whole number of rounds); give distinct steps"
            )
        seen[k] = float(hj)
    return np.array([t_end / k for k in sorted(rounds)])


def run(args: argparse.Namespace) -> int:
    from fedsde.compare import (
        PHIS,
        compare_moments,
        expected_phi,
        gaussian_w2,
        ks_per_coordinate,
        local_loglog_slopes,
        phi_function,
        sde_moments,
        weak_error_exact,
        weak_error_vs_step,
    )
    from fedsde.errors import FedsdeInputError, NoStationaryLawError
    from fedsde.exact import stationary_law, transient_moments
    from fedsde.sde import quadratic_sde_coefficients

    problem = load_problem(args.problem)
    steps = local_steps_from_args(args, problem.Q)
    w0 = parse_vector("--w0", args.w0, problem.d)
    n = args.rounds
    if n is None or n < 1:
        raise FedsdeInputError(f"--rounds={n}: must be an integer >= 1")
    if not isinstance(problem, QuadraticProblem):  # data problem: FedAvg vs the general SDE (2), by sampling
        from fedsde._cli._compare_data import run_data

        return run_data(args, problem, steps, w0)
    h = args.eta if args.h is None else args.h
    lin = quadratic_sde_coefficients(problem, args.eta, steps, args.server_lr, h, args.variant)
    h = lin.h
    t_end = n * h
    hs = _refinement_steps(args.steps, h, t_end)
    if args.paths is not None and args.paths < 2:
        raise FedsdeInputError(f"--paths={args.paths}: must be an integer >= 2 (a covariance needs two paths)")
    every = args.record_every if args.record_every is not None else max(1, n // 20)
    if every < 1:
        raise FedsdeInputError(f"--record-every={every}: must be an integer >= 1")
    record = sorted(set(range(0, n + 1, every)) | {n})
    chain = transient_moments(problem, args.eta, steps, n, args.server_lr, w0=w0, record=record)
    sde = sde_moments(problem, args.eta, steps, n, args.server_lr, h, args.variant, w0=w0, record=record)
    cmp = compare_moments(chain, sde, h)
    weak = {phi: weak_error_exact(problem, chain, sde, phi)[1] for phi in PHIS}
    slopes = {}
    for phi in PHIS:
        curve = weak_error_vs_step(problem, args.eta, steps, t_end=t_end, steps=hs, server_rate=args.server_lr / h,
                                   variant=args.variant, phi=phi, w0=w0, noise_scaling=args.noise_scaling)
        exact = curve.exact_at_grid  # errors at rounding level: no order to fit
        slopes[phi] = {"steps": curve.steps, "rounds": curve.rounds, "errors": curve.errors,
                       "slope": None if exact else curve.slope, "exact_at_grid": exact,
                       "local_slopes": None if exact else local_loglog_slopes(curve.steps, curve.errors),
                       "chain": curve.chain, "sde": curve.sde}
    unsettled = [f"{phi} local {np.round(v['local_slopes'], 2).tolist()} vs fitted {v['slope']:.2f}"
                 for phi, v in slopes.items()
                 if not v["exact_at_grid"] and np.any(np.abs(v["local_slopes"] - v["slope"]) > 0.5)]
    if unsettled:
        warn("the weak error is not in its asymptotic regime over --steps (local log–log "
             f"slopes differ from the fit by more than 0.5: {'; '.join(unsettled)}); the fitted slope is unreliable")
    for why in known_divergence(problem, args.eta, steps, args.server_lr):
        warn(f"the chain diverges with these settings: {why}")
    stationary: dict = {"sde": None, "chain": None, "w2": None}
    st_sde = lin.stationary()
    if st_sde is not None:
        stationary["sde"] = {"mean": st_sde.mean, "cov": st_sde.cov}
    try:
        st_chain = stationary_law(problem, args.eta, steps, args.server_lr)
        stationary["chain"] = {"mean": st_chain.mean, "cov": st_chain.cov}
        if st_sde is not None:
            stationary["w2"] = gaussian_w2(st_chain.mean, st_chain.cov, st_sde.mean, st_sde.cov)
    except NoStationaryLawError as exc:
        stationary["note"] = str(exc)
    result: dict = {
        "moments": {
            "rounds": chain.rounds, "times": chain.rounds * h,
            "chain": {"mean": chain.mean, "cov": chain.cov},
            "sde": {"mean": sde.mean, "cov": sde.cov},
        },
        "distances": {"w2": cmp.w2, "mean_error": cmp.mean_error, "cov_error": cmp.cov_error,
                      "cov_rel_error": cmp.cov_rel_error},
        "weak_error": {phi: {"times": chain.rounds * h, "error": weak[phi]} for phi in PHIS},
        "slope": slopes,
        "stationary": stationary,
        "config": {"variant": args.variant, "eta": args.eta, "server_lr": args.server_lr, "h": h, "rounds": n,
                   "local_steps": np.atleast_1d(steps).tolist(), "noise_scaling": args.noise_scaling},
    }
    lines = [
        f"problem: Q={problem.Q}, d={problem.d}  variant={args.variant}  eta={args.eta}  "
        f"server_lr={args.server_lr}  h={h}  rounds={n} (t = {t_end:.6g})",
        f"at t={t_end:.6g}: W2(chain, SDE) = {cmp.w2[-1]:.6g}   |Δmean| = {cmp.mean_error[-1]:.6g}   "
        f"rel. cov error = {cmp.cov_rel_error[-1]:.6g}",
    ]
    lines.append(f"refinement steps h = {', '.join(f'{x:.6g}' for x in hs)} (rounds "
                 f"{', '.join(str(k) for k in slopes[PHIS[0]]['rounds'])}; t = {t_end:.6g})")
    lines += [f"weak error {phi:5s} at t={t_end:.6g}: {weak[phi][-1]:.6g}   " + (
        f"exact at grid times (errors <= {np.max(slopes[phi]['errors']):.1e}, rounding level)"
        if slopes[phi]["exact_at_grid"] else f"slope vs h ({args.noise_scaling} noise): {slopes[phi]['slope']:.3f}")
        for phi in PHIS]
    if stationary["w2"] is not None:
        lines.append(f"stationary W2(chain, SDE) = {stationary['w2']:.6g}")
    if args.paths is not None:
        from fedsde.sde.integrate import simulate_sde

        paths = simulate_sde(problem, eta=args.eta, local_steps=steps, rounds=n, paths=args.paths, seed=args.seed,
                             variant=args.variant, server_lr=args.server_lr, h=h, substeps=args.substeps, w0=w0,
                             device=args.device, record=[n], progress=not args.json)
        final = paths.final
        chain_law = (chain.mean[-1], chain.cov[-1])
        ks = ks_per_coordinate(final, chain_law)
        mc: dict = {"paths": paths.replicates, "seed": args.seed, "substeps": args.substeps,
                    "ks_vs_chain_law": {"statistic": ks.statistic, "pvalue": ks.pvalue},
                    "mean": final.mean(0), "cov": np.cov(final, rowvar=False).reshape(problem.d, problem.d)}
        mc["w2_gaussian_fit_vs_chain"] = gaussian_w2(mc["mean"], mc["cov"], *chain_law)
        mc["weak_error"] = {}
        for phi in PHIS:
            vals = phi_function(problem, phi)(final)
            exact_chain = float(expected_phi(problem, chain.mean[-1], chain.cov[-1], phi))
            se = float(vals.std(ddof=1) / np.sqrt(vals.size))
            diff = exact_chain - float(vals.mean())
            mc["weak_error"][phi] = {"value": diff, "stderr": se, "ci95": [diff - 1.96 * se, diff + 1.96 * se]}
        result["monte_carlo"] = mc
        lines.append(f"Monte-Carlo ({paths.replicates} SDE paths): KS vs chain law {np.round(ks.statistic, 4)}, "
                     f"W2 {mc['w2_gaussian_fit_vs_chain']:.4g}")
        lines += [f"  E φ difference ({phi}): {v['value']:.4g} ± {1.96 * v['stderr']:.2g}"
                  for phi, v in mc["weak_error"].items()]
    return emit(args, result, "\n".join(lines))
