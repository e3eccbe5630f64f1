"""The ``fedsde`` command line.

Each subcommand lives in ``fedsde/_cli/<name>.py`` and exposes ``register(subparsers)``; its handler returns
a JSON-able dict (printed as one JSON object under ``--json``) and prints a human-readable view otherwise.
User mistakes (:class:`fedsde.errors.FedsdeInputError`, missing files, bad numbers) and simulations that diverge
with the parameters given (:class:`fedsde.errors.SimulationDivergedError`, which names the round and client) become
a one-line ``fedsde COMMAND: error: …`` message and exit status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

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
    try:
        with warnings.catch_warnings():
            if getattr(args, "json", False):
                # keep stdout a single JSON object; warnings go to stderr as one line each
                warnings.simplefilter("default")
            return int(args.func(args) or 0)
    except (FedsdeInputError, SimulationDivergedError) as exc:
        print(f"fedsde {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        print(f"fedsde {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"fedsde {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
