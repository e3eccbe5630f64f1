"""The link between sweeps and the commands they run: a cell runs a command's own handler in-process.

A cell is ``fedsde COMMAND <options> --json``.  The commands a cell can run come as a table, ``commands``: a
mapping from a command's name to the function that registers its parser on an ``argparse`` subparsers action
(``register(subparsers)``, the contract of the ``fedsde`` subcommand modules: it adds the parser and sets its
handler as the default ``func``); a table may also carry ``refused``, name → why a cell cannot run that command, so
that a spec naming one is told why rather than "unknown command".  The command line hands its own table
(:func:`fedsde.cli.cell_commands`); the Python API defaults to that same table (:func:`default_commands`, the one
place where this layer reaches up to the command line, by one explicit import inside that function).  The
functions of a table pickle by reference, so a cell runs the same on a Dask worker, given only its own command's
entry.

Rather than start a process per cell, the command registers itself on a small parser of our own, the cell's flags
are parsed by it and its handler runs in this process with stdout captured; the one JSON object it prints is the
cell's result.  The mapping from exceptions to outcomes follows the ``fedsde`` entry point: a user mistake or a
diverged simulation (the CLI's exit status 2, one line on stderr) becomes a failed cell carrying that line; any
other exception a failed cell carrying the exception text.  The flags a command declares are recorded as it
declares them (:class:`CommandInfo`), through argparse's public API only.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fedsde.errors import FedsdeInputError, SimulationDivergedError

#: registers one command's parser on an argparse subparsers action
Register = Callable[[Any], None]
#: options of cell commands that a spec may not set (they write outside the sweep folder or start clusters)
NOT_CELL_OPTIONS = {"out": "writes files outside the sweep folder", "figures": "writes files outside the sweep folder",
                    "sweep_out": "writes files outside the sweep folder",
                    "threads": "a cell runs on one thread (the sweep's --workers spreads the cells)",
                    "workers": "starts worker processes of its own (the sweep's --workers spreads the cells)"}
#: exceptions the ``fedsde`` entry point turns into a one-line message and exit status 2
_EXIT2 = (FedsdeInputError, SimulationDivergedError, FileNotFoundError, IsADirectoryError, PermissionError)
#: a cell swaps sys.stdout/sys.stderr and torch's thread count, which are per process: one cell at a time
CELL_LOCK = threading.RLock()


def default_commands() -> Mapping[str, Register]:
    """The table of the ``fedsde`` command line (:func:`fedsde.cli.cell_commands`): what a sweep runs when no
    ``commands`` are given.  The one import from the sweep layer up to the command line, made here on purpose:
    Python users name cells by their ``fedsde`` command."""
    from fedsde.cli import cell_commands

    return cell_commands()


def resolve_commands(commands: Mapping[str, Register] | None) -> Mapping[str, Register]:
    """``commands``, or the command line's table when ``None``."""
    return default_commands() if commands is None else commands


class ArgumentError(Exception):
    """A cell's flags were rejected by the command's parser (the CLI's exit status 2)."""


class _Recorder:
    """What a command declares: every action its ``add_argument`` calls return, with the ``action=`` they named."""

    def __init__(self, target, declared: list):
        self._target, self._declared = target, declared

    def add_argument(self, *args, **kwargs):
        action = self._target.add_argument(*args, **kwargs)
        self._declared.append((action, kwargs.get("action")))
        return action

    def add_argument_group(self, *args, **kwargs):
        return _Recorder(self._target.add_argument_group(*args, **kwargs), self._declared)

    def add_mutually_exclusive_group(self, *args, **kwargs):
        return _Recorder(self._target.add_mutually_exclusive_group(*args, **kwargs), self._declared)

    def __getattr__(self, name):
        return getattr(self._target, name)


class _Parser(argparse.ArgumentParser):
    """A command's parser for cells: errors raise :class:`ArgumentError`; the flags the command declares (after
    argparse's own set-up) are recorded in ``declared``."""

    def __init__(self, *args, **kwargs):
        self.declared: list[tuple[argparse.Action, Any]] = []
        self.recording = False
        super().__init__(*args, **kwargs)
        self.recording = True

    def _wrap(self, target):
        return _Recorder(target, self.declared) if self.recording else target

    def add_argument(self, *args, **kwargs):
        return self._wrap(super()).add_argument(*args, **kwargs)

    def add_argument_group(self, *args, **kwargs):
        return self._wrap(super().add_argument_group(*args, **kwargs))

    def add_mutually_exclusive_group(self, *args, **kwargs):
        return self._wrap(super().add_mutually_exclusive_group(*args, **kwargs))

    def error(self, message: str):
        raise ArgumentError(f"{self.prog}: error: {message}")


@dataclass(frozen=True)
class CommandInfo:
    """A cell command: the name ``fedsde`` knows it by, its parser and the flags it declares."""

    name: str
    parser: argparse.ArgumentParser  # the parser of ``fedsde NAME`` (errors raise ArgumentError)
    options: dict[str, argparse.Action]  # spec key (long flag without dashes, '-' → '_') → action
    positionals: tuple[argparse.Action, ...]
    repeated: frozenset[str]  # spec keys whose flag is given once per value (append actions)
    register: Register

    @property
    def takes_seed(self) -> bool:
        return "seed" in self.options


def command_info(command: str, commands: Mapping[str, Register] | None = None) -> CommandInfo:
    """The parser and options of ``fedsde COMMAND`` (``-`` or ``_`` in the name) in the table ``commands``
    (default: the command line's); FedsdeInputError when the table has no such command."""
    table = resolve_commands(commands)
    name = str(command).replace("_", "-")
    register = table.get(name, table.get(str(command)))
    if register is None:
        known = ", ".join(sorted(table))
        refused = getattr(table, "refused", {})
        why = (f"not a command a sweep cell can run ({refused[name]})" if name in refused else "unknown command")
        raise FedsdeInputError(f"run.command={command!r}: {why}; cell commands: {known}")
    return _command_info(name, register)


@functools.cache
def _command_info(name: str, register: Register) -> CommandInfo:
    root = argparse.ArgumentParser(prog="fedsde")
    sub = root.add_subparsers(dest="command", parser_class=_Parser)
    register(sub)
    parser = sub.choices.get(name) or next(iter(sub.choices.values()))
    options: dict[str, argparse.Action] = {}
    positionals = []
    repeated = set()
    for action, kind in parser.declared:
        if kind in ("help", "version"):
            continue
        if not action.option_strings:
            positionals.append(action)
            options[action.dest] = action
        for flag in action.option_strings:
            if flag.startswith("--"):
                key = flag[2:].replace("-", "_")
                options[key] = action
                if kind in ("append", "extend"):
                    repeated.add(key)
    return CommandInfo(name, parser, options, tuple(positionals), frozenset(repeated), register)


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
    if key in info.repeated:
        return [x for v in (value if isinstance(value, list) else [value]) for x in (flag, str(v))]
    if isinstance(value, list):
        if action.nargs in ("+", "*") or isinstance(action.nargs, int):
            return [flag, *map(str, value)]
        return [flag, ",".join(map(str, value))]
    return [f"{flag}={value}"]  # '=' keeps values such as '-1' from reading as flags


def parse_cell_args(info: CommandInfo, argv: list[str]) -> argparse.Namespace:
    """Parse ``fedsde NAME argv`` with the command's parser; ArgumentError on a parse error."""
    return info.parser.parse_args(argv)


def run_command(command: str, argv: list[str], commands: Mapping[str, Register] | None = None) -> dict[str, Any]:
    """Run ``fedsde COMMAND argv --json`` (and ``--quiet``: no progress bars) in this process; return the outcome.

    Returns ``{"status": "done", "result": {...}}`` with the parsed JSON object, or ``{"status": "failed",
    "error": "one line"}``; both with ``wall_s`` and, when the command wrote any, ``stderr`` (its last 2000
    characters).  Never raises for a failing cell.  Cells in one process run one at a time (:data:`CELL_LOCK`):
    a Dask worker with several threads runs its cells in turn, so give workers one thread each.
    """
    with CELL_LOCK:
        return _run_command(command, argv, commands)


def _run_command(command: str, argv: list[str], commands: Mapping[str, Register] | None) -> dict[str, Any]:
    t0 = time.perf_counter()
    out, err, stray = io.StringIO(), io.StringIO(), io.StringIO()
    outcome: dict[str, Any]
    try:
        info = command_info(command, commands)
        from fedsde._memory import command_budget

        # a cell is a command of its own: its own memory budget (what the process running it leaves, inside a map
        # or a sweep command its budget's remainder), reported in its JSON resources
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings(), \
                command_budget():
            warnings.simplefilter("default")
            quiet = ["--quiet"] if "--quiet" in info.parser._option_string_actions else []  # no bars in a cell
            args = parse_cell_args(info, [*argv, "--json", *quiet])
            from fedsde._output import stdout_to_stderr

            with stdout_to_stderr(stray):  # the result on `out`; what other code prints (a user's model) apart
                rc = int(args.func(args) or 0)
        if not out.getvalue():  # a command of one's own that prints its JSON object itself
            out, stray = stray, io.StringIO()
        err.write(stray.getvalue())
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
            # where it ran (its memory budget, threads) is not what it computed: beside the result, not in it, so
            # that a cell's result is the same wherever and whenever it runs
            used = result.pop("resources", None)
            outcome = {"status": "done", "result": result, **({"run_resources": used} if used is not None else {})}
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
