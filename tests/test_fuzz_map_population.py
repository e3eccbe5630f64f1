"""Property-based fuzzing of ``fedsde map`` and of client populations (hypothesis), in the contract of
``tests/test_fuzz.py``: exit 0 with one JSON object of finite numbers, or exit 2 with one line on stderr and no
``map.json`` left as if the map were complete; a population's client ``k`` is the same whatever the number of
clients, and a row subset is the slice of the client's rows."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsde.errors import FedsdeInputError
from fedsde.problems.populations.synthetic import SyntheticPopulation
from tests.test_fuzz import FAST, PAPER, SLOW, check_cli, mostly

ETAS = mostly(["0.02", "0.1", "0.02,0.2"], ["0", "-0.1", "nan", "inf", "1e400", "", ",", "0.1,0.1", "x", "50"])
STEPS = mostly(["1", "2", "1,3"], ["0", "-1", "1.5", "nan", "inf", "1,1", "", "x"])
SLRS = mostly(["1", "0.5,1"], ["0", "nan", "1e300", "1,1", "-1"])
ELLS = mostly(["1", "1,2"], ["0", "-2", "1.5", "nan", "1", ""])
SMALL = mostly(["1", "2", "3"], ["0", "-1"])


@st.composite
def map_argv(draw, out):
    argv = ["map", "--problem", PAPER, "--eta", draw(ETAS), "--local-steps", draw(STEPS), "--rounds", draw(SMALL),
            "--seed", draw(mostly(["0", "7"], ["-1"])), "--out", str(out), "--json"]
    flags = {"--server-lr": SLRS, "--ells": ELLS, "--record-every": SMALL,
             "--replicates": mostly(["4", "8"], ["1", "0"]),
             "--fedavg": st.sampled_from(["exact", "sampled"]), "--reference": st.sampled_from(["exact", "svag"]),
             "--tolerance": mostly(["0.05", "0.5"], ["0", "-1", "nan"]),
             "--alpha": mostly(["0.05", "0.2"], ["0", "1", "nan"]),
             "--metrics": mostly(["train_loss", "train_loss,distance_from_start"], ["bogus", ",", "test_accuracy"]),
             "--verdict-metrics": mostly(["train_loss"], ["bogus"]),
             "--refine": mostly(["50"], ["0", "-3"]), "--max-cells": mostly(["8"], ["0", "1"]),
             "--device": mostly(["cpu"], ["bogus", "cuda:99"])}
    for flag in draw(st.lists(st.sampled_from(sorted(flags)), max_size=4, unique=True)):
        argv += [flag, draw(flags[flag])]
    return argv + (["--strict"] if draw(st.booleans()) else [])


def _check_map(tmp_path_factory, data):
    out = tmp_path_factory.mktemp("fuzz-map") / "m"
    argv = data.draw(map_argv(out))
    if check_cli(argv, outputs=(out / "map.json", out / "map.png")) == 0:
        record = json.loads((out / "map.json").read_text(encoding="utf-8"))
        # a map presented as a result has at least one cell with an outcome
        assert any(c["outcome"] is not None for c in record["cells"]), record["cells"]


@settings(FAST, max_examples=5)
@given(data=st.data())
def test_fuzz_map_arguments(tmp_path_factory, data):
    _check_map(tmp_path_factory, data)


@pytest.mark.slow
@settings(SLOW, max_examples=300)
@given(data=st.data())
def test_fuzz_map_arguments_slow(tmp_path_factory, data):
    _check_map(tmp_path_factory, data)


@settings(FAST, max_examples=25)
@given(seed=st.integers(0, 2**32), q=st.integers(1, 300), more=st.integers(1, 3000), dim=st.integers(1, 6),
       classes=st.integers(2, 5), iid=st.booleans(), test_fraction=st.sampled_from([0.0, 0.1, 0.5, 0.99]),
       max_samples=st.sampled_from([None, 2, 3, 70, 200]), data=st.data())
def test_fuzz_population_client_is_the_same_in_a_larger_population(seed, q, more, dim, classes, iid, test_fraction,
                                                                    max_samples, data):
    kw = {"seed": seed, "dim": dim, "n_classes": classes, "iid": iid, "test_fraction": test_fraction,
          "max_samples": max_samples}
    small = SyntheticPopulation(1.0, 0.5, n_clients=q, **kw)
    big = SyntheticPopulation(1.0, 0.5, n_clients=q + more, **kw)
    assert (small.sizes >= 1).all() and (small.test_sizes >= 0).all()
    k = data.draw(st.integers(0, q - 1))
    split = data.draw(st.sampled_from(["train", "test"]))
    X, y = small.client_rows(k, split)
    Xb, yb = big.client_rows(k, split)
    np.testing.assert_array_equal(X, Xb)
    np.testing.assert_array_equal(y, yb)
    n = int((small.sizes if split == "train" else small.test_sizes)[k])
    assert X.shape == (n, dim) and y.shape == (n,) and np.isfinite(X).all() and ((0 <= y) & (y < classes)).all()
    if n:
        rows = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=8)))
        Xr, yr = big.client_rows(k, split, rows=rows)
        np.testing.assert_array_equal(Xr, X[rows])
        np.testing.assert_array_equal(yr, y[rows])
    bad = data.draw(st.sampled_from([-1, q, q + more + 5]))
    with pytest.raises(FedsdeInputError, match="client="):
        small.client_rows(bad, split)


@st.composite
def population_file(draw):
    spec = {"kind": "classification", "dataset": "synthetic", "batch_size": draw(mostly([5, 10], [0, -1])),
            "seed": draw(mostly([0, 3], [-1])), "dim": draw(mostly([3, 5], [0])), "n_classes": 3,
            "clients": draw(mostly([20_000, 50_000], [0, 1, 10**11])), "max_samples": draw(mostly([20, 60], [1]))}
    if draw(st.booleans()):
        spec["population"] = draw(mostly([True], [False, "yes", 1]))
    return spec


@settings(FAST, max_examples=10)
@given(spec=population_file(), data=st.data())
def test_fuzz_population_files_on_the_cross_device_path(tmp_path_factory, spec, data):
    path = tmp_path_factory.mktemp("fuzz-pop") / "p.toml"
    path.write_text(tomli_w.dumps(spec), encoding="utf-8")
    argv = ["simulate", "--problem", str(path), "--eta", data.draw(mostly(["0.01"], ["0", "nan"])), "--local-steps",
            "2", "--rounds", "2", "--replicates", data.draw(mostly(["2", "3"], ["0"])), "--seed", "1",
            "--participation", data.draw(mostly(["5", "10"], ["0", "2000000000"])), "--record-every", "2", "--json"]
    check_cli(argv)
