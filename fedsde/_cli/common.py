"""Helpers shared by the subcommands: common options, parsing of vectors, JSON output."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from fedsde.errors import FedsdeInputError


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")


def add_problem_args(p: argparse.ArgumentParser, *, steps: bool = True) -> None:
    """``--problem FILE --eta η --local-steps E --server-lr s [--client-steps τ1,τ2,…]``."""
    p.add_argument("--problem", required=True, metavar="FILE", help="quadratic problem (.toml or .json)")
    p.add_argument("--eta", required=True, type=float, metavar="η", help="client learning rate")
    if steps:
        p.add_argument("--local-steps", type=int, default=None, metavar="E", help="local SGD steps per round")
        p.add_argument(
            "--client-steps", default=None, metavar="τ1,τ2,…",
            help="per-client local steps (overrides --local-steps)",
        )
    p.add_argument("--server-lr", type=float, default=1.0, metavar="s",
                   help="actual server step s = h·η₀ (default 1: plain FedAvg)")


def local_steps_from_args(args: argparse.Namespace, Q: int) -> int | np.ndarray:
    """The ``--local-steps``/``--client-steps`` choice as an int or an int array of length Q."""
    if getattr(args, "client_steps", None):
        vals = parse_vector("--client-steps", args.client_steps)
        if vals.shape[0] != Q or np.any(vals != np.round(vals)):
            raise FedsdeInputError(f"--client-steps={args.client_steps!r}: need {Q} integers, one per client")
        return vals.astype(np.int64)
    if args.local_steps is None:
        raise FedsdeInputError("--local-steps: required (or give --client-steps τ1,τ2,…)")
    if args.local_steps < 1:
        raise FedsdeInputError(f"--local-steps={args.local_steps}: must be an integer >= 1")
    return int(args.local_steps)


def check_aggregator_problem(aggregator: str, problem, path: str) -> None:
    """One-line error when ``--aggregator`` needs data the problem file does not carry (FedDisco: labels)."""
    if aggregator == "feddisco" and getattr(problem, "label_distributions", None) is None:
        raise FedsdeInputError(
            f"--aggregator=feddisco: the problem file {path!r} has no label_distributions; add the key "
            f"label_distributions (Q={problem.Q} rows of non-negative label frequencies, one per client)"
        )


def parse_vector(name: str, text: str | None, d: int | None = None) -> np.ndarray | None:
    """Parse ``"1,2,3"`` (or a single number, broadcast to ``d``) into a float vector."""
    if text is None:
        return None
    try:
        vals = np.array([float(x) for x in str(text).replace(" ", "").split(",") if x != ""])
    except ValueError:
        raise FedsdeInputError(f"{name}={text!r}: must be comma-separated numbers") from None
    if vals.size == 0 or not np.all(np.isfinite(vals)):
        raise FedsdeInputError(f"{name}={text!r}: must be finite comma-separated numbers")
    if d is not None:
        if vals.size == 1:
            vals = np.full(d, vals[0])
        elif vals.size != d:
            raise FedsdeInputError(f"{name}={text!r}: has {vals.size} entries, the problem has d={d}")
    return vals


def writable_folder(option: str, text: str) -> Path:
    """``text`` as a folder that exists or can be created: not a file, nearest existing ancestor writable.

    Checked before any work starts, so a bad output folder fails at once (the message names ``option``).
    """
    out = Path(text)
    if out.exists() and not out.is_dir():
        raise FedsdeInputError(f"{option}={text!r}: exists and is not a folder")
    anc = out.absolute()
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise FedsdeInputError(f"{option}={text!r}: cannot be created, {str(anc)!r} is not a folder")
    if not os.access(anc, os.W_OK | os.X_OK):
        what = "is not writable" if anc == out.absolute() else f"cannot be created in {str(anc)!r} (not writable)"
        raise FedsdeInputError(f"{option}={text!r}: {what}")
    return out


def to_jsonable(obj: Any) -> Any:
    """Convert numpy/torch values to plain JSON types (NaN/inf become null)."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "detach"):  # torch tensor
        obj = obj.detach().cpu().numpy()
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return to_jsonable(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def emit(args: argparse.Namespace, result: dict, human: str) -> int:
    """Print ``result`` as one JSON object under ``--json``, else the human-readable text."""
    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(to_jsonable(result)) + "\n")
    else:
        sys.stdout.write(human.rstrip("\n") + "\n")
    return 0


def fmt_array(a) -> str:
    """Compact text of a vector or matrix for human output."""
    return np.array2string(np.asarray(a), precision=6, suppress_small=False, max_line_width=100)
