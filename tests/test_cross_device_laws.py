"""The cross-device regime (participants' slots) against the dense round: the same law for FedAWARE without its
full first round and for multinomial participation."""

import numpy as np
import pytest

from fedsde.aggregators import get_aggregator
from fedsde.problems import QuadraticProblem
from fedsde.sim import simulate


def _many(Q: int, d: int, seed: int) -> QuadraticProblem:
    rng = np.random.default_rng(seed)
    U = np.eye(d) * rng.uniform(0.5, 2.0, (Q, 1, d))
    S = np.eye(d) * rng.uniform(0.1, 0.5, (Q, 1, d))
    return QuadraticProblem.from_arrays(U, rng.standard_normal((Q, d)), S, rng.uniform(0.5, 1.5, Q))


def _same_law(rule, Q, rounds, m, weighting, monkeypatch, R=2000):
    import fedsde.sim.participation as part
    from fedsde.sim.plan import make_plan

    pb = _many(Q, 2, seed=5)
    kw = {"eta": 0.1, "local_steps": 2, "rounds": rounds, "server_lr": 0.5, "participation": m, "w0": [1.0, -1.0],
          "record": [rounds], "aggregator": rule, "replicates": R, "weighting": weighting}
    monkeypatch.setattr(part, "CROSS_DEVICE_Q", Q)
    assert make_plan(pb, seed=0, **kw).sparse
    res = simulate(pb, seed=1, **kw)
    monkeypatch.setattr(part, "CROSS_DEVICE_Q", 10**9)
    assert not make_plan(pb, seed=0, **kw).sparse
    ref = simulate(pb, seed=2, **kw)
    assert np.abs(ref.final - np.array([1.0, -1.0])).max() > 0.1  # the rule moved: the comparison is not vacuous
    diff = res.final.mean(0) - ref.final.mean(0)
    se = np.sqrt(res.final.var(0, ddof=1) / R + ref.final.var(0, ddof=1) / R)
    assert np.all(np.abs(diff) < 5 * se), (diff, se)
    dv = res.final.var(0, ddof=1) - ref.final.var(0, ddof=1)
    se_v = np.sqrt(2 / (R - 1)) * (res.final.var(0, ddof=1) + ref.final.var(0, ddof=1))  # Gaussian approximation
    assert np.all(np.abs(dv) < 5 * se_v), (dv, se_v)


@pytest.mark.parametrize("warm_start", ["none", "fedavg"])
def test_fedaware_has_the_same_law_on_the_participants_slots(warm_start, monkeypatch):
    # 6 clients, 3 a round: every client is seen within a few rounds, after which FedAWARE steps on the min-norm
    # point of all 6 momenta, from the table of the clients that took part (slots) or from all Q (dense)
    _same_law(get_aggregator("fedaware", warm_start=warm_start), 6, 8, 3, "unbiased", monkeypatch)


@pytest.mark.parametrize(("rule", "Q", "rounds", "m"), [("fedavg", 4, 2, 3), ("scaffold", 12, 6, 6)])
def test_multinomial_participation_has_the_same_law_on_the_participants_slots(rule, Q, rounds, m, monkeypatch):
    # the same draws with replacement (repeated clients: one slot weighted count/m, the other slots idle); with 3
    # draws from 4 clients most rounds repeat one, and training a repeat twice would show in the variance
    _same_law(rule, Q, rounds, m, "multinomial", monkeypatch, R=4000)


def test_multinomial_slots_draw_the_dense_rounds_participants_and_weights():
    import torch

    from fedsde.clients.streams import ReplicateStreams
    from fedsde.sim.participation import draw_participation, draw_subsets, first_occurrences

    Q, m, nb = 30, 8, 2
    p = torch.linspace(0.2, 2.0, Q, dtype=torch.float64)
    p = p / p.sum()
    mask, weights = draw_participation(ReplicateStreams(3, 0, nb, "cpu", purpose=1), nb, Q, m, "multinomial", p)
    cid, w = draw_subsets(ReplicateStreams(3, 0, nb, "cpu", purpose=1), nb, Q, m, "multinomial", p)
    keep = first_occurrences(cid)
    assert bool((keep.sum(1) < m).any())  # some client drawn twice
    dense = torch.zeros_like(weights).scatter_add_(1, cid, w)
    np.testing.assert_array_equal(dense.numpy(), weights.numpy())
    np.testing.assert_array_equal((dense > 0).numpy(), mask.numpy())  # every p_k > 0: drawn iff weighted
    assert bool((w[~keep] == 0).all())


def test_population_plans_count_the_full_round_and_the_multinomial_draws(monkeypatch):
    from fedsde.errors import FedsdeInputError
    from fedsde.problems.populations.synthetic import synthetic_population_problem
    from fedsde.sim.plan import make_plan

    pb = synthetic_population_problem(1.0, 1.0, seed=1, n_clients=10**5, batch_size=10)
    kw = dict(eta=0.01, local_steps=2, rounds=20, replicates=8, seed=0, participation=10)
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "2G")
    with pytest.raises(FedsdeInputError, match=r"^aggregator='fedaware' with warm_start='full' trains all Q clients in "
                       r"its first round; warm_start='none' .*: .*needs about"):
        make_plan(pb, aggregator="fedaware", **kw)
    for warm in ("none", "fedavg"):
        assert make_plan(pb, aggregator=get_aggregator("fedaware", warm_start=warm), **kw).sparse
    assert make_plan(pb, weighting="multinomial", **kw).sparse
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "64M")
    with pytest.raises(FedsdeInputError, match=r"80 participant slots .*; multinomial draws take client k with "
                       r"probability p_k: about .* rows a slot: needs about"):
        make_plan(pb, weighting="multinomial", **kw)


def test_per_client_state_of_the_participants_is_planned_up_front():
    # SCAFFOLD's controls, FedAWARE's momenta: one row per replicate for every client any replicate of the chunk
    # drew, at most min(Q, rounds·m·C) for C replicates at once: the chunk shrinks to fit, or the run is refused
    from fedsde.errors import FedsdeInputError
    from fedsde.sim.participation import CROSS_DEVICE_Q
    from fedsde.sim.plan import make_plan

    pb = _many(CROSS_DEVICE_Q, 2, seed=0)
    kw = dict(eta=0.1, local_steps=2, rounds=50, replicates=4096, seed=0, participation=100, workers=1,
              moments_only=True)
    for rule in ("scaffold", get_aggregator("fedaware", warm_start="none")):
        plan = make_plan(pb, aggregator=rule, memory_limit="1G", **kw)
        assert plan.sparse and plan.chunk_size is not None
        assert 3 * plan.chunk_size * CROSS_DEVICE_Q * 3 * 8 <= 2**30
        with pytest.raises(FedsdeInputError, match=r"keeps per-client state for the clients that have taken part: "
                           r"up to min\(Q=10000, rounds·participation·replicates in flight = 50·100·4096\) = 10000 "
                           r"clients × 3 numbers per replicate: needs about .*chunk_size"):
            make_plan(pb, aggregator=rule, memory_limit="1G", chunk_size=4096, **kw)


def test_fedaware_min_norm_problem_is_planned_up_front():
    # FedAWARE's step solves a min-norm problem on a Q × Q Gram matrix per replicate: counted before the run (on
    # slots only when a replicate can see every client, rounds·m >= Q)
    from fedsde.errors import FedsdeInputError
    from fedsde.sim.plan import make_plan

    pb = _many(20_000, 2, seed=0)
    kw = dict(eta=0.1, local_steps=2, rounds=5, replicates=8, seed=0, participation=10, memory_limit="2G",
              moments_only=True)
    assert make_plan(pb, aggregator=get_aggregator("fedaware", warm_start="none"), **kw).sparse
    with pytest.raises(FedsdeInputError, match=r"^aggregator='fedaware' with warm_start='full' trains all Q clients"):
        make_plan(pb, aggregator="fedaware", **kw)  # 8 × 64 × 20 000² bytes
    with pytest.raises(FedsdeInputError, match=r"replicates=8: needs about"):
        make_plan(pb, aggregator=get_aggregator("fedaware", warm_start="none"), **(kw | {"rounds": 2000}))


@pytest.mark.cuda
@pytest.mark.parametrize(("rule", "weighting"), [("fedaware-none", "unbiased"), ("fedavg", "multinomial"),
                                                 ("scaffold", "multinomial")])
def test_cross_device_rules_on_cuda_have_the_cpu_law(rule, weighting, monkeypatch):
    import fedsde.sim.participation as part

    Q, R = 6, 4000
    monkeypatch.setattr(part, "CROSS_DEVICE_Q", Q)
    agg = get_aggregator("fedaware", warm_start="none") if rule == "fedaware-none" else rule
    kw = {"eta": 0.1, "local_steps": 2, "rounds": 8, "server_lr": 0.5, "participation": 3, "w0": [1.0, -1.0],
          "record": [8], "aggregator": agg, "replicates": R, "weighting": weighting, "seed": 3}
    gpu, cpu = simulate(_many(Q, 2, seed=5), device="cuda", **kw).final, simulate(_many(Q, 2, seed=5), **kw).final
    se = np.sqrt(gpu.var(0, ddof=1) / R + cpu.var(0, ddof=1) / R)
    assert np.all(np.abs(gpu.mean(0) - cpu.mean(0)) < 5 * se)


def test_simulate_refuses_fedaware_full_warm_start_on_a_population_in_one_line(tmp_path, monkeypatch, capsys):
    from fedsde.cli import main

    path = tmp_path / "synthetic.toml"
    path.write_text('kind = "classification"\ndataset = "synthetic"\nalpha = 1.0\nbeta = 1.0\nclients = 100000\n'
                    'batch_size = 10\nseed = 0\n')
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "2G")
    code = main(["simulate", "--problem", str(path), "--eta", "0.01", "--local-steps", "2", "--rounds", "2",
                 "--replicates", "8", "--seed", "1", "--participation", "10", "--aggregator", "fedaware"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "warm_start='full' trains all Q clients in its first round; warm_start='none'" in err
    assert "--replicates=8: needs about" in err
