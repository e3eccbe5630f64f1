"""One memory budget and one thread policy per command (``fedsde._memory``, ``fedsde._threads``): the budget refuses
a command whose parts each fit but together do not, ``--final-cov`` decides what is computed (a diagonal never
forms a d × d array), the estimate counts what a run allocates, the general SDE's rollouts run in groups with the
same numbers, and ``--threads`` reaches torch and every command's JSON ``resources``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import one_line_error, run_cli

from fedsde._memory import MemoryBudget, command_budget, current_budget, keep_memory, memory_fits
from fedsde.errors import FedsdeInputError
from fedsde.sim.moments import StreamingMoments

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = str(ROOT / "examples" / "problems" / "digits_softmax.toml")
MLP = ROOT / "examples" / "models" / "mlp.py"
RESOURCE_KEYS = {"memory_budget_bytes", "memory_planned_bytes", "threads"}


def _mlp_file(tmp_path, hidden: int, clients: int = 4) -> str:
    """A module problem: examples/models/mlp.py with ``hidden`` units on digits (d = 65·hidden + 10·(hidden + 1))."""
    (tmp_path / "mlp.py").write_text(MLP.read_text())
    path = tmp_path / f"mlp{hidden}.toml"
    path.write_text(f'kind = "module"\nmodel = "mlp.py:MLP"\nmodel_options = {{ hidden = {hidden} }}\n'
                    f'dataset = "digits"\nclients = {clients}\npartition = "iid"\nloss = "cross-entropy"\n'
                    "batch_size = 8\nseed = 0\ninit_seed = 0\n")
    return str(path)


def _wide_file(tmp_path, features: int = 2000, hidden: int = 11) -> str:
    """A module problem on a few random rows with many features: d = (features + 1)·hidden + (hidden + 1)·10 weights
    (22,131 by default) at the cost of 40 rows."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, features))
    np.savez(tmp_path / "rows.npz", x=x, y=rng.integers(0, 10, 40), client=np.repeat(np.arange(4), 10),
             x_test=x[:10], y_test=rng.integers(0, 10, 10))
    (tmp_path / "mlp.py").write_text(MLP.read_text())
    path = tmp_path / "wide.toml"
    path.write_text(f'kind = "module"\nmodel = "mlp.py:MLP"\nmodel_options = {{ inputs = {features}, hidden = '
                    f'{hidden} }}\ndata = "rows.npz"\nloss = "cross-entropy"\nbatch_size = 4\n')
    return str(path)


def _never(*args, **kwargs):
    raise AssertionError("a chain ran before its memory was checked")


# ---------------------------------------------------------------------------------------------- the budget
def test_parts_that_fit_alone_are_refused_together():
    budget = MemoryBudget(100)
    budget.keep("the results", 60, "keep fewer results")
    budget.peak("a small working set", 40)  # 60 + 40 fits
    assert budget.planned == 100 and budget.left() == 40
    with pytest.raises(FedsdeInputError) as err:
        budget.peak("the chains", 50, "use fewer replicates")  # 50 alone fits in 100, not beside the 60 kept
    msg = str(err.value)
    assert "the chains: needs about" in msg and "the results" in msg and "use fewer replicates" in msg
    assert "keep fewer results" in msg  # the option that helps with the largest kept part too
    assert budget.planned == 100  # a refused part plans nothing


def test_a_command_budget_caps_what_components_see(monkeypatch):
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "1G")
    assert current_budget() is None
    with command_budget() as budget:
        assert budget.total == 1 << 30
        keep_memory("results", 1 << 29, "")
        memory_fits("a chain", 1 << 28, 1 << 62, "")  # charged to the budget, checked against what it leaves
        with pytest.raises(FedsdeInputError, match="is available to the command"):
            memory_fits("a bigger chain", 3 << 28, 1 << 62, "")
        with command_budget() as cell:  # a sweep cell in-process: what the command's budget leaves
            assert cell.total == 1 << 29
    assert current_budget() is None


def test_validity_refuses_covariances_and_chains_that_do_not_fit_together(capsys, monkeypatch):
    base = ["validity", "--problem", SOFTMAX, "--eta", "0.05", "--local-steps", "1", "--rounds", "1",
            "--replicates", "16", "--seed", "0", "--ells", "1,2", "--json"]
    import fedsde.sde.svag

    def plan(final_cov: str) -> tuple[int, int]:
        """(kept, planned) bytes of the run up front: its first local step stops it."""
        monkeypatch.setattr(fedsde.sde.svag, "run_local_steps", _never)
        monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "64G")
        from fedsde.cli import build_parser

        argv = [*base, "--final-cov", final_cov]
        args = build_parser(argv).parse_args(argv)
        with command_budget() as budget, pytest.raises(AssertionError, match="before its memory"):
            args.func(args)
        return budget._kept_bytes, budget.planned

    kept, planned = plan("full")
    work = planned - kept  # the largest working set (chains, metric passes) beside the kept results
    assert kept > 0 and work > 0
    limit = (max(kept, work) + planned) // 2  # the full covariances alone fit, and the working set, but not both
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", str(limit))
    one_line_error(*run_cli(capsys, [*base, "--final-cov", "full"]), "needs about", "--final-cov=diag")
    monkeypatch.undo()
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", str(limit))
    code, out, _ = run_cli(capsys, [*base, "--final-cov", "diag"])  # the variances: the same run fits
    assert code == 0
    obj = json.loads(out)
    assert np.shape(obj["final_cov"]) == (2, 650) and obj["resources"]["memory_planned_bytes"] <= limit


def test_final_cov_diag_never_forms_a_d_by_d_array(tmp_path, capsys, monkeypatch):
    path = _wide_file(tmp_path)  # d = 22,131: one d × d covariance is 3.9 GB
    argv = ["validity", "--problem", path, "--eta", "0.05", "--local-steps", "1", "--rounds", "1", "--replicates",
            "2", "--seed", "0", "--ells", "1,2", "--metrics", "train_loss", "--json"]
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "1G")
    import fedsde.sde.svag

    with monkeypatch.context() as m:  # full: refused up front, naming the option, before any chain runs
        m.setattr(fedsde.sde.svag, "run_local_steps", _never)
        one_line_error(*run_cli(capsys, [*argv, "--final-cov", "full"]), "final covariances", "--final-cov=diag")
    torch.func.vmap(torch.func.grad(lambda v: (v * v).sum()))(torch.ones(2, 2))  # torch.func's imports, untraced
    tracemalloc.start()  # numpy's arrays are traced: a d × d float64 array would show as 4 GB
    try:
        code, out, _ = run_cli(capsys, argv)  # the default above d = 256 is diag
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 0
    obj = json.loads(out)
    d = len(obj["final_mean"][0])
    assert d == 22131 and obj["config"]["final_cov"] == "diag" and np.shape(obj["final_cov"]) == (2, d)
    assert peak < 8 * d * d / 50


def test_sde_streams_its_moments_and_keeps_what_final_cov_says(tmp_path, capsys):
    path = _mlp_file(tmp_path, 4)  # d = 310: above 256, so the default is the diagonal
    base = ["sde", "--problem", path, "--variant", "general", "--eta", "0.05", "--local-steps", "1", "--rounds",
            "2", "--replicates", "3", "--seed", "0", "--inner-samples", "2", "--json"]
    objs = {}
    for how in (None, "full", "none"):
        code, out, _ = run_cli(capsys, base if how is None else [*base, "--final-cov", how])
        assert code == 0
        objs[how] = json.loads(out)
    full = np.array(objs["full"]["final"]["cov"])
    assert full.shape == (310, 310) and objs["none"]["final"]["cov"] is None
    assert objs[None]["config"]["final_cov"] == "diag"
    np.testing.assert_allclose(objs[None]["final"]["cov"], np.diag(full), rtol=1e-10, atol=1e-300)
    np.testing.assert_allclose(objs["none"]["trace_cov"][-1], np.trace(full), rtol=1e-10)
    assert set(objs[None]["metrics"]) >= {"train_loss", "test_accuracy"}


# ---------------------------------------------------------------------------------------------- the estimate
PROBE = textwrap.dedent("""
    import json, resource, sys
    import torch
    from fedsde.cli import main
    small, mid = sys.argv[1], sys.argv[2]
    argv = ["simulate", "--eta", "0.05", "--local-steps", "2", "--rounds", "1", "--seed", "0", "--json",
            "--threads", "1"]
    main(["simulate", "--problem", small, "--replicates", "16", *argv[1:]])  # every module a run imports, imported
    from fedsde.problems import load_problem
    load_problem(mid)  # its module and data cached as a run would load them
    def rss():
        with open("/proc/self/status") as fh:
            return next(int(l.split()[1]) * 1024 for l in fh if l.startswith("VmRSS"))
    base = rss()
    import io, contextlib
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["simulate", "--problem", mid, "--replicates", "16", *argv[1:]])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"growth": peak - base, "planned": json.loads(out.getvalue())["resources"]}))
""")


@pytest.mark.slow  # a fresh process that imports torch: seconds of CPU
def test_the_estimate_counts_what_a_module_run_allocates(tmp_path):
    """A mid-size network (d = 80,450, R = 16, Q = 4): the planned bytes cover the peak's growth over the process
    before the run, and are within a factor 4 of it (an estimate that refuses what fits is no use either)."""
    (tmp_path / "small").mkdir()
    small = _wide_file(tmp_path / "small", features=20, hidden=4)
    mid = _wide_file(tmp_path, features=2000, hidden=40)
    out = subprocess.run([sys.executable, "-c", PROBE, small, mid], capture_output=True, text=True, check=True,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    got = json.loads(out.stdout.strip().splitlines()[-1])
    planned, growth = got["planned"]["memory_planned_bytes"], got["growth"]
    assert growth > 8 * 16 * 4 * 80450  # the run's clients' weights at least: the measurement sees the run
    assert growth <= planned <= 4 * growth, (growth, planned)


# ---------------------------------------------------------------------------------------------- streamed moments
def test_streamed_variances_are_the_diagonal_whatever_the_chunks():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((2, 300, 5)) * np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    parts = {}
    for chunks in ([(0, 300)], [(0, 128), (128, 256), (256, 300)]):
        m = StreamingMoments(2, 5, 128, full=[1])
        for t in range(2):
            for a, b in chunks:
                m.add(t, a, w[t, a:b])
        parts[len(chunks)] = m
        np.testing.assert_allclose(m.var(), w.var(axis=1, ddof=1), rtol=1e-12)
        np.testing.assert_allclose(m.cov_at(1), np.cov(w[1], rowvar=False), rtol=1e-12)
        assert m.s2[0].shape == (5,) and m.s2[1].shape == (5, 5)  # no d × d sums where none is asked
        with pytest.raises(FedsdeInputError, match="cov_at"):
            m.cov()
    np.testing.assert_array_equal(parts[1].var(), parts[3].var())  # bit for bit, however chunked


def test_grouped_rollouts_give_the_one_pass_numbers(monkeypatch):
    """Rollouts too large for one pass run a few of a block's at a time: the same streams, so the same paths (to the
    rounding of the client sum), and bit for bit the same however the paths are chunked."""
    import fedsde.sde.models as models
    from fedsde.problems import paper_table_problem
    from fedsde.sde.integrate import simulate_sde

    pb = paper_table_problem()
    kw = dict(eta=0.05, local_steps=3, rounds=3, replicates=200, seed=1, variant="general", inner_samples=5,
              record=[3])
    one = simulate_sde(pb, **kw)
    monkeypatch.setattr(models, "ROLLOUT_BYTES", 2 * pb.Q * 128 * pb.d * 8)  # two rollouts of a block at a time
    assert models.rollout_group(5, pb.Q, 128, pb.d, torch.float64, "cpu") == 2
    grouped = simulate_sde(pb, **kw)
    np.testing.assert_allclose(grouped.weights, one.weights, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(simulate_sde(pb, **kw, chunk_size=128).weights, grouped.weights)


# ---------------------------------------------------------------------------------------------- threads
def test_threads_reach_torch_and_the_json(capsys, monkeypatch):
    import fedsde.sim

    seen = []
    real = fedsde.sim.simulate

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(fedsde.sim, "simulate", spy)
    before = torch.get_num_threads()
    argv = ["simulate", "--problem", SOFTMAX, "--eta", "0.05", "--local-steps", "1", "--rounds", "1",
            "--replicates", "2", "--seed", "0", "--json"]
    code, out, _ = run_cli(capsys, [*argv, "--threads", "2"])
    assert code == 0 and seen == [2]
    res = json.loads(out)["resources"]
    assert set(res) == RESOURCE_KEYS and res["threads"] == 2 and 0 < res["memory_planned_bytes"]
    assert res["memory_planned_bytes"] <= res["memory_budget_bytes"]
    assert torch.get_num_threads() == before  # the caller's threads, restored
    one_line_error(*run_cli(capsys, [*argv, "--threads", "0"]), "--threads=0: must be an integer >= 1")
    code, out, _ = run_cli(capsys, argv[:-1])  # the text output states them in one line
    assert code == 0 and out.splitlines()[-1].startswith(f"resources: {before} thread(s), memory planned")


def test_every_command_reports_the_same_resources(capsys, tmp_path):
    quad = str(ROOT / "examples" / "problems" / "paper_table.toml")
    runs = [["exact", "--problem", quad, "--eta", "0.05", "--local-steps", "2", "--rounds", "2"],
            ["sde", "--problem", quad, "--eta", "0.05", "--local-steps", "2", "--rounds", "2", "--replicates", "4",
             "--seed", "0"],
            ["validity", "--problem", quad, "--eta", "0.05", "--local-steps", "2", "--rounds", "2"]]
    for argv in runs:
        code, out, err = run_cli(capsys, [*argv, "--json", "--threads", "1"])
        assert code == 0, err
        assert json.loads(out)["resources"]["threads"] == 1
        assert set(json.loads(out)["resources"]) == RESOURCE_KEYS


def test_map_cells_compute_what_final_cov_says_and_the_estimate_counts_it():
    from fedsde.maps.grid import MapGrid, memory_need, sweep_spec
    from fedsde.problems import load_problem

    grid = MapGrid(eta=(0.05, 0.1), local_steps=(1,))
    assert sweep_spec("p.toml", grid, rounds=2, replicates=4, seed=0, options={})["base"]["final_cov"] == "none"
    spec = sweep_spec("p.toml", grid, rounds=2, replicates=4, seed=0, options={"final_cov": "diag"})
    assert spec["base"]["final_cov"] == "diag"
    pb = load_problem(SOFTMAX)
    sizes = dict(rounds=2, replicates=4, ells=[1, 2], record_every=1, metrics=4, exact=False, concurrent=1)
    need = {how: memory_need(pb, grid, final_cov=how, **sizes) for how in ("none", "diag", "full")}
    # three copies of a cell's (L, d, d) covariances (the running cell and the records of both cells), and JSON
    assert need["full"] - need["none"] >= 3 * 2 * pb.d * pb.d * 8 > need["diag"] - need["none"] > 0


def test_the_json_estimate_covers_printing_an_array():
    from fedsde._cli.common import to_jsonable
    from fedsde._memory import JSON_BYTES_PER_NUMBER, json_bytes

    a = np.random.default_rng(0).standard_normal((100, 1000))
    tracemalloc.start()
    try:
        text = json.dumps(to_jsonable({"mean": a}), allow_nan=False) + "\n"
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(text) > 15 * a.size  # the numbers were printed
    assert 0.5 * json_bytes(a.size) < peak <= json_bytes(a.size) == JSON_BYTES_PER_NUMBER * a.size
