"""The glossary's names (docs/glossary.md): new names work, old ones are deprecated aliases that still work, give the
same results, warn, and are refused together with the new name."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import warnings
from pathlib import Path

import numpy as np
import pytest

import fedsde
from fedsde._compat import renamed
from fedsde.cli import build_parser, main
from fedsde.errors import FedsdeInputError, NoStationaryLawError
from fedsde.problems import paper_table_problem

ROOT = Path(__file__).resolve().parents[1]
PAPER = str(ROOT / "examples" / "problems" / "paper_table.toml")
BASE = ["--problem", PAPER, "--eta", "0.05", "--local-steps", "5"]


# ---------------------------------------------------------------------------------------------- the helper
@renamed(paths="replicates", steps="time_steps")
def _study(a, replicates=2, *, time_steps=(1.0,), tag=None):
    if replicates < 2:
        raise FedsdeInputError(f"replicates={replicates}: must be >= 2")
    if len(time_steps) > 3:
        raise NoStationaryLawError(f"time_steps[3]={time_steps[3]}: too many; replicates={replicates}")
    return a, replicates, tuple(time_steps), tag


def test_new_names_pass_through_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _study(1, 5, time_steps=[0.1], tag="x") == (1, 5, (0.1,), "x")
        assert _study(1, replicates=5) == (1, 5, (1.0,), None)


def test_an_old_name_works_and_warns_naming_both():
    with pytest.warns(DeprecationWarning, match=r"_study: paths= is the old name of replicates=.*use replicates=") \
            as rec:
        assert _study(1, paths=5) == (1, 5, (1.0,), None)
    assert rec[0].filename == __file__  # attributed to the caller's line
    with pytest.warns(DeprecationWarning) as rec:
        assert _study(1, paths=3, steps=[0.5]) == (1, 3, (0.5,), None)
    assert {str(w.message).split(":")[1].strip().split("=")[0] for w in rec} == {"paths", "steps"}


@pytest.mark.parametrize("call", [lambda: _study(1, paths=3, replicates=3), lambda: _study(1, 3, paths=3)])
def test_both_names_at_once_are_refused_in_one_line(call):
    with pytest.raises(FedsdeInputError, match=r"^_study: paths= is the old name of replicates=; give replicates= "
                       r"only$"):
        call()


def test_errors_name_the_argument_as_the_caller_spelt_it():
    with pytest.raises(FedsdeInputError, match=r"^replicates=1: must be >= 2$"):
        _study(1, replicates=1)
    with pytest.warns(DeprecationWarning), pytest.raises(FedsdeInputError, match=r"^paths=1: must be >= 2$"):
        _study(1, paths=1)
    with pytest.warns(DeprecationWarning), pytest.raises(NoStationaryLawError,  # the type is kept
                                                         match=r"^steps\[3\]=4: too many; replicates=2$"):
        _study(1, steps=[1, 2, 3, 4])


def test_decoration_checks_the_names_and_keeps_the_signature():
    with pytest.raises(TypeError, match="no parameter 'nope'"):
        renamed(old="nope")(lambda new: new)
    with pytest.raises(TypeError, match="still has a parameter 'old'"):
        renamed(old="new")(lambda old, new: new)
    assert list(inspect.signature(_study).parameters) == ["a", "replicates", "time_steps", "tag"]
    assert _study.renamed == {"paths": "replicates", "steps": "time_steps"}


def _decorated():
    """Every function or method of fedsde (outside the scaling package) decorated with :func:`renamed`."""
    found = []
    for mod in pkgutil.walk_packages(fedsde.__path__, "fedsde."):
        if mod.name.startswith("fedsde.scaling") or mod.name == "fedsde.sim.fedavg":  # (a deprecated re-export)
            continue
        module = importlib.import_module(mod.name)
        for obj in vars(module).values():
            if getattr(obj, "__module__", None) != module.__name__:
                continue
            members = vars(obj).values() if inspect.isclass(obj) else [obj]
            found += [(f"{module.__name__}.{f.__qualname__}", f) for f in members if hasattr(f, "renamed")]
    return found


def test_every_renamed_parameter_is_a_glossary_name():
    found = dict(_decorated())
    assert len(found) >= 40 and "fedsde.sde.integrate.simulate_sde" in found
    glossary = (ROOT / "docs" / "glossary.md").read_text()
    for name, f in found.items():
        params = inspect.signature(f).parameters
        for old, new in f.renamed.items():
            assert new in params and old not in params, name
            if new in ("local_steps", "replicates", "time_steps"):
                assert f"`{old}`" in glossary, (name, old)  # the glossary lists it as an alias


# ---------------------------------------------------------------------------------------------- Python API
def test_sde_paths_and_study_by_either_name():
    from fedsde.compare import quadratic_sde_study
    from fedsde.sde import simulate_sde

    pb = paper_table_problem()
    kw = {"eta": 0.05, "local_steps": 5, "rounds": 4, "seed": 3}
    new = simulate_sde(pb, replicates=16, **kw)
    with pytest.warns(DeprecationWarning, match="paths= is the old name of replicates="):
        old = simulate_sde(pb, paths=16, **kw)
    np.testing.assert_array_equal(new.weights, old.weights)
    assert new.config == old.config and new.config["paths"] == 16  # the result's keys do not change
    st = quadratic_sde_study(pb, eta=0.05, local_steps=5, rounds=4, replicates=8, seed=1)
    with pytest.warns(DeprecationWarning):
        st_old = quadratic_sde_study(pb, eta=0.05, local_steps=5, rounds=4, paths=8, seed=1)
    assert json.dumps(st.to_dict()["monte_carlo"], default=str) == json.dumps(st_old.to_dict()["monte_carlo"],
                                                                              default=str)
    with pytest.raises(FedsdeInputError, match="give replicates= only"):
        simulate_sde(pb, paths=16, replicates=16, **kw)


def test_weak_error_by_either_name():
    from fedsde.compare import weak_error_mc_vs_step, weak_error_vs_step

    pb = paper_table_problem()
    new = weak_error_vs_step(pb, 0.05, 5, t_end=1.0, time_steps=[0.2, 0.1])
    with pytest.warns(DeprecationWarning, match="steps= is the old name of time_steps="):
        old = weak_error_vs_step(pb, 0.05, 5, t_end=1.0, steps=[0.2, 0.1])
    np.testing.assert_array_equal(new.errors, old.errors)
    kw = {"t_end": 0.2, "seed": 1, "phi": "dist2", "inner_samples": 2}
    mc = weak_error_mc_vs_step(pb, 0.05, 5, time_steps=[0.1, 0.05], replicates=4, **kw)
    with pytest.warns(DeprecationWarning):
        mc_old = weak_error_mc_vs_step(pb, 0.05, 5, steps=[0.1, 0.05], paths=4, **kw)
    np.testing.assert_array_equal(mc.errors, mc_old.errors)
    with pytest.raises(FedsdeInputError, match=r"time_steps\[1\]=0.0: must be finite and > 0"):
        weak_error_vs_step(pb, 0.05, 5, t_end=1.0, time_steps=[0.1, 0.0])


def test_local_steps_by_every_old_name():
    from fedsde.exact import client_round_maps
    from fedsde.exact.stability import known_divergence
    from fedsde.symbolic.local_sgd import contraction
    from fedsde.theory import feddisco, fednova
    from fedsde.theory.constants import quadratic_constants, v_hat_1

    pb = paper_table_problem()
    cases = [
        (known_divergence, (pb, 1.0), "steps", {}),
        (client_round_maps, (pb, 0.05), "steps", {}),
        (v_hat_1, (pb, 0.05), "E", {}),
        (quadratic_constants, (pb,), "E", {"radius": 1.0, "eta_max": 0.05}),
        (fednova.accumulation_vector, (), "tau", {"solver": "momentum", "rho": 0.5}),
        (feddisco.disco_bound, ([0.5, 0.5], [0.1, 0.2], [0.5, 0.5]), "tau",
         {"eta": 0.02, "L": 2.0, "sigma2": 1.0, "B": 1.0, "T": 100, "F0_gap": 2.0}),
        (contraction, (), "steps", {}),
    ]
    for f, args, old, kw in cases:
        value = np.full(pb.Q, 3) if f is client_round_maps else 3
        new = f(*args, local_steps=value, **kw)
        with pytest.warns(DeprecationWarning, match=f"{old}= is the old name of local_steps="):
            got = f(*args, **{old: value}, **kw)
        assert repr(got) == repr(new), f.__qualname__
    with pytest.warns(DeprecationWarning), pytest.raises(FedsdeInputError, match=r"^tau=0: must be"):
        fednova.accumulation_vector(tau=0)


def test_report_and_model_attributes_keep_their_old_spelling():
    from fedsde.sde.models import FedAvgSDE

    sde = FedAvgSDE(paper_table_problem(), 0.05, 5, inner_samples=3, seed=0)
    assert sde.inner_samples == 3 and sde.brownian_channels == 3
    with pytest.warns(DeprecationWarning, match="old name of FedAvgSDE.inner_samples"):
        assert sde.S == 3


# ---------------------------------------------------------------------------------------------- command line
def _json(capsys, argv):
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    out["resources"].pop("memory_budget_bytes")  # the free memory when the command started: a measurement
    return out


def test_sde_replicates_and_its_old_flag_give_the_same_json(capsys):
    argv = ["sde", *BASE, "--rounds", "5", "--seed", "2"]
    new = _json(capsys, [*argv, "--replicates", "40"])
    old = _json(capsys, [*argv, "--paths", "40"])
    assert new == old and new["paths"] == 40  # the JSON keys do not change


def test_compare_time_steps_and_replicates_and_their_old_flags(capsys):
    argv = ["compare", *BASE, "--rounds", "4", "--seed", "1"]
    new = _json(capsys, [*argv, "--time-steps", "0.2,0.1", "--replicates", "8"])
    old = _json(capsys, [*argv, "--steps", "0.2,0.1", "--paths", "8"])
    assert new == old and new["monte_carlo"]["paths"] == 8


@pytest.mark.parametrize(("argv", "flag"), [
    (["sde", *BASE, "--rounds", "2", "--seed", "0", "--replicates", "1"], "--replicates=1"),
    (["sde", *BASE, "--rounds", "2", "--seed", "0", "--paths", "1"], "--paths=1"),
    (["compare", *BASE, "--rounds", "2", "--replicates", "1"], "--replicates=1"),
    (["compare", *BASE, "--rounds", "2", "--time-steps", "0.1,0"], "--time-steps='0.1,0'"),
    (["compare", *BASE, "--rounds", "2", "--steps", "0.1,0"], "--steps='0.1,0'"),
    (["compare-aggregators", "--quick", "--replicates", "1"], "--replicates=1"),
    (["compare-aggregators", "--quick", "--runs", "1"], "--runs=1"),
])
def test_errors_name_the_flag_as_typed(capsys, argv, flag):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err


@pytest.mark.parametrize(("command", "new", "old", "metavar"), [
    ("sde", "--replicates", "--paths", "R"), ("compare", "--replicates", "--paths", "R"),
    ("compare", "--time-steps", "--steps", "h1,h2,…"), ("compare-aggregators", "--replicates", "--runs", "R"),
])
def test_help_names_the_old_flag(command, new, old, metavar):
    parser = build_parser([command])
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    action = sub._option_string_actions[new]
    assert action is sub._option_string_actions[old] and action.option_strings == [new, old]
    assert action.metavar == metavar and f"{old}: its old name" in action.help
    value = "0.2,0.1" if new == "--time-steps" else "3"
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        rest = [] if command == "compare-aggregators" else [*BASE, "--rounds", "1"]
        args = sub.parse_args([old, value, *rest, *(["--seed", "0"] if command == "sde" else [])])
    assert getattr(args, action.dest) == (value if new == "--time-steps" else 3)
    assert [str(w.message) for w in rec if w.category is DeprecationWarning] == [
        f"{old} is the old name of {new} and goes away in the next release; use {new}"]


def test_seed_and_inner_samples_metavars():
    for command in ("sde", "compare", "simulate", "validity", "compare-aggregators", "reproduce"):
        sub = next(a for a in build_parser([command])._actions if a.dest == "command").choices[command]
        assert sub._option_string_actions["--seed"].metavar == "SEED", command
        if "--inner-samples" in sub._option_string_actions:
            assert sub._option_string_actions["--inner-samples"].metavar == "K", command


def test_sweep_spec_may_use_either_flag_but_not_both():
    from fedsde.sweep import load_spec
    from fedsde.sweep.command import run_command
    from fedsde.sweep.spec import cell_argv

    results = []
    for key in ("replicates", "paths"):
        spec = load_spec({"run": {"command": "sde", "seed": 4},
                          "base": {"problem": PAPER, "eta": 0.05, "local_steps": 5, "rounds": 3, key: 20}})
        argv = cell_argv(spec, next(spec.cells()))
        assert f"--{key}=20" in argv
        if key == "paths":
            with pytest.warns(DeprecationWarning, match="--paths is the old name of --replicates"):
                out = run_command("sde", argv)
        else:
            out = run_command("sde", argv)
        assert out["status"] == "done", out
        results.append(out["result"])
    assert results[0] == results[1]
    with pytest.raises(FedsdeInputError, match=r"replicates, paths: the same option of fedsde sde \(--replicates "
                       r"or --paths"):
        load_spec({"run": {"command": "sde", "seed": 4},
                   "base": {"problem": PAPER, "eta": 0.05, "local_steps": 5, "rounds": 3, "replicates": 20},
                   "grid": {"paths": [20, 30]}})


def test_the_old_simulator_module_still_imports_with_a_warning():
    import subprocess
    import sys

    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "try:\n    import fedsde.sim.fedavg\nexcept DeprecationWarning as w:\n    print(w)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "fedsde.sim.fedavg is the old home of the simulator" in out.stdout
    with pytest.warns(DeprecationWarning, match="old home of the simulator"):
        old = importlib.reload(importlib.import_module("fedsde.sim.fedavg"))
    import fedsde.sim as sim

    assert (old.simulate, old.SimulationResult, old.WEIGHTINGS) == (sim.simulate, sim.SimulationResult,
                                                                    sim.WEIGHTINGS)


@pytest.mark.parametrize("old,new", [("logistic", "classification.problem"), ("regression_files", "regression.files"),
                                     ("population", "populations.base")])
def test_a_problems_module_still_imports_from_its_old_home_with_a_warning(old, new):
    import subprocess
    import sys

    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\nimport fedsde.problems\n"
            f"try:\n    import fedsde.problems.{old}\nexcept DeprecationWarning as w:\n    print(w)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert f"fedsde.problems.{old} is the old home of fedsde.problems.{new}" in out.stdout
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        moved = importlib.import_module(f"fedsde.problems.{old}")
    assert moved is importlib.import_module(f"fedsde.problems.{new}")
