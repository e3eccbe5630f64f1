"""``--batch-size`` and ``--l2``: a data problem's minibatch size and ridge coefficient given on the command line, over
the problem file's ``batch_size`` and ``l2`` (:data:`fedsde.problems.io.OVERRIDABLE`).  Every command that takes data
problems declares them (:func:`add_data_overrides`; :func:`fedsde._cli.common.add_problem_args` does for its
commands) and loads its problem through :func:`problem_from_args`; quadratic clients refuse them in one line."""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

from fedsde.errors import FedsdeInputError

_FLAG_KEY = re.compile(r"(?<![\w.-])(batch_size|l2)=")


def add_data_overrides(p: argparse.ArgumentParser) -> None:
    """``--batch-size b|full`` and ``--l2 λ``: a data problem's minibatch size and ridge coefficient, over the
    problem file's (refused for quadratic clients); read by :func:`problem_from_args`."""
    p.add_argument("--batch-size", default=None, metavar="b",
                   help="data problems: rows per local step, an integer >= 1 (or 'full' for a module problem's whole "
                   "client), overriding the problem file's batch_size")
    p.add_argument("--l2", default=None, type=float, metavar="λ",
                   help="data problems: ridge coefficient λ >= 0, overriding the problem file's l2")


def data_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """``--batch-size`` and ``--l2`` as problem-file keys (checked: an integer >= 1 or ``full``; a finite λ >= 0)."""
    out: dict[str, Any] = {}
    b = getattr(args, "batch_size", None)
    if b is not None:
        text = str(b).strip()
        if text == "full":
            out["batch_size"] = "full"
        else:
            try:
                out["batch_size"] = int(text)
            except ValueError:
                out["batch_size"] = None
            if out["batch_size"] is None or out["batch_size"] < 1:
                raise FedsdeInputError(f"--batch-size={b!r}: must be an integer >= 1 or 'full'")
    lam = getattr(args, "l2", None)
    if lam is not None:
        if not (math.isfinite(lam) and lam >= 0):
            raise FedsdeInputError(f"--l2={lam!r}: must be a finite number >= 0")
        out["l2"] = float(lam)
    return out


def problem_from_args(args: argparse.Namespace, *, population: bool = False):
    """``load_problem(--problem, population=…)`` with ``--batch-size``/``--l2`` over the file's keys (messages name
    the flags)."""
    from fedsde.problems import load_problem

    overrides = data_overrides(args)
    if not overrides:
        return load_problem(args.problem, population=population)
    try:
        return load_problem(args.problem, population=population, overrides=overrides)
    except FedsdeInputError as exc:  # the file's key, set by a flag: the message names the flag
        raise FedsdeInputError(_FLAG_KEY.sub(lambda m: f"--{m.group(1).replace('_', '-')}=", str(exc))) from None
