"""Large grids: the number of cells comes from the axis lengths, grids past the limit are refused before anything is
built or written, cells are produced one at a time, and spec files that are not UTF-8 are one line."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w

from fedsde.errors import FedsdeInputError
from fedsde.sweep import MAX_CELLS, load_spec
from fedsde.sweep.spec import parse_structure

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = str(ROOT / "examples" / "problems" / "paper_table.toml")
THOUSAND = {"eta": [round(1e-4 * (i + 1), 6) for i in range(1000)], "local_steps": list(range(1, 1001)),
            "rounds": list(range(1, 1001))}


def huge(axes: int) -> dict:
    """A ``simulate`` spec with ``axes`` axes of 1000 values each (10^(3·axes) cells)."""
    grid = {k: list(v) for k, v in itertools.islice(THOUSAND.items(), axes)}
    base = {"problem": PROBLEM, "replicates": 2} | ({} if "rounds" in grid else {"rounds": 1})
    return {"run": {"command": "simulate", "seed": 1}, "base": base, "grid": grid}


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedsde.cli", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=60)  # hang guard


@pytest.mark.parametrize(("axes", "shape"), [(2, "eta 1000 × local_steps 1000"),
                                             (3, "eta 1000 × local_steps 1000 × rounds 1000")])
def test_huge_grids_are_refused_with_the_count_and_the_limit(tmp_path, axes, shape):
    spec = tmp_path / "huge.toml"
    spec.write_text(tomli_w.dumps(huge(axes)))
    res = _cli("sweep", str(spec), "--out", str(tmp_path / "out"), "--json", cwd=tmp_path)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == (f"fedsde sweep: error: grid: {10 ** (3 * axes)} cells ({shape}), more than the limit of "
                          f"{MAX_CELLS}; split it into several sweeps or raise the limit (fedsde sweep --max-cells N, "
                          "max_cells= in Python)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["huge.toml"]  # nothing created


def test_a_huge_grid_within_a_raised_limit_is_checked_without_building_it(tmp_path):
    """10^6 cells: every axis value is parsed once, not every cell (the check answers at once)."""
    spec = tmp_path / "huge.toml"
    spec.write_text(tomli_w.dumps(huge(2)))
    code = (f"from fedsde.sweep import load_spec\nspec = load_spec({str(spec)!r}, max_cells=10**6)\n"
            "print(spec.n_cells, next(spec.cells()).coords)")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)  # hang guard
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout == "1000000 {'eta': 0.0001, 'local_steps': 1}\n"
    bad = huge(2)
    bad["grid"]["local_steps"][-1] = "x"
    with pytest.raises(FedsdeInputError, match=r'cell \{"eta":0.0001,"local_steps":"x"\}: fedsde simulate: error: '
                       r"argument --local-steps: invalid int value: 'x'"):
        load_spec(bad, max_cells=10**6)


def test_cells_are_counted_and_produced_one_at_a_time():
    spec = parse_structure(huge(3))
    assert spec.n_cells == 10**9 and spec.dims == {"eta": 1000, "local_steps": 1000, "rounds": 1000}
    first = list(itertools.islice(spec.cells(), 3))
    assert [c.index for c in first] == [(0, 0, 0), (0, 0, 1), (0, 0, 2)]
    last = spec.cell_at((999, 999, 999))
    assert last.coords == {"eta": 0.1, "local_steps": 1000, "rounds": 1000} and last == spec.cell_at((999,) * 3)
    with pytest.raises(FedsdeInputError, match=r"^grid: 1000000000 cells \(.*\), more than the limit of 100000;"):
        load_spec(huge(3))


def test_max_cells_option(tmp_path, capsys):
    from fedsde.cli import main

    example = str(ROOT / "examples" / "sweep.toml")
    assert main(["sweep", example, "--out", str(tmp_path / "o"), "--max-cells", "5"]) == 2
    err = capsys.readouterr().err
    assert "grid: 12 cells (eta 3 × local_steps 4), more than the limit of 5;" in err and err.count("\n") == 1
    assert main(["sweep", example, "--out", str(tmp_path / "o"), "--max-cells", "0"]) == 2
    assert "--max-cells=0: must be an integer >= 1" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    assert load_spec(example, max_cells=12).n_cells == 12


def test_spec_that_is_not_utf8_is_one_line(tmp_path, capsys):
    from fedsde.cli import main

    spec = tmp_path / "latin1.toml"
    data = '[run]\ncommand = "exact"\n# caf\u00e9\n'.encode("latin-1")
    spec.write_bytes(data)
    offset = data.index(b"\xe9")
    with pytest.raises(FedsdeInputError, match=rf"sweep spec '.*latin1.toml': not UTF-8 text \(byte 0xe9 at offset "
                       rf"{offset}\)"):
        load_spec(spec)
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and f"offset {offset})" in captured.err
    assert not (tmp_path / "o").exists()
