"""Reliability: divergence is never silent, long and large runs work, reproduce configs are checked up front, and
the determinism statement of docs/determinism.md (bit-identical across runs, chunkings and thread counts)."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import one_line_error
from helpers import run_cli as run

from fedsde.errors import DivergenceWarning, FedsdeInputError
from fedsde.problems import QuadraticProblem, paper_table_problem, random_quadratic_problem
from fedsde.sde.brownian import GridBrownian
from fedsde.sde.integrate import SEGMENT_STEPS, sdeint_rounds, simulate_sde
from fedsde.sim import simulate
from fedsde.sim.moments import StreamingMoments, plan_chunks

ROOT = Path(__file__).resolve().parents[1]
PAPER = str(ROOT / "examples" / "problems" / "paper_table.toml")
SIM = ["simulate", "--problem", PAPER, "--local-steps", "5", "--replicates", "10", "--seed", "0", "--json"]


# ---------------------------------------------------------------- divergence known up front
def test_issue_reproduction_eta_50_is_refused(capsys):
    code, out, err = run(capsys, [*SIM, "--eta", "50", "--rounds", "10"])
    one_line_error(code, out, err, "eta*max_eig(U_k) = 200 >= 2", "need eta < 0.5")


def test_unstable_server_recursion_is_refused(capsys):
    # B = 0.4360 for η = 0.05, E = 5 on the paper's problem: ρ(I − sB) = 5·0.436 − 1 = 1.18 > 1 at s = 5
    code, out, err = run(capsys, [*SIM, "--eta", "0.05", "--rounds", "10", "--server-lr", "5"])
    one_line_error(code, out, err, "rho(I − s·B) = 1.18", "need server_lr < 4.58")
    code, out, err = run(capsys, [*SIM, "--eta", "0.05", "--rounds", "10", "--server-lr", "4.5"])
    assert code == 0 and json.loads(out)["warnings"] == []


def test_sde_refuses_known_divergence(capsys):
    code, out, err = run(capsys, ["sde", "--problem", PAPER, "--eta", "0.6", "--local-steps", "5", "--rounds", "3",
                                  "--paths", "4", "--seed", "0"])
    one_line_error(code, out, err, "local SGD diverges")


def test_exact_warns_and_strict_fails(capsys):
    argv = ["exact", "--problem", PAPER, "--eta", "0.05", "--local-steps", "5", "--server-lr", "5", "--json"]
    code, out, err = run(capsys, argv)
    obj = json.loads(out)
    assert code == 0 and obj["stationary"] is None
    assert len(obj["warnings"]) == 1 and "the chain diverges" in obj["warnings"][0]
    assert err.startswith("warning:") and err.count("\n") == 1
    code, out, err = run(capsys, [*argv, "--strict"])
    one_line_error(code, out, err, "--strict:", "rho(I − s·B)")


def test_server_momentum_is_checked(capsys):
    # heavy ball, beta = 0.9: v' = 0.9v − B(w − c), w' = w + s v'; stable for s·B < 2(1 + β) = 3.8, B = 0.436
    code, out, err = run(capsys, [*SIM, "--eta", "0.05", "--rounds", "3", "--aggregator", "fedavgm",
                                  "--server-lr", "9"])
    one_line_error(code, out, err, "server momentum recursion of the mean (fedavgm heavy_ball, beta=0.9)")
    code, out, err = run(capsys, [*SIM, "--eta", "0.05", "--rounds", "3", "--aggregator", "fedavgm",
                                  "--server-lr", "8.5"])
    assert code == 0
    # independent check of the threshold s·B = 2(1 + β), s = 8.716: the simulated chain itself
    pb = paper_table_problem()
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        for s in (8.6, 8.85):
            simulate(pb, eta=0.05, local_steps=5, rounds=600, replicates=4, seed=0, server_lr=s, aggregator="fedavgm",
                     record=[600])
    div = [str(w.message) for w in log if issubclass(w.category, DivergenceWarning)]
    assert len(div) == 1 and "blowing up" in div[0]


def test_local_solver_with_prox_is_checked(capsys):
    code, out, err = run(capsys, [*SIM, "--eta", "0.6", "--rounds", "3", "--aggregator", "fedprox"])
    one_line_error(code, out, err, "expands on client(s) [2]")


# ---------------------------------------------------------------- blow-up detected during the run
def test_blow_up_is_reported_and_strict_fails(capsys):
    # SCAFFOLD with a large server step: not checked up front (no exact law), grows geometrically
    argv = [*SIM, "--eta", "0.05", "--rounds", "30", "--aggregator", "scaffold", "--server-lr", "10"]
    code, out, err = run(capsys, argv)
    obj = json.loads(out)
    assert code == 0 and any("blowing up" in w and "round" in w for w in obj["warnings"])
    assert "warning: the simulation is blowing up" in err
    code, out, err = run(capsys, [*argv, "--strict"])
    one_line_error(code, out, err, "--strict: the simulation is blowing up")


def test_library_warns_once_and_not_on_stable_runs():
    pb = paper_table_problem()
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        simulate(pb, eta=0.05, local_steps=5, rounds=40, replicates=10, seed=0, server_lr=8.0)
        simulate(pb, eta=0.05, local_steps=5, rounds=40, replicates=10, seed=0, server_lr=1.0)
        simulate_sde(pb, eta=0.05, local_steps=5, rounds=200, paths=4, seed=0, server_lr=np.full(200, 8.0),
                     variant="corrected")  # Euler with dt = h: |1 − dt·A| = 2.49, not checked for schedules
    div = [w for w in log if issubclass(w.category, DivergenceWarning)]
    assert len(div) == 2, [str(w.message) for w in log]
    assert "the simulation is blowing up" in str(div[0].message)
    assert "the SDE (corrected) is blowing up" in str(div[1].message)


# ---------------------------------------------------------------- reproduce --config: constraints up front
@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ("[F2]\netas = [0.01, 0.6]\n", "F2.etas ∋ 0.6, F2.Es ∋ 1: eta*max_eig(U_k) = 2.4 >= 2"),
        ("[F1]\nserver_lr = 5.0\n", "F1.eta=0.05, F1.local_steps=5, F1.server_lr=5: server_lr=5"),
        ("[F1]\nreplicates = 1\n", "F1.replicates=1: must be >= 2"),
        ("[F7]\nQs = [3, 4]\n", "F7.Qs=[3, 4]: every Q must be a multiple of the problem's 3 clients"),
        ("[F9]\neta_cs = [0.025, 5.0]\n", "F9.eta_cs[1]=5"),
        ("[F12]\nlevels = 30\n", "F12.levels=30"),
        ("[F1]\npaths = 1\n", "F1.paths=1: must be >= 2"),
        ("[F14]\nells = [2, 4]\n", "F14.ells=[2, 4]"),
        ("[F14]\nells = [1, 4]\n", "at least 3 values"),
        ("[F13]\nells = [1]\n", "F13.ells=[1]"),
        ("[F13]\nells = [1, 4, 2]\n", "strictly increasing"),
        ("[F14]\nrecord_every = 1000\n", "F14.record_every=1000"),
    ],
)
def test_reproduce_config_refused_before_anything_runs(tmp_path, capsys, toml, needle):
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(toml)
    out = tmp_path / "out"
    fid = toml[1:toml.index("]")]
    code, stdout, err = run(capsys, ["reproduce", "--quick", "--config", str(cfg), "--out", str(out), "--only", fid,
                                     "--no-claims", "--json"])
    one_line_error(code, stdout, err, needle)
    assert not out.exists()


def test_builtin_configs_pass_the_constraints():
    from fedsde.report.config import FIGURE_IDS, check_constraints, load_config
    from fedsde.report.runner import resolve_problem

    for quick in (True, False):
        cfg = load_config(quick=quick)
        check_constraints(cfg, FIGURE_IDS, resolve_problem(cfg["run"]["problem"]))


# ---------------------------------------------------------------- long runs: time on the grid by integer index
def test_grid_brownian_view_is_the_same_path():
    bm = GridBrownian(0.0, 0.05, (130, 2), seed=3)
    v = bm.view(1_000_003, t0=7.0)
    for i in (0, 1, 40):
        torch.testing.assert_close(v.increment(i), bm.increment(1_000_003 + i), rtol=0, atol=0)
    assert v.index(7.0 + 0.05 * 40) == 40


class _Additive(torch.nn.Module):
    """dy = dB: the Euler path is the running sum of the Brownian increments."""

    sde_type, noise_type = "ito", "additive"

    def f(self, t, y):
        return torch.zeros_like(y)

    def g(self, t, y):
        return torch.ones(y.shape[0], 1, 1, dtype=y.dtype)


def test_segments_far_out_on_the_grid():
    # starting at step 10⁹ a single accumulated clock is off the grid after ~10 steps; the restarted clocks are not
    h, j0, n = 0.05, 10**9, SEGMENT_STEPS + 1000
    bm = GridBrownian(0.0, h, (2, 1), seed=1)
    y0 = torch.zeros(2, 1, dtype=torch.float64)
    ys = sdeint_rounds(_Additive(), y0, bm, h=h, rounds=n, t0=j0 * h, record=[0, SEGMENT_STEPS, n])
    expect = y0.clone()
    for i in range(n):
        expect = expect + bm.increment(j0 + i)
        if i + 1 == SEGMENT_STEPS:
            torch.testing.assert_close(ys[1], expect, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ys[-1], expect, rtol=1e-12, atol=1e-12)


def test_long_run_matches_the_stationary_law_and_segments_are_invisible():
    # 3·SEGMENT_STEPS + 5 Euler steps: segment boundaries inside, recorded rounds on both sides of them
    pb = paper_table_problem()
    n = 3 * SEGMENT_STEPS + 5
    kw = {"eta": 0.05, "local_steps": 5, "paths": 2, "seed": 0, "variant": "corrected"}
    a = simulate_sde(pb, rounds=n, record=[0, SEGMENT_STEPS - 1, SEGMENT_STEPS + 1, n], **kw)
    b = simulate_sde(pb, rounds=n, record=[n], progress=True, **kw)
    np.testing.assert_array_equal(a.weights[-1], b.weights[-1])


@pytest.mark.slow
def test_a_million_euler_steps():
    # the issue's failing run needed 2.6·10⁵ steps; 10⁶ steps (substeps 4 × 250 000 rounds) on a scalar problem
    pb = QuadraticProblem.from_arrays([1.0], [1.0], [0.5])
    res = simulate_sde(pb, eta=0.05, local_steps=5, rounds=250_000, substeps=4, paths=2, seed=0, h=0.05,
                       record=[0, 250_000], moments_only=True)
    assert np.all(np.isfinite(res.mean())) and res.config["rounds"] * res.config["substeps"] == 10**6


@pytest.mark.slow
def test_issue_long_sde_command(capsys):
    code, out, _err = run(capsys, ["sde", "--problem", PAPER, "--variant", "corrected", "--eta", "0.05",
                                  "--local-steps", "5", "--h", "0.05", "--rounds", "300000", "--paths", "2", "--seed",
                                  "0", "--json"])
    assert code == 0 and json.loads(out)["final"]["time"] == pytest.approx(15000.0)


# ---------------------------------------------------------------- large runs: streaming moments, memory up front
def test_streaming_moments_are_chunk_invariant_and_match_the_samples():
    pb = random_quadratic_problem(3, 2, seed=1)
    kw = {"eta": 0.1, "local_steps": 3, "rounds": 4, "replicates": 1000, "seed": 0}
    full = simulate(pb, **kw)
    outs = [simulate(pb, moments_only=True, chunk_size=c, **kw) for c in (None, 128, 384, 500)]
    outs.append(simulate(pb, moments_only=True, memory_limit=4 * 10**8 + 60_000, **kw))  # chunked to fit
    for o in outs[1:]:
        np.testing.assert_array_equal(o.mean(), outs[0].mean())
        np.testing.assert_array_equal(o.cov(), outs[0].cov())
    np.testing.assert_allclose(outs[0].mean(), full.mean(), rtol=0, atol=1e-14)
    np.testing.assert_allclose(outs[0].cov(), full.cov(), rtol=1e-11, atol=1e-16)
    assert outs[0].replicates == 1000 and outs[0].weights is None
    s = simulate_sde(pb, eta=0.1, local_steps=3, rounds=5, paths=700, seed=2, moments_only=True, chunk_size=256)
    t = simulate_sde(pb, eta=0.1, local_steps=3, rounds=5, paths=700, seed=2)
    np.testing.assert_allclose(s.cov(), t.cov(), rtol=1e-11, atol=1e-16)


def test_streaming_moments_against_numpy_on_shifted_data():
    rng = np.random.default_rng(0)
    x = 1e6 + rng.standard_normal((1000, 3)) * 1e-3  # mean >> sd: the shift keeps the cancellation small
    m = StreamingMoments(1, 3, 128)
    for a in range(0, 1000, 256):
        m.add(0, a, x[a:a + 256])
    np.testing.assert_allclose(m.mean()[0], x.mean(0), rtol=1e-15)
    np.testing.assert_allclose(m.cov()[0], np.cov(x, rowvar=False), rtol=1e-9)


def test_chunk_plan_is_bounded_whatever_R():
    per_rep = 400
    for R in (10**4, 10**8, 10**12):
        size = plan_chunks("replicates", R, None, 128, per_rep, 0, 6 * 2**30, "")
        assert size is None or size * per_rep <= 2**29
    assert plan_chunks("replicates", 10**8, None, 128, per_rep, 0, 6 * 2**30, "") == 1342080


def test_run_that_cannot_fit_is_refused_up_front(capsys, monkeypatch):
    with pytest.raises(FedsdeInputError, match=r"replicates=100000000: needs about 1.49 GiB of memory but about "):
        simulate(paper_table_problem(), eta=0.05, local_steps=5, rounds=1, replicates=10**8, seed=0,
                 memory_limit="1G")
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "10K")
    code, out, err = run(capsys, [*SIM[:-5], "--eta", "0.05", "--rounds", "2", "--replicates", "100000000", "--seed",
                                  "0", "--json"])
    one_line_error(code, out, err, "replicates=100000000: needs about", "MiB of memory but about")
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "64M")  # fits one chunk of ~5·10⁴ replicates: streams
    code, out, err = run(capsys, [*SIM[:-5], "--eta", "0.05", "--rounds", "2", "--replicates", "300000", "--seed",
                                  "0", "--json"])
    obj = json.loads(out)
    assert code == 0 and obj["replicates"] == 300000 and obj["config"]["chunk_size"] < 300000


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_replicates():
    def peak(R):
        code = ("import resource, sys; from fedsde.cli import main; "
                f"main(['simulate','--problem',{PAPER!r},'--eta','0.05','--local-steps','5','--rounds','2',"
                f"'--replicates','{R}','--seed','0','--json']); "
                "sys.stderr.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))")
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={"FEDSDE_MEMORY_LIMIT": "256M", "PATH": ""})
        return int(res.stderr.strip().splitlines()[-1])

    small, large = peak(20_000), peak(2_000_000)
    assert large < small + 200_000  # kB: the chunk's working set, not 100× the small run


# ---------------------------------------------------------------- determinism (docs/determinism.md)
def _runs(pb):
    return (
        simulate(pb, eta=0.05, local_steps=4, rounds=4, replicates=600, seed=1, aggregator="fedadam",
                 participation=4).weights,
        simulate_sde(pb, eta=0.05, local_steps=4, rounds=12, paths=600, seed=1, variant="corrected").weights,
        simulate_sde(pb, eta=0.05, local_steps=4, rounds=2, paths=200, seed=1, variant="general",
                     inner_samples=3).weights,
    )


def test_bit_identical_across_runs_and_thread_counts():
    pb = random_quadratic_problem(8, 40, seed=2)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _runs(pb)
        again = _runs(pb)
        torch.set_num_threads(2)
        two = _runs(pb)
    finally:
        torch.set_num_threads(threads)
    for a, b, c in zip(one, again, two, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def test_bit_identical_across_chunkings():
    pb = random_quadratic_problem(4, 3, seed=5)
    kw = {"eta": 0.05, "local_steps": 3, "rounds": 3, "replicates": 700, "seed": 9, "participation": 2}
    a = simulate(pb, **kw).weights
    for c in (128, 300):
        np.testing.assert_array_equal(simulate(pb, chunk_size=c, **kw).weights, a)
    s = simulate_sde(pb, eta=0.05, local_steps=3, rounds=6, paths=700, seed=9, variant="paper", substeps=2)
    np.testing.assert_array_equal(
        simulate_sde(pb, eta=0.05, local_steps=3, rounds=6, paths=700, seed=9, variant="paper", substeps=2,
                     chunk_size=256).weights, s.weights)


@pytest.mark.cuda
def test_cpu_and_gpu_agree_in_law_not_in_bits():
    pb = paper_table_problem()
    kw = {"eta": 0.05, "local_steps": 5, "rounds": 30, "replicates": 20000, "seed": 0}
    cpu, gpu = simulate(pb, **kw), simulate(pb, device="cuda", **kw)
    assert not np.array_equal(cpu.weights, gpu.weights)  # different generators: different numbers
    se = np.sqrt(cpu.cov()[-1, 0, 0] * 2 / kw["replicates"])
    assert abs(cpu.mean()[-1, 0] - gpu.mean()[-1, 0]) < 5 * se
