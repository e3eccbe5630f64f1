"""``fedsde compare`` on a data problem: discrete FedAvg against the general SDE (2), by sampling; on a
least-squares regression file, exactly (:func:`fedsde.compare.least_squares_sde_study`); with ``--aggregator``, the
rule against its own SDE by its SVAG chains (:func:`fedsde.validity.rule_general.rule_general_study`)."""

from __future__ import annotations

import argparse

from fedsde._cli.common import emit, flag, show_progress


def _ints(option: str, text: str, *, minimum: int) -> list[int]:
    from fedsde.errors import FedsdeInputError

    try:
        vals = [int(x) for x in str(text).replace(" ", "").split(",") if x]
    except ValueError:
        raise FedsdeInputError(f"{option}={text!r}: must be comma-separated integers >= {minimum}") from None
    if not vals or min(vals) < minimum:
        raise FedsdeInputError(f"{option}={text!r}: must be comma-separated integers >= {minimum}")
    return vals


def run_data(args: argparse.Namespace, problem, local_steps, w0) -> int:
    """FedAvg vs SDE (2) on ``problem`` (see :func:`fedsde.validity.general.general_sde_study`)."""
    from fedsde._cli.common import options_named
    from fedsde._cli.validity import _names
    from fedsde.errors import FedsdeInputError
    from fedsde.validity.general import general_sde_study

    if args.replicates is None or args.replicates < 2:
        raise FedsdeInputError(f"{flag(args, 'replicates')}={args.replicates}: a data problem is compared by "
                               "sampling; give --replicates R (old name --paths; >= 2 paths per scheme)")
    if args.variant != "corrected":
        raise FedsdeInputError(f"--variant={args.variant}: the linear SDE variants need quadratic clients; a data "
                               "problem is compared with the general SDE (2) (leave --variant out)")
    ells = _ints("--ells", "1,2,4,8" if args.ells is None else args.ells, minimum=1)
    mc = "1" if args.mc_substeps is None else args.mc_substeps
    subs = [k for k in _ints("--mc-substeps", mc, minimum=0) if k > 0]
    if args.inner_samples is None:
        args.inner_samples = 8
    if args.inner_samples < 1:
        raise FedsdeInputError(f"--inner-samples={args.inner_samples}: must be an integer >= 1")
    every = args.record_every if args.record_every is not None else max(1, args.rounds // 20)
    if every < 1:
        raise FedsdeInputError(f"--record-every={every}: must be an integer >= 1")
    metrics = _names("--metrics", args.metrics)
    with options_named(args, "metrics"):  # a name the problem does not define: the error names --metrics
        st = general_sde_study(problem, eta=args.eta, local_steps=local_steps, rounds=args.rounds,
                               replicates=args.replicates, seed=args.seed, server_lr=args.server_lr, h=args.h,
                               ells=ells, mc_substeps=subs, inner_samples=args.inner_samples, record_every=every,
                               w0=w0, device=args.device, metrics=metrics, progress=show_progress(args))
    result = {"kind": "data", "sde": "general (eq. (2))", **st.to_dict()}
    return emit(args, result, _data_text(args, problem, st))


def _data_text(args: argparse.Namespace, problem, st) -> str:
    """The readable view of a :class:`fedsde.validity.general.GeneralSDEStudy`."""
    from fedsde.validity.general import Z95
    from fedsde.validity.text import bounded_value

    T = st.times[-1]
    shown = {m: bounded_value(m, v["mean"]) for m, v in st.reference.items()}  # an accuracy beyond [0, 1]: clipped
    lines = [f"problem: Q={problem.Q}, d={problem.d}  eta={args.eta}  server_lr={args.server_lr}  "
             f"h={st.config['h']}  rounds={args.rounds} (t = {T:.6g})  replicates={args.replicates} per scheme",
             "SDE reference (Richardson from the two finest SVAG chains): "
             + ", ".join(f"{m} {shown[m][0]:.5g}{'*' if shown[m][1] else ''} ± {Z95 * v['se']:.2g}"
                         for m, v in st.reference.items()),
             *[f"  * {note}" for _, note in shown.values() if note],
             f"{'scheme':10s}{'step':>10s}{'cost×':>8s}  " + "  ".join(f"{m} − SDE (95 % CI)".ljust(30)
                                                                       for m in st.reference)]
    for r in st.rows:
        name = "FedAvg" if (r.scheme == "svag" and r.param == 1) else (
            f"svag ℓ={r.param}" if r.scheme == "svag" else f"mc k={r.param}")
        cells = "  ".join(f"{r.error[m]:+.4g} ± {Z95 * r.error_se[m]:.2g}".ljust(30) for m in st.reference)
        lines.append(f"{name:10s}{r.step:10.4g}{r.cost_ratio:8.1f}  {cells}")
    lines.append("slopes of |error| vs step (95 % intervals): " + "; ".join(
        f"{s}: " + ", ".join(f"{m} {st.slope_fits[s][m].text('+.2f')}" for m in d) for s, d in st.slopes.items()))
    return "\n".join(lines)


def run_rule_data(args: argparse.Namespace, problem, agg, local_steps, w0, sampling) -> int:
    """``--aggregator`` on a data problem: the rule's SVAG chains against its SDE (:func:`fedsde.validity.
    rule_general.rule_general_study`); the options of FedAvg's samplers are refused, not ignored."""
    import numpy as np

    from fedsde.errors import FedsdeInputError
    from fedsde.params import ClientSampling, Precision, Recording, Replication, Schedule
    from fedsde.problems.metrics import metric_names
    from fedsde.sde.rules import NoSDEError
    from fedsde.validity.general import Z95
    from fedsde.validity.rule_general import rule_general_study

    if agg.sde_kind is None:
        raise NoSDEError(agg.sde_refusal)
    agg.check_problem(problem, args.problem)
    for option, value, why in (
            ("--variant", None if args.variant == "corrected" else args.variant, "the SDE is the rule's own"),
            ("--mc-substeps", args.mc_substeps, "the Monte-Carlo-coefficient Euler scheme samples FedAvg's SDE only; a "
             "rule's SDE is sampled by its SVAG chains (--ells)"),
            ("--inner-samples", args.inner_samples, "the Monte-Carlo-coefficient Euler scheme samples FedAvg's SDE "
             "only"),
            ("--noise-scaling", args.noise_scaling, "a data problem's minibatch noise is the data's"),
            (flag(args, "time_steps"), args.time_steps, "the steps are h/ℓ of the SVAG chains (--ells)"),
            ("--substeps", None if args.substeps == 1 else args.substeps, "the SVAG chains have no substeps")):
        if value is not None:
            raise FedsdeInputError(f"{option}={value}: not used with --aggregator on a data problem ({why}); leave "
                                   f"{option} out")
    if args.replicates is None or args.replicates < 2:
        raise FedsdeInputError(f"{flag(args, 'replicates')}={args.replicates}: a data problem is compared by "
                               "sampling; give --replicates R (>= 2 chains per ℓ)")
    every = args.record_every if args.record_every is not None else max(1, args.rounds // 20)
    if every < 1:
        raise FedsdeInputError(f"--record-every={every}: must be an integer >= 1")
    ells = None if args.ells is None else _ints("--ells", args.ells, minimum=1)
    names = [m for m in ("train_loss", "test_accuracy") if m in metric_names(problem)]
    st = rule_general_study(problem, agg, Schedule(args.eta, local_steps, args.rounds, args.server_lr, args.h),
                            Replication(args.replicates, args.seed), Precision(device=args.device), ells=ells,
                            sampling=ClientSampling(*sampling), recording=Recording(metrics=names, record_every=every),
                            w0=w0)
    result = {"kind": "data", "aggregator": agg.describe(), "sde": f"{agg.sde_kind} (the rule's own, sampled by its "
              "SVAG chains)", **st.to_dict()}
    T = st.times[-1]
    lines = [f"aggregator={agg.name}  sde={agg.sde_kind}  problem: Q={problem.Q}, d={problem.d}  eta={args.eta}  "
             f"server_lr={args.server_lr}  h={st.config['h']}  rounds={args.rounds} (t = {T:.6g})  "
             f"replicates={args.replicates} per chain"
             + ("" if sampling[0] is None else f"  participation={sampling[0]} ({sampling[1]})"),
             "SDE reference (Richardson from the two finest SVAG chains): "
             + ", ".join(f"{m} {v['mean']:.5g} ± {Z95 * v['se']:.2g}" for m, v in st.reference.items()),
             f"{'chain':12s}{'step':>10s}{'cost×':>8s}  " + "  ".join(f"{m} − SDE (95 % CI)".ljust(30)
                                                                     for m in st.reference)]
    for r in st.rows:
        name = agg.name if r.param == 1 else f"svag ℓ={r.param}"
        cells = "  ".join(f"{r.error[m]:+.4g} ± {Z95 * r.error_se[m]:.2g}".ljust(30) for m in st.reference)
        lines.append(f"{name:12s}{r.step:10.4g}{r.cost_ratio:8.1f}  {cells}")
    fitted = [f"{m} {v:+.2f} " + ("[" + ", ".join(f"{x:.2f}" for x in st.slope_intervals[m]) + "]"
                                  if st.slope_intervals.get(m) else "")
              for m, v in st.slopes["svag"].items() if np.isfinite(v)]
    lines.append("slopes of |error| vs step, 95 % interval: " + "; ".join(fitted) if fitted else
                 "slopes of |error| vs step: none (fewer than two errors independent of the reference are resolved "
                 "beyond 2 s.e.)")
    return emit(args, result, "\n".join(lines))


def run_regression(args: argparse.Namespace, problem, local_steps, w0) -> int:
    """FedAvg vs its SDE on least-squares clients, from exact moments (no sampling)."""
    from fedsde.compare import least_squares_sde_study
    from fedsde.compare.study import refinement_grid
    from fedsde.errors import FedsdeInputError

    for option, given in ((flag(args, "replicates"), args.replicates is not None),
                          ("--variant", args.variant != "corrected"),
                          ("--noise-scaling", args.noise_scaling not in (None, "fixed"))):
        if given:
            raise FedsdeInputError(
                f"{option}: not used with a least-squares regression file, which is compared exactly with its own SDE "
                "(eq. (2) with the exact round moments; no sampling, the data's minibatch noise as it is); leave "
                f"{option} out")
    if args.record_every is not None and args.record_every < 1:
        raise FedsdeInputError(f"--record-every={args.record_every}: must be an integer >= 1")
    h = args.eta if args.h is None else args.h
    h_grid = None
    if args.time_steps:
        from fedsde._cli.common import parse_vector

        option = flag(args, "time_steps")
        h_grid = refinement_grid(parse_vector(option, args.time_steps), args.rounds * h,
                                 name=f"{option}={args.time_steps!r}")
    st = least_squares_sde_study(problem, eta=args.eta, local_steps=local_steps, rounds=args.rounds,
                                 server_lr=args.server_lr, h=args.h, w0=w0, record_every=args.record_every,
                                 h_grid=h_grid)
    t_end, cmp = st.t_end, st.distances
    lines = [f"problem: {problem.name} (least squares), Q={problem.Q}, d={problem.d}  eta={args.eta}  "
             f"server_lr={args.server_lr}  h={st.h}  rounds={args.rounds} (t = {t_end:.6g}); exact moments, no "
             "sampling",
             f"at t={t_end:.6g}: |Δmean| = {cmp.mean_error[-1]:.6g}   rel. cov error = {cmp.cov_rel_error[-1]:.6g}"
             f"   W2 of the Gaussian fits (a lower bound) = {cmp.w2[-1]:.6g}",
             f"refinement steps h = {', '.join(f'{x:.6g}' for x in st.h_grid)} (server step s = h·η₀, η₀ = "
             f"{args.server_lr / st.h:.6g})"]
    for phi, v in st.slope.items():
        lines.append(f"weak error {phi:5s} at t={t_end:.6g}: {st.weak_error[phi][-1]:.6g}   " + (
            "exact at grid times" if v["exact_at_grid"] else f"slope vs h: {v['slope']:.3f} "
            f"[{v['slope_interval'][0]:.3f}, {v['slope_interval'][1]:.3f}]  (errors "
            f"{', '.join(f'{e:.3g}' for e in v['errors'])})"))
    sta = st.stationary
    if sta["chain"] is not None and sta["sde"] is not None:
        lines.append(f"stationary: rel. cov error (SDE vs chain) = {sta['cov_rel_error']:.4g}, Gaussian W2 = "
                     f"{sta['w2']:.4g}")
    lines += [f"note: {n}" for n in sta["notes"]]
    return emit(args, st.to_dict(), "\n".join(lines))
