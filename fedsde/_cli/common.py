"""Helpers shared by the subcommands: common options, parsing of vectors, JSON output, warnings and ``--strict``.

What every command uses:

* :func:`add_json_flag` adds ``--json``, ``--strict`` (do not add ``--strict`` yourself) and ``--quiet``;
  :func:`show_progress` says whether the command shows progress bars (on stderr, also under ``--json``; never with
  ``--quiet``; see :func:`fedsde._progress.progress_wanted`);
* :func:`emit` prints the result (one JSON object under ``--json``, on the stdout the command started with: what
  other code prints meanwhile, e.g. a user's model, goes to stderr, :mod:`fedsde._output`) with the key
  ``warnings`` always present: the
  one-line messages of every warning raised while the command ran (:func:`warn`, :class:`fedsde.errors.
  DivergenceWarning` from the simulator or the SDE integrator, numpy/torch runtime warnings), each also printed on
  stderr as ``warning: …``.  Under ``--strict`` a warning is an error instead: nothing on stdout,
  one line on stderr, exit 2;
* :func:`warn` records a warning of the command itself (instead of writing to stderr by hand);
* :func:`refuse_known_divergence` (commands that run the algorithm) raises a one-line error when the settings are
  known to diverge on quadratic clients: a local solver that expands (plain SGD: ``η·λ_max(U_k) >= 2``) or a server
  recursion of the mean with spectral radius ``ρ(I − sB) > 1`` (server momentum included); :func:`known_divergence`
  (home: :mod:`fedsde._validate`) returns the same messages
  for commands that only compute laws (they go to :func:`warn`);
* memory: :func:`fedsde._memory.available_memory` (free memory, cgroup and ``RLIMIT_AS`` limits, capped by the
  environment variable ``FEDSDE_MEMORY_LIMIT``, e.g. ``6G``) and :func:`fedsde._memory.memory_fits` (a one-line
  error with the estimate); the simulator and the SDE integrator use them to chunk or refuse a run up front.

``fedsde.cli.main`` also turns operating-system errors, running out of memory and numeric overflow into the
one-line error with exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from fedsde.errors import FedsdeInputError


def add_json_flag(p: argparse.ArgumentParser) -> None:
    """``--json`` (one JSON object on stdout), ``--strict`` (warnings are errors, exit 2), ``--quiet`` (no
    progress on stderr) and ``--threads N`` (the command's thread policy, :func:`fedsde._threads.thread_policy`):
    every command has them."""
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    add_strict_flag(p)
    p.add_argument("--quiet", action="store_true",
                   help="no progress bars on stderr (shown, also with --json, when stderr is a terminal or "
                   "FEDSDE_PROGRESS=1; warnings and errors are printed either way)")
    if "--threads" not in p._option_string_actions:
        p.add_argument("--threads", type=int, default=None, metavar="N",
                       help="threads the command computes on (torch and BLAS; workers share them); default the CPUs "
                       "this process may use, at most 16 (stated in the output: resources.threads)")


def show_progress(args: argparse.Namespace) -> bool:
    """Whether the command shows progress on stderr (:func:`fedsde._progress.progress_wanted`: not with
    ``--quiet``; else ``FEDSDE_PROGRESS``, else whether stderr is a terminal)."""
    from fedsde._progress import progress_wanted

    return progress_wanted(quiet=bool(getattr(args, "quiet", False)))


def add_order_flag(p: argparse.ArgumentParser, what: str) -> None:
    """``--order 1|2`` (default 1): the approximation order of the SDE (:mod:`fedsde.sde.order2`)."""
    p.add_argument("--order", type=int, choices=(1, 2), default=1, help=f"approximation order of {what}")


def add_strict_flag(p: argparse.ArgumentParser) -> None:
    """``--strict``: a warning (divergence, blow-up, unreliable result) is an error with exit status 2."""
    if "--strict" not in p._option_string_actions:
        p.add_argument("--strict", action="store_true",
                       help="treat warnings (e.g. a run that grows far beyond its start and optimum) as errors: "
                       "one line on stderr, nothing on stdout, exit 2")


def add_problem_args(p: argparse.ArgumentParser, *, local_steps: bool = True, data: bool = True,
                     problem_help: str | None = None) -> None:
    """``--problem FILE --eta η --local-steps E --server-lr s [--client-steps τ1,τ2,…]``; ``local_steps=False``
    (old name: ``steps``) leaves out the two local-steps flags; ``data=False`` for commands that take quadratic
    clients only; ``problem_help`` replaces the help of ``--problem``."""
    if problem_help is None:
        problem_help = ("problem file (.toml/.json): quadratic clients or a data problem (kind = \"classification\", "
                        "\"regression\" or \"module\": your own nn.Module)" if data
                        else "quadratic problem (.toml or .json)")
    p.add_argument("--problem", required=True, metavar="FILE", help=problem_help)
    p.add_argument("--eta", required=True, type=float, metavar="η", help="client learning rate")
    if local_steps:
        p.add_argument("--local-steps", type=int, default=None, metavar="E", help="local SGD steps per round")
        p.add_argument(
            "--client-steps", default=None, metavar="τ1,τ2,…",
            help="per-client local steps (overrides --local-steps)",
        )
    p.add_argument("--server-lr", type=float, default=1.0, metavar="s",
                   help="actual server step s = h·η₀ (default 1: plain FedAvg)")
    if data:
        from fedsde._cli._data_flags import add_data_overrides

        add_data_overrides(p)


class _RenamedFlag(argparse.Action):
    """Stores the value like ``store`` and records which of the option's strings was typed (:func:`flag`); the
    option strings after the first are old names: using one issues a :class:`DeprecationWarning` (housekeeping:
    neither in the JSON ``warnings`` nor fatal under ``--strict``, so the output does not change).  The old and
    the new name given together is a one-line error (exit 2), as the Python API and the sweep specs refuse it,
    rather than the last one silently winning."""

    def __call__(self, parser, namespace, values, option_string=None):
        typed = getattr(namespace, "_flags", None)
        if typed is None:
            typed = {}
            namespace._flags = typed
        given = typed.get(self.dest)
        if given is not None and option_string is not None and given != option_string:
            new, old = self.option_strings[0], self.option_strings[1]
            raise argparse.ArgumentError(self, f"{old} is the old name of {new}; give {new} only (both were given)")
        setattr(namespace, self.dest, values)
        typed[self.dest] = option_string or self.option_strings[0]
        if option_string is not None and option_string != self.option_strings[0]:
            warnings.warn(f"{option_string} is the old name of {self.option_strings[0]} and goes away in the next "
                          f"release; use {self.option_strings[0]}", DeprecationWarning, stacklevel=2)


def add_renamed(p, new: str, old: str, *, help: str, **kwargs) -> argparse.Action:
    """Add the option ``new`` that also answers to its old name ``old`` (accepted for one release; its help says
    so).  Other keyword arguments are those of ``add_argument`` (``type``, ``default``, ``metavar``, ``required``).

    A sweep spec may name the option by either flag (:mod:`fedsde.sweep.command` reads every option string).
    """
    return p.add_argument(new, old, action=_RenamedFlag, help=f"{help} ({old}: its old name, accepted for one "
                          "release)", **kwargs)


def check_device(value: str) -> None:
    """``--device``, validated as the simulating commands validate it (:func:`fedsde._validate.device_dtype`:
    a known torch device that is available here), also where the command simulates nothing; one-line error."""
    import torch

    from fedsde._validate import device_dtype

    try:
        device_dtype(value, torch.float64)
    except FedsdeInputError as exc:
        raise FedsdeInputError(str(exc).replace("device=", "--device=", 1)) from None


def flag(args: argparse.Namespace, dest: str) -> str:
    """The option string the user typed for ``dest`` (a renamed option's old name when that was used), else the
    option's name: ``--`` and ``dest`` with ``-`` for ``_``.  Messages about an option name it as it was typed."""
    return (getattr(args, "_flags", None) or {}).get(dest, "--" + dest.replace("_", "-"))


@contextlib.contextmanager
def options_named(args: argparse.Namespace, *names: str):
    """Re-raise a library :class:`FedsdeInputError` with the Python argument names ``names`` (``participation=…``)
    written as the options the user typed (``--participation=…``, :func:`flag`), so a CLI error names the flags."""
    import re

    pattern = re.compile(r"(?<![\w.-])(" + "|".join(names) + r")=")
    try:
        yield
    except FedsdeInputError as exc:
        text = pattern.sub(lambda found: flag(args, found.group(1)) + "=", str(exc))
        if text == str(exc):
            raise
        raise type(exc)(text) from None


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


from fedsde._cli._rule_flags import (  # noqa: E402,F401  (the commands import them from here)
    add_aggregator_option,
    add_rule_sde_args,
    aggregator_from_args,
    aggregator_options,
    check_aggregator_problem,
    rule_from_args,
    rule_sampling_from_args,
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


def check_start(problem, w0: np.ndarray | None, name: str = "--w0") -> None:
    """Refuse a start ``w0`` at which the objective or ‖∇F‖² overflows float64 (they would be reported as nulls).

    Only for problems with NumPy ``loss`` and ``grad`` (quadratic, regression, classification, module problems);
    others are left to the run's own divergence checks.
    """
    if w0 is None or not (callable(getattr(problem, "loss", None)) and callable(getattr(problem, "grad", None))):
        return
    with np.errstate(all="ignore"):
        try:
            loss = float(np.asarray(problem.loss(w0), dtype=float).sum())
            g = np.asarray(problem.grad(w0), dtype=float)
            gn = float(np.dot(g.ravel(), g.ravel()))
        except (OverflowError, FloatingPointError, ValueError):
            loss, gn = float("inf"), float("inf")
    if not (np.isfinite(loss) and np.isfinite(gn)):
        raise FedsdeInputError(f"{name}: the objective F(w0) = {loss:.3g} or ‖∇F(w0)‖² = {gn:.3g} overflows "
                               "float64 at this start; give a start of moderate size")


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


#: warning categories that are not about the result (library housekeeping): neither reported nor strict
_HOUSEKEEPING = (DeprecationWarning, PendingDeprecationWarning, FutureWarning, ImportWarning, ResourceWarning)
_LOG: list | None = None  # the warnings recorded while a command runs (see capture_warnings)


@contextlib.contextmanager
def capture_warnings():
    """Record every warning raised inside (``fedsde.cli.main`` wraps each command in it); yields the record."""
    global _LOG
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        prev, _LOG = _LOG, log
        try:
            yield log
        finally:
            _LOG = prev


def warn(message: str) -> None:
    """A warning of the command itself: reported by :func:`emit` (stderr and JSON ``warnings``), fatal under
    ``--strict``."""
    warnings.warn(message, UserWarning, stacklevel=2)


def run_warnings() -> list[str]:
    """One-line messages of the warnings recorded so far in this command (in order, without repeats)."""
    out: list[str] = []
    for w in _LOG or ():
        if issubclass(w.category, _HOUSEKEEPING) or "matplotlib" in str(w.filename):
            continue
        msg = " ".join(str(w.message).split())
        if msg not in out:
            out.append(msg)
    return out


def emit(args: argparse.Namespace, result: dict, human: str) -> int:
    """Print ``result`` as one JSON object under ``--json``, else the human-readable text.

    The warnings of the run are added as ``result["warnings"]`` (a list of strings, empty when none) and printed on
    stderr, one line each; under ``--strict`` the first one is raised as an error instead (nothing is printed).
    """
    msgs = [str(m) for m in result.get("warnings") or ()]
    msgs += [m for m in run_warnings() if m not in msgs]
    if getattr(args, "strict", False) and msgs:
        more = f" (and {len(msgs) - 1} more warning(s))" if len(msgs) > 1 else ""
        raise FedsdeInputError(f"--strict: {msgs[0]}{more}")
    for m in msgs:
        sys.stderr.write(f"warning: {m}\n")
    from fedsde._cli._resources import note_json, resources, resources_line
    from fedsde._output import result_stream

    if getattr(args, "json", False):  # the printed JSON, in the planned peak (up front where a command sized it)
        note_json(result)
    result = {**result, "warnings": msgs, "resources": resources()}
    if getattr(args, "json", False):  # the stdout the command started with (user code's prints go to stderr)
        result_stream().write(json.dumps(to_jsonable(result), allow_nan=False) + "\n")
    else:
        sys.stdout.write(human.rstrip("\n") + "\n" + resources_line(result["resources"]) + "\n")
    return 0


def fmt_array(a) -> str:
    """Compact text of a vector or matrix for human output."""
    return np.array2string(np.asarray(a), precision=6, suppress_small=False, max_line_width=100)


def refuse_known_divergence(problem, eta, local_steps=None, server_lr: float = 1.0, *, aggregator="fedavg",
                            participation: int | None = None) -> None:
    """Raise a one-line :class:`FedsdeInputError` when :func:`known_divergence` finds a reason (commands that run
    the algorithm or its SDE call this before any work); ``local_steps`` old name: ``steps``; ``eta`` may be a
    :class:`~fedsde.params.Schedule` holding the rates."""
    from fedsde.exact.stability import known_divergence

    why = known_divergence(problem, eta, local_steps, server_lr, aggregator=aggregator, participation=participation)
    if why:
        raise FedsdeInputError(why[0])


def refuse_least_squares(problem, what: str) -> None:
    """One-line error when ``problem`` is a least-squares regression problem and ``what`` (a command or option) needs
    the constant-noise closed forms of quadratic clients; it names where the exact answers are."""
    if getattr(problem, "model", None) == "least-squares":
        raise FedsdeInputError(
            f"{what}: {problem.name or 'the problem'} is a least-squares regression problem, whose minibatch noise "
            "depends on w, so the closed forms for constant noise do not apply; its exact laws: `fedsde exact` (the "
            "chain's moments, with the constant-noise surrogate's stationary law beside them), `fedsde compare` "
            "(the SDE's exact moments), fedsde.exact.least_squares_round_law / least_squares_stationary_law / "
            "least_squares_sde_moments; the surrogate as quadratic clients: fedsde.exact.constant_noise_surrogate"
        )
