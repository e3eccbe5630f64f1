"""The commands a sweep runs come as a table handed down by the command line: a table of one's own, the command
line's default, and the sweep layer's independence from the command line's modules."""

from __future__ import annotations

import ast
import json
import pickle
from pathlib import Path

import pytest

from fedsde.cli import CommandTable, cell_commands
from fedsde.errors import FedsdeInputError
from fedsde.sweep import load, load_spec, run
from fedsde.sweep.command import command_info, option_argv
from fedsde.sweep.spec import cell_argv

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "fedsde" / "sweep"


def _toy(args) -> int:
    print(json.dumps({"y": 2 * args.x, "seed": args.seed, "tags": args.tag, "a": args.a, "b": args.b}))
    return 0


def toy_register(sub) -> None:
    """A command of a table of one's own: ``toy --x X [--tag T …] [--a | --b] --seed S --json``."""
    p = sub.add_parser("toy")
    p.add_argument("--x", type=float, required=True)
    p.add_argument("--tag", action="append", default=[])
    either = p.add_mutually_exclusive_group()
    either.add_argument("--a", action="store_true")
    either.add_argument("--b", action="store_true")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_toy)


TOY = {"toy": toy_register}


def test_a_table_of_ones_own(tmp_path):
    spec = {"run": {"command": "toy", "seed": 5}, "base": {"tag": ["p", "q"]}, "grid": {"x": [1.0, 2.5]}}
    summary = run(spec, tmp_path / "o", commands=TOY, progress=False)
    assert (summary["done"], summary["failed"]) == (2, 0)
    ds = load(tmp_path / "o")
    assert list(ds.y.values) == [2.0, 5.0] and list(ds.a.values) == [0.0, 0.0]
    info = command_info("toy", TOY)
    assert option_argv(info, "tag", ["p", "q"]) == ["--tag", "p", "--tag", "q"]  # a repeated flag, once per value
    assert option_argv(info, "a", True) == ["--a"] and option_argv(info, "a", False) == []
    with pytest.raises(FedsdeInputError, match=r"run.command='simulate': unknown command; cell commands: toy$"):
        load_spec({"run": {"command": "simulate", "seed": 1}}, commands=TOY)


def test_cells_that_only_fail_together_are_found():
    """Each value parses alone, but ``--a`` and ``--b`` together do not: the cell that has both is named."""
    spec = {"run": {"command": "toy", "seed": 1}, "base": {"x": 1.0}, "grid": {"a": [False, True], "b": [False, True]}}
    with pytest.raises(FedsdeInputError, match=r'cell \{"a":true,"b":true\}: fedsde toy: error: argument --b: not '
                       r"allowed with argument --a") as err:
        load_spec(spec, commands=TOY)
    assert "\n" not in str(err.value)
    ok = load_spec({"run": {"command": "toy", "seed": 1}, "grid": {"a": [False, True], "b": [False]},
                    "zip": {"x": [1.0, 2.0], "tag": [["p"], []]}}, commands=TOY)
    assert ok.n_cells == 4 and all("--b" not in cell_argv(ok, c) for c in ok.cells())


def test_the_command_lines_table_is_the_default():
    table = cell_commands()
    assert isinstance(table, CommandTable) and "simulate" in table and "sweep" not in table
    assert command_info("simulate").register == table["simulate"]
    # a table's entries pickle by reference (what a Dask worker receives with each cell)
    entry = pickle.loads(pickle.dumps(table["simulate"]))
    assert entry.__self__ == table["simulate"].__self__ and entry.__func__ is table["simulate"].__func__
    with pytest.raises(FedsdeInputError, match=r"run.command='reproduce': not a command a sweep cell can run \(it "
                       r"writes files of its own outside the sweep folder\); cell commands: claims, compare, "):
        load_spec({"run": {"command": "reproduce"}})


def _imports(path: Path) -> list[tuple[str, str]]:
    """(enclosing function or '<module>', imported module) for every import in a file, importlib's included."""
    out = []

    def visit(node, where):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else where
            if isinstance(child, ast.Import):
                out.extend((where, a.name) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                out.append((where, child.module or ""))
            elif isinstance(child, ast.Call) and getattr(child.func, "attr", getattr(child.func, "id", "")) == \
                    "import_module" and child.args and isinstance(child.args[0], ast.Constant):
                out.append((where, str(child.args[0].value)))
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), "<module>")
    return out


def test_the_sweep_layer_does_not_import_the_command_line():
    up = [(p.name, where, mod) for p in sorted(SWEEP.glob("*.py")) for where, mod in _imports(p)
          if mod == "fedsde.cli" or mod.startswith(("fedsde._cli", "fedsde.cli."))]
    assert up == [("command.py", "default_commands", "fedsde.cli")]  # the Python API's default table, only
    text = (SWEEP / "command.py").read_text(encoding="utf-8")
    assert "argparse._" not in text and "._actions" not in text and "pkgutil" not in text
