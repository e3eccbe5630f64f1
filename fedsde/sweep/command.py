"""The one link between sweeps and the command line: run a subcommand's own handler in-process for one cell.

A cell is ``fedsde COMMAND <options> --json``.  Rather than start a process per cell, the subcommand module
``fedsde._cli.COMMAND`` registers itself (its ``register(subparsers)``) on a small parser of our own, the cell's
flags are parsed by it and its handler runs in this process with stdout captured; the one JSON object it prints is
the cell's result.  The mapping from exceptions to outcomes follows the ``fedsde`` entry point: a user mistake or a
diverged simulation (the CLI's exit status 2, one line on stderr) becomes a failed cell carrying that line; any
other exception a failed cell carrying the exception text.  ``fedsde.cli`` itself is not imported (nothing imports
it), so every command present under ``fedsde/_cli/`` is available to sweeps, including ones added later, but
``sweep`` itself and the commands that write files of their own (:data:`_NOT_CELL_COMMANDS`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import io
import json
import pkgutil
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any

from fedsde.errors import FedsdeInputError, SimulationDivergedError

#: modules under fedsde._cli that are not commands a cell can run: helpers, and commands that write files of
#: their own outside the sweep folder or run sweeps themselves
_NOT_CELL_COMMANDS = frozenset({"common", "sweep", "reproduce", "compare_aggregators"})
#: options of cell commands that a spec may not set (they write outside the sweep folder or start clusters)
NOT_CELL_OPTIONS = {"out": "writes files outside the sweep folder", "figures": "writes files outside the sweep folder",
                    "sweep_out": "writes files outside the sweep folder",
                    "workers": "starts worker processes of its own (the sweep's --workers spreads the cells)"}
#: exceptions the ``fedsde`` entry point turns into a one-line message and exit status 2
_EXIT2 = (FedsdeInputError, SimulationDivergedError, FileNotFoundError, IsADirectoryError, PermissionError)
#: a cell swaps sys.stdout/sys.stderr and torch's thread count, which are per process: one cell at a time
CELL_LOCK = threading.RLock()


class ArgumentError(Exception):
    """A cell's flags were rejected by the command's parser (the CLI's exit status 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise ArgumentError(f"{self.prog}: error: {message}")


@dataclass(frozen=True)
class CommandInfo:
    """A cell command: its module name, the name ``fedsde`` knows it by, and its parser."""

    module: str
    name: str
    parser: argparse.ArgumentParser  # the parser of ``fedsde NAME`` (errors raise ArgumentError)
    options: dict[str, argparse.Action]  # spec key (long flag without dashes, '-' → '_') → action
    positionals: tuple[argparse.Action, ...]

    @property
    def takes_seed(self) -> bool:
        return "seed" in self.options


def available_commands() -> list[str]:
    """Names of the commands a sweep cell can run (every module under ``fedsde/_cli`` but common and sweep)."""
    import fedsde._cli as pkg

    return sorted(m.name.replace("_", "-") for m in pkgutil.iter_modules(pkg.__path__)
                  if not m.name.startswith("_") and m.name not in _NOT_CELL_COMMANDS)


@functools.cache
def command_info(command: str) -> CommandInfo:
    """The parser and options of ``fedsde COMMAND`` (``-`` or ``_`` in the name); FedsdeInputError if unknown."""
    module = str(command).replace("-", "_")
    known = available_commands()
    if module.replace("_", "-") not in known:
        what = ("not a command a sweep cell can run (it writes files outside the sweep folder or runs sweeps)"
                if module in _NOT_CELL_COMMANDS and module != "common" else "unknown command")
        raise FedsdeInputError(f"run.command={command!r}: {what}; cell commands: {', '.join(known)}")
    mod = importlib.import_module(f"fedsde._cli.{module}")
    root = _Parser(prog="fedsde")
    sub = root.add_subparsers(dest="command", parser_class=_Parser)
    mod.register(sub)
    name, parser = next(iter(sub.choices.items()))
    options: dict[str, argparse.Action] = {}
    positionals = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if not action.option_strings:
            positionals.append(action)
            options[action.dest] = action
        for flag in action.option_strings:
            if flag.startswith("--"):
                options[flag[2:].replace("-", "_")] = action
    return CommandInfo(module, name, parser, options, tuple(positionals))


def option_argv(info: CommandInfo, key: str, value: Any) -> list[str]:
    """The flags for one spec option ``key = value`` (booleans switch flags on or off, lists join with commas)."""
    action = info.options[key]
    if not action.option_strings:  # positional
        return [str(v) for v in value] if isinstance(value, list) else [str(value)]
    flag = "--" + key.replace("_", "-")
    if flag not in action.option_strings:
        flag = next(f for f in action.option_strings if f.startswith("--") and f[2:].replace("-", "_") == key)
    if action.nargs == 0:  # store_true / store_false / store_const / count
        if not isinstance(value, bool):
            raise FedsdeInputError(f"{key}={value!r}: {flag} is a switch; give true or false")
        return [flag] if value else []
    if isinstance(action, argparse._AppendAction):
        return [x for v in (value if isinstance(value, list) else [value]) for x in (flag, str(v))]
    if isinstance(value, list):
        if action.nargs in ("+", "*") or isinstance(action.nargs, int):
            return [flag, *map(str, value)]
        return [flag, ",".join(map(str, value))]
    return [f"{flag}={value}"]  # '=' keeps values such as '-1' from reading as flags


def parse_cell_args(info: CommandInfo, argv: list[str]) -> argparse.Namespace:
    """Parse ``fedsde NAME argv`` with the command's parser; ArgumentError on a parse error."""
    return info.parser.parse_args(argv)


def run_command(command: str, argv: list[str]) -> dict[str, Any]:
    """Run ``fedsde COMMAND argv --json`` in this process and return the outcome.

    Returns ``{"status": "done", "result": {...}}`` with the parsed JSON object, or ``{"status": "failed",
    "error": "one line"}``; both with ``wall_s`` and, when the command wrote any, ``stderr`` (its last 2000
    characters).  Never raises for a failing cell.  Cells in one process run one at a time (:data:`CELL_LOCK`):
    a Dask worker with several threads runs its cells in turn, so give workers one thread each.
    """
    with CELL_LOCK:
        return _run_command(command, argv)


def _run_command(command: str, argv: list[str]) -> dict[str, Any]:
    t0 = time.perf_counter()
    out, err = io.StringIO(), io.StringIO()
    outcome: dict[str, Any]
    try:
        info = command_info(command)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("default")
            args = parse_cell_args(info, [*argv, "--json"])
            rc = int(args.func(args) or 0)
        if rc != 0:
            lines = err.getvalue().strip().splitlines()
            outcome = {"status": "failed", "error": lines[-1] if lines else f"fedsde {info.name}: exit status {rc}"}
        else:
            try:
                result = json.loads(out.getvalue())
            except json.JSONDecodeError as exc:
                raise RuntimeError(f"fedsde {info.name} --json did not print one JSON object ({exc})") from None
            if not isinstance(result, dict):
                raise RuntimeError(f"fedsde {info.name} --json printed a {type(result).__name__}, not an object")
            outcome = {"status": "done", "result": result}
    except ArgumentError as exc:
        outcome = {"status": "failed", "error": str(exc)}
    except _EXIT2 as exc:
        outcome = {"status": "failed", "error": f"fedsde {command}: error: {exc}"}
    except SystemExit as exc:
        outcome = {"status": "failed", "error": f"fedsde {command}: exit status {exc.code}"}
    except Exception as exc:
        outcome = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
    outcome["wall_s"] = time.perf_counter() - t0
    if err.getvalue().strip():
        outcome["stderr"] = err.getvalue()[-2000:]
    return outcome
