"""report.html opens in headless Chromium: every image decodes and the console stays clean.

Skipped where Chromium is not installed (Debian's ``chromium`` package; CI installs it when it can).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from fedsde.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed")
def test_report_html_in_headless_chromium(tmp_path, capsys):
    out = tmp_path / "res"
    main(["reproduce", "--quick", "--only", "F5,F6", "--no-claims", "--out", str(out), "--json"])
    capsys.readouterr()
    html = out / "report.html"
    profile = tmp_path / "profile"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000",
           "--dump-dom", html.as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)  # hang guard
    assert res.returncode == 0, res.stderr[-2000:]
    m = re.search(r'data-images="(\d+)/(\d+)"', res.stdout)
    assert m, "the page's load handler did not run"
    ok, total = int(m.group(1)), int(m.group(2))
    assert total == 2 and ok == total
    console = [line for line in res.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console
