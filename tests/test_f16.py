"""F16 (real clients, exact answers): it runs on a tiny configuration, its caption states the numbers of its CSV
tables, and its configuration is checked up front."""

from __future__ import annotations

import csv

import pytest

from fedsde.errors import FedsdeInputError
from fedsde.report.config import check_constraints, load_config, validate
from fedsde.report.gallery import GALLERY, RunContext, run_figure

TINY = {"batch_size": 5, "sampling": "with-replacement", "eta": 0.05, "E": 2, "E_grid": [1, 4], "eta_grid": [0.1],
        "replicates": 40, "burn_in_tol": 1e-2, "validity_server_lrs": [1.0, 4.0], "validity_rounds": 6,
        "validity_replicates": 60, "tolerance": 0.05}


def _rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_f16_is_registered_with_a_schema():
    assert GALLERY["F16"].module == "f16_real_data"
    for quick in (True, False):
        cfg = load_config(quick=quick)
        assert set(cfg["F16"]) == set(TINY)


def test_f16_runs_and_its_caption_states_its_csv(tmp_path):
    validate({"F16": TINY}, partial=True)
    ctx = RunContext(seed=0, device="cpu", problem=None, progress=False, quick=True)
    rec = run_figure("F16", {"F16": TINY}, ctx, tmp_path)
    assert rec.error is None, rec.error
    assert {p.name for p in rec.files} >= {"F16_real_data.png", "F16_real_data.pdf", "F16_stationary.csv",
                                           "F16_validity.csv"}
    rows = _rows(tmp_path / "data" / "F16_stationary.csv")
    assert len(rows) == 3 and {r["scan"] for r in rows} == {"E", "eta"}
    cap = rec.output.caption
    f = {k: [float(r[k]) for r in rows] for k in rows[0] if k != "scan"}
    sur = [a / b for a, b in zip(f["surrogate_var"], f["exact_var"], strict=True)]
    pri = [a / b for a, b in zip(f["printed_var"], f["exact_var"], strict=True)]
    z = [abs(a - b) / c for a, b, c in zip(f["sim_var"], f["exact_var"], f["sim_var_se"], strict=True)]
    assert f"{min(sur):.3g}× (" in cap and f"{max(sur):.3g}× (" in cap
    assert f"{min(pri):.3g}× to {max(pri):.3g}×" in cap
    assert f"exact variance within {max(z):.2f}" in cap
    # the three biases (exact, surrogate, printed) coincide: one mean recursion
    for a, b, c in zip(f["exact_bias"], f["surrogate_bias"], f["printed_bias"], strict=True):
        assert abs(a - b) <= 1e-9 * max(f["exact_bias"]) and abs(a - c) <= 1e-9 * max(f["exact_bias"])
    # the verdicts in the caption are those of the validity table
    val = _rows(tmp_path / "data" / "F16_validity.csv")
    for s in ("1", "4"):
        mine = [r for r in val if float(r["server_lr"]) == float(s)]
        assert mine and f"s = {s}: {mine[0]['outcome'].upper()}" in cap
    assert rec.output.numbers["validity"][1]["outcome"] == "does not track"


def test_f16_config_is_checked_before_running():
    cfg = load_config(quick=True)
    check_constraints(cfg, ("F16",), None)
    for key, value, match in (("eta_grid", [0.5], "local SGD diverges"), ("batch_size", 30, "batch_size"),
                              ("validity_server_lrs", [1.0, 60.0], "spectral radius")):
        bad = {**cfg, "F16": {**cfg["F16"], key: value}}
        with pytest.raises(FedsdeInputError, match=match):
            check_constraints(bad, ("F16",), None)
