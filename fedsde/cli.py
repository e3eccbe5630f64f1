"""The ``fedsde`` command line.

Each subcommand lives in ``fedsde/_cli/<name>.py`` and exposes ``register(subparsers)``; its handler returns
a JSON-able dict (printed as one JSON object under ``--json``) and prints a human-readable view otherwise.
User mistakes (:class:`fedsde.errors.FedsdeInputError`, missing files, bad numbers) and simulations that diverge
with the parameters given (:class:`fedsde.errors.SimulationDivergedError`, which names the round and client) become
a one-line ``fedsde COMMAND: error: …`` message and exit status 2, without a traceback; so do operating-system
errors (files, folders) and running out of memory.  Warnings raised while a command runs (e.g. a run that grows far
beyond its start and optimum, :class:`fedsde.errors.DivergenceWarning`) are reported on stderr and in the JSON
``warnings`` list, and become such an error under ``--strict`` (see :mod:`fedsde._cli.common`).
"""

from __future__ import annotations

import argparse
import importlib
import sys

import numpy as np

from fedsde.errors import FedsdeInputError, SimulationDivergedError

#: subcommand modules under fedsde._cli, in the order ``--help`` lists them
SUBCOMMANDS = (
    "exact",
    "simulate",
    "derive",
    "sde",
    "compare",
    "claims",
    "compare_aggregators",
    "validity",
    "scaling",
    "sweep",
    "reproduce",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's own convention)
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available subcommand registered."""
    parser = _Parser(
        prog="fedsde",
        description="Continuous-time (SDE) analysis and simulation of federated optimisation.",
    )
    from fedsde import __version__

    parser.add_argument("--version", action="version", version=f"fedsde {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in SUBCOMMANDS:
        try:
            mod = importlib.import_module(f"fedsde._cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"fedsde._cli.{name}":
                continue  # subcommand not shipped in this build
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fedsde`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from fedsde._cli.common import capture_warnings

    try:
        # warnings are recorded and reported by emit (stderr, JSON "warnings"; errors under --strict)
        with capture_warnings():
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
        _error(args.command, f"out of memory ({exc or 'allocation failed'}); use fewer replicates/paths or a "
               "smaller --chunk-size where the command has one")
        return 2
    except RuntimeError as exc:
        if "out of memory" not in str(exc) and "can't allocate memory" not in str(exc):
            raise
        _error(args.command, f"out of memory ({str(exc).splitlines()[0]}); use fewer replicates/paths or a smaller "
               "--chunk-size where the command has one")
        return 2
    except KeyboardInterrupt:
        print(f"fedsde {args.command}: interrupted", file=sys.stderr)
        return 130


def _error(command: str, message: str) -> None:
    """``fedsde COMMAND: error: …`` on one line of stderr."""
    print(f"fedsde {command}: error: {' '.join(message.split())}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
