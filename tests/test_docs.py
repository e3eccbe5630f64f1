"""The documentation site builds offline with ``mkdocs build --strict`` (generated errata and gallery included)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.long  # .ci/run builds the site strictly before the tests; this also checks what the site holds
def test_mkdocs_build_strict(tmp_path):
    mkdocs = shutil.which("mkdocs") or str(Path(sys.executable).with_name("mkdocs"))
    if not Path(mkdocs).exists():
        pytest.skip("mkdocs is not installed")
    out = subprocess.run([mkdocs, "build", "--strict", "-q", "-d", str(tmp_path / "site")], cwd=ROOT,
                         capture_output=True, text=True, timeout=900,  # hang guard
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    errata = (tmp_path / "site" / "errata" / "index.html").read_text()
    assert "thm6.3-v0" in errata and "fedsde:errata" not in errata
    assert (tmp_path / "site" / "api" / "exact" / "index.html").exists()
