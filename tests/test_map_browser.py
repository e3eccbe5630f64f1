"""``fedsde map``'s report.html in headless Chromium: every image decodes, nothing runs past the right edge of the
window (the page's load handler counts the elements that do), and the console stays clean.

Skipped where Chromium is not installed (Debian's ``chromium`` package; ``.ci/run`` installs it).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fedsde.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
TABLE = str(Path(__file__).resolve().parents[1] / "examples" / "problems" / "paper_table.toml")


def _report(tmp_path_factory, capsys) -> Path:
    out = tmp_path_factory.getbasetemp() / "browser-map"
    if not (out / "report.html").exists():
        assert main(["map", "--problem", TABLE, "--eta", "0.02,0.3", "--local-steps", "1,3", "--server-lr", "0.5,1",
                     "--rounds", "6", "--replicates", "8", "--seed", "2", "--fedavg", "sampled", "--out", str(out),
                     "--json"]) == 0
        capsys.readouterr()
    return out / "report.html"


def _render(html: Path, width: int, profile: Path) -> tuple[int, int, int, list[str]]:
    """(images decoded, images, elements past the right edge, console lines) of the page at this window width."""
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000",
           f"--window-size={width},900", "--dump-dom", html.as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)  # hang guard
    assert res.returncode == 0, res.stderr[-2000:]
    images = re.search(r'data-images="(\d+)/(\d+)"', res.stdout)
    overflow = re.search(r'data-overflow="(\d+)"', res.stdout)
    assert images and overflow, "the page's load handler did not run"
    console = [line for line in res.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    return int(images.group(1)), int(images.group(2)), int(overflow.group(1)), console


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed")
@pytest.mark.parametrize("width", [1280, 900])
def test_map_report_in_headless_chromium(tmp_path_factory, capsys, width):
    ok, total, overflow, console = _render(_report(tmp_path_factory, capsys), width,
                                           tmp_path_factory.mktemp("profile"))
    assert total == 2 and ok == total
    assert overflow == 0, "elements run past the right edge of the window"
    assert not console, console


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed")
def test_the_page_counts_what_runs_past_the_edge(tmp_path_factory, capsys):
    html = _report(tmp_path_factory, capsys)
    wide = tmp_path_factory.mktemp("wide") / "report.html"
    wide.write_text(html.read_text(encoding="utf-8").replace("<h2>Run</h2>", "<div style='width:3000px'>wide</div>"
                                                             "<h2>Run</h2>"), encoding="utf-8")
    assert _render(wide, 900, tmp_path_factory.mktemp("profile"))[2] > 0
