"""Chunks of replicates in parallel threads (fedsde.sim.workers): the simulator, the SDE integrator and the SVAG
chains give the same numbers, warnings and errors for every number of workers; the streamed moments merge in
block order whatever order chunks finish in; grouped random streams (the GPU layout) are chunk-invariant."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
import torch

from fedsde.clients.streams import ReplicateStreams, split_chunks
from fedsde.errors import DivergenceWarning, FedsdeInputError, SimulationDivergedError
from fedsde.problems import QuadraticProblem, federated_classification, random_quadratic_problem
from fedsde.sde import simulate_sde, svag_chain
from fedsde.sim import EpochSteps, RandomSteps, simulate
from fedsde.sim.moments import ChunkAborted, StreamingMoments
from fedsde.sim.workers import MIN_CHUNK_WORK, plan_workers, resolve_workers, run_chunks

WORKERS = (2, 3)


@pytest.fixture(scope="module")
def quad():
    return random_quadratic_problem(12, 6, seed=3)


def _same(a, b):
    if isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    else:
        np.testing.assert_array_equal(a.mean(), b.mean())
        np.testing.assert_array_equal(a.cov(), b.cov())


@pytest.mark.parametrize("kw", [
    {"aggregator": "fedadam", "participation": 4},
    {"aggregator": "scaffold", "local_steps": RandomSteps(1, 4)},
    {"participation": 5, "weighting": "multinomial", "record_drift": [1]},
    {"moments_only": True, "participation": 3, "weighting": "renormalised"},
])
def test_simulator_is_bit_identical_for_any_number_of_workers(quad, kw):
    kw = {"eta": 0.05, "local_steps": 3, "rounds": 3, "replicates": 700, "seed": 4} | kw
    one = simulate(quad, workers=1, **kw)
    for w in WORKERS:
        other = simulate(quad, workers=w, **kw)
        _same(other.weights if other.weights is not None else other, one.weights if one.weights is not None
              else one)
        if one.drift is not None:
            np.testing.assert_array_equal(other.drift, one.drift)


def test_data_simulator_with_epoch_steps_and_participants_is_bit_identical():
    pb = federated_classification("digits", n_clients=8, partition="dirichlet", alpha=0.5, seed=1).replace(
        batch_size=8)
    steps = EpochSteps(tuple(int(n) for n in pb.sizes), epochs=(1, 2), batch_size=(4, 12))
    kw = {"eta": 0.05, "local_steps": steps, "rounds": 2, "replicates": 40, "seed": 2, "participation": 3,
          "block_size": 8}
    one = simulate(pb, workers=1, **kw).weights
    np.testing.assert_array_equal(simulate(pb, workers=3, **kw).weights, one)


def test_sde_paths_are_bit_identical_for_any_number_of_workers(quad):
    for kw in ({"variant": "corrected", "substeps": 2}, {"variant": "paper", "method": "exact"},
               {"variant": "general", "inner_samples": 3, "rounds": 2}):
        kw = {"eta": 0.05, "local_steps": 3, "rounds": 5, "paths": 600, "seed": 6} | kw
        one = simulate_sde(quad, workers=1, **kw)
        for w in WORKERS:
            np.testing.assert_array_equal(simulate_sde(quad, workers=w, **kw).weights, one.weights)
        streamed = simulate_sde(quad, workers=3, moments_only=True, **kw)
        _same(streamed, simulate_sde(quad, workers=1, moments_only=True, **kw))


@pytest.mark.parametrize("ell", [1, 2])
def test_svag_chains_are_bit_identical_and_every_row_reaches_on_grid(quad, ell):
    kw = {"eta": 0.05, "local_steps": 2, "rounds": 3, "ell": ell, "replicates": 500, "seed": 1, "record": [1, 3]}
    seen = {}
    lock = threading.Lock()

    def on_grid(n, start, w):
        with lock:
            seen.setdefault(n, []).append((start, w.shape[0], w.clone()))

    one = svag_chain(quad, workers=1, **kw)
    other = svag_chain(quad, workers=3, on_grid=on_grid, **kw)
    np.testing.assert_array_equal(other.weights, one.weights)
    np.testing.assert_array_equal(other.final, one.final)
    assert sorted(seen) == [0, 1, 2, 3]
    for n, parts in seen.items():
        rows = sorted((a, b) for a, b, _ in parts)
        assert rows[0][0] == 0 and sum(b for _, b in rows) == 500 and len(parts) > 1
        if n in (1, 3):
            full = np.concatenate([w.numpy() for _, _, w in sorted(parts, key=lambda t: t[0])])
            np.testing.assert_array_equal(full, one.weights[[1, 3].index(n)])


@pytest.fixture
def tiny_chunks(monkeypatch):
    """Chunks of tiny problems run in threads too (plan_workers would keep them in one)."""
    import fedsde.sim.workers as W

    monkeypatch.setattr(W, "MIN_CHUNK_WORK", 1)


def test_divergence_error_and_warning_are_those_of_a_serial_run(tiny_chunks):
    pb = QuadraticProblem.from_arrays([1.0, 100.0], [0.0, 1.0], [0.1, 0.1])
    kw = {"eta": 0.5, "local_steps": 50, "rounds": 50, "replicates": 900, "seed": 0}
    messages = []
    for w in (1, 2, 3):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(SimulationDivergedError) as err:
                simulate(pb, workers=w, **kw)
        blowups = [str(c.message) for c in caught if issubclass(c.category, DivergenceWarning)]
        assert len(blowups) == 1
        messages.append((str(err.value), blowups[0]))
    assert messages[1] == messages[0] and messages[2] == messages[0]


def test_blow_up_warning_is_the_first_in_chunk_order(tiny_chunks):
    from fedsde.problems import paper_table_problem

    pb = paper_table_problem()
    texts = []
    for w in (1, 2, 4):
        for run in (lambda w=w: simulate(pb, eta=0.05, local_steps=5, rounds=40, replicates=1000, seed=0,
                                         server_lr=8.0, record=[40], workers=w),
                    lambda w=w: simulate_sde(pb, eta=0.05, local_steps=5, rounds=200, paths=1000, seed=0,
                                             server_lr=np.full(200, 8.0), variant="corrected", record=[200],
                                             workers=w)):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                run()
            found = [str(c.message) for c in caught if issubclass(c.category, DivergenceWarning)]
            assert len(found) == 1
            texts.append(found[0])
    assert texts[2:4] == texts[0:2] and texts[4:6] == texts[0:2]
    assert "replicate" in texts[0] and "path" in texts[1]


def test_streaming_moments_merge_in_block_order_whatever_order_chunks_arrive():
    rng = np.random.default_rng(0)
    x = 3.0 + rng.standard_normal((1000, 4))
    chunks = split_chunks(1000, 256, 128)
    inorder = StreamingMoments(2, 4, 128)
    for t in range(2):
        for a, b in chunks:
            inorder.add(t, a, x[a:b] * (t + 1))
    shuffled = StreamingMoments(2, 4, 128)
    order = [0, 3, 1, 2]  # the first chunk (the shift) first, the rest out of order
    for t in range(2):
        for i in order:
            a, b = chunks[i]
            shuffled.add(t, a, x[a:b] * (t + 1))
    _same(shuffled, inorder)
    np.testing.assert_allclose(inorder.cov()[1], np.cov(2 * x, rowvar=False), rtol=1e-12)


def test_a_chunk_waiting_for_the_shift_is_released_when_another_fails():
    m = StreamingMoments(1, 2, 128)
    got = []

    def later():
        try:
            m.add(0, 128, np.ones((128, 2)))
        except ChunkAborted:
            got.append("aborted")

    t = threading.Thread(target=later)
    t.start()
    m.abort()
    t.join(timeout=10)
    assert got == ["aborted"]


def test_run_chunks_reports_the_earliest_failure_and_restores_threads():
    from fedsde.sim.workers import diverged

    threads = torch.get_num_threads()
    reached = {}

    def fn(a, b, halt):  # chunk a fails at step 10 - a (chunks 3 and 5), the others run 20 steps
        for step in range(20):
            halt.check(step)
            reached[a] = step
            if a in (3, 5) and step == 10 - a:
                raise diverged(ValueError(f"chunk {a}"), step, a)

    for workers in (1, 2, 4):
        reached.clear()
        seen = []
        with pytest.raises(ValueError, match="chunk 5"):
            run_chunks(fn, [(i, i + 1) for i in range(8)], workers, before_raise=seen.append)
        assert [str(e) for e in seen] == ["chunk 5"] and torch.get_num_threads() == threads
        assert max(reached.values()) <= 19 and all(v >= 5 for v in reached.values())  # all reach the failing step
        assert reached[6] == 5 and reached[7] == 5  # chunks that start after the failure stop right past it

    def plain(a, b, halt):
        if a == 2:
            raise KeyError("plain")
        if a == 1:
            raise diverged(ValueError("diverged"), 0, 1)

    with pytest.raises(KeyError):  # an error that is not a divergence wins
        run_chunks(plain, [(i, i + 1) for i in range(4)], 2)


def test_plan_workers_splits_only_what_is_worth_a_thread():
    assert plan_workers(1000, None, 128, 1, 1000) == [(0, 1000)]
    assert plan_workers(300, None, 128, 2, 3) == [(0, 300)]  # too little work per step
    chunks = plan_workers(1000, None, 128, 2, 1000)
    assert chunks == [(0, 512), (512, 1000)]
    assert len(plan_workers(100_000, None, 128, 8, 1000)) == 8
    # a memory plan of 4 blocks per chunk shared by 2 threads: 2 blocks each
    assert plan_workers(2048, 512, 128, 2, 1000)[0] == (0, 256)
    assert plan_workers(1000, None, 128, 4, MIN_CHUNK_WORK // 400) == [(0, 512), (512, 1000)]  # two are worth it
    assert resolve_workers(None, torch.device("cpu")) == torch.get_num_threads()
    with pytest.raises(FedsdeInputError, match="workers=0: must be an integer >= 1"):
        resolve_workers(0, torch.device("cpu"))
    with pytest.raises(FedsdeInputError, match="workers=0"):
        simulate(random_quadratic_problem(2, 1, seed=0), eta=0.1, local_steps=1, rounds=1, replicates=2, seed=0,
                 workers=0)


@pytest.mark.parametrize("method", ["normal_", "uniform_"])
def test_grouped_streams_are_chunk_invariant_and_keep_the_prefix(method):
    """The GPU layout (one generator per group of blocks), run on the CPU: any chunk of blocks, aligned with the
    groups or not, gets the rows of one big draw."""
    full = torch.empty((10, 3, 5), dtype=torch.float64)
    getattr(ReplicateStreams(7, 0, 10, "cpu", purpose=2, group=4), method)(full)
    for first, nb in ((0, 3), (2, 5), (4, 4), (5, 5), (9, 1)):
        part = torch.empty((nb, 3, 5), dtype=torch.float64)
        getattr(ReplicateStreams(7, first, nb, "cpu", purpose=2, group=4), method)(part)
        torch.testing.assert_close(part, full[first:first + nb], rtol=0, atol=0)
    strided = torch.empty((3, 10, 5), dtype=torch.float64)  # a non-contiguous view, as GridBrownian fills
    getattr(ReplicateStreams(7, 0, 10, "cpu", purpose=2, group=4), method)(strided.transpose(0, 1))
    torch.testing.assert_close(strided.transpose(0, 1), full, rtol=0, atol=0)
    ints = ReplicateStreams(7, 1, 6, "cpu", group=4).randint(0, 9, (3,))
    assert ints.shape == (6, 3)
    torch.testing.assert_close(ints, ReplicateStreams(7, 0, 8, "cpu", group=4).randint(0, 9, (3,))[1:7])


def test_device_reduction_of_streamed_moments_run_on_the_cpu(monkeypatch):
    """The GPU path of StreamingMoments (torch block sums, one transfer at the end), exercised on CPU tensors: the
    host path's moments to rounding, and bit-identical however the rows are chunked or ordered."""
    monkeypatch.setattr(StreamingMoments, "_on_device", staticmethod(lambda w: isinstance(w, torch.Tensor)))
    x = 1e3 + torch.randn(1000, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ref = np.cov(x.numpy(), rowvar=False)
    runs = []
    for chunks in (split_chunks(1000, None, 128), split_chunks(1000, 256, 128), split_chunks(1000, 384, 128)[::-1]):
        m = StreamingMoments(1, 3, 128)
        for a, b in sorted(chunks, key=lambda c: c[0] != 0):  # the first block first (it sets the shift)
            m.add(0, a, x[a:b])
        assert not m._pending[0] or isinstance(next(iter(m._pending[0].values()))[1], torch.Tensor)
        runs.append((m.mean(), m.cov()))
    np.testing.assert_allclose(runs[0][0][0], x.numpy().mean(0), rtol=1e-14)
    np.testing.assert_allclose(runs[0][1][0], ref, rtol=1e-10)
    for mean, cov in runs[1:]:
        np.testing.assert_array_equal(mean, runs[0][0])
        np.testing.assert_array_equal(cov, runs[0][1])
