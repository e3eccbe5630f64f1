"""The server-rule flags every command shares: ``--aggregator NAME`` with ``--aggregator-option KEY=VALUE`` (the
rule and its parameters) and, for the rules' SDEs, ``--participation m`` and ``--weighting`` (client sampling);
re-exported by :mod:`fedsde._cli.common`."""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from fedsde.errors import FedsdeInputError


def add_aggregator_option(p: argparse.ArgumentParser) -> None:
    """``--aggregator-option KEY=VALUE`` (repeatable): a constructor parameter of the ``--aggregator`` rule."""
    p.add_argument("--aggregator-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a parameter of the --aggregator rule, repeatable: e.g. variant=flower (FedAdam as Flower "
                   "runs it), variant=official (FedNova's momentum + prox loop as the official code), "
                   "warm_start=fedavg (FedAWARE), beta1=0.9; values are read as JSON numbers, booleans or lists, "
                   "anything else as a string (the parameters are those of the classes in fedsde.aggregators)")


def add_rule_sde_args(p: argparse.ArgumentParser, what: str = "the SDE", *, sampling: bool = True) -> None:
    """``--aggregator NAME`` (default: FedAvg's own SDE) and ``--aggregator-option KEY=VALUE``: which server rule's
    SDE ``what`` is (:mod:`fedsde.sde.rules`, :mod:`fedsde.sde.adaptive`); a rule without one is refused in one
    line.  ``sampling``: also ``--participation m`` and ``--weighting`` (the rule's SDE under client sampling,
    :mod:`fedsde.sde.sampled`; read by :func:`rule_sampling_from_args`)."""
    from fedsde._cli._names import AGGREGATOR_NAMES, WEIGHTINGS

    p.add_argument("--aggregator", default=None, choices=AGGREGATOR_NAMES, metavar="NAME",
                   help=f"server rule whose own SDE {what} uses: linear rules (fedavg, fedprox, fednova, feddisco) "
                   "their first-order SDE from the rule's exact round, fedavgm the momentum SDE with step s/(1 − β), "
                   "fedadam/fedyogi the adaptive SDE of Malladi et al. 2022; on a data problem the rule's SDE is "
                   "sampled by its SVAG chains; scaffold, fedaware and fedadagrad are refused with the reason "
                   "(default: FedAvg's SDE, the --variant)")
    add_aggregator_option(p)
    if sampling:
        p.add_argument("--participation", type=int, default=None, metavar="m",
                       help="with --aggregator: m clients (draws) per round, drawn and weighted as fedsde simulate "
                       "does (--weighting); the rule's SDE then carries the client-sampling term in its diffusion "
                       "(default: every client)")
        p.add_argument("--weighting", choices=WEIGHTINGS, default=None,
                       help="with --participation: unbiased (m-subsets weighted p_k Q/m, the default), renormalised "
                       "(p_k/Σ_S p_j) or multinomial (m draws with replacement ∝ p, 1/m each)")


def rule_sampling_from_args(args: argparse.Namespace, agg) -> tuple[int | None, str]:
    """``(participation, weighting)`` of ``--participation``/``--weighting``, refused in one line where they cannot
    apply: without ``--aggregator`` (FedAvg's own SDE variants are those of full participation), ``--weighting``
    without ``--participation``, or a rule whose SDE holds for full participation only."""
    m, weighting = getattr(args, "participation", None), getattr(args, "weighting", None)
    if m is None:
        if weighting is not None:
            raise FedsdeInputError(f"--weighting={weighting}: only with --participation m (without it every client "
                                   "takes part)")
        return None, "unbiased"
    if agg is None:
        raise FedsdeInputError(f"--participation={m}: the SDE under client sampling is a rule's own; give "
                               "--aggregator NAME (FedAvg's: --aggregator fedavg)")
    if m < 1:
        raise FedsdeInputError(f"--participation={m}: must be an integer >= 1")
    if agg.sde_kind is not None and agg.sampled_sde_weights(np.ones(1), np.ones(1), p=np.ones(1)) is None:
        raise FedsdeInputError(f"--participation={m}: aggregator={agg.name!r} does not declare how its weights "
                               "depend on the sampled clients, so its SDE holds under full participation only")
    return m, weighting or "unbiased"


def rule_from_args(args: argparse.Namespace):
    """The ``--aggregator`` rule as an instance (its options applied, its SDE kind declared), or ``None``."""
    if getattr(args, "aggregator", None) is None:
        if getattr(args, "aggregator_option", None):
            raise FedsdeInputError("--aggregator-option: needs --aggregator NAME")
        return None
    from fedsde.aggregators import get_aggregator

    agg = aggregator_from_args(args)
    return get_aggregator(agg)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a finite number")


def aggregator_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--aggregator-option KEY=VALUE`` pairs as keyword arguments (``-`` in keys read as ``_``)."""
    opts: dict[str, Any] = {}
    for item in getattr(args, "aggregator_option", None) or ():
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key.isidentifier():
            raise FedsdeInputError(f"--aggregator-option={item!r}: must be KEY=VALUE (e.g. variant=flower)")
        try:
            value = json.loads(text, parse_constant=_reject_constant)
        except ValueError as exc:
            if "finite" in str(exc):
                raise FedsdeInputError(f"--aggregator-option={item!r}: {exc}") from None
            value = text.strip()
        opts[key] = value
    return opts


def aggregator_from_args(args: argparse.Namespace):
    """``--aggregator`` as a registry name, or an instance when ``--aggregator-option`` gives parameters."""
    from fedsde.aggregators import get_aggregator

    opts = aggregator_options(args)
    if not opts:
        return args.aggregator
    try:
        return get_aggregator(args.aggregator, **opts)
    except FedsdeInputError as exc:
        raise FedsdeInputError(f"--aggregator-option: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise FedsdeInputError(f"--aggregator-option {opts}: {exc}") from None


def check_aggregator_problem(aggregator: str, problem, path: str) -> None:
    """One-line error when ``--aggregator`` needs data the problem file does not carry (the rule's own
    :meth:`~fedsde.aggregators.Aggregator.check_problem`, e.g. FedDisco's label distributions)."""
    from fedsde.aggregators import get_aggregator

    get_aggregator(aggregator).check_problem(problem, path)
