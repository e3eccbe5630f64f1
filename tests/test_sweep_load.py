"""Loading sweeps: problems of different d along an axis, and named dimensions for the known commands."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedsde.sweep import load, load_frame, run
from fedsde.sweep.load import value_dims
from fedsde.sweep.spec import cell_id

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = str(ROOT / "examples" / "problems" / "paper_table.toml")
PROBLEM_2D = """\
U = [[1.0, 2.0], [2.0, 0.5], [4.0, 1.0]]
a = [[-1.0, 1.0], [0.0, -1.0], [2.0, 0.5]]
Sigma = [[0.5, 1.0], [1.0, 0.5], [2.0, 1.0]]
p = [1, 2, 1]
"""


def test_problem_axis_with_different_d_loads_padded(tmp_path):
    two = tmp_path / "two.toml"
    two.write_text(PROBLEM_2D)
    digits = str(ROOT / "examples" / "problems" / "digits_softmax.toml")  # d = 650, no final_cov in its result
    spec = {"run": {"command": "simulate", "seed": 3},
            "base": {"eta": 0.05, "local_steps": 1, "rounds": 1, "replicates": 2},
            "grid": {"problem": [PROBLEM, str(two), digits]}}
    assert run(spec, tmp_path / "o", progress=False)["done"] == 3
    ds = load(tmp_path / "o")
    assert ds.final_mean.dims == ("problem", "d") and ds.final_cov.dims == ("problem", "d", "d2")
    assert dict(ds.sizes)["d"] == 650 and list(ds.d_size.values) == [1, 2, 650]
    assert dict(ds.sizes)["d2"] == 2 and list(ds.d2_size.values) == [1, 2, 0]  # no covariance for digits
    one = ds.final_cov.sel(problem=PROBLEM)
    assert np.isfinite(one.isel(d=0, d2=0)) and np.isnan(one.isel(d=1)).all() and np.isnan(one.isel(d2=1)).all()
    assert np.isfinite(ds.final_cov.sel(problem=str(two)).isel(d=slice(0, 2), d2=slice(0, 2))).all()
    assert np.isnan(ds.final_cov.sel(problem=digits)).all() and np.isfinite(ds.final_mean.sel(problem=digits)).all()
    rec = json.loads((tmp_path / "o" / "cells" / f"{cell_id({'problem': str(two)})}.json").read_text())
    got = ds.final_cov.sel(problem=str(two)).isel(d=slice(0, 2), d2=slice(0, 2))
    assert got.values.tolist() == rec["result"]["final"]["cov"]
    assert ds.metrics_train_loss_mean.dims == ("problem", "round")  # data problems only: NaN for quadratic ones
    assert list(ds["round"].values) == [0, 1] and "round_size" not in ds  # one length wherever there are curves
    assert len(load_frame(tmp_path / "o")) == 3


def test_same_d_records_no_size_variable(tmp_path):
    spec = {"run": {"command": "exact"}, "base": {"problem": PROBLEM, "local_steps": 1},
            "grid": {"eta": [0.05, 0.1]}}
    run(spec, tmp_path / "o", progress=False)
    ds = load(tmp_path / "o")
    assert "d_size" not in ds and ds.stationary_cov.dims == ("eta", "d", "d2")


@pytest.mark.parametrize(("command", "name", "shape", "dims"), [
    ("validity", "metrics_train_loss_mean", (3, 4), ("ell", "time")),
    ("validity", "extrapolated_train_loss_mean", (4,), ("time",)),
    ("validity", "extrapolated_train_loss_se", (4,), ("time",)),
    ("validity", "final_mean", (3, 1), ("ell", "d")),
    ("validity", "final_cov", (3, 2, 2), ("ell", "d", "d2")),
    ("validity", "verdict_worst_ells", (2,), ("verdict_worst_ells_dim0",)),
    ("simulate", "metrics_test_accuracy_mean", (4,), ("round",)),
    ("simulate", "final_mean_stderr", (650,), ("d",)),
    ("simulate", "problem_sizes", (10,), ("client",)),
    ("scaling", "base_curves_train_loss_se", (3,), ("tau",)),
    ("scaling", "discrepancy_vs_kappa_max_rel", (2,), ("kappa",)),
    ("scaling", "base_stationary_cov", (1, 1), ("d", "d2")),
    ("scaling", "base_temperature", (2, 2), ("d", "d2")),
    ("sde", "somecurve_mean", (5,), ("somecurve_mean_dim0",)),  # only weight keys take d
    ("other", "metrics_x_mean", (4, 4), ("metrics_x_mean_dim0", "metrics_x_mean_dim1")),
])
def test_value_dims(command, name, shape, dims):
    assert value_dims(command, name, shape) == dims


def test_validity_cells_get_ell_and_time(tmp_path):
    spec = {"run": {"command": "validity", "seed": 1},
            "base": {"problem": PROBLEM, "local_steps": 2, "rounds": 3, "replicates": 4, "ells": "1,2"},
            "grid": {"eta": [0.05, 0.1]}}
    assert run(spec, tmp_path / "o", progress=False)["done"] == 2
    ds = load(tmp_path / "o")
    assert ds.metrics_train_loss_mean.dims == ("eta", "ell", "time")
    assert ds.extrapolated_train_loss_mean.dims == ds.extrapolated_train_loss_se.dims == ("eta", "time")
    assert ds.final_mean.dims == ("eta", "ell", "d") and ds.final_cov.dims == ("eta", "ell", "d", "d2")
    assert list(ds.ell.values) == [1, 2] and "time" not in ds.coords  # the grids t = n·h differ with η
    assert dict(ds.sizes) == {"eta": 2, "ell": 2, "time": 4, "d": 1, "d2": 1, "verdict_worst_ells_dim0": 2}
    same_h = dict(spec, base=dict(spec["base"], h=0.05))
    run(same_h, tmp_path / "h", progress=False)
    ds = load(tmp_path / "h")
    assert np.allclose(ds.time.values, [0.0, 0.05, 0.1, 0.15])
    assert float(ds.metrics_train_loss_mean.sel(eta=0.1, ell=2).isel(time=0)) == pytest.approx(
        float(ds.metrics_train_loss_mean.sel(eta=0.1, ell=1).isel(time=0)))


def test_result_names_taken_by_an_axis_are_renamed(tmp_path):
    spec = {"run": {"command": "simulate", "seed": 2},
            "base": {"problem": PROBLEM, "eta": 0.05, "local_steps": 1, "rounds": 2},
            "grid": {"replicates": [4, 6]}}  # simulate's result has a 'replicates' entry too
    run(spec, tmp_path / "o", progress=False)
    ds = load(tmp_path / "o")
    assert list(ds.result_replicates.values) == [4.0, 6.0] and list(ds.replicates.values) == [4, 6]
