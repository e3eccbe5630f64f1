"""The vectorised simulator: agreement with the exact law, determinism, chunk invariance, validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import assert_moments_within

from fedsde.errors import FedsdeInputError, SimulationDivergedError
from fedsde.exact import stationary_law, transient_moments
from fedsde.problems import QuadraticProblem, paper_table_problem, random_quadratic_problem
from fedsde.sim import BLOCK, RandomSteps, simulate

R = 20000


def test_scalar_stationary_table_point():
    pb = paper_table_problem()
    res = simulate(pb, eta=0.05, local_steps=5, rounds=60, replicates=R, seed=11, record=[60])
    st = stationary_law(pb, 0.05, 5)
    tr = transient_moments(pb, 0.05, 5, 60, record=[60])  # 60 rounds: within 1e-12 of stationarity
    np.testing.assert_allclose(tr.final_cov, st.cov, rtol=1e-9)
    assert_moments_within(res.final, st.mean, st.cov)


def test_full_matrices_heterogeneous_steps_and_schedules():
    pb = random_quadratic_problem(4, 3, seed=21, weights="random")
    assert not pb.is_diagonal
    steps = [1, 3, 6, 2]
    etas = np.linspace(0.2, 0.05, 12)
    lrs = np.linspace(1.0, 0.6, 12)
    w0 = [1.0, -1.0, 0.5]
    res = simulate(pb, eta=etas, local_steps=steps, rounds=12, server_lr=lrs, replicates=R, seed=3, w0=w0,
                   record=[5, 12])
    tr = transient_moments(pb, etas, steps, 12, lrs, w0=w0, record=[5, 12])
    for i in range(2):
        assert_moments_within(res.weights[i], tr.mean[i], tr.cov[i])


def test_diagonal_fast_path_matches_exact():
    pb = random_quadratic_problem(6, 4, seed=5, diagonal=True)
    assert pb.is_diagonal
    res = simulate(pb, eta=0.1, local_steps=4, rounds=15, replicates=R, seed=8, w0=[2, 2, 2, 2], record=[15])
    tr = transient_moments(pb, 0.1, 4, 15, w0=[2, 2, 2, 2], record=[15])
    assert_moments_within(res.final, tr.final_mean, tr.final_cov)


@pytest.mark.parametrize("m", [1, 3])
def test_partial_participation_unbiased_matches_exact(m):
    pb = random_quadratic_problem(5, 3, seed=2, weights="random")
    steps = [1, 3, 5, 2, 4]
    res = simulate(pb, eta=0.1, local_steps=steps, rounds=20, server_lr=0.7, replicates=R, seed=4,
                   participation=m, w0=[1, 1, 1], record=[20])
    tr = transient_moments(pb, 0.1, steps, 20, 0.7, w0=[1, 1, 1], participation=m, record=[20])
    assert_moments_within(res.final, tr.final_mean, tr.final_cov)


def test_renormalised_weighting_single_client_is_local_sgd():
    # with m = 1 the renormalised weight is 1: the server jumps to the sampled client's iterate
    pb = QuadraticProblem.from_arrays([1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0.3, 0.7])
    res = simulate(pb, eta=0.1, local_steps=3, rounds=1, replicates=256, seed=0, participation=1,
                   weighting="renormalised", w0=[1.0], record=[1])
    np.testing.assert_allclose(res.final, 0.9**3, rtol=1e-14)


def test_one_client_server_lr_one_is_local_sgd():
    # STYLE.md invariant: one-client FedAvg with server lr 1 equals plain local SGD over n·E steps
    pb = QuadraticProblem.from_arrays([2.0], [1.0], [0.5])
    a = simulate(pb, eta=0.1, local_steps=3, rounds=4, replicates=300, seed=9, record=[4])
    b = simulate(pb, eta=0.1, local_steps=1, rounds=12, replicates=300, seed=9, record=[12])
    np.testing.assert_allclose(a.final, b.final, rtol=1e-13)


def test_same_seed_bit_identical_and_generator_seed():
    pb = random_quadratic_problem(3, 2, seed=1)
    kw = dict(eta=0.1, local_steps=RandomSteps(1, 4), rounds=5, replicates=500, participation=2)
    a = simulate(pb, seed=7, **kw)
    b = simulate(pb, seed=7, **kw)
    c = simulate(pb, seed=8, **kw)
    assert np.array_equal(a.weights, b.weights)
    assert not np.array_equal(a.weights, c.weights)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    assert np.array_equal(simulate(pb, seed=g1, **kw).weights, simulate(pb, seed=g2, **kw).weights)


@pytest.mark.parametrize("diagonal", [True, False])
def test_chunk_invariance_and_prefix_property(diagonal):
    pb = random_quadratic_problem(4, 3, seed=3, diagonal=diagonal)
    kw = dict(eta=0.1, local_steps=RandomSteps(1, 3), rounds=4, seed=12, participation=3,
              weighting="renormalised", record_drift=[1])
    whole = simulate(pb, replicates=700, **kw)
    chunked = simulate(pb, replicates=700, chunk_size=BLOCK, **kw)
    assert np.array_equal(whole.weights, chunked.weights)
    assert np.array_equal(whole.drift, chunked.drift)
    fewer = simulate(pb, replicates=150, **kw)
    assert np.array_equal(whole.weights[:, :150], fewer.weights)


def test_drift_recording_matches_local_sgd():
    # no noise, one client: drift after i steps is |1 − (1 − ηU)^i|·|w − a|
    pb = QuadraticProblem.from_arrays([2.0], [1.0], [0.0])
    res = simulate(pb, eta=0.1, local_steps=4, rounds=2, replicates=3, seed=0, w0=[3.0], record_drift=True)
    i = np.arange(1, 5)
    np.testing.assert_allclose(res.drift[0, :, 0, 0], (1 - 0.8**i) * 2.0, rtol=1e-13)
    assert res.drift.shape == (2, 4, 3, 1)


@pytest.mark.filterwarnings("ignore::fedsde.errors.DivergenceWarning")  # the blow-up warning precedes the error
def test_divergence_names_round_and_client():
    pb = QuadraticProblem.from_arrays([1.0, 100.0], [0.0, 1.0], [0.1, 0.1])
    with pytest.raises(SimulationDivergedError, match=r"round \d+ in client 1"):
        simulate(pb, eta=0.5, local_steps=50, rounds=50, replicates=10, seed=0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(eta=0.0), "eta=0.0"),
        (dict(local_steps=0), "local_steps=0"),
        (dict(replicates=0), "replicates=0"),
        (dict(seed=-1), "seed=-1"),
        (dict(seed=None), "seed: required"),
        (dict(participation=9), "participation=9"),
        (dict(weighting="mean"), "weighting='mean'"),
        (dict(w0=[1.0, 2.0, 3.0]), "w0"),
        (dict(aggregator="nope"), "aggregator='nope'"),
        (dict(device="nodevice"), "device='nodevice'"),
        (dict(record=[99]), "record"),
        (dict(device="meta"), "device='meta': must be a cpu, cuda or mps device"),
        (dict(chunk_size=0), "chunk_size=0: must be an integer >= 1"),
        (dict(local_steps=float("inf")), "local_steps=inf"),
    ],
)
def test_validation(kwargs, match):
    base = dict(eta=0.1, local_steps=2, rounds=3, replicates=10, seed=0)
    base.update(kwargs)
    with pytest.raises(FedsdeInputError, match=match):
        simulate(paper_table_problem(), **base)


def test_float32_matches_exact_law():
    # float32 draws its own normals, so the check is statistical
    pb = paper_table_problem()
    res = simulate(pb, eta=0.05, local_steps=5, rounds=30, replicates=R, seed=1, dtype=torch.float32, record=[30])
    st = stationary_law(pb, 0.05, 5)
    assert_moments_within(res.final, st.mean, st.cov)


@pytest.mark.cuda
def test_cuda_matches_exact_law():
    pb = random_quadratic_problem(4, 3, seed=1)
    res = simulate(pb, eta=0.1, local_steps=3, rounds=15, replicates=R, seed=2, device="cuda", record=[15])
    tr = transient_moments(pb, 0.1, 3, 15, record=[15])
    assert_moments_within(res.final, tr.final_mean, tr.final_cov)


def test_aggregator_with_bad_parameters_is_an_input_error():
    from fedsde.aggregators import get_aggregator

    with pytest.raises(FedsdeInputError, match=r"aggregator='fedavgm': bad parameters \['bogus'\]"):
        get_aggregator("fedavgm", bogus=1)


# ---------------------------------------------------------------- cross-device regime: many clients, few taking part
def _many(Q: int, d: int, seed: int, diagonal: bool = True) -> QuadraticProblem:
    rng = np.random.default_rng(seed)
    if diagonal:
        U = np.eye(d) * rng.uniform(0.5, 2.0, (Q, 1, d))
        S = np.eye(d) * rng.uniform(0.1, 0.5, (Q, 1, d))
    else:
        G = rng.standard_normal((Q, d, d)) * 0.3
        U = np.eye(d) + G @ G.transpose(0, 2, 1)
        S = 0.2 * np.eye(d) + 0.1 * G @ G.transpose(0, 2, 1)
    return QuadraticProblem.from_arrays(U, rng.standard_normal((Q, d)), S, rng.uniform(0.5, 1.5, Q))


def test_cross_device_regime_is_chosen_by_documented_thresholds():
    from fedsde.aggregators import get_aggregator
    from fedsde.sim.participation import CROSS_DEVICE_Q
    from fedsde.sim.plan import make_plan

    big = _many(CROSS_DEVICE_Q, 2, seed=0)
    kw = {"eta": 0.1, "local_steps": 2, "rounds": 1, "replicates": 4, "seed": 0, "participation": 5}
    assert make_plan(big, **kw).sparse and make_plan(big, **kw).slots == 5
    assert make_plan(big, weighting="renormalised", **kw).sparse
    assert make_plan(big, weighting="multinomial", **kw).sparse  # the same draws; repeats: idle slots
    for rule in ("fedavgm", "fedadam", "fedyogi", "fedadagrad"):  # server state only: the participants' slots
        assert make_plan(big, aggregator=rule, **kw).sparse, rule
    assert make_plan(big, aggregator="scaffold", **kw).sparse  # the participants' controls, on their slots
    with pytest.MonkeyPatch.context() as mp:  # a warm start with every client: the dense round (at 10⁴ clients its
        import fedsde.sim.participation as part  # min-norm problem needs a 10⁴ × 10⁴ Gram matrix per replicate)

        mp.setattr(part, "CROSS_DEVICE_Q", 1000)
        assert make_plan(_many(1000, 2, seed=0), aggregator="fedaware", **kw).sparse is False
    for warm in ("none", "fedavg"):  # the momenta of the clients that took part, on their slots
        assert make_plan(big, aggregator=get_aggregator("fedaware", warm_start=warm), **kw).sparse, warm
    assert not make_plan(big, **(kw | {"participation": None})).sparse
    assert not make_plan(_many(CROSS_DEVICE_Q - 1, 2, seed=0), **kw).sparse  # below: today's draws, unchanged


@pytest.mark.parametrize(("weighting", "diagonal"), [("unbiased", True), ("renormalised", False)])
def test_cross_device_regime_has_the_law_of_sampling(weighting, diagonal, monkeypatch):
    import fedsde.sim.participation as part
    from fedsde.sim.plan import make_plan

    # the regime's threshold lowered to the problem's 400 clients (the dense reference of 10⁴ clients took 40 s)
    monkeypatch.setattr(part, "CROSS_DEVICE_Q", 400)
    pb = _many(400, 2, seed=1, diagonal=diagonal)
    kw = {"eta": 0.1, "local_steps": 3, "rounds": 3, "server_lr": 0.8, "seed": 2, "participation": 4,
          "w0": [1.0, -1.0], "record": [3]}
    assert make_plan(pb, replicates=6000, weighting=weighting, **kw).sparse
    res = simulate(pb, replicates=6000, weighting=weighting, **kw)
    if weighting == "unbiased":
        tr = transient_moments(pb, 0.1, 3, 3, 0.8, w0=[1.0, -1.0], participation=4, record=[3])
        assert_moments_within(res.final, tr.final_mean, tr.final_cov)
    else:  # no closed form: the dense draw of the same law (forced by a threshold above Q) within 5 s.e.
        monkeypatch.setattr(part, "CROSS_DEVICE_Q", 10**9)
        ref = simulate(pb, replicates=6000, weighting=weighting, **(kw | {"seed": 3}))
        diff = res.final.mean(0) - ref.final.mean(0)
        se = np.sqrt(res.final.var(0, ddof=1) / 6000 + ref.final.var(0, ddof=1) / 6000)
        assert np.all(np.abs(diff) < 5 * se), (diff, se)


@pytest.mark.parametrize("rule", ["fedavgm", "fedadam", "scaffold"])
def test_server_state_rules_have_the_same_law_on_the_participants_slots(rule, monkeypatch):
    # FedAvgM and the adaptive rules read Σ ω_k Δ_k only, SCAFFOLD keeps the controls of the clients that took part:
    # the cross-device round (participants' slots, Floyd's draw) and the dense round (all Q clients, the top-m draw)
    # give the same law, within 5 s.e.
    import fedsde.sim.participation as part
    from fedsde.sim.plan import make_plan

    Q, n = (40, 8) if rule == "scaffold" else (400, 4)  # SCAFFOLD: clients take part again, with their controls
    pb = _many(Q, 2, seed=5)
    kw = {"eta": 0.1, "local_steps": 2, "rounds": n, "server_lr": 0.5, "participation": 4, "w0": [1.0, -1.0],
          "record": [n], "aggregator": rule, "replicates": 2000}
    monkeypatch.setattr(part, "CROSS_DEVICE_Q", Q)
    assert make_plan(pb, seed=0, **kw).sparse
    res = simulate(pb, seed=1, **kw)
    monkeypatch.setattr(part, "CROSS_DEVICE_Q", 10**9)
    ref = simulate(pb, seed=2, **kw)
    diff = res.final.mean(0) - ref.final.mean(0)
    se = np.sqrt(res.final.var(0, ddof=1) / 2000 + ref.final.var(0, ddof=1) / 2000)
    assert np.all(np.abs(diff) < 5 * se), (diff, se)
    dv = res.final.var(0, ddof=1) - ref.final.var(0, ddof=1)
    se_v = np.sqrt(2 / 1999) * (res.final.var(0, ddof=1) + ref.final.var(0, ddof=1))  # Gaussian approximation
    assert np.all(np.abs(dv) < 5 * se_v), (dv, se_v)


def test_cross_device_participants_are_uniform_subsets():
    import torch

    from fedsde.clients.streams import ReplicateStreams
    from fedsde.sim.participation import draw_subsets

    Q, m, nb = 50, 5, 40
    streams = ReplicateStreams(0, 0, nb, "cpu", purpose=1)
    p = torch.full((Q,), 1.0 / Q, dtype=torch.float64)
    counts = torch.zeros(Q)
    for _ in range(5):
        cid, w = draw_subsets(streams, nb, Q, m, "unbiased", p)
        assert bool((cid[:, 1:] > cid[:, :-1]).all())  # distinct, increasing
        torch.testing.assert_close(w, torch.full_like(w, 1.0 / m))  # p_k Q/m
        counts += torch.bincount(cid.reshape(-1), minlength=Q)
    n = 5 * nb * BLOCK
    expected, sd = n * m / Q, np.sqrt(n * (m / Q) * (1 - m / Q))
    assert float((counts - expected).abs().max()) < 5 * sd


@pytest.mark.long
def test_cross_device_runs_are_bit_identical_across_chunks_and_workers_and_name_clients():
    from fedsde.sim.participation import CROSS_DEVICE_Q

    pb = _many(CROSS_DEVICE_Q, 3, seed=4, diagonal=False)
    kw = {"eta": 0.1, "local_steps": 2, "rounds": 2, "replicates": 700, "seed": 1, "participation": 6}
    a = simulate(pb, **kw).weights
    np.testing.assert_array_equal(simulate(pb, chunk_size=256, **kw).weights, a)
    np.testing.assert_array_equal(simulate(pb, workers=3, **kw).weights, a)
    fewer = simulate(pb, **(kw | {"replicates": 300}), block_size=128).weights
    np.testing.assert_array_equal(fewer, a[:, :300])
    bad = QuadraticProblem.from_arrays(np.r_[np.ones(CROSS_DEVICE_Q - 1), 100.0], np.zeros(CROSS_DEVICE_Q),
                                       np.full(CROSS_DEVICE_Q, 0.1))
    with pytest.warns(Warning), pytest.raises(SimulationDivergedError, match=rf"client {CROSS_DEVICE_Q - 1} "):
        simulate(bad, eta=0.5, local_steps=50, rounds=20, replicates=2000, seed=0, participation=500)


def test_ragged_rows_give_the_padded_rows_results(monkeypatch):
    """Gathering minibatches from the problem's own rows (cross-device client counts) or from the padded layout gives
    the same simulation."""
    import fedsde.clients.data_rows as rows
    from fedsde.problems import federated_classification

    pb = federated_classification("digits", n_clients=6, partition="dirichlet", alpha=0.5, seed=2).replace(
        batch_size=4, model="mlp", hidden=5, init_seed=1)
    kw = {"eta": 0.05, "local_steps": 3, "rounds": 2, "replicates": 12, "seed": 3}
    for batch, extra in ((4, {}), (4, {"participation": 2}), (200, {"participation": 2})):  # gathered, dense rows
        padded = simulate(pb.replace(batch_size=batch), **kw, **extra).weights
        monkeypatch.setattr(rows, "RAGGED_FLOATS", 0)
        np.testing.assert_array_equal(simulate(pb.replace(batch_size=batch), **kw, **extra).weights, padded)
        monkeypatch.undo()
