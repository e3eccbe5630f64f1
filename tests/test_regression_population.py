"""Least-squares clients of a CSV file as a population (rows on disk, read by client): the clients and rows of the
materialised problem, bit for bit (to float64 rounding when standardised), a simulation with the materialised
problem's numbers bit for bit, exact metrics, the materialised path's messages, and the temporary store removed
with the problem."""

from __future__ import annotations

import gc
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

from fedsde.cli import main
from fedsde.errors import FedsdeInputError
from fedsde.problems import RegressionPopulation, RegressionProblem, is_data_problem, load_problem
from fedsde.problems.metrics import evaluate_metrics, metric_names
from fedsde.problems.regression.data import csv_clients, standardise
from fedsde.sim import simulate

KEYS = {"kind": "regression", "data": "d.csv", "features": ["x1", "x2"], "target": "y", "client_column": "site",
        "batch_size": 2, "intercept": True, "l2": 0.01}


def _csv(path: Path, n_clients: int, seed: int = 0, extra: int = 0) -> None:
    """Clients ``c0 …`` of 2–6 rows, the rows of all clients shuffled (a client's first appearance decides its
    order); ``extra`` more clients (``c{n_clients} …``) appended after them."""
    lines = _lines(range(n_clients), np.random.default_rng(seed))
    lines += _lines(range(n_clients, n_clients + extra), np.random.default_rng(seed + 1))
    path.write_text("site,x1,x2,y\n" + "\n".join(lines) + "\n")


def _lines(clients, rng) -> list[str]:
    rows = [[f"c{k}", *(repr(float(v)) for v in rng.normal(3.0, 2.0, 3))] for k in clients
            for _ in range(int(rng.integers(2, 7)))]
    return [",".join(rows[i]) for i in rng.permutation(len(rows))]


def _file(folder: Path, keys: dict, name: str = "p.toml") -> Path:
    import tomli_w

    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(tomli_w.dumps(keys))
    return folder / name


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lspop")
    _csv(folder / "d.csv", 240)
    return folder


def _both(folder: Path, **keys):
    path = _file(folder, KEYS | {"population": True} | keys)
    pop, mat = load_problem(path, population=True), load_problem(path)
    assert isinstance(pop, RegressionPopulation) and isinstance(mat, RegressionProblem)
    return pop, mat


def test_client_rows_are_those_of_the_materialised_problem(files, tmp_path):
    pop, mat = _both(files)
    assert pop.Q == mat.Q == 240 and pop.d == mat.d == 3 and pop.client_names == mat.client_names
    assert pop.client_names[:3] == tuple(csv_clients(files / "d.csv", ["x1", "x2"], "y", "site")[2][:3])
    np.testing.assert_array_equal(pop.sizes, mat.sizes)
    np.testing.assert_array_equal(pop.p, mat.p)
    Xs, ys = mat.client_data()
    for k in range(pop.Q):
        X, y = pop.client_data(k)
        np.testing.assert_array_equal(X, Xs[k])
        np.testing.assert_array_equal(y, ys[k])
    np.testing.assert_array_equal(pop.materialise().X, mat.X)
    assert is_data_problem(pop)
    # 40 more clients appended after the first 240 (only appended ones keep the first clients' rows: a client that
    # first appears earlier in the file renumbers the clients after it)
    _csv(tmp_path / "d.csv", 240, extra=40)
    more = load_problem(_file(tmp_path, KEYS | {"population": True}), population=True)
    assert more.Q == 280 and more.client_names[:240] == pop.client_names
    for k in (0, 17, 239):
        np.testing.assert_array_equal(more.client_data(k)[0], pop.client_data(k)[0])
        np.testing.assert_array_equal(more.client_data(k)[1], pop.client_data(k)[1])
    summary = pop.summary()
    assert summary["Q"] == 240 and "clients" not in summary and "sizes" not in summary and "p" not in summary
    assert summary["store_bytes"] == 8 * pop.n_rows * (pop.d + 1)


def test_standardised_rows_and_statistics_agree_to_rounding(files):
    pop, mat = _both(files, standardise=True)
    X, y, _ = csv_clients(files / "d.csv", ["x1", "x2"], "y", "site")
    _, _, stats = standardise(X, y)
    got = pop.info["standardisation"]
    for key in ("feature_mean", "feature_sd", "target_mean", "target_sd"):  # block sums, not NumPy's: not bit for bit
        np.testing.assert_allclose(got[key], stats[key], rtol=1e-13, atol=0)
    Xs, ys = mat.client_data()
    for k in range(0, pop.Q, 7):  # standardised rows are O(1): a few units of the last place
        np.testing.assert_allclose(pop.client_data(k)[0], Xs[k], rtol=0, atol=1e-13)
        np.testing.assert_allclose(pop.client_data(k)[1], ys[k], rtol=0, atol=1e-13)
    kw = dict(eta=0.05, local_steps=3, rounds=4, replicates=4, seed=2, participation=10)
    np.testing.assert_allclose(simulate(pop, **kw).weights, simulate(mat, **kw).weights, rtol=0, atol=1e-13)


@pytest.mark.parametrize("sampling", ["without-replacement", "with-replacement"])
@pytest.mark.parametrize("cross_device", [False, True], ids=["participant-slots", "cross-device"])
def test_on_demand_simulation_gives_the_materialised_numbers_bit_for_bit(files, sampling, cross_device,
                                                                        monkeypatch):
    import fedsde.sim.participation as part
    from fedsde.sim.plan import make_plan

    if cross_device:  # the regime of 10⁴ clients and more, at a size a test affords
        monkeypatch.setattr(part, "CROSS_DEVICE_Q", 200)
    pop, mat = _both(files, sampling=sampling)
    kw = dict(eta=0.05, local_steps=3, rounds=4, replicates=16, seed=3, participation=12)
    assert make_plan(pop, **kw).sparse == make_plan(mat, **kw).sparse == cross_device
    lazy, full = simulate(pop, **kw), simulate(mat, **kw)
    np.testing.assert_array_equal(lazy.weights, full.weights)
    assert pop.rows_cache.misses > 0
    everyone = dict(kw, participation=None, rounds=2)  # no sampling: every client's rows in every round
    np.testing.assert_array_equal(simulate(pop, **everyone).weights, simulate(mat, **everyone).weights)


@pytest.mark.parametrize("l2", [0.0, 0.3])
def test_metrics_are_exact_at_any_size(files, l2):
    pop, mat = _both(files, l2=l2, p=[1.0 + (k % 3) for k in range(240)])
    w = np.random.default_rng(1).normal(size=(3, 5, pop.d))
    assert metric_names(pop) == metric_names(mat) == ("train_loss", "grad_norm_sq", "distance_from_start")
    got, want = evaluate_metrics(pop, w), evaluate_metrics(mat, w)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=0)
        assert not np.any(got.se[name])
    np.testing.assert_allclose(pop.optimum, mat.optimum, rtol=0, atol=1e-12 * np.linalg.norm(mat.optimum))
    np.testing.assert_allclose(pop.min_loss, mat.min_loss, rtol=1e-12)
    np.testing.assert_allclose(pop.grad(mat.optimum), 0.0, atol=1e-12)
    heavy = pop.with_weights(np.arange(1.0, 241.0))  # another p: its own quadratic
    np.testing.assert_allclose(heavy.loss(w[0]), mat.with_weights(np.arange(1.0, 241.0)).loss(w[0]), rtol=1e-12)


BAD = [
    ("site,x1,x2,y\na,1,2,3\na,1,oops,3\n", r"row 2 \(line 3\), column 'x2': 'oops' is not a number"),
    ("site,x1,x2,y\na,1,2,3\nb,1,2,nan\n", r"row 2 \(line 3\), column 'y': 'nan' is not a finite number"),
    ("site,x1,x2,y\na,1,2,3\n\nb,1,,3\n", r"row 2 \(line 4\), column 'x2': empty"),
    ("site,x1,x2,y\na,1,2,3\n,1,2,3\n", r"row 2 \(line 3\), column 'site': empty \(every row needs a client\)"),
    ("site,x1,x2,y\na,1,2\n", r"row 1 \(line 2\): has 3 fields, the header has 4"),
    ("site,x1,x2,y\na,1,2,3\na,1,2,3,4\n", r"row 2 \(line 3\): has 5 fields, the header has 4"),
    ("site,x1,x1,y\na,1,2,3\n", r"column name\(s\) 'x1' appear more than once"),
    ("site,x1,y\na,1,3\n", r"no column\(s\) 'x2' \(columns: site, x1, y\)"),
    ("site,x1,x2,y\n", r"has a header but no rows"),
    ("", r"empty \(it needs a header row"),
    ("site,x1,x2,y\na,1,2,3\nb,1,2e200,3\n", r"row 2 \(line 3\), column 'x2': 2e\+200 is too large"),
    (b"site,x1,x2,y\na,1,2,3\nb,1\xe9,2,3\n", r"data file .*d.csv': not UTF-8 text \(byte 0xe9 at offset 24\)"),
]


@pytest.mark.parametrize(("text", "match"), BAD)
def test_bad_files_give_the_materialised_paths_messages(tmp_path, text, match, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the temporary files of this test only
    (tmp_path / "d.csv").write_bytes(text if isinstance(text, bytes) else text.encode())
    path = _file(tmp_path, KEYS | {"batch_size": 1, "population": True})
    messages = []
    for population in (True, False):
        with pytest.raises(FedsdeInputError, match=match) as info:
            load_problem(path, population=population)
        messages.append(str(info.value))
    with pytest.raises(FedsdeInputError) as info:
        load_problem(_file(tmp_path, KEYS | {"batch_size": 1}))  # the file without the key
    assert messages[0] == messages[1] == str(info.value)
    assert "\n" not in messages[0]
    assert not [f for f in os.listdir(tmp_path) if f.startswith("fedsde-")]


def test_population_key_only_for_csv_files_and_batch_checks(tmp_path, files):
    path = _file(tmp_path, {"kind": "regression", "dataset": "grunfeld", "batch_size": 2, "population": True})
    with pytest.raises(FedsdeInputError, match=r"dataset='grunfeld' has no key\(s\) population") as info:
        load_problem(path, population=True)
    assert "\n" not in str(info.value)
    with pytest.raises(FedsdeInputError, match=r"batch_size=5: exceeds the 2 rows of client 'c\d+'; sampling="):
        _both(files, batch_size=5)


def test_temporary_store_is_removed_with_the_problem(files, monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the system's temporary folder, for this test
    pop = load_problem(_file(files, KEYS | {"population": True}), population=True)
    fh = pop.store.file
    assert os.fstat(fh.fileno()).st_size == 8 * pop.n_rows * (pop.d + 1) == pop.summary()["store_bytes"]
    if os.name == "posix":  # no name from the start: nothing left behind even by a killed process
        assert os.listdir(tmp_path) == []
        if os.path.isdir("/proc/self/fd"):
            assert os.readlink(f"/proc/self/fd/{fh.fileno()}").startswith(str(tmp_path))
    copy = pop.with_l2(0.5)  # shares the store
    del pop
    gc.collect()
    assert not fh.closed
    del copy
    gc.collect()
    assert fh.closed
    assert not os.listdir(tmp_path)


def test_simulate_command_reads_participants_and_other_paths_take_the_materialised_problem(files, capsys,
                                                                                           monkeypatch):
    argv = ["simulate", "--eta", "0.05", "--local-steps", "2", "--rounds", "3", "--replicates", "4", "--seed", "1",
            "--participation", "10", "--json", "--problem"]
    out = []
    for keys in (KEYS | {"population": True}, KEYS):
        assert main([*argv, str(_file(files, keys, "cli.toml"))]) == 0
        out.append(json.loads(capsys.readouterr().out))
    assert out[0]["final"]["mean"] == out[1]["final"]["mean"]
    assert out[0]["problem"]["population"].startswith("on demand")
    for name, values in out[1]["metrics"].items():  # exact both ways, to rounding
        for key in ("mean", "se"):
            np.testing.assert_allclose(out[0]["metrics"][name][key], values[key], rtol=1e-12, atol=1e-14)
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "64K")
    with pytest.raises(FedsdeInputError, match=r"the file's rows do not fit in memory") as info:
        load_problem(_file(files, KEYS | {"population": True}))  # commands without participants: materialised
    assert "\n" not in str(info.value) and "--participation" in str(info.value)


def test_at_the_cross_device_threshold_itself(tmp_path):
    from fedsde.sim.participation import CROSS_DEVICE_Q
    from fedsde.sim.plan import make_plan

    rng = np.random.default_rng(5)
    sizes = rng.integers(2, 4, CROSS_DEVICE_Q)
    site = np.repeat(np.arange(sizes.size), sizes)[rng.permutation(int(sizes.sum()))]
    values = rng.normal(size=(site.size, 3))
    (tmp_path / "d.csv").write_text("site,x1,x2,y\n" + "".join(
        f"c{k},{a!r},{b!r},{c!r}\n" for k, (a, b, c) in zip(site.tolist(), values.tolist(), strict=True)))
    pop, mat = _both(tmp_path, sampling="with-replacement", batch_size=3)
    kw = dict(eta=0.05, local_steps=2, rounds=3, replicates=8, seed=4, participation=16)
    assert pop.Q == CROSS_DEVICE_Q and make_plan(pop, **kw).sparse
    np.testing.assert_array_equal(simulate(pop, **kw).weights, simulate(mat, **kw).weights)
    assert pop.rows_cache.misses <= 3 * 8 * 16


def test_a_temporary_folder_without_room_is_one_line(files, monkeypatch, tmp_path):
    def full(fd, offset, size):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(FedsdeInputError, match=r"no room for the rows on disk \(\d+ bytes: No space left on "
                       r"device\); set TMPDIR") as info:
        load_problem(_file(files, KEYS | {"population": True}), population=True)
    assert "\n" not in str(info.value)
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("order", ["small last", "large last"])
def test_epoch_batches_above_floyd_read_only_the_slots_clients(tmp_path, order):
    """Batches of more than FLOYD_MAX rows drawn as the b smallest keys, per-slot batch sizes from EpochSteps: the
    entries past a slot's batch (weight 0) stay inside the loaded rows, also when the smallest client is the last
    one loaded (an index error before), and the population gives the materialised numbers."""
    from fedsde.clients.steps import EpochSteps

    sizes = [41, 41, 41, 41, 200, 200] if order == "large last" else [200, 200, 41, 41, 41, 41]
    rng = np.random.default_rng(0)
    lines = [f"c{k},{rng.normal()!r},{rng.normal()!r}" for k, n in enumerate(sizes) for _ in range(n)]
    (tmp_path / "d.csv").write_text("site,x1,y\n" + "\n".join(lines) + "\n")
    path = _file(tmp_path, {"kind": "regression", "data": "d.csv", "features": ["x1"], "target": "y",
                            "client_column": "site", "batch_size": 40, "population": True})
    pop, mat = load_problem(path, population=True), load_problem(path)
    kw = dict(eta=0.01, local_steps=EpochSteps(sizes=pop.sizes, epochs=1, batch_size=(40, None)), rounds=3,
              replicates=2, block_size=1, seed=0, participation=2)
    np.testing.assert_array_equal(simulate(pop, **kw).weights, simulate(mat, **kw).weights)


def test_the_up_front_estimate_counts_the_keys_of_batches_above_floyd(tmp_path):
    """Without replacement, batches above FLOYD_MAX draw one key per row of the largest client in every slot: a run
    whose slots cannot hold them is refused before it starts, naming the largest client."""
    from fedsde.sim.plan import make_plan

    sizes = [20000] + [64] * 20
    rng = np.random.default_rng(0)
    lines = [f"c{k},{v:.3f},{v:.3f}" for k, n in enumerate(sizes) for v in rng.normal(size=n)]
    (tmp_path / "d.csv").write_text("site,x1,y\n" + "\n".join(lines) + "\n")
    keys = {"kind": "regression", "data": "d.csv", "features": ["x1"], "target": "y", "client_column": "site",
            "population": True}
    kw = dict(eta=0.01, local_steps=2, rounds=2, replicates=64, seed=0, participation=5, moments_only=True)
    small = load_problem(_file(tmp_path, keys | {"batch_size": 8}), population=True)
    big = load_problem(_file(tmp_path, keys | {"batch_size": 64}), population=True)
    limit = 64 * 2**20 + small.round_memory(64 * 5)[0] + (4 << 20)  # the Floyd draw fits
    make_plan(small, memory_limit=limit, **kw)
    with pytest.raises(FedsdeInputError, match=r"participation=5: 320 participant slots a round holding about .* rows "
                       r"of 2 columns \(mean client .* rows, largest 20000\); every slot up to the largest client"):
        make_plan(big, memory_limit=limit, **kw)
