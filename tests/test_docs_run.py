"""Every command and snippet of README.md and docs/*.md runs as printed, and shows the numbers it prints.

The convention (markers ``<!-- docs-test: skip (reason) -->``, ``slow``, ``output``) is in
:mod:`tests.docs_blocks`.  Each page runs in a copy of the checkout (so a page that writes where it should not
cannot touch the tree, and is caught: a page writes only under ``examples-output/PAGE/``), from its root, with the
environment that ``source .venv/bin/activate`` gives (``.venv/bin`` first on ``PATH``) and the checkout under test
first on ``PYTHONPATH``; the blocks of a page run one after the other in that folder.  A page with a block marked
slow runs once without it here and once whole in the slow job.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.docs_blocks import Block, PageError, compare_output, convention_errors, parse

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK_TIMEOUT_S = 600  # a hang guard per block, not a speed assertion
#: where a page may write (git-ignored), besides its own examples-output/<page>/: the main job's report folder
WRITABLE = ("fedsde-results/",)
NOT_COPIED = {".git", ".venv", "site", "examples-output", "fedsde-results", "results"}  # at the top
NOT_COPIED_ANYWHERE = {"__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis"}


def _blocks(page: Path) -> list[Block]:
    try:
        return parse(page, ROOT)
    except PageError as exc:
        pytest.fail(str(exc))


def _runnable_pages(slow: bool) -> list[Path]:
    out = []
    for page in PAGES:
        try:
            blocks = parse(page, ROOT)
        except PageError:  # reported by test_pages_follow_the_convention
            continue
        run = [b for b in blocks if b.runnable and b.marker != "skip"]
        wanted = "slow" if slow else None
        if any(b.marker == wanted for b in run):
            out.append(page)
    return out


def _venv_bin() -> Path:
    venv = ROOT / ".venv" / "bin"
    return venv if (venv / "python").exists() else Path(sys.executable).parent


def _workspace(tmp_path: Path) -> Path:
    """A copy of the checkout (its files as they are, not only the committed ones) with .venv linked in."""
    work = tmp_path / "repo"
    shutil.copytree(ROOT, work, symlinks=True,
                    ignore=lambda d, names: [n for n in names if n in NOT_COPIED_ANYWHERE or n.endswith(".egg-info")
                                             or (Path(d) == ROOT and n in NOT_COPIED)])
    if (ROOT / ".venv").exists():
        (work / ".venv").symlink_to((ROOT / ".venv").resolve(), target_is_directory=True)
    return work


def _environ(work: Path, tmp_path: Path) -> dict[str, str]:
    venv_bin = _venv_bin()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTEST_CURRENT_TEST")}
    env.update({
        "PATH": f"{venv_bin}{os.pathsep}{env.get('PATH', '')}",  # what `source .venv/bin/activate` does
        "VIRTUAL_ENV": str(venv_bin.parent),
        "PYTHONPATH": str(work),  # the checkout under test, not an installed copy
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": str(tmp_path / "mpl"),
        "NO_MKDOCS_2_WARNING": "1",
    })
    return env


def _snapshot(work: Path) -> dict[str, tuple[int, int]]:
    files = {}
    for p in work.rglob("*"):
        rel = p.relative_to(work).as_posix()
        if rel == ".venv" or rel.startswith(".venv/") or not p.is_file() or p.is_symlink():
            continue
        st = p.stat()
        files[rel] = (st.st_size, st.st_mtime_ns)
    return files


def _run_block(block: Block, work: Path, env: dict[str, str], scripts: Path, k: int) -> str:
    """Run one block in ``work``; its stdout and stderr, or a test failure naming the page and line."""
    if block.lang == "python":
        script = scripts / f"block{k:02d}.py"
        script.write_text(block.script(), encoding="utf-8")
        argv = [str(_venv_bin() / "python"), str(script)]
    else:
        script = scripts / f"block{k:02d}.sh"
        script.write_text(block.script(), encoding="utf-8")
        argv = ["bash", "-e", "-o", "pipefail", str(script)]
    try:
        out = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S,
                             stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.where}: still running after {BLOCK_TIMEOUT_S} s:\n{block.script()}")
    if out.returncode != 0:
        pytest.fail(f"{block.where}: exit status {out.returncode}:\n{block.script()}\n--- stdout\n"
                    f"{out.stdout[-2000:]}\n--- stderr\n{out.stderr[-3000:]}")
    return out.stdout + "\n" + out.stderr


def _run_page(page: Path, tmp_path: Path, slow: bool) -> None:
    blocks = [b for b in _blocks(page) if b.runnable and b.marker != "skip" and (slow or b.marker != "slow")]
    work = _workspace(tmp_path)
    env = _environ(work, tmp_path)
    scripts = tmp_path / "blocks"
    scripts.mkdir()
    before = _snapshot(work)
    timings = []
    for k, block in enumerate(blocks):
        t0 = time.perf_counter()
        output = _run_block(block, work, env, scripts, k)
        timings.append(f"{block.where} {time.perf_counter() - t0:.1f} s")
        for shown in block.shown_output():
            diff = compare_output(shown, output)
            if diff is not None:
                pytest.fail(f"{block.where}: {diff}\n{block.script()}\n--- output\n{output[-3000:]}")
    after = _snapshot(work)
    writable = (f"examples-output/{page.stem}/", *WRITABLE)
    stray = sorted(rel for rel, st in after.items() if before.get(rel) != st and not rel.startswith(writable))
    assert not stray, f"{page.name}: its commands wrote outside {writable}: {stray[:10]}"
    print(f"{page.name}: {len(blocks)} blocks: " + "; ".join(timings))


def test_pages_follow_the_convention():
    errors = []
    for page in PAGES:
        try:
            errors += convention_errors(parse(page, ROOT))
        except PageError as exc:
            errors.append(str(exc))
    assert not errors, "\n".join(errors)


#: pages whose default blocks take a minute or more (a network's verdict, reproduce --quick, the rules' SDEs under
#: sampling, populations of 10⁶ clients): in the long set that CI
#: runs after the default one (``pytest -m long``)
LONG_PAGES = ("own_model.md", "quickstart.md", "aggregator_sdes.md", "cross_device.md")


@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.long) if p.name in LONG_PAGES else p
                                  for p in _runnable_pages(slow=False)], ids=lambda p: p.name)
def test_page_runs_as_printed(page, tmp_path):
    _run_page(page, tmp_path, slow=False)


@pytest.mark.slow
@pytest.mark.parametrize("page", _runnable_pages(slow=True), ids=lambda p: p.name)
def test_page_runs_as_printed_with_its_slow_blocks(page, tmp_path):
    _run_page(page, tmp_path, slow=True)


def test_the_convention_itself(tmp_path):
    """The parser and the comparison of shown numbers, on a page made here."""
    from tests.docs_blocks import compare_output

    page = tmp_path / "page.md"
    page.write_text("""# A page

```bash
bash scripts/env.sh && fedsde exact --help
```

<!-- docs-test: output -->
```text
…
x = 0.0240 and 1.09e-14
```

<!-- docs-test: skip (needs a GPU) -->
```python
print(1)
```

<!-- docs-test: slow -->
```console
$ fedsde simulate --rounds 2 \\
      --seed 0
mean 1.25
```
""")
    run, skipped, slow = parse(page, tmp_path)
    assert (run.lang, run.marker, run.script()) == ("bash", None, "fedsde exact --help\n")
    assert (skipped.marker, skipped.reason) == ("skip", "needs a GPU")
    assert slow.marker == "slow" and slow.script() == "fedsde simulate --rounds 2 \\\n      --seed 0\n"
    assert slow.shown_output() == ["mean 1.25"]
    shown = run.shown_output()[0]
    assert compare_output(shown, "a 7\nx = 0.024 and 3e-16\n") is None  # printed precision; rounding-level noise
    assert compare_output(shown, "x = 0.02401 and 0\n") is None
    assert compare_output(shown, "x = 0.0242 and 0\n") is not None  # off by two units of the last digit
    assert compare_output(shown, "x = 0.024 and 0.1\n") is not None
    assert compare_output("n = 12\n", "n = 12.4\n") is not None  # integers are compared exactly
    assert compare_output("a 1\n…\nb 2\n", "b 2 a 1\n") is not None  # in order
    bad = tmp_path / "bad.md"
    bad.write_text("<!-- docs-test: skip -->\n```bash\nls\n```\n")
    with pytest.raises(PageError, match="needs its reason"):
        parse(bad, tmp_path)
    bad.write_text("```bash\nfedsde simulate … --rounds 20\n```\n\n```text\n$ fedsde exact\n```\n")
    errors = convention_errors(parse(bad, tmp_path))
    assert len(errors) == 2 and "elided" in errors[0] and "is not run" in errors[1]
