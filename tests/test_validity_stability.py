"""`validity` and `map` carry the stability warnings that `fedsde exact` prints for the same least-squares settings
(a client's local SGD expanding; the chain's mean or variance growing without bound)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedsde.cli import main
from fedsde.exact.stability import least_squares_stability
from fedsde.problems import load_problem

GRUNFELD = str(Path(__file__).resolve().parents[1] / "examples" / "problems" / "grunfeld.toml")


def _json(capsys, argv) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("eta", "E", "count"), [(0.3, 2, 2), (0.3, 1, 1), (0.1, 2, 0)])
def test_validity_warns_as_exact_does(capsys, eta, E, count):
    common = ["--problem", GRUNFELD, "--eta", str(eta), "--local-steps", str(E), "--rounds", "5"]
    exact = _json(capsys, ["exact", *common])["warnings"]
    got = _json(capsys, ["validity", *common])["warnings"]
    assert len(exact) == count and set(exact) <= set(got), (exact, got)
    assert main(["validity", *common]) == 0
    err = capsys.readouterr().err
    assert all(f"warning: {m}" in err for m in exact)


def test_stability_radii_match_the_exact_laws():
    pb = load_problem(GRUNFELD)
    grows = least_squares_stability(pb, 0.3, 2, 1.0)
    assert grows.grows and grows.expanding == (0,) and grows.mean_radius == pytest.approx(1.10534, abs=1e-5)
    from fedsde.exact import least_squares_stationary_law

    calm = least_squares_stability(pb, 0.1, 4, 1.0)
    st = least_squares_stationary_law(pb, 0.1, 4, 1.0)
    assert not calm.grows and calm.second_moment_radius == pytest.approx(st.spectral_radius, rel=1e-8)


def test_map_collects_the_cells_warnings(capsys, tmp_path):
    rec = _json(capsys, ["map", "--problem", GRUNFELD, "--eta", "0.3", "--local-steps", "2", "--rounds", "4",
                         "--seed", "1", "--out", str(tmp_path / "m")])
    assert any("mean map has spectral radius 1.10534 >= 1" in w for w in rec["cells"][0]["warnings"])
    assert any("local SGD expands" in w for w in rec["warnings"])
