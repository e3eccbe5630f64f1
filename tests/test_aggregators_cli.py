"""``--aggregator`` of ``fedsde exact`` / ``fedsde simulate`` and the ``compare-aggregators`` command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedsde.cli import main
from fedsde.exact import aggregator_stationary_law
from fedsde.problems import load_problem

ROOT = Path(__file__).resolve().parents[1]
TABLE = str(ROOT / "examples" / "problems" / "paper_table.toml")


def _json(capsys):
    out = capsys.readouterr().out
    return json.loads(out)


def test_exact_with_fednova(capsys):
    rc = main(["exact", "--problem", TABLE, "--eta", "0.1", "--client-steps", "1,2,5", "--aggregator", "fednova",
               "--json"])
    assert rc == 0
    out = _json(capsys)
    p = np.full(3, 1 / 3)
    tau = np.array([1, 2, 5])
    np.testing.assert_allclose(out["weights"], p * (p @ tau) / tau)
    st = aggregator_stationary_law(load_problem(TABLE), "fednova", 0.1, tau)
    np.testing.assert_allclose(out["stationary"]["mean"], st.mean)
    np.testing.assert_allclose(out["stationary"]["cov"], st.cov)


def test_exact_without_law_is_a_clear_error(capsys):
    rc = main(["exact", "--problem", TABLE, "--eta", "0.1", "--local-steps", "2", "--aggregator", "fedadam"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "fedadam" in err and "server state" in err and "Traceback" not in err


def test_simulate_with_aggregator(capsys):
    rc = main(["simulate", "--problem", TABLE, "--eta", "0.1", "--client-steps", "1,2,5", "--aggregator", "scaffold",
               "--rounds", "5", "--replicates", "64", "--seed", "0", "--json"])
    assert rc == 0
    out = _json(capsys)
    assert out["config"]["aggregator"] == "scaffold"
    assert np.isfinite(out["final"]["mean"][0])


@pytest.mark.parametrize("bad", [["--runs", "1"], ["--settings", "hybrid,extreme"], ["--clients", "4",
                                                                                       "--participation", "5"]])
def test_compare_aggregators_bad_input(bad, tmp_path, capsys):
    rc = main(["compare-aggregators", "--quick", "--out", str(tmp_path), *bad])
    assert rc == 2
    assert not any(tmp_path.iterdir())  # no partial result files


def test_compare_aggregators_small_run(tmp_path, capsys):
    rc = main(["compare-aggregators", "--quick", "--rounds", "2", "--runs", "2", "--settings", "statistical,hybrid+",
               "--aggregators", "fedavg,fedaware,fednova", "--out", str(tmp_path), "--json"])
    assert rc == 0
    out = _json(capsys)
    assert {r["aggregator"] for r in out["summary"]} == {"fedavg", "fedaware", "fednova"}
    assert out["config"]["seed"] == 0 and out["config"]["runs"] == 2
    for name in ("table.md", "summary.csv", "results.json", "accuracy.png"):
        assert (tmp_path / name).stat().st_size > 0
    rec = json.loads((tmp_path / "results.json").read_text())
    acc = np.asarray(rec["settings"]["hybrid+"]["rules"]["fedaware"]["accuracy"])
    assert acc.shape == (2, 3) and np.all((acc >= 0) & (acc <= 1))
    assert not list(tmp_path.glob(".*.tmp"))
