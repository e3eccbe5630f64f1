"""Every script in examples/ runs as it is (quick mode) and writes its figure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "examples").glob("f[0-9][0-9]_*.py"))


def test_one_example_per_figure():
    from fedsde.report.gallery import GALLERY

    ids = {p.name[:3] for p in SCRIPTS}
    assert ids == {f"f{int(k[1:]):02d}" for k in GALLERY}, sorted(ids)


#: examples that take a minute or more with --quick: in the long set that CI runs after the default one (-m long)
LONG = ("f11_aggregators", "f16_real_data", "f17_module_validity")


@pytest.mark.parametrize("script", [pytest.param(s, marks=pytest.mark.long) if s.stem in LONG else s
                                    for s in SCRIPTS], ids=lambda p: p.stem)
def test_example_runs(script, tmp_path):
    assert len(script.read_text().splitlines()) <= 60, "examples stay short"
    out = subprocess.run([sys.executable, str(script), "--quick", "--out", str(tmp_path)], capture_output=True,
                         text=True, timeout=900, cwd=ROOT)  # hang guard
    assert out.returncode == 0, out.stderr[-2000:]
    pngs = list(tmp_path.glob("*.png"))
    assert len(pngs) == 1 and pngs[0].stat().st_size > 5_000
