"""The ``fedsde`` command line.

The commands are declared in :data:`SUBCOMMANDS` (home: :mod:`fedsde._cli`): each one's name, one-line help, and
whether a sweep cell can run it (:func:`cell_commands`, the table the command line hands to
:func:`fedsde.sweep.run`).  A command lives in ``fedsde/_cli/<name>.py`` (``-`` in a name is ``_`` there) and
exposes ``register(subparsers)``, which only declares its flags: the heavy modules (torch, scipy, sympy, dask,
matplotlib and fedsde's numerical subpackages) are imported by the handler that runs.  :func:`main` registers in
full only the command named on the command line and lists the others by their one-line help, so ``fedsde --help``
and a mistyped flag answer at once.

A handler returns a JSON-able dict (printed as one JSON object under ``--json``) and prints a human-readable view
otherwise.  User mistakes (:class:`fedsde.errors.FedsdeInputError`, missing files, bad numbers) and simulations
that diverge with the parameters given (:class:`fedsde.errors.SimulationDivergedError`, which names the round and
client) become a one-line ``fedsde COMMAND: error: …`` message and exit status 2, without a traceback; so do
operating-system errors (files, folders) and running out of memory.  Warnings raised while a command runs (e.g. a
run that grows far beyond its start and optimum, :class:`fedsde.errors.DivergenceWarning`) are reported on stderr
and in the JSON ``warnings`` list, and become such an error under ``--strict`` (see :mod:`fedsde._cli.common`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence

from fedsde._cli import SUBCOMMANDS, CommandTable, Subcommand, cell_commands
from fedsde.errors import FedsdeInputError, SimulationDivergedError

__all__ = ["SUBCOMMANDS", "CommandTable", "Subcommand", "build_parser", "cell_commands", "main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's own convention)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _named_command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is not an option (``fedsde`` takes no option values)."""
    return next((word for word in argv if isinstance(word, str) and not word.startswith("-")), None)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser of ``fedsde``.

    Parameters
    ----------
    argv
        ``None`` (default): every command registered with all its flags.  A command line: only the command it
        names is registered in full; the others are listed by their one-line help (enough for ``fedsde --help``
        and for the error on an unknown command).
    """
    parser = _Parser(
        prog="fedsde",
        description="Continuous-time (SDE) analysis and simulation of federated optimisation.",
    )
    from fedsde import __version__

    parser.add_argument("--version", action="version", version=f"fedsde {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    named = None if argv is None else _named_command(argv)
    for command in SUBCOMMANDS:
        if not command.shipped():
            continue  # not in this build
        if argv is None or command.name == named:
            command.register(sub)
        else:
            sub.add_parser(command.name, help=command.help)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fedsde`` console script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    import numpy as np

    from fedsde._cli.common import capture_warnings

    try:
        from fedsde._memory import command_budget
        from fedsde._output import stdout_to_stderr
        from fedsde._threads import thread_policy

        threads = getattr(args, "threads", None)
        if threads is not None and threads < 1:
            raise FedsdeInputError(f"--threads={threads}: must be an integer >= 1")
        # one thread policy, applied once; one memory budget for everything the command plans; warnings recorded
        # and reported by emit (stderr, JSON "warnings"; errors under --strict); under --json, stdout is the one
        # JSON object: what user code prints meanwhile goes to stderr
        with thread_policy(threads), capture_warnings(), command_budget(), \
                (stdout_to_stderr() if getattr(args, "json", False) else contextlib.nullcontext()):
            return int(args.func(args) or 0)
    except (FedsdeInputError, SimulationDivergedError, OSError) as exc:
        _error(args.command, str(exc))
        return 2
    except OverflowError as exc:  # Python float arithmetic on huge inputs (e.g. --eta 1e300 squared)
        _error(args.command, f"numeric overflow ({exc}): an input is too large for float64 arithmetic")
        return 2
    except np.linalg.LinAlgError as exc:  # e.g. a problem file whose numbers overflow in an eigendecomposition
        _error(args.command, f"linear algebra failed ({exc}): the inputs are too large or degenerate")
        return 2
    except MemoryError as exc:  # also torch.OutOfMemoryError (a RuntimeError) below
        _error(args.command, f"out of memory ({exc or 'allocation failed'}); {_memory_advice(args)}")
        return 2
    except RuntimeError as exc:
        if "out of memory" not in str(exc) and "can't allocate memory" not in str(exc):
            raise
        _error(args.command, f"out of memory ({str(exc).splitlines()[0]}); {_memory_advice(args)}")
        return 2
    except KeyboardInterrupt:
        from fedsde._progress import close_all

        close_all()
        print(f"fedsde {args.command}: interrupted", file=sys.stderr)
        return 130


#: options that lower a command's memory, in the order the advice names them (those the command has)
_MEMORY_OPTIONS = (("final_cov", "--final-cov diag (or none)"), ("replicates", "fewer --replicates"),
                   ("record_every", "a larger --record-every"), ("chunk_size", "a smaller --chunk-size"),
                   ("workers", "fewer --workers"))


def _memory_advice(args: argparse.Namespace) -> str:
    """What helps when ``args``' command ran out of memory: the options it has that lower its memory."""
    have = [text for dest, text in _MEMORY_OPTIONS if hasattr(args, dest)]
    return ("use " + ", ".join(have) if have else "use a smaller problem") + (
        "; FEDSDE_MEMORY_LIMIT caps what the command plans for")


def _error(command: str, message: str) -> None:
    """``fedsde COMMAND: error: …`` on one line of stderr."""
    from fedsde._progress import close_all

    close_all()  # a bar cut short by the error: cleared, so the message starts its own line
    print(f"fedsde {command}: error: {' '.join(message.split())}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
