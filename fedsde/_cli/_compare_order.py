"""``fedsde compare --order``: the order refinement (weak errors as ``η → 0`` with ``h = η``, ``s`` fixed), exact on
quadratic and least-squares clients, coupled Monte Carlo on data problems (:mod:`fedsde.compare.order2`,
:mod:`fedsde.compare.order2_mc`)."""

from __future__ import annotations

import argparse

import numpy as np

from fedsde._cli.common import show_progress


def _h_ratio(args: argparse.Namespace) -> float:
    from fedsde._validate import positive_float

    eta = positive_float("--eta", args.eta)
    return 1.0 if args.h is None else positive_float("--h", args.h) / eta


def _etas_option(args: argparse.Namespace):
    from fedsde._cli.common import parse_vector

    return None if args.etas is None else parse_vector("--etas", args.etas).tolist()


def _checked_etas(args: argparse.Namespace, check):
    """``--etas`` given to ``check(etas)`` (``None`` when not given) after the checks of the flags together: it needs
    ``--order`` and its largest is ``--eta``; the errors of ``check`` name the flag."""
    from fedsde.errors import FedsdeInputError

    etas = _etas_option(args)
    if etas is None:
        return None
    if args.order is None:
        raise FedsdeInputError(f"--etas={args.etas}: the order refinement needs --order 1 or 2")
    if max(etas) != args.eta:
        raise FedsdeInputError(f"--etas={args.etas}: the largest must be --eta={args.eta:g} (the horizon is "
                               "t = rounds·η at the largest η)")
    try:
        return check(etas)
    except FedsdeInputError as err:
        raise FedsdeInputError(f"--{err}") from None


def check_etas(args: argparse.Namespace):
    """``--etas`` as a list (``None`` when not given), checked: the largest is ``--eta`` and each is ``η/k``."""
    from fedsde.compare.order2 import refinement_etas

    return _checked_etas(args, lambda etas: (refinement_etas(args.eta, etas), etas)[1])


def eta_refinement(args: argparse.Namespace):
    """``--order`` and ``--etas`` as the study's :class:`~fedsde.params.EtaRefinement`, built (and checked) once;
    ``None`` without ``--order`` (``--etas`` alone is refused)."""
    from fedsde.params import EtaRefinement

    if args.order is None:
        return _checked_etas(args, lambda etas: None)  # refuses --etas without --order
    return _checked_etas(args, lambda etas: EtaRefinement(args.order, etas)) or EtaRefinement(args.order)


def exact_order_refinement(args: argparse.Namespace, problem, steps, w0):
    """:func:`fedsde.compare.order2.order_refinement` with the command's options (errors name the flags)."""
    from fedsde.compare.order2 import order_refinement
    from fedsde.errors import FedsdeInputError

    etas = check_etas(args)
    try:
        return order_refinement(problem, eta=args.eta, local_steps=steps, rounds=args.rounds, server_lr=args.server_lr,
                                order=args.order, h_ratio=_h_ratio(args), w0=w0, etas=etas)
    except FedsdeInputError as err:
        msg = str(err)
        raise FedsdeInputError(f"--{msg}" if msg.startswith("etas") else msg) from None


def slope_text(rec: dict) -> str:
    """``1.998 [1.990, 2.006] (95 %)`` from a slope record (``slope``, ``slope_ci95``, ``exact_at_grid``)."""
    if rec.get("exact_at_grid"):
        return "none (errors at rounding level: exact at the grid times)"
    ci = rec.get("slope_ci95")
    tail = "(no interval)" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}] (95 %)"
    return f"{rec['slope']:.3f} {tail}"


def order_lines(ref) -> list[str]:
    """The readable lines of an :class:`~fedsde.compare.order2.OrderRefinement`."""
    from fedsde.compare.order2 import ERRORS

    lines = [f"order refinement (order {ref.order}, SDE {ref.sde}; h = η·{ref.config['h_ratio']:g}, s = "
             f"{ref.config['server_lr']:g} fixed, t = {ref.t_end:.6g}): η = "
             + ", ".join(f"{e:.4g}" for e in ref.etas) + " (rounds " + ", ".join(str(int(n)) for n in ref.rounds)
             + ")"]
    for name in ERRORS:
        errs = ref.errors[name]
        lines.append(f"  {name:14s} errors {', '.join(f'{e:.3g}' for e in errs)}; slope "
                     + slope_text(ref.slopes[name]))
    return lines


def run_exact(args: argparse.Namespace, problem, steps, w0) -> dict:
    """The JSON record of the exact refinement (least-squares clients with ``--order``; quadratic clients get it
    inside ``fedsde compare``'s study)."""
    ref = exact_order_refinement(args, problem, steps, w0)
    return {"order_refinement": ref.to_dict()}, order_lines(ref)


def run_data_order(args: argparse.Namespace, problem, steps, w0) -> int:
    """Data problems with ``--order``: FedAvg against the order-1 and order-2 SDEs by coupled Monte Carlo as ``η`` is
    refined (:func:`fedsde.compare.order2_mc.coupled_order_study`; both orders are always run, they share the
    chains)."""
    from fedsde._cli.common import emit
    from fedsde.compare.order2_mc import coupled_order_study
    from fedsde.errors import FedsdeInputError
    from fedsde.params import Integrator, Precision, Replication, Schedule
    from fedsde.sde.svag import default_oracle_factory
    from fedsde.validity.core import default_start

    if args.replicates is None or args.replicates < 2:
        raise FedsdeInputError(f"--replicates={args.replicates}: must be an integer >= 2 with --order on a data "
                               "problem (coupled Monte Carlo)")
    if args.variant != "corrected":
        raise FedsdeInputError(f"--variant={args.variant}: --order compares the order-1 and order-2 SDEs of "
                               "docs/order2.md; drop --variant")
    etas = check_etas(args)
    st = coupled_order_study(problem, Schedule(args.eta, steps, args.rounds, args.server_lr),
                             Replication(args.replicates, args.seed), Precision(device=args.device), etas=etas,
                             h_ratio=_h_ratio(args), w0=default_start(problem, w0),
                             oracle_factory=default_oracle_factory(problem),
                             integrator=Integrator(substeps=args.substeps), progress=show_progress(args))
    lines = [f"problem: {type(problem).__name__} Q={problem.Q}, d={problem.d}  E={np.atleast_1d(steps).tolist()}  "
             f"s={args.server_lr}  replicates={args.replicates} (coupled: FedAvg and both SDEs share the minibatches)",
             f"order refinement: h = η, t = {st['t_end']:.6g}; η = " + ", ".join(f"{e:.4g}" for e in st["etas"])
             + f"; SDE integrator: {st['integrator']} with {st['substeps']} substep(s) per round"]
    for order in ("order1", "order2"):
        for phi, rec in st[order].items():
            lines.append(f"  {order} {phi:14s} errors "
                         + ", ".join(f"{e:.3g}±{1.96 * s:.2g}" for e, s in zip(rec["errors"], rec["stderr"],
                                                                              strict=True))
                         + "; slope " + slope_text(rec) + ("" if rec["resolved"] else " — some errors do not exclude "
                                                         "zero: more replicates"))
    return emit(args, st, "\n".join(lines))
