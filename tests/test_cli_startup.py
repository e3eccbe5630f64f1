"""Start-up of the command line: ``fedsde --help`` and a command's flags import nothing heavy, and the lazy parser
(only the named command registered in full) says what the full one says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedsde.cli import SUBCOMMANDS, build_parser, cell_commands, main

ROOT = Path(__file__).resolve().parents[1]
#: libraries a flag declaration must not need (fedsde's numerical layers are heavy through them)
HEAVY = ("torch", "torchsde", "scipy", "sympy", "dask", "distributed", "matplotlib", "xarray", "pandas", "sklearn",
         "statsmodels")


def _heavy(modules) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def _python(code: str) -> str:
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)  # hang guard
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def test_help_imports_nothing_heavy():
    out = _python("import contextlib, io, json, sys\n"
                  "from fedsde.cli import main\n"
                  "with contextlib.redirect_stdout(io.StringIO()) as buf:\n"
                  "    try:\n"
                  "        main(['--help'])\n"
                  "    except SystemExit as exc:\n"
                  "        code = exc.code\n"
                  "print(json.dumps({'code': code, 'help': buf.getvalue(), 'modules': sorted(sys.modules)}))")
    got = json.loads(out)
    assert got["code"] == 0 and all(c.name in got["help"] for c in SUBCOMMANDS)
    assert _heavy(got["modules"]) == [] and "numpy" not in got["modules"]


def test_registering_a_command_imports_nothing_heavy():
    """Each command's ``register()`` (what a parse error or ``fedsde COMMAND --help`` costs) imports no heavy library.

    The shared helpers' divergence check (``fedsde.exact.stability``, used by handlers only) is stood in for, so that
    what is measured is the commands' own declarations; :data:`NOT_YET_LIGHT` lists commands whose flags still read a
    library registry."""
    out = _python("import json, sys, types\n"
                  "stand_in = types.ModuleType('fedsde.exact.stability')\n"
                  "stand_in.known_divergence = None\n"
                  "sys.modules.setdefault('fedsde.exact.stability', stand_in)\n"
                  "import fedsde._cli.common\n"
                  "from fedsde.cli import SUBCOMMANDS, build_parser\n"
                  "common = sorted(sys.modules)\n"
                  "seen, new = set(sys.modules), {}\n"
                  "for c in SUBCOMMANDS:\n"
                  "    build_parser([c.name])\n"
                  "    new[c.name] = sorted(set(sys.modules) - seen)\n"
                  "    seen = set(sys.modules)\n"
                  "print(json.dumps({'common': common, 'new': new}))")
    got = json.loads(out)
    assert _heavy(got["common"]) == []
    assert set(got["new"]) == {c.name for c in SUBCOMMANDS}
    heavy = {name: _heavy(mods) for name, mods in got["new"].items() if _heavy(mods) and name not in NOT_YET_LIGHT}
    assert heavy == {}


#: commands whose module still imports a library module at its top: ``scaling`` (``--rule`` choices from
#: fedsde.scaling.rules) and ``validity`` (fedsde.problems)
NOT_YET_LIGHT = {"scaling", "validity"}


def test_lazy_parser_lists_what_the_full_parser_lists():
    full, lazy = build_parser(), build_parser(["--help"])
    assert lazy.format_help() == full.format_help()
    assert lazy.format_usage() == full.format_usage()
    for c in SUBCOMMANDS:  # the named command gets the same parser either way
        assert build_parser([c.name]).format_help() == full.format_help()


def test_name_mirrors_match_the_library():
    from fedsde._cli import _names
    from fedsde.aggregators import AGGREGATORS
    from fedsde.compare import NOISE_SCALINGS
    from fedsde.report.gallery import GALLERY
    from fedsde.sde import VARIANTS
    from fedsde.sde.integrate import METHODS, MODELS
    from fedsde.sde.models import ESTIMATORS
    from fedsde.sim import WEIGHTINGS
    from fedsde.theory.claims import PAPERS

    assert _names.WEIGHTINGS == tuple(WEIGHTINGS)
    assert _names.SDE_VARIANTS == tuple(VARIANTS)
    assert _names.SDE_MODELS == tuple(MODELS)
    assert _names.SDE_METHODS == tuple(METHODS)
    assert _names.SDE_ESTIMATORS == tuple(ESTIMATORS)
    assert _names.NOISE_SCALINGS == tuple(NOISE_SCALINGS)
    assert _names.CLAIM_PAPERS == tuple(PAPERS)
    assert _names.GALLERY_RANGE == f"{next(iter(GALLERY))}–{list(GALLERY)[-1]}"  # first and last figure
    assert list(_names.AGGREGATOR_NAMES) == sorted(AGGREGATORS)


def test_aggregator_choices_are_checked_when_given(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--problem", "x.toml", "--eta", "0.1", "--rounds", "1", "--replicates", "2", "--seed", "0",
              "--aggregator", "nosuch"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --aggregator: invalid choice: 'nosuch' (choose from 'fedadagrad'," in err
    assert err.count("\n") == 1


def test_unknown_command_and_no_command_are_one_line(capsys):
    for argv in (["nosuch"], []):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("fedsde: error: ") and err.count("\n") == 1


def test_cell_commands_are_declared_with_the_commands():
    table = cell_commands()
    assert sorted(table) == sorted(c.name for c in SUBCOMMANDS if c.cell)
    assert set(table.refused) == {"compare-aggregators", "sweep", "reproduce", "map"}
    assert all(table.refused.values())
