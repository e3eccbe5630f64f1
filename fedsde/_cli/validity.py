"""``fedsde validity``: the SVAG test of whether seed 002's SDE tracks FedAvg on a problem."""

from __future__ import annotations

import argparse

from fedsde._cli import one_line_help
from fedsde._cli.common import (
    add_json_flag,
    add_order_flag,
    add_problem_args,
    add_rule_sde_args,
    check_start,
    emit,
    local_steps_from_args,
    parse_vector,
    refuse_known_divergence,
    rule_from_args,
    rule_sampling_from_args,
    show_progress,
)

#: values of ``--reference``
REFERENCES = ("exact", "svag")
#: values of ``--fedavg``
FEDAVG_MODES = ("exact", "sampled")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validity",
        help=one_line_help("validity"),
        description="Run FedAvg (ℓ = 1, R replicates) and judge it against seed 002's SDE (2) on the grid t = n·h: "
        "d(t) = |E φ_FedAvg(t) − E φ_SDE(t)| / (range of E φ_SDE over [0, T]) for the train loss, ‖∇F‖² and ‖w − w0‖ "
        "(test accuracy: the gap in accuracy units). The SDE's value is its exact law (--reference exact: the OU law "
        "of eq. (2) with exact round moments on quadratic clients, the exact moments of its SDE on least-squares "
        "clients) or the Richardson limit of SVAG chains lifted to "
        "the server round (--reference svag; Li, Malladi & Arora 2021): ℓ× more rounds with server step s/ℓ and "
        "displacement (1+√(2ℓ−1))/2·Â⁽¹⁾ + (1−√(2ℓ−1))/2·Â⁽²⁾ from two independent client rounds. Simultaneous "
        "Student-t intervals (Bonferroni, level --alpha) give one of three outcomes: tracks (every upper bound of d "
        "<= tolerance), does not track (some lower bound > tolerance), or inconclusive (with the replicates that "
        "would decide); a metric whose per-replicate values are heavy-tailed decides nothing (inconclusive — heavy "
        "tails). Where FedAvg's moments close too (quadratic and least-squares clients), --fedavg exact (the "
        "default there) compares the two exact paths instead: no replicates, the exact gap. Quadratic and data "
        "problem files (kind = \"classification\", \"regression\" or \"module\") are accepted.",
    )
    add_problem_args(p)
    p.add_argument("--rounds", type=int, required=True, metavar="n", help="base rounds: the test runs to t = n·h")
    p.add_argument("--reference", choices=REFERENCES, default=None,
                   help="the SDE's value: exact (its exact law; default where one exists: quadratic and least-squares "
                   "clients) or svag "
                   "(Richardson limit of the two largest ℓ; default for data problems)")
    p.add_argument("--ells", default=None, metavar="ℓ1,ℓ2,…",
                   help="SVAG parameters, distinct integers >= 1; the smallest is the chain judged (1: FedAvg). "
                   "Default 1 with --reference exact (add larger ℓ for the 1/ℓ report) and 1,2,4,8 with svag (at "
                   "least two values; three besides FedAvg let the 1/ℓ regime be checked)")
    p.add_argument("--fedavg", choices=FEDAVG_MODES, default=None,
                   help="FedAvg's side: exact (its exact moments, where they close: quadratic and least-squares "
                   "clients, against the SDE's exact law; no replicates, the exact gap, outcome tracks or does not "
                   "track) or sampled (R Monte-Carlo chains, the equivalence test with simultaneous intervals and "
                   "the heavy-tail check). Default exact where the moments close and no SVAG chain is asked for, "
                   "else sampled")
    p.add_argument("--replicates", type=int, default=None, metavar="R",
                   help="independent chains per ℓ (>= 2; needed by --fedavg sampled)")
    p.add_argument("--seed", type=int, default=None, metavar="SEED", help="base seed (needed by --fedavg sampled)")
    p.add_argument("--h", type=float, default=None, metavar="h", help="time step of one base round (default η)")
    p.add_argument("--w0", default=None, metavar="w1,w2,…",
                   help="start point (default: the problem's initial weights for a data problem — zero for linear "
                   "models, seeded for an MLP — and zero for quadratic clients)")
    p.add_argument("--tolerance", type=float, default=0.05, metavar="tol",
                   help="largest accepted d: FedAvg's distance from the SDE as a fraction of the SDE's movement "
                   "(range of its mean path over [0, T]) of the loss, ‖∇F‖² and ‖w − w0‖ (default 0.05)")
    p.add_argument("--accuracy-tolerance", type=float, default=0.01, metavar="tol",
                   help="largest accepted gap of the test accuracy, in accuracy units (default 0.01: one point)")
    p.add_argument("--alpha", type=float, default=0.05, metavar="α",
                   help="family level of the simultaneous intervals (Bonferroni over all metrics and times; "
                   "default 0.05)")
    p.add_argument("--metrics", default=None, metavar="m1,m2,…",
                   help="metrics to record (default all: train_loss, grad_norm_sq, test_accuracy for data problems, "
                   "distance_from_start; train_loss always)")
    p.add_argument("--verdict-metrics", default=None, metavar="m1,m2,…",
                   help="metrics the verdict judges (default all recorded)")
    p.add_argument("--record-every", type=int, default=1, metavar="m", help="grid spacing in base rounds (default 1)")
    p.add_argument("--independent-chains", action="store_true",
                   help="draw every chain's random numbers independently (default: common random numbers — replicate "
                   "r of every ℓ uses the same minibatches and dropout masks where their steps begin at the same "
                   "time; each chain's law is unchanged and the paired differences the verdict averages vary less)")
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda, …)")
    p.add_argument("--float32", action="store_true", help="run the chains in float32 (default float64)")
    p.add_argument("--final-cov", choices=FINAL_COV, default=None,
                   help="what is computed and kept as final_cov per ℓ: full (the d×d covariance of the final weights), "
                   "diag (the d variances) or none (null); default full up to d = 256 and diag above (a network's d×d "
                   "covariance is tens of GB); final_cov_trace (the total variance) is always there")
    add_rule_sde_args(p, "validity judges the rule against (on every problem kind: the exact law of a linear or "
                      "momentum rule's SDE on quadratic clients, else the Richardson limit of the rule's SVAG chains; "
                      "adaptive rules: the SVAG test of Malladi et al. 2022, ℓ = k² = 1,4,16,64 by default, see "
                      "--ells)")
    add_order_flag(p, "the SDE FedAvg is judged against: 1, seed 002's first-order SDE (default); 2, the order-2 "
                   "SDE (docs/order2.md; its exact law: quadratic and least-squares clients)")
    add_json_flag(p)
    p.set_defaults(func=run)


#: choices of ``--final-cov`` (:data:`fedsde._samples.FINAL_COV`)
FINAL_COV = ("full", "diag", "none")


def final_cov_view(cov, how: str):
    """``final_cov`` of a rule's test (quadratic clients, whose covariances are small) as asked by ``--final-cov``:
    the (L, d, d) covariances, their (L, d) diagonals, or ``None``."""
    import numpy as np

    if how == "full":
        return cov
    if how == "diag":
        return np.diagonal(cov, axis1=-2, axis2=-1).copy()
    return None


def _names(option: str, text: str | None) -> list[str] | None:
    if text is None:
        return None
    out = [x.strip() for x in text.split(",") if x.strip()]
    if not out:
        from fedsde.errors import FedsdeInputError

        raise FedsdeInputError(f"{option}={text!r}: must name at least one metric")
    return out


def _ells(text: str | None, reference: str) -> list[int] | None:
    from fedsde.errors import FedsdeInputError

    if text is None:
        return None
    try:
        vals = [int(x) for x in str(text).replace(" ", "").split(",") if x]
    except ValueError:
        raise FedsdeInputError(f"--ells={text!r}: must be comma-separated integers >= 1") from None
    if not vals or min(vals) < 1:
        raise FedsdeInputError(f"--ells={text!r}: must be comma-separated integers >= 1")
    if reference == "svag" and len(set(vals)) < 2:
        raise FedsdeInputError(f"--ells={text!r}: need at least two distinct values of ℓ >= 1 for a verdict against "
                               "the SVAG reference (the Richardson limit of the two largest; 1, FedAvg itself, is the "
                               "chain judged when included; e.g. 1,2,4,8)")
    return vals


def run(args: argparse.Namespace) -> int:

    from fedsde._cli._data_flags import problem_from_args
    from fedsde._cli.common import options_named
    from fedsde.errors import FedsdeInputError
    from fedsde.params import Equivalence, Schedule, SDEReference
    from fedsde.validity.core import DEFAULT_ELLS
    from fedsde.validity.exact_fedavg import resolve_fedavg
    from fedsde.validity.reference import check_order, resolve_reference

    problem = problem_from_args(args)
    steps = local_steps_from_args(args, problem.Q)
    w0 = parse_vector("--w0", args.w0, problem.d)
    check_start(problem, w0)
    if args.rounds is None or args.rounds < 1:
        raise FedsdeInputError(f"--rounds={args.rounds}: must be an integer >= 1")
    agg = rule_from_args(args)
    if agg is not None:
        if args.order != 1:
            raise FedsdeInputError(f"--order={args.order}: with --aggregator the SDE is the rule's own first-order SDE")
        if args.replicates is None or args.replicates < 2:
            raise FedsdeInputError(f"--replicates={args.replicates}: must be an integer >= 2 (a standard error needs "
                                   "two)")
        return _rule(args, problem, agg, steps, w0)
    rule_sampling_from_args(args, None)  # refuses --participation and --weighting without --aggregator
    try:
        reference = resolve_reference(problem, args.reference)
    except FedsdeInputError as err:
        raise FedsdeInputError(f"--reference={args.reference}: {str(err).split(': ', 1)[-1]}") from None
    with options_named(args, "ells", "order"):  # the SDE side, checked once, here (errors name the flags)
        sde = SDEReference(reference, _ells(args.ells, reference), args.order, not args.independent_chains)
    try:
        check_order(problem, sde.order, reference)
    except FedsdeInputError as err:
        raise FedsdeInputError(f"--order={args.order}: {str(err).split(': ', 1)[-1]}") from None
    try:
        fedavg = resolve_fedavg(problem, args.fedavg, reference, sde.ells)
    except FedsdeInputError as err:
        raise FedsdeInputError(f"--fedavg={args.fedavg}: {str(err).split(': ', 1)[-1]}") from None
    if fedavg == "sampled":
        if args.replicates is None or args.replicates < 2:
            raise FedsdeInputError(f"--replicates={args.replicates}: must be an integer >= 2 (a standard error needs "
                                   "two) with --fedavg sampled")
        if args.seed is None:
            raise FedsdeInputError("--seed: required with --fedavg sampled (the chains are random)")
    elif args.replicates is not None and args.replicates < 2:
        raise FedsdeInputError(f"--replicates={args.replicates}: must be an integer >= 2 (a standard error needs two)")
    # the run's values, checked once, here (errors name the flags), and passed whole
    with options_named(args, "tolerance", "accuracy_tolerance", "alpha"):
        equivalence = Equivalence(args.tolerance, args.accuracy_tolerance, args.alpha,
                                  _names("--verdict-metrics", args.verdict_metrics))
    schedule = Schedule(args.eta, steps, args.rounds, args.server_lr, args.h)
    # known divergence on quadratic clients, up front: local SGD (eta·λ_max >= 2) and the server recursion of the
    # mean at the server step of every chain (s for ℓ = 1, s/ℓ for the SVAG chains)
    for ell in DEFAULT_ELLS[reference] if sde.ells is None else sde.ells:
        try:
            refuse_known_divergence(problem, schedule.with_server_lr(schedule.server_lr / ell))
        except FedsdeInputError as err:
            if ell == 1:
                raise
            raise FedsdeInputError(f"SVAG chain ell={ell} (server step s/ell = {args.server_lr / ell:g}): {err}") \
                from None
    with options_named(args, "final_cov", "replicates", "record_every"):  # errors name the flags
        res = _validity(args, problem, schedule, equivalence, w0, sde, fedavg)
    return emit(args, res.to_dict(), human_report(res, problem, args))


def _validity(args: argparse.Namespace, problem, schedule, equivalence, w0, sde, fedavg):
    from fedsde.params import Precision, Recording, Replication
    from fedsde.validity import validity_test

    replication = None if args.replicates is None else Replication(args.replicates, args.seed)
    recording = Recording(metrics=_names("--metrics", args.metrics), record_every=args.record_every,
                          final_cov=args.final_cov)
    precision = Precision("float32" if args.float32 else "float64", args.device)
    return validity_test(problem, schedule, replication, precision, sde=sde, w0=w0, equivalence=equivalence,
                         recording=recording, progress=show_progress(args), fedavg=fedavg)


def human_report(res, problem, args: argparse.Namespace) -> str:
    """The text of ``fedsde validity`` without ``--json``: metrics at T per ℓ and for the SDE, the outcome, the
    gap of every judged metric with its simultaneous bounds, and the 1/ℓ report (an SVAG-extrapolated accuracy
    outside [0, 1] shown clipped, with a note; an interval without an upper bound and a ratio that is not defined
    say why: :mod:`fedsde.validity.text`)."""
    from fedsde.validity.text import bounded_value, bounds_text, ratio_text

    v = res.verdict
    T = res.times[-1]
    first = "FedAvg" if res.ells[0] == 1 else f"ℓ={res.ells[0]}"
    if v.reference == "exact":
        from fedsde.problems import RegressionProblem

        source = ("exact moments of the SDE of least-squares clients (eq. (2) with exact round moments)"
                  if isinstance(problem, RegressionProblem)
                  else "exact law of the SDE (OU, eq. (2) with exact round moments)")
        if res.config.get("order") == 2:
            source = "exact " + ("moments" if isinstance(problem, RegressionProblem) else "law") + \
                " of the order-2 SDE (docs/order2.md)"
    else:
        source = f"SVAG: Richardson limit of ℓ = {res.ells[-2]}, {res.ells[-1]}"
    exact = res.config.get("fedavg") == "exact"
    lines = [f"problem: Q={problem.Q}, d={problem.d}  eta={args.eta}  server_lr={args.server_lr}  h={res.config['h']}"
             f"  rounds={args.rounds} (t = n·h up to {T:.6g})  "
             + ("FedAvg: exact moments (no replicates)" if exact else f"replicates={args.replicates} per ℓ"),
             f"reference: {source}"]
    header = "  ".join(f"ℓ={e:<14d}" for e in res.ells)
    lines.append(f"{'metric at T':22s}{header}  SDE")
    notes = []
    for name, s in res.metrics.items():
        cells = "  ".join(f"{m:.5g}±{se:.1g}".ljust(16) for m, se in zip(s["mean"][:, -1], s["se"][:, -1],
                                                                          strict=True))
        if name in v.skipped:
            continue
        sde = res.sde.get(name)
        shown, note = (None, "") if sde is None else bounded_value(name, float(sde["mean"][-1]))
        notes += [note] if note else []
        lines.append(f"{name:22s}{cells}  " + ("" if sde is None else f"{shown:.5g}" + ("*" if note else "")))
    lines += [f"  * {n}" for n in notes]
    lines.append(v.sentence())
    for c in v.curves:
        i = int(max(range(len(c["gap"])), key=lambda k: c["gap"][k]))
        unit = "accuracy units" if c["metric"] == "test_accuracy" else f"of its movement, range {c['scale']:.4g}"
        bounds = ("exact (FedAvg's moments against the SDE's law)" if exact else
                  "simultaneous bounds of max_t d " + bounds_text(max(c["lower"][1:], default=0.0),
                                                                  max(c["upper"][1:], default=0.0), c["metric"]))
        lines.append(f"  d({c['metric']}) = {c['gap'][i]:.3g} at t={res.times[i]:.4g} ({unit}); {bounds}, "
                     f"tolerance {c['tolerance']:g}")
    for m, why in v.skipped.items():
        lines.append(f"  {m}: not judged ({why})")
    if v.ell_ratios:
        lines.append(f"1/ℓ regime ({v.regime}): ratios of successive SVAG gaps (expected "
                     f"{v.ell_ratios[0]['expected']:.3g}): "
                     + "; ".join(ratio_text(r) for r in v.ell_ratios))
    if res.sde:
        lines.append(f"{first} − SDE at T ({v.reference}): "
                     + ", ".join(f"{m} {float(res.metrics[m]['mean'][0, -1] - s['mean'][-1]):+.3g}"
                                 for m, s in res.sde.items() if m not in v.skipped))
    return "\n".join(lines)


def _rule(args: argparse.Namespace, problem, agg, steps, w0) -> int:
    """``--aggregator A``: the rule against its own SDE on any problem kind (:func:`fedsde.validity.rules.
    rule_validity_test`); for adaptive rules ``--ells`` are the SVAG ``ℓ = k²`` (squares: 1,4,16,64 by default)."""
    from fedsde._cli.common import options_named, rule_sampling_from_args
    from fedsde.errors import FedsdeInputError
    from fedsde.params import ClientSampling, Equivalence, Precision, Recording, Replication, Schedule, SDEReference
    from fedsde.sde.rules import NoSDEError
    from fedsde.validity.rules import rule_validity_test
    from fedsde.validity.text import bounds_text

    if agg.sde_kind is None:
        raise NoSDEError(agg.sde_refusal)
    agg.check_problem(problem, args.problem)
    if args.fedavg == "exact":
        raise FedsdeInputError("--fedavg=exact: with --aggregator the rule's side is sampled (its own chains, "
                               "--replicates R); leave --fedavg out")
    if args.seed is None:
        raise FedsdeInputError("--seed: required with --aggregator (the rule's chains are random)")
    participation, weighting = rule_sampling_from_args(args, agg)
    schedule = Schedule(args.eta, steps, args.rounds, args.server_lr, args.h)
    refuse_known_divergence(problem, schedule, aggregator=agg)
    ells = None
    if args.ells is not None:
        ells = _ells(args.ells, "exact")
    from fedsde._samples import resolve_final_cov

    how = resolve_final_cov("--final-cov", args.final_cov, problem.d)
    with options_named(args, "reference", "ells", "metrics", "verdict_metrics", "participation", "weighting",
                       "tolerance", "accuracy_tolerance", "alpha"):
        # the run's values, checked once, here (errors name the flags), and passed whole
        sampling = ClientSampling(participation, weighting)
        equivalence = Equivalence(args.tolerance, args.accuracy_tolerance, args.alpha,
                                  _names("--verdict-metrics", args.verdict_metrics))
        recording = Recording(metrics=_names("--metrics", args.metrics), record_every=args.record_every,
                              final_cov=how)
        res = rule_validity_test(
            problem, agg, schedule, Replication(args.replicates, args.seed),
            Precision("float32" if args.float32 else "float64", args.device), w0=w0,
            sde=SDEReference(args.reference, ells), sampling=sampling, equivalence=equivalence,
            recording=recording, progress=show_progress(args))
    result = res.to_dict()
    result["config"] = {**result["config"], "final_cov": how}
    v = res.verdict
    sampling = "" if participation is None else f"  participation={participation} ({weighting})"
    lines = [f"aggregator={agg.name}  sde={agg.sde_kind}  eta={args.eta}  server_lr={args.server_lr}  "
             f"h={res.config['h']}  rounds={args.rounds} (t up to {res.times[-1]:.6g})  replicates={args.replicates} "
             f"per ℓ{sampling}",
             "reference: " + (f"SVAG chains ℓ = {', '.join(map(str, res.ells))}"
                              + (" (ℓ = k²)" if agg.sde_kind == "adaptive" else "")
                              + ", Richardson limit of the two largest" if v.reference == "svag"
                              else "exact law of the rule's first-order SDE"),
             f"{'metric at T':22s}" + "  ".join(f"ℓ={e:<14d}" for e in res.ells) + "  SDE"]
    for name, st in res.metrics.items():
        if name in v.skipped:
            continue
        cells = "  ".join(f"{m:.5g}±{se:.1g}".ljust(16) for m, se in zip(st["mean"][:, -1], st["se"][:, -1],
                                                                          strict=True))
        sde = res.sde.get(name)
        lines.append(f"{name:22s}{cells}  " + ("" if sde is None else f"{sde['mean'][-1]:.5g}"))
    lines.append(v.sentence(agg.name))
    for c in v.curves:
        lines.append(f"  d({c['metric']}): simultaneous bounds of max_t d "
                     + bounds_text(max(c["lower"][1:], default=0.0), max(c["upper"][1:], default=0.0), c["metric"])
                     + f", tolerance {c['tolerance']:g}")
    for m, why in v.skipped.items():
        lines.append(f"  {m}: not judged ({why})")
    return emit(args, result, "\n".join(lines))
