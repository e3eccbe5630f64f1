"""Every file fedsde reads that is not UTF-8 (one Latin-1 byte) is one line naming the file and the byte offset,
exit status 2, and nothing is created: problem files (TOML and JSON), the CSV of a regression problem, sweep specs
and reproduce configs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import one_line_error, run_cli

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "problems"
LATIN1 = "caf\xe9".encode("latin-1")  # 0xe9 is not UTF-8 on its own


def _bad(path: Path, text: str, where: str) -> int:
    """Write ``text`` with a Latin-1 byte in place of ``where``; return the byte offset of the bad byte."""
    head, tail = text.split(where, 1)
    data = head.encode() + LATIN1 + tail.encode()
    path.write_bytes(data)
    return len(head.encode()) + 3


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_problem_file(tmp_path, capsys, suffix):
    text = ('U = [1.0]\na = [0.0]\nSigma = [1.0]\nname = "NAME"\n' if suffix == ".toml"
            else '{"U": [1.0], "a": [0.0], "Sigma": [1.0], "name": "NAME"}')
    path = tmp_path / f"problem{suffix}"
    offset = _bad(path, text, "NAME")
    for argv in (["exact", "--problem", str(path), "--eta", "0.1", "--local-steps", "2"],
                 ["simulate", "--problem", str(path), "--eta", "0.1", "--local-steps", "2", "--rounds", "1",
                  "--replicates", "2", "--seed", "0"]):
        one_line_error(*run_cli(capsys, argv), str(path), f"offset {offset}", "UTF-8")


def test_csv_of_a_regression_problem(tmp_path, capsys):
    shutil.copy(EXAMPLES / "my_data.toml", tmp_path / "my_data.toml")
    text = (EXAMPLES / "my_data.csv").read_text(encoding="utf-8")
    first_site = text.splitlines()[1].split(",")[0]  # a client label of the first data row
    offset = _bad(tmp_path / "my_data.csv", text, first_site)
    argv = ["simulate", "--problem", str(tmp_path / "my_data.toml"), "--eta", "0.01", "--local-steps", "2",
            "--rounds", "1", "--replicates", "2", "--seed", "0"]
    one_line_error(*run_cli(capsys, argv), "my_data.csv", f"offset {offset}", "UTF-8")


def test_sweep_spec(tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    problem = EXAMPLES / "paper_table.toml"
    offset = _bad(spec, f'# NAME\n[run]\ncommand = "exact"\n[base]\nproblem = "{problem}"\neta = 0.05\n'
                  '[grid]\nlocal_steps = [1, 2]\n', "NAME")
    out = tmp_path / "out"
    one_line_error(*run_cli(capsys, ["sweep", str(spec), "--out", str(out)]), str(spec), f"offset {offset}")
    assert not out.exists()


def test_reproduce_config(tmp_path, capsys):
    config = tmp_path / "config.toml"
    offset = _bad(config, "# NAME\n[run]\nseed = 1\n", "NAME")
    out = tmp_path / "report"
    argv = ["reproduce", "--quick", "--config", str(config), "--only", "F5", "--out", str(out)]
    one_line_error(*run_cli(capsys, argv), str(config), f"offset {offset}")
    assert not out.exists()
