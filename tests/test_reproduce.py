"""``fedsde reproduce --quick``: files, numbers against the exact law, no partial output."""

from __future__ import annotations

import csv
import json

import pytest

from fedsde.cli import main
from fedsde.exact import stationary_law
from fedsde.problems import paper_table_problem


def test_reproduce_quick_outputs_and_numbers(tmp_path, capsys):
    out = tmp_path / "res"
    assert main(["reproduce", "--quick", "--out", str(out), "--seed", "1", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert (out / "figures" / "stationary_vs_E.png").stat().st_size > 10_000
    assert (out / "figures" / "stationary_vs_E.pdf").exists()
    assert not list(out.glob(".partial-*"))
    with open(out / "data" / "stationary_vs_E.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(obj["rows"]) == 15
    pb = paper_table_problem()
    for r in rows:
        eta, E = float(r["eta"]), int(r["E"])
        st = stationary_law(pb, eta, E)
        assert float(r["exact_var"]) == pytest.approx(st.cov[0, 0], rel=1e-8)
        # simulation within 5 standard errors of the exact stationary law
        assert abs(float(r["sim_mean"]) - st.mean[0]) < 5 * float(r["sim_mean_se"])
        assert abs(float(r["sim_var"]) - st.cov[0, 0]) < 5 * float(r["sim_var_se"])
        # printed C4 is the exact stationary mean; printed v0(∞) is far too large for E > 1
        assert float(r["paper_C4"]) == pytest.approx(st.mean[0], rel=1e-10)
        assert float(r["paper_over_exact"]) > 2.0
    summary = json.loads((out / "summary.json").read_text())
    slopes = summary["variance_log_slopes_vs_E"]["0.05"]
    assert max(abs(s) for s in slopes["exact"]) < 0.05  # flat in E
    assert min(slopes["printed"]) > 1.9  # the printed formula grows at least like E²


def test_reproduce_out_is_a_file(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["reproduce", "--quick", "--out", str(f)]) == 2
    assert "--out" in capsys.readouterr().err
