"""``fedsde derive``: the symbolic derivation of a variant's SDE, or its coefficients evaluated on a problem.

* ``fedsde derive --variant paper|corrected|matched [--local-steps E|symbolic] [--format text|latex|json]``
  prints the derivation (E-step client law → round law → drift/diffusion on the clock t = n·h → moments,
  ODE residuals, stationary limits, series in η, E → ∞).
* ``fedsde derive --variant V --problem FILE --eta η --local-steps E [--server-lr s] [--h h] --json`` prints one
  JSON object ``{"drift": {"A", "c"}, "diffusion_cov", "stationary": {"mean", "cov"} | null, …}`` with
  drift ``−A (w − c)``, time ``t = n·h`` (``h`` defaults to η).  Diagonal problems are evaluated with the
  lambdified symbolic formulas; full matrices through fedsde.exact's round law (see
  :func:`fedsde.symbolic.numeric.sde_coefficients_numeric`).
* ``fedsde derive --problem FILE --aggregator A [--aggregator-option K=V …] --eta η --local-steps E|--client-steps
  τ1,… [--server-lr s] [--h h] --json`` prints rule ``A``'s own first-order SDE with the same keys
  (:func:`fedsde.sde.rules.rule_sde`: drift ``(s/h)B_A(w − c_A)``, diffusion ``(s²/h)N_A``; server momentum with
  ``s/(1 − β)`` and its underdamped SDE under ``second_order``); a rule without one is refused in one line.
* ``fedsde derive --errata [--format …]`` prints the generated errata of seed 002, Section 6.
"""

from __future__ import annotations

import argparse
import sys

from fedsde._cli import one_line_help
from fedsde._cli.common import (
    add_json_flag,
    add_rule_sde_args,
    emit,
    fmt_array,
    local_steps_from_args,
    refuse_least_squares,
    rule_from_args,
    rule_sampling_from_args,
)
from fedsde.errors import FedsdeInputError

VARIANT_CHOICES = ("paper", "corrected", "matched")
FORMATS = ("text", "latex", "json")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "derive",
        help=one_line_help("derive"),
        description="Print the sympy derivation of a variant's SDE for FedAvg on quadratic clients (clock "
        "t = n·h; seed 002 Section 6 uses h = η, s = 1), or, with --problem, evaluate its coefficients.",
    )
    p.add_argument("--variant", choices=VARIANT_CHOICES, default="corrected",
                   help="paper: eq. (4)/Thm 6.3 as printed; corrected: exact one-round variance; matched: OU "
                   "equal in law to the chain at grid times (default corrected)")
    p.add_argument("--local-steps", default=None, metavar="E|symbolic",
                   help="local steps E (an integer, substituted into the derivation) or 'symbolic' (default)")
    p.add_argument("--format", choices=FORMATS, default="text", help="output of the derivation (default text)")
    p.add_argument("--problem", default=None, metavar="FILE",
                   help="evaluate the coefficients on this quadratic problem (.toml or .json)")
    p.add_argument("--eta", type=float, default=None, metavar="η", help="client learning rate (with --problem)")
    p.add_argument("--server-lr", type=float, default=1.0, metavar="s",
                   help="actual server step s = h·η₀ (default 1: plain FedAvg)")
    p.add_argument("--h", type=float, default=None, metavar="h",
                   help="time step of the lift, round n at t = n·h (default η, seed 002 Section 6)")
    p.add_argument("--client-steps", default=None, metavar="τ1,τ2,…",
                   help="per-client local steps (with --problem; overrides --local-steps)")
    add_rule_sde_args(p, "derive --problem evaluates")
    p.add_argument("--errata", action="store_true", help="print the generated errata of seed 002, Section 6")
    add_json_flag(p)
    p.set_defaults(func=run)


def _local_steps(text: str | None, *, required: bool) -> int | None:
    if text is None or text == "symbolic":
        if required:
            raise FedsdeInputError("--local-steps: an integer E >= 1 is required with --problem")
        return None
    try:
        val = int(text)
    except ValueError:
        raise FedsdeInputError(f"--local-steps={text!r}: must be an integer >= 1 or 'symbolic'") from None
    if val < 1:
        raise FedsdeInputError(f"--local-steps={text!r}: must be an integer >= 1 or 'symbolic'")
    return val


def run(args: argparse.Namespace) -> int:
    if args.errata:
        return _errata(args)
    if args.problem is not None:
        return _numeric(args)
    for name, val in (("--eta", args.eta), ("--h", args.h)):
        if val is not None:
            raise FedsdeInputError(f"{name}={val}: only used with --problem FILE")
    if args.server_lr != 1.0:
        raise FedsdeInputError(f"--server-lr={args.server_lr}: only used with --problem FILE")
    for name, val in (("--client-steps", args.client_steps), ("--aggregator", args.aggregator),
                      ("--participation", args.participation), ("--weighting", args.weighting)):
        if val is not None:
            raise FedsdeInputError(f"{name}={val}: only used with --problem FILE")
    from fedsde.symbolic.render import derivation

    der = derivation(args.variant, _local_steps(args.local_steps, required=False))
    fmt = "json" if args.json else args.format
    if fmt == "json":
        args.json = True
        return emit(args, der.to_dict(), "")
    sys.stdout.write((der.to_latex() if fmt == "latex" else der.to_text()) + "\n")
    return 0


def _numeric(args: argparse.Namespace) -> int:
    from fedsde.problems import load_problem, require_quadratic
    from fedsde.symbolic.numeric import sde_coefficients_numeric

    if args.eta is None:
        raise FedsdeInputError("--eta: required with --problem FILE")
    agg = rule_from_args(args)
    sampling = rule_sampling_from_args(args, agg)
    if agg is not None or args.client_steps:
        return _rule(args, agg, sampling)
    E = _local_steps(args.local_steps, required=True)
    problem = load_problem(args.problem)
    refuse_least_squares(problem, "derive --problem")
    require_quadratic(problem, "derive --problem", "the symbolic one-round map and the SDE's drift and "
                       "diffusion are closed forms for quadratic losses only")
    sde = sde_coefficients_numeric(problem, args.eta, E, args.server_lr, args.h, variant=args.variant)
    result = sde.to_dict()
    st = result["stationary"]
    lines = [
        f"variant={sde.variant}  eta={sde.eta}  E={sde.local_steps}  server_lr={sde.server_lr}  h={sde.h}  "
        f"(clock t = n·h; evaluated via {sde.path})",
        "dw = -A (w - c) dt + b dB(t)",
        f"A              {fmt_array(sde.A)}",
        f"c              {fmt_array(sde.c)}",
        f"diffusion b bᵀ {fmt_array(sde.diffusion_cov)}",
    ]
    if st is None:
        lines.append("stationary law: none (A is not stable)")
    else:
        lines += [f"stationary mean {fmt_array(st['mean'])}", f"stationary cov  {fmt_array(st['cov'])}"]
    return emit(args, result, "\n".join(lines))


def _rule(args: argparse.Namespace, agg, sampling=(None, "unbiased")) -> int:
    """A rule's own first-order SDE on quadratic clients (FedAvg's corrected SDE when only --client-steps)."""
    from fedsde.problems import load_problem, require_quadratic
    from fedsde.sde.rules import rule_sde

    if args.variant != "corrected":
        raise FedsdeInputError(f"--variant={args.variant}: a rule's own SDE (--aggregator, --client-steps) is the "
                               "corrected first-order SDE of its exact round; drop --variant")
    problem = load_problem(args.problem)
    refuse_least_squares(problem, "derive --problem --aggregator")
    require_quadratic(problem, "derive --problem --aggregator", "a rule's exact one-round law is a closed form for "
                      "quadratic losses only")
    if args.client_steps is None:
        args.local_steps = _local_steps(args.local_steps, required=True)
    steps = local_steps_from_args(args, problem.Q)
    if agg is not None:
        agg.check_problem(problem, args.problem)
    if agg is not None and agg.sde_kind == "adaptive":
        from fedsde.sde.adaptive import adaptive_sde, adaptive_sde_dict

        res = {"aggregator": agg.describe(), **adaptive_sde_dict(adaptive_sde(
            problem, agg, eta=args.eta, local_steps=steps, server_lr=args.server_lr, h=args.h,
            participation=sampling[0], weighting=sampling[1]))}
        return emit(args, res, "\n".join([f"aggregator={agg.name}  sde=adaptive (Malladi et al. 2022)  clock "
                                          f"{res['clock']}", *res["equations"], f"B {fmt_array(res['drift']['B'])}",
                                          f"c {fmt_array(res['drift']['c'])}", f"N {fmt_array(res['noise_cov'])}"]))
    r = rule_sde(problem, "fedavg" if agg is None else agg, args.eta, steps, args.server_lr, args.h,
                 participation=sampling[0], weighting=sampling[1])
    result = r.to_dict()
    st = result["stationary"]
    lines = [
        f"aggregator={r.aggregator.name}  sde={r.kind}  eta={args.eta}  local_steps={result['local_steps']}  "
        f"server_lr={args.server_lr}  effective server_lr={r.effective_server_lr:.6g}  h={r.sde.h}  (clock t = n·h)",
        "dw = -A (w - c) dt + b dB(t)   (the rule's own first-order SDE)",
        f"A              {fmt_array(r.sde.A)}",
        f"c              {fmt_array(r.sde.c)}",
        f"diffusion b bᵀ {fmt_array(r.sde.diffusion_cov)}",
    ]
    if st is None:
        lines.append("stationary law: none (A is not stable)")
    else:
        lines += [f"stationary mean {fmt_array(st['mean'])}", f"stationary cov  {fmt_array(st['cov'])}"]
    if r.sampling is not None:
        lines.append(f"client sampling: m={r.sampling.participation} ({r.sampling.weighting}); the diffusion adds "
                     f"(s_eff²/h) Σ_kl C_kl M_k (w − a_k)(w − a_l)ᵀ M_lᵀ with C = Cov ω = {fmt_array(r.sampling.C)}")
    if r.momentum is not None:
        lines.append(f"server momentum beta={r.momentum.beta:g}: first-order step s*g/(1-beta) = "
                     f"{r.effective_server_lr:.6g}; underdamped (w, u) SDE under the JSON key second_order")
    return emit(args, result, "\n".join(lines))


def _errata(args: argparse.Namespace) -> int:
    from fedsde.symbolic.errata import errata_entries, errata_text

    entries = errata_entries()
    fmt = "json" if args.json else args.format
    if fmt == "json":
        args.json = True
        return emit(args, {"errata": [e.to_dict() for e in entries]}, "")
    if fmt == "latex":
        out = []
        for e in entries:
            out += [f"% {e.id} ({e.location})", rf"\paragraph{{{e.id}}} printed: \[ {e.printed_latex} \]",
                    rf"corrected: \[ {e.corrected_latex} \]",
                    f"% printed={e.printed_value:.6g} corrected={e.corrected_value:.6g} exact={e.exact_value:.6g}"]
        sys.stdout.write("\n".join(out) + "\n")
        return 0
    sys.stdout.write(errata_text() + "\n")
    return 0
