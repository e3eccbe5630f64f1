"""``fedsde map``: the grid's cells on the sweep engine, the JSON record, the files, resume, refusals, the κ line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedsde.cli import main
from fedsde.maps import MapGrid
from fedsde.report.validity_map import threshold_path

ROOT = Path(__file__).resolve().parents[1]
TABLE = str(ROOT / "examples" / "problems" / "paper_table.toml")
CELL_KEYS = {"eta", "local_steps", "server_lr", "outcome", "gap", "lower", "upper", "replicates_needed", "kappa"}
# FedAvg sampled (R Monte-Carlo chains), so that cells can be undecided and --refine has work to do
ARGS = ["--problem", TABLE, "--eta", "0.02,0.3", "--local-steps", "1,3", "--rounds", "6", "--replicates", "8",
        "--seed", "5", "--fedavg", "sampled"]


def _map(capsys, out, *extra) -> tuple[int, dict | None, str]:
    rc = main(["map", *ARGS, "--out", str(out), "--json", *extra])
    cap = capsys.readouterr()
    return rc, (json.loads(cap.out) if rc == 0 else None), cap.err


@pytest.fixture(scope="module")
def table_map(tmp_path_factory):
    out = tmp_path_factory.mktemp("map") / "m"
    rc = main(["map", *ARGS, "--out", str(out), "--json"])
    assert rc == 0
    return out, json.loads((out / "map.json").read_text(encoding="utf-8"))


def test_map_json_holds_every_cell_the_grid_tolerance_and_problem(table_map):
    out, rec = table_map
    assert rec["grid"] == {"eta": [0.02, 0.3], "local_steps": [1, 3], "server_lr": [1.0]}
    assert rec["tolerance"] == 0.05 and rec["problem"]["kind"] == "QuadraticProblem" and rec["problem"]["d"] == 1
    assert len(rec["cells"]) == 4
    for c in rec["cells"]:
        assert CELL_KEYS <= set(c)
        assert c["outcome"] in ("tracks", "does not track", "inconclusive")
        assert c["kappa"] > 0 and c["look"] == 1
    assert [(c["local_steps"], c["eta"]) for c in rec["cells"]] == [(1, 0.02), (1, 0.3), (3, 0.02), (3, 0.3)]
    # κ = s·λ_max(B) grows with η and E
    k = {(c["local_steps"], c["eta"]): c["kappa"] for c in rec["cells"]}
    assert k[(1, 0.02)] < k[(1, 0.3)] < k[(3, 0.3)] and k[(1, 0.02)] < k[(3, 0.02)]
    assert rec["kappa_threshold"] > 0 and rec["claim"] == "002/eq-2-model"
    # the cells' numbers are validity's own: read back from the stored cell files
    first = json.loads((out / rec["cells"][0]["record"]).read_text(encoding="utf-8"))["result"]["verdict"]
    assert first["outcome"] == rec["cells"][0]["outcome"] and first["worst"]["gap"] == rec["cells"][0]["gap"]


def test_map_writes_the_picture_and_a_self_contained_report(table_map):
    out, _ = table_map
    for name in ("map.png", "map.pdf", "paths.png", "report.html"):
        assert (out / name).stat().st_size > 1000, name
    html = (out / "report.html").read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") == 2 and "src='http" not in html and "κ* =" in html


def test_map_cells_load_as_xarray(table_map):
    from fedsde.sweep import load

    out, rec = table_map
    ds = load(out)
    assert set(ds.status.dims) == {"server_lr", "local_steps", "eta"} and (ds.status.values == "done").all()
    got = ds.verdict_outcome.sel(server_lr=1.0, local_steps=3, eta=0.3).item()
    assert got == rec["cells"][3]["outcome"]


def test_map_resumes_and_refuses_a_folder_that_holds_it(table_map, capsys):
    out, rec = table_map
    rc, again, _ = _map(capsys, out, "--resume")
    assert rc == 0 and again["sweep"]["skipped"] == 4 and again["sweep"]["done"] == 0
    assert [c["outcome"] for c in again["cells"]] == [c["outcome"] for c in rec["cells"]]
    rc, _, err = _map(capsys, out)
    assert rc == 2 and "--resume" in err and len(err.strip().splitlines()) == 1


def test_refine_looks_again_at_undecided_cells_with_half_the_level(tmp_path, capsys):
    rc, rec, _ = _map(capsys, tmp_path / "r", "--refine", "300")
    assert rc == 0
    assert rec["alpha_per_look"] == pytest.approx(rec["alpha"] / 2) and rec["refine"]["budget"] == 300
    assert rec["refine"]["spent"] <= 300
    second = [c for c in rec["cells"] if c["look"] == 2]
    assert len(second) == rec["refine"]["cells"] >= 1
    for c in second:
        assert c["looks"][0] == "inconclusive" and c["record"].startswith("refine/")
        assert (tmp_path / "r" / c["record"]).is_file()


@pytest.mark.parametrize(("extra", "message"), [
    (["--max-cells", "3"], "4 cells"),
    (["--local-steps", "1,x"], "--local-steps"),
    (["--eta", "0.1,0.1"], "distinct"),
    (["--refine", "0"], "--refine"),
])
def test_map_user_mistakes_are_one_line_errors(tmp_path, capsys, extra, message):
    argv = ["map", *ARGS, "--out", str(tmp_path / "x"), "--json", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x" / "cells").exists()


def test_map_memory_is_checked_before_anything_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "1K")
    assert main(["map", *ARGS, "--out", str(tmp_path / "m"), "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert "map of 4 cells" in err and "needs about" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "m").exists()


def test_grid_is_sorted_and_checked():
    g = MapGrid(eta=(0.3, 0.1), local_steps=(4, 1), server_lr=(1.0, 0.5))
    assert g.eta == (0.1, 0.3) and g.shape == (2, 2, 2) and g.n_cells == 8
    assert next(iter(g.cells())) == {"eta": 0.1, "local_steps": 1, "server_lr": 0.5}


def test_threshold_line_crosses_each_row_where_kappa_meets_the_threshold():
    # κ ∝ η along a row (log-linear in the column index when η doubles): κ = 0.05·2^i, κ* = 0.1 at column 1
    kappas = np.array([[0.05, 0.1, 0.2, 0.4], [0.1, 0.2, 0.4, 0.8], [1.0, 2.0, 4.0, 8.0]])
    x, y = threshold_path(kappas, 0.1)
    assert x[:2] == pytest.approx([1.0, 1.0]) and y[:2] == pytest.approx([-0.5, 0.5])
    assert x[2:4] == pytest.approx([0.0, 0.0]) and y[2:4] == pytest.approx([0.5, 1.5])
    assert np.isnan(x[4])  # the third row stays above κ* by more than half a column: no segment


def test_zip_axes_may_repeat_a_value_but_not_a_cell():
    from fedsde.errors import FedsdeInputError
    from fedsde.sweep import load_spec

    spec = load_spec({"run": {"command": "validity", "seed": 1}, "base": {"problem": TABLE, "rounds": 2},
                      "zip": {"eta": [0.1, 0.1], "local_steps": [1, 2], "replicates": [4, 4]}})
    assert spec.n_cells == 2
    with pytest.raises(FedsdeInputError, match="positions 0 and 1 have the same values"):
        load_spec({"run": {"command": "validity", "seed": 1}, "base": {"problem": TABLE, "rounds": 2},
                   "zip": {"eta": [0.1, 0.1], "local_steps": [1, 1]}})


@pytest.mark.parametrize(("extra", "message"), [
    (["--eta", ","], "--eta=','"),
    (["--local-steps", "nan"], "--local-steps='nan': must be comma-separated integers >= 1"),
    (["--local-steps", "inf"], "--local-steps='inf'"),
    (["--ells", "nan"], "--ells='nan'"),
    (["--ells", "1.5,2"], "--ells='1.5,2'"),
    (["--ells", "0"], "--ells='0'"),
    (["--metrics", "bogus"], "--metrics=['bogus']: not available"),
    (["--verdict-metrics", "bogus"], "--verdict-metrics=['bogus']: not recorded"),
    (["--record-every", "0"], "--record-every=0"),
    (["--device", "bogus"], "--device='bogus'"),
    (["--max-cells", "0"], "--max-cells=0"),
    (["--reference", "svag", "--ells", "1"], "two distinct values"),
    (["--fedavg", "exact", "--refine", "10"], "--refine=10: FedAvg's side is exact"),
    (["--tolerance", "nan"], "--tolerance=nan"),
])
def test_map_shared_options_are_checked_before_any_cell_runs(tmp_path, capsys, extra, message):
    """Options every cell shares are refused up front in one line naming the flag, not stored as N failed cells
    under exit status 0; and the flag is named once (not ``----eta``)."""
    argv = ["map", *ARGS, "--out", str(tmp_path / "x"), "--json", *extra]
    assert main(argv) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert message in err and "----" not in err and len(err.splitlines()) == 1 and cap.out == ""
    assert not (tmp_path / "x" / "cells").exists()


def test_map_whose_every_cell_fails_is_an_error_not_an_empty_map(tmp_path, capsys):
    """Every cell refused (here the server recursion diverges in the grid's only cell): one line, exit 2, and no
    map.json/map.png presented as the map."""
    argv = ["map", "--problem", TABLE, "--eta", "0.1", "--local-steps", "1", "--server-lr", "1e300", "--rounds", "3",
            "--seed", "0", "--out", str(tmp_path / "m"), "--json"]
    assert main(argv) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert "every one of the 1 cells failed" in err and "spectral radius" in err and len(err.splitlines()) == 1
    assert cap.out == "" and not (tmp_path / "m" / "map.json").exists() and not (tmp_path / "m" / "map.png").exists()


def test_map_with_exact_fedavg_needs_no_replicates_and_passes_strict(tmp_path, capsys):
    """Where FedAvg's moments close (quadratic clients, exact reference) the cells compare exact paths: no
    --replicates needed, none passed to the cells (so no per-cell 'not used' warning and --strict passes), and the
    gaps are exact (zero-width intervals); --replicates given anyway is one warning, --fedavg sampled needs it."""
    base = ["map", "--problem", TABLE, "--eta", "0.02,0.3", "--local-steps", "1", "--rounds", "4", "--seed", "0",
            "--json"]
    assert main([*base, "--out", str(tmp_path / "a"), "--strict"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["fedavg"] == "exact" and rec["replicates"] is None and rec["warnings"] == []
    assert all(c["lower"] == c["gap"] == c["upper"] and c["warnings"] == [] for c in rec["cells"])
    assert "FedAvg exact (no replicates)" in (tmp_path / "a" / "report.html").read_text(encoding="utf-8")
    assert main([*base, "--out", str(tmp_path / "b"), "--replicates", "4"]) == 0
    warned = json.loads(capsys.readouterr().out)["warnings"]
    assert len(warned) == 1 and "replicates=4: not used" in warned[0]
    assert main([*base, "--out", str(tmp_path / "c"), "--fedavg", "sampled"]) == 2
    assert "--replicates: required" in capsys.readouterr().err


def test_map_refused_by_strict_leaves_no_map_behind(tmp_path, capsys):
    """--strict turns a warning into exit status 2 before map.json, the pictures and the report are written; the
    cells' warnings are the map's (JSON ``warnings``) without --strict."""
    base = ["map", "--problem", TABLE, "--eta", "0.02", "--local-steps", "1", "--rounds", "1", "--seed", "0",
            "--replicates", "4", "--json"]
    assert main([*base, "--out", str(tmp_path / "s"), "--strict"]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "--strict: replicates=4: not used" in cap.err and len(cap.err.strip().splitlines()) == 1
    assert not any((tmp_path / "s" / name).exists() for name in ("map.json", "map.png", "map.pdf", "report.html"))
    rc, rec, _ = _map(capsys, tmp_path / "w", "--eta", "0.02,0.3", "--strict")
    assert rc == 0 and rec["warnings"] == []


def test_map_with_a_failed_cell_under_strict_leaves_no_map_behind(tmp_path, capsys):
    """One cell of two refused (η = 50 diverges), the other decided: a map with a warning (exit 0) and, under
    --strict, exit 2 before map.json is written."""
    base = ["map", "--problem", TABLE, "--eta", "0.02,50", "--local-steps", "1", "--rounds", "1", "--seed", "0",
            "--json"]
    assert main([*base, "--out", str(tmp_path / "w")]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["counts"]["failed"] == 1 and any("1 of 2 cells failed" in w for w in rec["warnings"])
    assert main([*base, "--out", str(tmp_path / "s"), "--strict"]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "--strict: " in cap.err and len(cap.err.strip().splitlines()) == 1
    assert not (tmp_path / "s" / "map.json").exists() and not (tmp_path / "s" / "report.html").exists()
