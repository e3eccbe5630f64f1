"""Integrating on the round grid: stationary law of the corrected SDE, matched = chain, reproducibility, CUDA."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch
from helpers import assert_moments_within, assert_within_se

from fedsde.errors import FedsdeInputError, SimulationDivergedError
from fedsde.exact import transient_moments
from fedsde.problems import paper_table_problem, random_quadratic_problem
from fedsde.sde import quadratic_sde_coefficients
from fedsde.sde.integrate import simulate_sde
from fedsde.sde.segments import time_grid


def test_corrected_sde_stationary_covariance_matches_continuous_lyapunov():
    pb = random_quadratic_problem(3, 2, seed=8, curvature=(1.0, 3.0))
    eta, E, s, h, k = 0.05, 4, 0.2, 0.1, 8
    lin = quadratic_sde_coefficients(pb, eta, E, s, h, "corrected")
    st = lin.stationary()
    R = 4096
    # Euler's own stationary covariance (step dt = h/k) is within a fraction of a standard error of Lyapunov's
    dt = h / k
    T = np.eye(2) - lin.A * dt
    P_em = scipy.linalg.solve_discrete_lyapunov(T, lin.diffusion_cov * dt)
    se = np.sqrt((np.outer(np.diag(st.cov), np.diag(st.cov)) + st.cov**2) / R)
    assert np.all(np.abs(P_em - st.cov) < 0.5 * se)
    relax = 1.0 / np.linalg.eigvalsh(lin.A).min()
    rounds = int(np.ceil(12 * relax / h))
    res = simulate_sde(pb, eta=eta, local_steps=E, server_lr=s, h=h, substeps=k, rounds=rounds, paths=R, seed=3,
                       w0=st.mean, record=[rounds])
    assert_moments_within(res.final, st.mean, st.cov, nsigma=5.0)


def test_matched_has_the_chain_law_at_grid_times():
    pb = random_quadratic_problem(3, 2, seed=1)
    eta, E, s, h = 0.05, 5, 0.6, 0.3
    rounds = [1, 3, 10, 40]
    chain = transient_moments(pb, eta, E, 40, s, w0=[2.0, -1.0], record=rounds)
    res = simulate_sde(pb, eta=eta, local_steps=E, server_lr=s, h=h, rounds=40, paths=4096, seed=2,
                       variant="matched", method="exact", w0=[2.0, -1.0], record=rounds)
    np.testing.assert_allclose(res.times, np.array(rounds) * h)
    for i in range(len(rounds)):
        assert_moments_within(res.weights[i], chain.mean[i], chain.cov[i], nsigma=5.0)


def test_euler_of_corrected_and_exact_matched_are_the_same_paths():
    """With one Euler step per round both are eq. (1) driven by the same normals (coupled path by path)."""
    pb = random_quadratic_problem(3, 3, seed=6)
    kw = {"eta": 0.05, "local_steps": 3, "server_lr": 0.5, "h": 0.1, "rounds": 25, "paths": 300, "seed": 9,
          "w0": [1.0, 0.0, -1.0]}
    em = simulate_sde(pb, variant="corrected", **kw)
    ex = simulate_sde(pb, variant="matched", method="exact", **kw)
    np.testing.assert_allclose(em.weights, ex.weights, rtol=1e-9, atol=1e-11)


def test_same_seed_same_paths_whatever_the_chunks_and_progress():
    pb = paper_table_problem()
    kw = {"eta": 0.05, "local_steps": 5, "rounds": 30, "paths": 300, "seed": 4, "substeps": 2}
    for variant in ("paper", "general"):
        extra = {"inner_samples": 3} if variant == "general" else {}
        a = simulate_sde(pb, variant=variant, **kw, **extra)
        b = simulate_sde(pb, variant=variant, chunk_size=128, progress=True, **kw, **extra)
        np.testing.assert_array_equal(a.weights, b.weights)
        # prefix property for runs using the same block: the general SDE's rollouts use blocks of min(paths, 128)
        # paths (as the simulator), so its prefix run has 128 paths; the linear variants' Brownian blocks are fixed
        m = 128 if variant == "general" else 100
        c = simulate_sde(pb, variant=variant, **(kw | {"paths": m}), **extra)
        np.testing.assert_array_equal(a.weights[:, :m], c.weights)
    d = simulate_sde(pb, variant="paper", **(kw | {"seed": 5}))
    assert not np.allclose(a.weights[-1], d.weights[-1])


def test_general_sde_block_is_sized_to_the_paths(monkeypatch):
    """Monte-Carlo Euler never pays for paths it was not asked for: the rollouts of a 2-path run are 2 paths wide."""
    from fedsde.sde.models import FedAvgSDE

    pb = paper_table_problem()
    kw = {"eta": 0.05, "local_steps": 2, "rounds": 2, "seed": 4, "variant": "general", "inner_samples": 2}
    assert simulate_sde(pb, paths=2, **kw).config["block_size"] == 2
    assert simulate_sde(pb, paths=300, **kw).config["block_size"] == 128
    seen = []
    orig = FedAvgSDE.rollouts

    def spy(self, t, y):
        out = orig(self, t, y)
        seen.append(self._nb * self.block)
        return out

    monkeypatch.setattr(FedAvgSDE, "rollouts", spy)
    simulate_sde(pb, paths=3, **kw)
    assert seen and max(seen) == 3


def test_global_rng_is_left_alone():
    state = torch.get_rng_state()
    simulate_sde(paper_table_problem(), eta=0.05, local_steps=5, rounds=3, paths=10, seed=1)
    assert torch.equal(state, torch.get_rng_state())


def test_results_on_the_round_grid():
    pb = paper_table_problem()
    res = simulate_sde(pb, eta=0.05, local_steps=5, rounds=12, paths=20, seed=1, substeps=3, record=[0, 5, 12])
    assert res.rounds.tolist() == [0, 5, 12]
    np.testing.assert_allclose(res.times, [0.0, 0.25, 0.6])
    assert res.weights.shape == (3, 20, 1) and np.all(res.weights[0] == 0)
    grid = time_grid(0.05, 12, 3)
    assert grid.shape == (37,) and grid[36] == pytest.approx(0.6, abs=1e-14)
    zero = simulate_sde(pb, eta=0.05, local_steps=5, rounds=0, paths=5, seed=1)
    assert zero.weights.shape == (1, 5, 1)


def test_time_varying_schedule_matches_chain_moments():
    """Per-round η_n and s_n: the matched SDE sampled exactly has the chain's moments at every round."""
    pb = paper_table_problem()
    etas = np.linspace(0.05, 0.02, 20)
    lrs = np.linspace(1.0, 0.3, 20)
    chain = transient_moments(pb, etas, 5, 20, lrs, record=[20])
    res = simulate_sde(pb, eta=etas, local_steps=5, server_lr=lrs, h=0.05, rounds=20, paths=4096, seed=3,
                       variant="matched", method="exact", record=[20])
    assert_moments_within(res.final, chain.mean[-1], chain.cov[-1])


def test_float32_paths():
    pb = paper_table_problem()
    res = simulate_sde(pb, eta=0.05, local_steps=5, rounds=50, paths=2048, seed=1,
                       dtype=torch.float32, float32_draws=True, variant="matched", record=[50])
    assert res.config["dtype"] == "float32" and res.config["method"] == "euler"
    # Euler mean of dw = −A(w − c)dt + b dB from w₀ = 0 (h = η): c + (I − hA)^50 (w₀ − c), in float64.
    # The paths are i.i.d., so the s.e. of their mean is sd/√R; float32 rounding (~1e-7) is far below it.
    lin = quadratic_sde_coefficients(pb, 0.05, 5, 1.0, 0.05, "matched")
    mean = lin.c - np.linalg.matrix_power(np.eye(1) - 0.05 * lin.A, 50) @ lin.c
    x = res.final.astype(np.float64)
    assert_within_se(x.mean(0), mean, x.std(0, ddof=1) / np.sqrt(x.shape[0]), what="float32 path mean",
                     resolution=0.01)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"variant": "ito"}, "variant"),
        ({"method": "milstein"}, "method"),
        ({"variant": "general", "method": "exact"}, "exact"),
        ({"paths": 0}, "paths"),
        ({"substeps": 0}, "substeps"),
        ({"record": [11]}, "record"),
        ({"w0": [1.0, 2.0]}, "w0"),
        ({"eta": [0.05, 0.05], "h": 0.05}, "per-round schedule"),
    ],
)
def test_input_validation(kwargs, match):
    args = {"eta": 0.05, "local_steps": 5, "rounds": 10, "paths": 4, "seed": 0} | kwargs
    with pytest.raises(FedsdeInputError, match=match):
        simulate_sde(paper_table_problem(), **args)


def test_divergence_is_reported():
    # a per-round server-lr schedule is not checked up front: the NaN/inf check names the time
    with pytest.raises(SimulationDivergedError, match="NaN/inf"):
        simulate_sde(paper_table_problem(), eta=0.05, local_steps=5, server_lr=np.full(400, 1e3), rounds=400,
                     paths=4, seed=0, variant="paper")


def test_unstable_euler_step_is_refused_up_front():
    # I − dt·A with dt = h = 0.05 and A = (s/h)B, s = 30: spectral radius 30·0.436 − 1 = 12.08
    kw = {"eta": 0.05, "local_steps": 5, "server_lr": 30.0, "rounds": 10, "paths": 4, "seed": 0}
    with pytest.raises(FedsdeInputError, match=r"spectral radius of I − dt·A is 12.08 >= 1\); use substeps >= 8"):
        simulate_sde(paper_table_problem(), variant="corrected", **kw)
    ok = simulate_sde(paper_table_problem(), variant="corrected", substeps=8, **kw)
    assert np.all(np.isfinite(ok.weights))


@pytest.mark.cuda
def test_cuda_matches_the_law_and_is_reproducible():
    pb = random_quadratic_problem(3, 2, seed=1)
    eta, E, s, h = 0.05, 5, 0.6, 0.3
    chain = transient_moments(pb, eta, E, 10, s, w0=[2.0, -1.0], record=[10])
    kw = {"eta": eta, "local_steps": E, "server_lr": s, "h": h, "rounds": 10, "paths": 4096, "seed": 2,
          "w0": [2.0, -1.0], "record": [10], "device": "cuda"}
    a = simulate_sde(pb, **kw)  # corrected, one Euler step per round = eq. (1)
    b = simulate_sde(pb, chunk_size=1024, **kw)
    np.testing.assert_array_equal(a.weights, b.weights)
    assert_moments_within(a.final, chain.mean[-1], chain.cov[-1])
    g = simulate_sde(pb, variant="general", inner_samples=4, **(kw | {"paths": 1024}))
    assert_moments_within(g.final, chain.mean[-1], chain.cov[-1])


# ---------------------------------------------------------------- the Euler loop is torchsde's, bit for bit
def _reference(pb, variant, *, rounds, paths, seed, substeps=1, record=None, dtype=torch.float64, **kw):
    """The same run through torchsde.sdeint (fedsde.sde.segments.sdeint_rounds) with the same Brownian motion."""
    from fedsde.clients.streams import resolve_block_size
    from fedsde.sde.brownian import GridBrownian
    from fedsde.sde.models import FedAvgSDE, QuadraticSDE
    from fedsde.sde.segments import sdeint_rounds

    eta, E, s, h = kw["eta"], kw["local_steps"], kw.get("server_lr", 1.0), kw.get("h")
    if variant == "general":
        sde = FedAvgSDE(pb, eta, E, s, h, inner_samples=kw["inner_samples"], seed=seed, dtype=dtype,
                        block_size=resolve_block_size(None, paths))
    else:
        sde = QuadraticSDE(pb, eta, E, s, h, variant, dtype=dtype)
    bm = GridBrownian(0.0, sde.h / substeps, (paths, sde.brownian_channels), seed=seed, steps=rounds * substeps,
                      dtype=dtype)
    y0 = torch.zeros(paths, pb.d, dtype=dtype)
    return sdeint_rounds(sde, y0, bm, h=sde.h, rounds=rounds, substeps=substeps, record=record).numpy()


@pytest.mark.parametrize(("variant", "extra"), [
    ("corrected", {}),
    ("paper", {"substeps": 3, "record": [0, 2, 7]}),
    ("corrected", {"dtype": torch.float32}),
    ("corrected", {"eta": np.linspace(0.05, 0.02, 9), "h": 0.05, "server_lr": np.linspace(1.0, 0.5, 9)}),
    ("general", {"inner_samples": 3, "substeps": 2}),
])
def test_euler_loop_gives_torchsde_paths_bit_for_bit(variant, extra):
    pb = random_quadratic_problem(4, 3, seed=1)
    kw = {"eta": 0.05, "local_steps": 3, "rounds": 9, "paths": 200, "seed": 5} | extra
    got = simulate_sde(pb, variant=variant, **kw)
    ref = _reference(pb, variant, **kw)
    np.testing.assert_array_equal(got.weights, ref)
    diag = random_quadratic_problem(3, 2, seed=2, diagonal=True)  # the elementwise fast path
    np.testing.assert_array_equal(simulate_sde(diag, variant="corrected", eta=0.05, local_steps=2, rounds=5,
                                               paths=130, seed=3).weights,
                                  _reference(diag, "corrected", eta=0.05, local_steps=2, rounds=5, paths=130, seed=3))


def test_euler_loop_across_segments_is_torchsde(monkeypatch):
    """Several segments on restarted clocks (a small SEGMENT_STEPS in both integrators)."""
    import fedsde.sde.integrate as integrate
    import fedsde.sde.segments as segments

    monkeypatch.setattr(segments, "SEGMENT_STEPS", 8)
    monkeypatch.setattr(integrate, "SEGMENT_STEPS", 8)
    pb = random_quadratic_problem(3, 2, seed=4)
    kw = {"eta": 0.05, "local_steps": 2, "rounds": 20, "paths": 150, "seed": 8, "substeps": 3}
    np.testing.assert_array_equal(simulate_sde(pb, variant="corrected", **kw).weights,
                                  _reference(pb, "corrected", **kw))


def test_moments_only_and_samples_stay_on_the_device_until_the_end(monkeypatch):
    """No transfer inside the loop: the recorded states of a chunk reach the host once (here: one stack per chunk)."""
    pb = random_quadratic_problem(3, 2, seed=4)
    calls = []
    orig = torch.Tensor.cpu

    def spy(self, *a, **k):
        calls.append(tuple(self.shape))
        return orig(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "cpu", spy)
    simulate_sde(pb, eta=0.05, local_steps=2, rounds=30, paths=300, seed=1, chunk_size=128, workers=1)
    assert calls == [(31, 128, 2), (31, 128, 2), (31, 44, 2)]
