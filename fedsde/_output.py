"""Where a command's result goes (internal): under ``--json`` stdout carries exactly one JSON object, so everything
else that code run by the command prints — a user's model printing in ``forward``, a model file printing at import —
is sent to stderr while the command runs, and the result is written to the stdout the command started with.

``fedsde.cli.main`` (for ``--json``) and a sweep cell (:mod:`fedsde.sweep.command`, always ``--json``) run a command
inside :func:`stdout_to_stderr`; :func:`fedsde._cli.common.emit` writes the result to :func:`result_stream`.  (A
cell command of one's own that prints its JSON object itself still works: a sweep cell reads what it printed when
nothing was written to the result stream.)
"""

from __future__ import annotations

import contextlib
import sys
from typing import TextIO

_RESULT: list[TextIO] = []


@contextlib.contextmanager
def stdout_to_stderr(target: TextIO | None = None):
    """Inside, ``sys.stdout`` is ``sys.stderr`` (or ``target``) and :func:`result_stream` is the ``sys.stdout`` of
    entry."""
    _RESULT.append(sys.stdout)
    try:
        with contextlib.redirect_stdout(sys.stderr if target is None else target):
            yield
    finally:
        _RESULT.pop()


def result_stream() -> TextIO:
    """The stream a command's result goes to: the stdout of the innermost :func:`stdout_to_stderr`, else
    ``sys.stdout``."""
    return _RESULT[-1] if _RESULT else sys.stdout
