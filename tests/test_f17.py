"""F17 (your own network: SVAG validity of the digits CNN) and its example files: the problem files load with the
documented conventions, the figure runs on a tiny configuration and its caption states the verdicts of its tables,
and its configuration is checked up front."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from fedsde.errors import FedsdeInputError
from fedsde.report.config import check_constraints, load_config, validate
from fedsde.report.gallery import GALLERY, RunContext, run_figure

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "examples" / "models"
TINY = {"problem": "examples/models/digits_cnn.toml", "eta": 0.1, "local_steps": 1, "server_lrs": [1.0, 8.0],
        "rounds": 1, "replicates": 2, "ells": [1, 2, 4], "record_every": 1, "tolerance": 0.05,
        "accuracy_tolerance": 0.01}


def _cnn_class():
    spec = importlib.util.spec_from_file_location("digits_cnn_example", MODELS / "digits_cnn.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.DigitsCNN


def test_f17_is_registered_with_a_schema():
    assert GALLERY["F17"].module == "f17_module_validity"
    for quick in (True, False):
        assert set(load_config(quick=quick)["F17"]) == set(TINY)


def test_the_example_problems_load_with_the_conventions():
    """The CNN problem on bundled digits and on the npz: d, clients in order of first appearance, the initial
    weights of the module built after torch.manual_seed(init_seed), in float64."""
    from fedsde.problems import load_problem

    cnn = load_problem(MODELS / "digits_cnn.toml")
    torch.manual_seed(0)
    ref = torch.nn.utils.parameters_to_vector(_cnn_class()(channels=4, groups=2, dropout=0.1).parameters())
    assert cnn.d == ref.numel() == 2618 and cnn.Q == 5
    w0 = np.asarray(cnn.initial_weights())
    assert w0.dtype == np.float64 and np.array_equal(w0, ref.detach().double().numpy())
    npz = load_problem(MODELS / "clients_cnn.toml")
    data = np.load(MODELS / "clients.npz")
    assert npz.Q == 6 and npz.d == 2618
    assert np.array_equal(np.asarray(npz.sizes), np.bincount(data["client"]))
    assert data["x"].shape[1:] == (1, 8, 8) and len(data["x_test"]) == len(data["y_test"]) == 200


def test_f17_runs_and_its_caption_states_its_tables(tmp_path):
    validate({"F17": TINY}, partial=True)
    ctx = RunContext(seed=0, device="cpu", problem=None, progress=False, quick=True)
    rec = run_figure("F17", {"F17": TINY}, ctx, tmp_path)
    assert rec.error is None, rec.error
    assert {p.name for p in rec.files} >= {"F17_module_validity.png", "F17_validity.csv", "F17_gaps.csv"}
    with open(tmp_path / "data" / "F17_validity.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {int(r["ell"]) for r in rows} == {1, 2, 4} and {float(r["server_lr"]) for r in rows} == {1.0, 8.0}
    cap, numbers = rec.output.caption, rec.output.numbers
    assert "d = 2618 weights, Q = 5 clients" in cap
    for s in ("1", "8"):
        v = numbers[f"s={s}"]
        assert v["outcome"] in ("tracks", "does not track", "inconclusive")
        assert f"s = {s} (η = 0.1, E = 1): {v['outcome'].upper()}" in cap
        w = v["worst"]
        assert f"d = {w['gap']:.3g} in [{w['lower']:.3g}, {w['upper']:.3g}]" in cap
        # FedAvg's final train loss is the last ℓ = 1 row of the table
        last = [r for r in rows if float(r["server_lr"]) == float(s) and r["ell"] == "1" and r["metric"] ==
                "train_loss"][-1]
        assert float(last["mean"]) == pytest.approx(v["fedavg_at_T"]["train_loss"], rel=1e-9)


def test_f17_config_is_checked_before_running():
    cfg = load_config(quick=True)
    check_constraints(cfg, ("F17",), None)
    for key, value, match in (("problem", "nowhere/none.toml", "F17.problem='nowhere/none.toml': no such file"),
                              ("ells", [1, 2], r"F17\.ells=\[1, 2\]")):
        with pytest.raises(FedsdeInputError, match=match):
            check_constraints({**cfg, "F17": {**cfg["F17"], key: value}}, ("F17",), None)
