"""``fedsde compare``: discrete chain vs SDE — moments over time, distances between laws, weak error and its order."""

from __future__ import annotations

import argparse

import numpy as np

from fedsde._cli import one_line_help
from fedsde._cli._names import NOISE_SCALINGS, SDE_VARIANTS
from fedsde._cli.common import (
    add_json_flag,
    add_problem_args,
    add_renamed,
    add_rule_sde_args,
    check_device,
    check_start,
    emit,
    flag,
    local_steps_from_args,
    parse_vector,
    rule_from_args,
    rule_sampling_from_args,
    show_progress,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help=one_line_help("compare"),
        description="Exact comparison (no sampling) of FedAvg on quadratic clients with a linear SDE variant on "
        "the clock t = n·h: means and covariances at round times, Wasserstein-2 distance between the laws, weak "
        "error |E φ(w_n) − E φ(w(n·h))| for φ = ‖w − w*‖² and φ = F(w), and the weak error against the step h at "
        "fixed t and η₀ = s/h with its fitted log–log slope. With --replicates, also Monte-Carlo: SDE paths vs the "
        "chain's law (per-coordinate KS, weak errors with confidence intervals). For a data problem "
        "(kind = \"classification\" or \"module\", your own nn.Module): discrete FedAvg against the general SDE "
        "(2) sampled by the SVAG chain (--ells) and by Monte-Carlo-coefficient Euler (--mc-substeps), with "
        "--replicates paths each: moments of the train loss over time, weak error of E F(w_T) and of the test "
        "accuracy (the --metrics) vs step with 95 % intervals, cost. "
        "For a least-squares regression file (kind = \"regression\"): exactly, no sampling — the chain's exact "
        "moments against those of its SDE (eq. (2) with the exact round moments, diffusion quadratic in w), weak "
        "error over time and against the step at fixed t and η₀ = s/h (the data's minibatch noise as it is) with "
        "its fitted slope, and both stationary laws. With --aggregator NAME: the rule against its own SDE — exactly on "
        "quadratic clients (linear and momentum rules; adaptive rules by Monte Carlo), and on every other problem kind "
        "by the rule's SVAG chains (--ells; each chain's error against their Richardson limit with its interval, the "
        "slope with its interval, the cost).",
    )
    add_problem_args(p)
    p.add_argument("--variant", choices=SDE_VARIANTS, default="corrected", help="SDE variant (default corrected)")
    p.add_argument("--h", type=float, default=None, metavar="h", help="time step of one round (default η)")
    p.add_argument("--rounds", type=int, required=True, metavar="n", help="compare up to round n (t = n·h)")
    p.add_argument("--w0", default=None, metavar="w1,w2,…",
                   help="start point (default: zero for quadratic clients, the problem's initial weights for a data "
                   "problem)")
    p.add_argument("--record-every", type=int, default=None, metavar="m",
                   help="report the moments every m rounds (default: about 20 records)")
    add_renamed(p, "--time-steps", "--steps", default=None, metavar="h1,h2,…",
                help="time steps of the weak-error refinement at fixed t = n·h: at least two, each > 0, snapped "
                   "to t/round(t/h_j) so that t is a whole number of rounds, distinct after snapping "
                   "(default h, h/2, …, h/16)")
    p.add_argument("--noise-scaling", choices=NOISE_SCALINGS, default=None,
                   help="how the problem changes as the refinement shrinks h. diffusive (default): the gradient-noise "
                   "covariances are scaled by h_max/h, so the noise injected per unit time is fixed and the chain "
                   "is Euler–Maruyama of one SDE; the right SDE's weak error is O(h) and a wrong diffusion (e.g. "
                   "--variant paper) leaves an error that does not vanish. fixed: the problem as given, a "
                   "small-noise limit in which every SDE with the right drift, even with a wrong diffusion, shows "
                   "slope about 1 (a regression file: always fixed, its minibatch noise is the data's)")
    add_renamed(p, "--replicates", "--paths", type=int, default=None, metavar="R", help="also simulate R SDE paths")
    p.add_argument("--seed", type=int, default=0, metavar="SEED", help="seed of the Monte-Carlo part")
    p.add_argument("--substeps", type=int, default=1, metavar="k", help="Euler steps per round (Monte-Carlo)")
    p.add_argument("--device", default="cpu", help="torch device for the Monte-Carlo part")
    p.add_argument("--ells", default=None, metavar="ℓ1,ℓ2,…",
                   help="data problems: SVAG parameters of the general SDE (1 = FedAvg, or the --aggregator rule; the "
                   "two largest give the reference; default 1,2,4,8); adaptive rules: ℓ = k², squares (default "
                   "1,4,16,64; on quadratic clients 1,4,16)")
    p.add_argument("--mc-substeps", default=None, metavar="k1,k2,…",
                   help="data problems, FedAvg: substeps of the Monte-Carlo-coefficient Euler runs ('0': none; default "
                   "1)")
    p.add_argument("--inner-samples", type=int, default=None, metavar="K",
                   help="data problems, FedAvg: Monte-Carlo rollouts per path and step of the Euler runs (default 8)")
    p.add_argument("--metrics", default=None, metavar="m1,m2,…",
                   help="data problems compared by sampling (classification, module): the metrics compared, of "
                   "train_loss, grad_norm_sq, test_accuracy (with a test set), distance_from_start (default "
                   "train_loss, and test_accuracy where the problem has a test set)")
    add_rule_sde_args(p, "compare measures the chain against (quadratic clients: exact moments and the exact weak "
                      "error vs h with its slope)")
    p.add_argument("--order", type=int, choices=(1, 2), default=None,
                   help="approximation order of the SDE compared with FedAvg: 1, seed 002's first-order SDE "
                   "(--variant; the default); 2, the order-2 SDE (docs/order2.md: on quadratic clients its round-law "
                   "form, integrated by exact OU transitions; on data problems the Hessian-vector-product drift, by "
                   "coupled Monte Carlo). Given, it adds the order refinement: the weak errors of the mean, the second "
                   "moment and the covariance as η → 0 at t = rounds·η (h = η, s fixed), with fitted slopes and 95 %% "
                   "intervals (exact on quadratic and least-squares clients)")
    p.add_argument("--etas", default=None, metavar="η1,η2,…",
                   help="client steps of the order refinement, each η_max/k for an integer k (default η, η/2, …, η/32 "
                   "on quadratic clients, 1.5 decades; η, η/2, η/4, η/8 on data problems)")
    add_json_flag(p)
    p.set_defaults(func=run)


def _refinement_steps(text: str | None, args: argparse.Namespace) -> np.ndarray | None:
    """``--time-steps`` parsed and snapped so that t = n·h is a whole number of rounds (None: the study's default)."""
    if not text:
        return None
    from fedsde._validate import positive_float
    from fedsde.compare.study import refinement_grid

    h = positive_float("eta", args.eta) if args.h is None else positive_float("h", args.h)
    option = flag(args, "time_steps")
    return refinement_grid(parse_vector(option, text), args.rounds * h, name=f"{option}={text!r}")


def run(args: argparse.Namespace) -> int:
    from fedsde.compare import quadratic_sde_study
    from fedsde.errors import FedsdeInputError
    from fedsde.problems import QuadraticProblem

    check_device(args.device)
    from fedsde._cli._data_flags import problem_from_args

    problem = problem_from_args(args)
    steps = local_steps_from_args(args, problem.Q)
    w0 = parse_vector("--w0", args.w0, problem.d)
    check_start(problem, w0)
    n = args.rounds
    if n is None or n < 1:
        raise FedsdeInputError(f"--rounds={n}: must be an integer >= 1")
    if args.metrics is not None and (isinstance(problem, QuadraticProblem)
                                     or getattr(problem, "model", None) == "least-squares"):
        raise FedsdeInputError(f"--metrics={args.metrics!r}: compares the metrics of data problems compared by "
                               "sampling (classification, module); quadratic and least-squares clients are compared "
                               "exactly, by their moments (leave --metrics out)")
    agg = rule_from_args(args)
    sampling = rule_sampling_from_args(args, agg)
    if agg is not None and args.order is not None:
        raise FedsdeInputError(f"--order={args.order}: with --aggregator the SDE is the rule's own first-order SDE")
    if agg is not None and not isinstance(problem, QuadraticProblem):  # the rule against its SDE, by sampling
        from fedsde._cli._compare_data import run_rule_data

        return run_rule_data(args, problem, agg, steps, w0, sampling)
    if args.order is not None and not isinstance(problem, QuadraticProblem):
        from fedsde._cli._compare_order import run_data_order, run_exact

        if getattr(problem, "model", None) != "least-squares":  # FedAvg vs both SDEs by coupled Monte Carlo
            return run_data_order(args, problem, steps, w0)
        extra, lines = run_exact(args, problem, steps, w0)  # least squares: exact moments of the chain and SDEs
        return emit(args, extra, "\n".join(lines))
    if getattr(problem, "model", None) == "least-squares":  # exact moments of the chain and of its SDE
        from fedsde._cli._compare_data import run_regression

        return run_regression(args, problem, steps, w0)
    if not isinstance(problem, QuadraticProblem):  # data problem: FedAvg vs the general SDE (2), by sampling
        from fedsde._cli._compare_data import run_data

        return run_data(args, problem, steps, w0)
    if agg is not None and agg.sde_kind == "adaptive":
        for option, value, why in (("--h", args.h, "its clock is t = n·s²"),
                                   ("--noise-scaling", args.noise_scaling, "its weak error is in the SVAG step s²/ℓ"),
                                   (flag(args, "time_steps"), args.time_steps, "its steps are s²/ℓ (--ells)"),
                                   ("--record-every", args.record_every, "it reports the last round")):
            if value is not None:
                raise FedsdeInputError(f"{option}={value}: not used by an adaptive rule's comparison ({why}); leave "
                                       f"{option} out")
    if args.noise_scaling is None:
        args.noise_scaling = "diffusive"
    h_grid = _refinement_steps(args.time_steps, args)
    if agg is not None:
        if args.order is not None:
            raise FedsdeInputError(f"--order={args.order}: with --aggregator the SDE is the rule's own first-order SDE")
        return _rule(args, problem, agg, steps, w0, h_grid, sampling)
    variant = args.variant
    if args.order == 2:
        if args.variant != "corrected":
            raise FedsdeInputError(f"--variant={args.variant}: --order 2 compares the order-2 SDE (its round-law form, "
                                   "docs/order2.md); drop --variant")
        from fedsde.sde.order2 import DEFAULT_FORM, ORDER2_FORMS

        variant = ORDER2_FORMS[DEFAULT_FORM]
    if args.replicates is not None and args.replicates < 2:
        raise FedsdeInputError(f"{flag(args, 'replicates')}={args.replicates}: must be an integer >= 2 (a covariance "
                               "needs two paths)")
    if args.record_every is not None and args.record_every < 1:
        raise FedsdeInputError(f"--record-every={args.record_every}: must be an integer >= 1")
    from fedsde._cli._compare_order import eta_refinement, order_lines
    from fedsde.params import Integrator, Precision, Recording, Replication, Schedule

    refinement = eta_refinement(args)  # the study's values, each built (and checked) once
    every = None if args.record_every is None else Recording(record_every=args.record_every)
    st = quadratic_sde_study(problem, Schedule(args.eta, steps, n, args.server_lr, args.h),
                             None if args.replicates is None else Replication(args.replicates, args.seed),
                             Precision(device=args.device), variant=variant, w0=w0, recording=every, h_grid=h_grid,
                             noise_scaling=args.noise_scaling, integrator=Integrator(substeps=args.substeps),
                             progress=show_progress(args), eta_refinement=refinement)
    extra = [] if st.order_refinement is None else order_lines(st.order_refinement)
    return emit(args, st.to_dict(), "\n".join([_human(st, args, problem), *extra]))


def _human(st, args: argparse.Namespace, problem) -> str:
    """The readable view of a :class:`fedsde.compare.QuadraticSDEStudy`."""
    from fedsde.compare.study import Z95

    t_end, cmp, slopes, phis = st.t_end, st.distances, st.slope, list(st.weak_error)
    lines = [
        f"problem: Q={problem.Q}, d={problem.d}  variant={st.config['variant']}  eta={args.eta}  "
        f"server_lr={args.server_lr}  h={st.h}  rounds={args.rounds} (t = {t_end:.6g})",
        f"at t={t_end:.6g}: W2(chain, SDE) = {cmp.w2[-1]:.6g}   |Δmean| = {cmp.mean_error[-1]:.6g}   "
        f"rel. cov error = {cmp.cov_rel_error[-1]:.6g}",
        f"refinement steps h = {', '.join(f'{x:.6g}' for x in st.h_grid)} (rounds "
        f"{', '.join(str(k) for k in slopes[phis[0]]['rounds'])}; t = {t_end:.6g})",
    ]
    lines += [f"weak error {phi:5s} at t={t_end:.6g}: {st.weak_error[phi][-1]:.6g}   " + (
        f"exact at grid times (errors <= {np.max(slopes[phi]['errors']):.1e}, rounding level)"
        if slopes[phi]["exact_at_grid"] else f"slope vs h ({args.noise_scaling} noise): {slopes[phi]['slope']:.3f} "
        f"[{slopes[phi]['slope_interval'][0]:.3f}, {slopes[phi]['slope_interval'][1]:.3f}]")
        for phi in phis]
    if st.stationary["w2"] is not None:
        lines.append(f"stationary W2(chain, SDE) = {st.stationary['w2']:.6g}")
    mc = st.monte_carlo
    if mc is not None:
        lines.append(f"Monte-Carlo ({mc['paths']} SDE paths): KS vs chain law "
                     f"{np.round(mc['ks_vs_chain_law']['statistic'], 4)}, W2 {mc['w2_gaussian_fit_vs_chain']:.4g}")
        lines += [f"  E φ difference ({phi}): {v['value']:.4g} ± {Z95 * v['stderr']:.2g}"
                  for phi, v in mc["weak_error"].items()]
    return "\n".join(lines)


def _interval(ci) -> str:
    """``[lo, hi] (95 %)``, or a note where no interval exists (two steps: no residual degree of freedom)."""
    return "(no interval: two steps)" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}] (95 %)"


def _rule(args: argparse.Namespace, problem, agg, steps, w0, h_grid, sampling) -> int:
    """``--aggregator``: the rule's chain against its own SDE (linear and momentum rules: exact; adaptive rules:
    Monte Carlo, :mod:`fedsde._cli._compare_adaptive`)."""
    from fedsde.errors import FedsdeInputError
    from fedsde.sde.rules import NoSDEError

    if agg.sde_kind is None:
        raise NoSDEError(agg.sde_refusal)
    if args.variant != "corrected":
        raise FedsdeInputError(f"--variant={args.variant}: with --aggregator the SDE is the rule's own first-order "
                               "SDE; drop --variant")
    for option, value in (("--mc-substeps", args.mc_substeps), ("--inner-samples", args.inner_samples)):
        if value is not None:
            raise FedsdeInputError(f"{option}={value}: the Monte-Carlo-coefficient Euler scheme samples FedAvg's SDE "
                                   "on a data problem; it has no part in a rule's comparison on quadratic clients")
    if agg.sde_kind == "adaptive":
        from fedsde._cli._compare_adaptive import run_adaptive

        return run_adaptive(args, problem, agg, steps, w0, sampling)
    for option, value in (("--ells", args.ells), (flag(args, "replicates"), args.replicates),
                          ("--substeps", None if args.substeps == 1 else args.substeps)):
        if value is not None:
            raise FedsdeInputError(f"{option}={value}: a linear or momentum rule is compared exactly with its SDE on "
                                   f"quadratic clients (no sampling, no SVAG chains); leave {option} out")
    from fedsde._stats import fit_slope_interval
    from fedsde.compare.rule_weak import rule_sde_study

    agg.check_problem(problem, args.problem)
    st = rule_sde_study(problem, agg, eta=args.eta, local_steps=steps, rounds=args.rounds, server_lr=args.server_lr,
                        h=args.h, w0=w0, time_steps=h_grid, noise_scaling=args.noise_scaling,
                        participation=sampling[0], weighting=sampling[1])
    mom, weak = st["moments"], st["weak_error"]
    for v in weak.values():  # every slope with its interval (exact errors: the fit's residuals)
        fit = fit_slope_interval(v["steps"], v["errors"])
        v |= {"slope_interval": [fit.lower, fit.upper], "slope_basis": fit.basis}
    lines = [f"aggregator={agg.name}  sde={st['sde']}  eta={args.eta}  server_lr={args.server_lr}  effective "
             f"server_lr={st['effective_server_lr']:.6g}  h={st['h']}  rounds={args.rounds} (t = {st['t_end']:.6g})",
             f"at t={st['t_end']:.6g}: W2(chain, SDE) = {mom['w2'][-1]:.6g}"]
    lines += [f"weak error {phi:5s} vs h ({args.noise_scaling} noise): errors "
              f"{', '.join(f'{e:.3g}' for e in v['errors'])} at h = {', '.join(f'{x:.3g}' for x in v['steps'])}; "
              f"slope {v['slope']:.3f} [{v['slope_interval'][0]:.3f}, {v['slope_interval'][1]:.3f}]"
              for phi, v in weak.items()]
    if st["stationary"]["w2"] is not None:
        lines.append(f"stationary W2(chain, SDE) = {st['stationary']['w2']:.6g}")
    return emit(args, st, "\n".join(lines))
