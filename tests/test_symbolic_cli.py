"""``fedsde derive``: derivation output (text / latex / json), numeric coefficients, errata, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedsde.cli import main
from fedsde.exact import stationary_law
from fedsde.problems import paper_table_problem, random_quadratic_problem, save_problem

ROOT = Path(__file__).resolve().parents[1]
TABLE = str(ROOT / "examples" / "problems" / "paper_table.toml")


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_derive_text(capsys):
    rc, out, _ = _run(capsys, "derive", "--variant", "paper")
    assert rc == 0
    assert "t = n·h" in out and "Thm 6.3 as printed: v0(t)" in out
    assert "-b_p**2*eta*exp(-D*t)/2" in out  # the ODE residual of the printed v0


def test_derive_latex_with_concrete_E(capsys):
    rc, out, _ = _run(capsys, "derive", "--variant", "corrected", "--local-steps", "5", "--format", "latex")
    assert rc == 0
    assert out.startswith("%") and r"\begin{enumerate}" in out and r"\end{enumerate}" in out
    assert r"\sum_{m=0}^{4}" in out  # E = 5 substituted


@pytest.mark.parametrize("flag", [("--format", "json"), ("--json",)])
def test_derive_json(capsys, flag):
    rc, out, _ = _run(capsys, "derive", "--variant", "matched", *flag)
    assert rc == 0
    obj = json.loads(out)
    assert obj["variant"] == "matched" and obj["local_steps"] == "symbolic"
    labels = [st["label"] for st in obj["steps"]]
    assert any("m(n h) - m_n" in lab for lab in labels)
    assert all(st["latex"] and st["text"] for st in obj["steps"])


@pytest.mark.parametrize("variant", ["paper", "corrected", "matched"])
def test_derive_numeric_json(capsys, variant):
    rc, out, _ = _run(capsys, "derive", "--variant", variant, "--problem", TABLE, "--eta", "0.05",
                      "--local-steps", "5", "--json")
    assert rc == 0
    obj = json.loads(out)
    assert set(obj) >= {"drift", "diffusion_cov", "stationary"}
    assert obj["h"] == 0.05 and obj["clock"] == "t = n*h"
    A, c = np.array(obj["drift"]["A"]), np.array(obj["drift"]["c"])
    assert A.shape == (1, 1) and c.shape == (1,)
    var = np.array(obj["stationary"]["cov"])[0, 0]
    expected = {"paper": 2.3650, "corrected": 3.3271e-3, "matched": stationary_law(paper_table_problem(), 0.05, 5)
                .cov[0, 0]}[variant]
    assert var == pytest.approx(expected, rel=1e-4)


def test_derive_numeric_full_matrix_and_human_output(capsys, tmp_path):
    path = tmp_path / "p.json"
    save_problem(random_quadratic_problem(3, 2, seed=1), path)
    rc, out, _ = _run(capsys, "derive", "--problem", str(path), "--eta", "0.05", "--local-steps", "4",
                      "--server-lr", "0.5", "--h", "0.025", "--json")
    assert rc == 0
    obj = json.loads(out)
    assert obj["path"] == "exact-matrix" and np.array(obj["diffusion_cov"]).shape == (2, 2)
    rc, out, _ = _run(capsys, "derive", "--problem", str(path), "--eta", "0.05", "--local-steps", "4")
    assert rc == 0 and "stationary cov" in out and "t = n·h" in out


def test_derive_stationary_null_when_none(capsys):
    # eta = 1, E = 2 on U = [1, 2, 4]: r = [0, -1, -3], beta = mean(1 - r^2) = -7/3 < 0, so A < 0
    rc, out, _ = _run(capsys, "derive", "--variant", "corrected", "--problem", TABLE, "--eta", "1.0",
                      "--local-steps", "2", "--json")
    assert rc == 0 and json.loads(out)["stationary"] is None


def test_derive_errata(capsys):
    rc, out, _ = _run(capsys, "derive", "--errata", "--json")
    assert rc == 0
    ids = [e["id"] for e in json.loads(out)["errata"]]
    assert "thm6.3-v0" in ids and "eq4-diffusion" in ids
    rc, out, _ = _run(capsys, "derive", "--errata")
    assert rc == 0 and "exact chain" in out


@pytest.mark.parametrize("argv", [
    ["derive", "--local-steps", "zero"],
    ["derive", "--local-steps", "0"],
    ["derive", "--eta", "0.1"],
    ["derive", "--problem", TABLE, "--local-steps", "5"],
    ["derive", "--problem", TABLE, "--eta", "0.05"],
    ["derive", "--problem", TABLE, "--eta", "-0.05", "--local-steps", "5"],
    ["derive", "--problem", TABLE, "--eta", "0.6", "--local-steps", "1", "--variant", "matched"],
    ["derive", "--problem", "does-not-exist.toml", "--eta", "0.05", "--local-steps", "5"],
])
def test_derive_bad_input_is_one_line_exit_2(capsys, argv):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "error" in err and "Traceback" not in err


def test_derive_bad_variant_is_argparse_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["derive", "--variant", "nope"])
    assert exc.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
