"""Progress of long computations, on stderr: the one helper behind every progress bar of fedsde.

* :func:`progress_bar` — a tqdm bar written to ``sys.stderr`` (never stdout: ``fedsde … --json`` prints exactly one
  JSON object there), removed from the terminal when it closes; ``enabled=False`` gives a disabled bar with the
  same methods, so code runs the same whether or not progress shows (results never depend on it).
* :func:`progress_wanted` — whether a command shows progress: never with ``--quiet``; else as the environment
  variable ``FEDSDE_PROGRESS`` says (``0``: never, ``1``: always, e.g. for a log file); else when stderr is a
  terminal (so pipes, log files and captured test output stay free of bars, as with ``git`` or ``pip``).
* :func:`close_all` — close the bars still open (the command line calls it before it prints an error, so the message
  starts on a line of its own).
* :func:`tracking` and :func:`advance` — a bar that code several calls below may advance without a parameter of its
  own (the metric loops of :mod:`fedsde.problems.metrics` tick it per weight vector): the caller that owns the bar
  installs it for the duration of a call; ``advance`` elsewhere does nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
from collections.abc import Iterator

#: the environment variable that forces progress on (``1``) or off (``0``) when ``--quiet`` is not given
ENV = "FEDSDE_PROGRESS"
_ON = ("1", "true", "yes", "on", "always")
_OFF = ("0", "false", "no", "off", "never")
_CURRENT: contextvars.ContextVar = contextvars.ContextVar("fedsde_progress_bar", default=None)


def progress_wanted(quiet: bool = False, stream=None) -> bool:
    """Whether a command shows progress: not with ``quiet``; else ``FEDSDE_PROGRESS`` (``1``/``0``) when set to
    one of those; else whether ``stream`` (default ``sys.stderr``) is a terminal."""
    if quiet:
        return False
    env = os.environ.get(ENV, "").strip().lower()
    if env in _OFF:
        return False
    if env in _ON:
        return True
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except (ValueError, OSError):  # a closed or detached stream
        return False


def progress_bar(total: float | None, desc: str, *, enabled: bool, unit: str = "step", leave: bool = False):
    """A tqdm bar on ``sys.stderr`` (disabled unless ``enabled``): ``total`` units of ``unit``, labelled ``desc``.

    Use it as tqdm's (``update``, ``set_description``, ``close``, or as a context manager).  It is removed when
    closed unless ``leave``.
    """
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, leave=leave, file=sys.stderr,
                dynamic_ncols=True)


@contextlib.contextmanager
def tracking(bar) -> Iterator[None]:
    """Make ``bar`` (or ``None``: no bar) the one :func:`advance` moves while the block runs (this thread and
    context only; an enclosing bar is hidden, not advanced, by ``None``)."""
    token = _CURRENT.set(bar)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def advance(n: float = 1) -> None:
    """Advance the bar installed by :func:`tracking` by ``n`` (nothing when none is)."""
    bar = _CURRENT.get()
    if bar is not None:
        bar.update(n)


@contextlib.contextmanager
def counting(total: float, desc: str, *, enabled: bool, unit: str = "step"):
    """A :func:`progress_bar` of ``total`` units that code below advances through :func:`advance` (installed by
    :func:`tracking` for the block), filled when the block ends (for the work that does not tick)."""
    with progress_bar(total, desc, enabled=enabled, unit=unit) as bar, tracking(bar):
        yield bar
        if bar.n < total:
            bar.update(total - bar.n)


def close_all() -> None:
    """Close every progress bar still open (after an error cut its computation short)."""
    from tqdm.auto import tqdm

    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()
