"""The refinements at a fixed end time (StepRefinement, EtaRefinement), the general SDE's rollouts in the Integrator
and the sweep's SweepExecution: checked once where built, passed whole; the old keyword calls of the functions that
take them give the same numbers (bitwise: the same call), and the commands build each value once."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import numpy as np
import pytest

from fedsde.cli import main
from fedsde.compare import quadratic_sde_study, weak_error_mc_vs_step
from fedsde.compare.order2 import order_refinement
from fedsde.errors import FedsdeInputError
from fedsde.params import EtaRefinement, Integrator, Precision, Replication, Schedule, StepRefinement
from fedsde.problems import paper_table_problem
from fedsde.sde import simulate_sde
from fedsde.sweep import SweepExecution
from fedsde.sweep import run as sweep_run
from tests.test_params import _count_validations, _same

ROOT = Path(__file__).resolve().parents[1]
PAPER = str(ROOT / "examples" / "problems" / "paper_table.toml")


@pytest.fixture(scope="module")
def problem():
    return paper_table_problem()


# --- the values ----------------------------------------------------------------------------------------------------

def test_a_step_refinement_holds_one_fedavg_schedule_per_step():
    ref = StepRefinement(np.float32(0.5), np.int64(3), t_end=0.2, time_steps=[0.1, 0.05, 0.025], server_rate=0.5)
    assert type(ref.eta) is float and ref.local_steps == 3 and ref.validated
    assert ref.rounds.tolist() == [2, 4, 8] and not ref.rounds.flags.writeable and not ref.time_steps.flags.writeable
    s = ref.schedule(1)
    assert (s.eta, s.local_steps, s.rounds, s.server_lr, s.h, s.validated) == (0.5, 3, 4, 0.05 * 0.5, 0.05, True)
    assert ref.schedule(2, with_h=False).h is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        ref.t_end = 1.0


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(t_end=0.25), "time_steps: t_end=0.25 is not a whole number of steps h=0.1 (t_end/h=2.5)"),
    (dict(time_steps=[0.1]), "time_steps: need at least two step sizes, got 1"),
    (dict(time_steps=[0.1, 0.05, 0.1]), "time_steps[2]=0.1: repeats time_steps[0]; the step sizes must be distinct"),
    (dict(eta=[0.1, 0.2]), "eta=[0.1, 0.2]: must be a number"),
    (dict(local_steps=[2, 0]), "local_steps[1]=0: must be an integer >= 1"),
])
def test_a_bad_step_refinement_is_refused_in_one_line(kwargs, message):
    base = dict(eta=0.1, local_steps=2, t_end=0.2, time_steps=[0.1, 0.05])
    with pytest.raises(FedsdeInputError) as err:
        StepRefinement(**(base | kwargs))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_an_eta_refinement_holds_its_checked_steps_largest_first():
    ref = EtaRefinement(2, [0.025, 0.1, 0.05])
    assert ref.order == 2 and ref.etas.tolist() == [0.1, 0.05, 0.025] and not ref.etas.flags.writeable
    assert EtaRefinement(1).etas is None
    with pytest.raises(FedsdeInputError, match=r"^etas=\[0.1, 0.05\]: need at least three distinct client steps"):
        EtaRefinement(1, [0.1, 0.05])
    with pytest.raises(FedsdeInputError, match=r"^etas=\[0.1, 0.04, 0.02\]: each must be η_max/k"):
        EtaRefinement(2, [0.1, 0.04, 0.02])
    with pytest.raises(FedsdeInputError, match=r"^order=True: must be one of 1, 2"):
        EtaRefinement(True)


def test_the_integrator_holds_the_general_sdes_rollouts():
    assert (Integrator().inner_samples, Integrator().estimator) == (16, "compensated")
    with pytest.raises(FedsdeInputError, match=r"^inner_samples=1: estimator='unbiased' needs at least 2$"):
        Integrator(inner_samples=1, estimator="unbiased")


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(workers=2, scheduler="tcp://127.0.0.1:1"), "--workers and --scheduler: give one of them"),
    (dict(workers=2, gpu_workers=3), "--gpu-workers=3: must be at most --workers=2"),
    (dict(gpu_workers=True), "--gpu-workers=True: must be an integer >= 0"),
    (dict(workers=1.5), "--workers=1.5: must be an integer >= 1"),
])
def test_a_bad_sweep_execution_is_refused_in_one_line(kwargs, message):
    with pytest.raises(FedsdeInputError) as err:
        SweepExecution(**kwargs)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    assert SweepExecution(workers=3).local_cluster and not SweepExecution(scheduler="tcp://h:1").local_cluster


# --- old calls and value calls: the same numbers -------------------------------------------------------------------

def _curve(c) -> dict:
    return {f.name: getattr(c, f.name) for f in dataclasses.fields(c)}


def test_weak_error_mc_old_positional_and_keyword_calls_give_the_same_curve(problem):
    old = weak_error_mc_vs_step(problem, 0.05, 5, t_end=0.2, time_steps=[0.1, 0.05], server_rate=0.7,
                                replicates=32, seed=1, phi="dist2", substeps=2, inner_samples=3, w0=2.0)
    new = weak_error_mc_vs_step(problem, StepRefinement(0.05, 5, 0.2, [0.1, 0.05], server_rate=0.7),
                                Replication(32, 1), Precision(), phi="dist2", w0=2.0,
                                integrator=Integrator(substeps=2, inner_samples=3))
    _same(_curve(old), _curve(new))
    assert old.config["server_rate"] == 0.7 and old.config["inner_samples"] == 3 and old.rounds.tolist() == [2, 4]
    kw = weak_error_mc_vs_step(problem, eta=0.05, local_steps=5, t_end=0.2, time_steps=[0.1, 0.05],
                               server_rate=0.7, replicates=32, seed=1, phi="dist2", substeps=2, inner_samples=3, w0=2.0)
    _same(_curve(old), _curve(kw))


def test_weak_error_mc_checks_each_value_once_and_passes_each_steps_schedule_whole(problem, monkeypatch):
    from fedsde.params import DEFAULT_RECORDING, derive
    from fedsde.sim import simulate

    ref, rep, prec = StepRefinement(0.05, 5, 0.2, [0.1, 0.05]), Replication(8, 0), Precision()

    def each_step() -> None:  # what the chain and the SDE check of their own when handed the values whole
        for j in range(2):
            rec = derive(DEFAULT_RECORDING, record=[int(ref.rounds[j])])
            simulate(problem, ref.schedule(j, with_h=False), rep, prec, recording=rec)
            simulate_sde(problem, ref.schedule(j), rep, prec, variant="corrected", recording=rec)

    weak_error_mc_vs_step(problem, ref, rep, prec, variant="corrected")  # the adapter's defaults, built once
    counts = _count_validations(monkeypatch)
    each_step()
    inner = counts.copy()
    counts.clear()
    weak_error_mc_vs_step(problem, ref, rep, prec, variant="corrected")
    assert counts == inner, (counts - inner, inner - counts)  # nothing checked again
    counts.clear()
    weak_error_mc_vs_step(problem, 0.05, 5, t_end=0.2, time_steps=[0.1, 0.05], replicates=8, seed=0,
                          variant="corrected")
    once = {"eta": 1, "local_steps": 1, "t_end": 1, "time_steps[0]": 1, "time_steps[1]": 1, "server_rate": 1,
            "replicates": 1, "seed": 1, "device_dtype": 1}
    assert dict(counts - inner) == once and not inner - counts  # the old keywords: each checked once, where built


def test_weak_error_mc_refuses_a_value_given_both_ways_and_a_field_it_does_not_read(problem):
    ref = StepRefinement(0.05, 5, 0.2, [0.1, 0.05])
    with pytest.raises(FedsdeInputError, match="server_rate= and refinement= both given"):
        weak_error_mc_vs_step(problem, ref, Replication(8, 0), server_rate=0.5)
    with pytest.raises(FedsdeInputError, match=r"integrator.method='exact': not used by weak_error_mc_vs_step"):
        weak_error_mc_vs_step(problem, ref, Replication(8, 0), integrator=Integrator(method="exact"))
    with pytest.raises(TypeError, match="at most 3 positional arguments"):
        weak_error_mc_vs_step(problem, 0.05, 5, 1.0)


def test_the_general_sdes_rollouts_old_keywords_give_the_same_paths(problem):
    kw = dict(eta=0.05, local_steps=2, rounds=2, replicates=12, seed=3, variant="general", record=[2])
    a = simulate_sde(problem, inner_samples=3, estimator="unbiased", substeps=2, **kw)
    b = simulate_sde(problem, Schedule(0.05, 2, 2), Replication(12, 3), variant="general", record=[2],
                     integrator=Integrator(substeps=2, inner_samples=3, estimator="unbiased"))
    _same(a.weights, b.weights)
    _same(a.config, b.config)
    assert a.config["inner_samples"] == 3 and a.config["estimator"] == "unbiased"
    with pytest.raises(FedsdeInputError, match=r"integrator\.inner_samples=8: not used by quadratic_sde_study"):
        quadratic_sde_study(problem, Schedule(0.05, 2, 2), integrator=Integrator(inner_samples=8))


def test_the_studys_order_refinement_old_keywords_give_the_same_numbers(problem):
    kw = dict(eta=0.05, local_steps=5, rounds=4, h_grid=[0.05, 0.025])
    a = quadratic_sde_study(problem, order=2, etas=[0.05, 0.025, 0.0125], **kw)
    b = quadratic_sde_study(problem, eta_refinement=EtaRefinement(2, [0.0125, 0.05, 0.025]), **kw)
    _same(a.order_refinement.to_dict(), b.order_refinement.to_dict())
    assert a.order_refinement.order == 2 and a.order_refinement.etas.tolist() == [0.05, 0.025, 0.0125]
    c = order_refinement(problem, eta=0.05, local_steps=5, rounds=4, order=2, etas=[0.05, 0.025, 0.0125])
    _same(a.order_refinement.to_dict(), c.to_dict())
    d = quadratic_sde_study(problem, order=1, **kw)  # the default steps η, η/2, …
    _same(d.order_refinement.to_dict(), order_refinement(problem, eta=0.05, local_steps=5, rounds=4,
                                                         order=EtaRefinement(1)).to_dict())
    assert quadratic_sde_study(problem, etas=[0.05, 0.025, 0.0125], **kw).order_refinement is None  # no order: none
    with pytest.raises(FedsdeInputError, match="etas= and an EtaRefinement as order= both given"):
        order_refinement(problem, eta=0.05, local_steps=5, rounds=4, order=EtaRefinement(1), etas=[0.05, 0.025, 0.01])


def _tiny_spec() -> dict:
    return {"run": {"command": "simulate", "seed": 7},
            "base": {"problem": PAPER, "rounds": 3, "replicates": 20, "local_steps": 2}, "grid": {"eta": [0.01, 0.05]}}


def test_a_sweep_by_old_keywords_and_by_its_execution_stores_the_same_cells(tmp_path):
    from fedsde.sweep.store import read_cells

    a = sweep_run(_tiny_spec(), tmp_path / "a", workers=1, progress=False, max_cells=4)
    b = sweep_run(_tiny_spec(), tmp_path / "b", SweepExecution(progress=False, max_cells=4))
    assert (a["done"], a["workers"], a["scheduler"]) == (b["done"], b["workers"], b["scheduler"]) == (2, 1, None)
    ra, rb = read_cells(tmp_path / "a"), read_cells(tmp_path / "b")
    assert set(ra) == set(rb)
    for k in ra:
        _same(ra[k]["result"]["final"], rb[k]["result"]["final"])
    with pytest.raises(FedsdeInputError, match=r"grid: 2 cells .*more than the limit of 1"):
        sweep_run(_tiny_spec(), tmp_path / "c", SweepExecution(max_cells=1))


def test_a_map_by_old_keywords_and_by_its_execution_gives_the_same_cells(tmp_path):
    from fedsde._cli import cell_commands
    from fedsde.maps import MapGrid, run_map

    grid = MapGrid(eta=(0.05,), local_steps=(2,))
    kw = dict(rounds=4, replicates=None, seed=0, commands=cell_commands())
    a = run_map(PAPER, grid, out=tmp_path / "a", progress=False, max_cells=None, workers=1, **kw)
    b = run_map(PAPER, grid, out=tmp_path / "b", execution=SweepExecution(progress=False), **kw)
    assert a["counts"] == b["counts"] and a["counts"]["failed"] == 0
    _same(a["cells"], b["cells"])
    with pytest.raises(FedsdeInputError, match=r"grid: 1 cells .*more than --max-cells=0|--max-cells=0: must be"):
        run_map(PAPER, grid, out=tmp_path / "c", max_cells=0, **kw)


# --- the commands build each value once ----------------------------------------------------------------------------

def test_the_map_command_builds_its_execution_once(tmp_path, monkeypatch, capsys):
    for mod in ("fedsde._cli.map", "fedsde.maps.run", "fedsde.sweep.options"):  # loaded: their validators counted
        importlib.import_module(mod)
    counts = _count_validations(monkeypatch)
    argv = ["map", "--problem", PAPER, "--eta", "0.05", "--local-steps", "2", "--rounds", "3", "--seed", "0",
            "--out", str(tmp_path / "m"), "--max-cells", "5", "--json"]
    monkeypatch.setattr("fedsde.report.map_report.write_outputs", lambda *a, **k: {})  # the figures are not counted
    assert main(argv) == 0
    capsys.readouterr()
    assert (counts["--workers"], counts["--max-cells"], counts["max_cells"]) == (1, 1, 0), counts


def test_the_compare_command_builds_its_order_refinement_once(monkeypatch, capsys):
    for mod in ("fedsde._cli._compare_order", "fedsde.compare.order2"):  # loaded: their validators counted
        importlib.import_module(mod)
    counts = _count_validations(monkeypatch)
    argv = ["compare", "--problem", PAPER, "--eta", "0.05", "--local-steps", "2", "--rounds", "4", "--order", "2",
            "--etas", "0.05,0.025,0.0125", "--time-steps", "0.05,0.025", "--json"]
    assert main(argv) == 0
    assert '"order_refinement"' in capsys.readouterr().out
    assert counts["etas[0]"] == 1, counts
