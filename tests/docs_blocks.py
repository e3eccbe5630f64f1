"""The fenced blocks of the documentation pages, as ``tests/test_docs_run.py`` runs them.

A page (README.md, docs/*.md) is read as a reader would run it: from the repository root, after
``bash scripts/env.sh && source .venv/bin/activate``, its blocks in page order.

* ```` ```bash ```` (``sh``, ``shell``) blocks run as bash scripts (``set -e -o pipefail``); ```` ```python ````
  blocks run as scripts (so they ``print`` what they show); ```` ```console ```` blocks hold ``$ ``-prompted
  commands (a line ending in ``\\`` continues) and the output they print.
* A ```` ```text ```` block preceded by ``<!-- docs-test: output -->`` shows the output of the runnable block before
  it: the numbers in it must appear in that block's output, in order and as a contiguous run, each equal to its
  printed precision (one unit of its last digit); a line that is only ``…`` or ``...`` stands for any output.
* ``<!-- docs-test: skip (reason) -->`` before a block: not run (the reason is required);
  ``<!-- docs-test: slow -->``: run only in the slow job (``pytest -m slow``).
* ``bash scripts/env.sh && COMMAND`` runs ``COMMAND``: the test runs inside the environment that script makes.

Also checked, without running anything: no elided command (``…``, `` ... ``) in a runnable block, no command shown
with a ``$`` prompt in a block that is not run (unless marked skip), no unknown marker.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

RUNNABLE = {"bash": "bash", "sh": "bash", "shell": "bash", "console": "console", "python": "python", "py": "python"}
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<kind>\w+)\s*(?:\((?P<reason>.*)\))?\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)[^`]*$")  # no backtick after
ELISION_LINE = {"…", "...", "[…]", "[...]"}
ELIDED = re.compile(r"…|(?<![\w.])\.\.\.(?![\w.])")
# a number as printed: sign (also U+2212), digits with an optional fraction, optional exponent; not part of a word
NUMBER = re.compile(r"(?<![\w.])[-+−]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+−]?\d+)?(?![\w])")
TINY = 1e-9  # numbers below this in magnitude are rounding-level noise: equal to any other such number


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    lang: str  # bash, console, python, or the fence's own label for blocks that are not run
    code: str
    marker: str | None = None  # "skip", "slow" or None
    reason: str | None = None
    expected: list[str] = field(default_factory=list)  # texts of the output blocks shown for it

    @property
    def runnable(self) -> bool:
        return self.lang in ("bash", "console", "python")

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def script(self) -> str:
        """What runs: the bash script, the console block's commands, or the Python source."""
        if self.lang == "python":
            return self.code
        lines = self.code.splitlines()
        if self.lang == "console":
            commands, going = [], False
            for ln in lines:
                if ln.startswith("$ ") or going:
                    commands.append(ln[2:] if ln.startswith("$ ") and not going else ln)
                    going = ln.rstrip().endswith("\\")
            lines = commands
        out = []
        for ln in lines:
            m = re.match(r"^(\s*)bash scripts/env\.sh(?:\s*&&\s*(.*))?\s*$", ln)
            if m:  # the environment is the one that script makes: run what follows it
                if m.group(2):
                    out.append(m.group(1) + m.group(2))
                continue
            out.append(ln)
        return "\n".join(out) + "\n"

    def shown_output(self) -> list[str]:
        """The output blocks for it, and for a console block the lines that are not commands."""
        shown = list(self.expected)
        if self.lang == "console":
            rest, going = [], False
            for ln in self.code.splitlines():
                if ln.startswith("$ ") or going:
                    going = ln.rstrip().endswith("\\")
                    continue
                rest.append(ln)
            if any(s.strip() for s in rest):
                shown.insert(0, "\n".join(rest))
        return shown


class PageError(ValueError):
    """A page breaks the convention (a message naming page and line)."""


def parse(path: Path, root: Path) -> list[Block]:
    """The fenced blocks of a page in order, with their markers and output blocks; :class:`PageError` on a
    marker that is unknown, misplaced or without its reason."""
    page = str(path.relative_to(root))
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    pending: tuple[str, str | None, int] | None = None  # a marker waiting for its block
    i = 0
    while i < len(lines):
        text = lines[i]
        m = MARKER.match(text)
        if m:
            kind, reason = m.group("kind"), m.group("reason")
            if kind not in ("skip", "slow", "output"):
                raise PageError(f"{page}:{i + 1}: unknown marker docs-test: {kind} (skip (reason), slow, output)")
            if kind == "skip" and not (reason or "").strip():
                raise PageError(f"{page}:{i + 1}: docs-test: skip needs its reason, e.g. <!-- docs-test: skip "
                                "(needs a GPU) -->")
            pending = (kind, reason, i + 1)
            i += 1
            continue
        f = FENCE.match(text)
        if not f:
            if text.strip() and pending is not None:
                raise PageError(f"{page}:{pending[2]}: the marker docs-test: {pending[0]} is not right before a "
                                "fenced block")
            i += 1
            continue
        indent, fence, lang = f.group("indent"), f.group("fence"), f.group("lang").lower()
        body, j = [], i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        code = "\n".join(body)
        kind, reason = (pending[0], pending[1]) if pending else (None, None)
        pending = None
        if kind == "output":
            runs = [b for b in blocks if b.runnable]
            if lang not in ("text", "") or not runs or runs[-1] is not blocks[-1]:
                raise PageError(f"{page}:{i + 1}: docs-test: output goes before a ```text block right after the "
                                "runnable block whose output it shows")
            runs[-1].expected.append(code)
        else:
            blocks.append(Block(page, i + 1, RUNNABLE.get(lang, lang or "(none)"), code, kind, reason))
        i = j + 1
    return blocks


def convention_errors(blocks: list[Block]) -> list[str]:
    """What breaks the convention without running anything: elided commands, commands shown but not run."""
    errors = []
    for b in blocks:
        if b.marker == "skip":
            continue
        if b.runnable and b.lang != "python":
            for ln in b.script().splitlines():
                if ELIDED.search(ln.split("#", 1)[0]):
                    errors.append(f"{b.where}: an elided command cannot run as printed: {ln.strip()!r}")
        if not b.runnable and any(ln.startswith("$ ") for ln in b.code.splitlines()):
            errors.append(f"{b.where}: a command shown in a ```{b.lang} block is not run: write it in a ```bash block "
                          "(its output in a ```text block after <!-- docs-test: output -->) or mark it "
                          "<!-- docs-test: skip (reason) -->")
    return errors


def _token_value(tok: str) -> float:
    return float(tok.replace("−", "-"))


def _token_unit(tok: str) -> float:
    """One unit of the last printed digit (0 for an integer: integers are compared exactly)."""
    tok = tok.replace("−", "-").lstrip("+-")
    mant, _, exp = tok.lower().partition("e")
    if "." not in mant and not exp:
        return 0.0
    decimals = len(mant.split(".", 1)[1]) if "." in mant else 0
    return 10.0 ** (int(exp or 0) - decimals)


def numbers(text: str) -> list[str]:
    return NUMBER.findall(text)


def _equal(expected: str, actual: str) -> bool:
    e, a = _token_value(expected), _token_value(actual)
    if not (math.isfinite(e) and math.isfinite(a)):
        return e == a or (math.isnan(e) and math.isnan(a))
    if abs(e) < TINY and abs(a) < TINY:
        return True
    # one unit of the shown number's last digit; half a unit of the output's when it prints fewer digits
    tol = max(_token_unit(expected), 0.5 * _token_unit(actual))
    return abs(e - a) <= tol * (1 + 1e-9) + 1e-12 * max(abs(e), abs(a))


def compare_output(shown: str, actual: str) -> str | None:
    """``None`` when the numbers ``shown`` appear in ``actual`` as described in the module docstring, else what
    differs (one line)."""
    segments: list[list[str]] = [[]]
    for ln in shown.splitlines():
        if ln.strip() in ELISION_LINE:
            segments.append([])
        else:
            segments[-1].extend(numbers(ln))
    got = numbers(actual)
    at = 0
    for seg in segments:
        if not seg:
            continue
        for start in range(at, len(got) - len(seg) + 1):
            if all(_equal(x, y) for x, y in zip(seg, got[start:start + len(seg)], strict=True)):
                at = start + len(seg)
                break
        else:
            best = _closest(seg, got[at:])
            return (f"the numbers shown ({' '.join(seg[:12])}{' …' if len(seg) > 12 else ''}) are not in the output; "
                    f"closest run: {best}")
    return None


def _closest(seg: list[str], got: list[str]) -> str:
    if not got:
        return "(no numbers in the output)"
    score = [sum(_equal(x, y) for x, y in zip(seg, got[s:s + len(seg)], strict=False))
             for s in range(max(1, len(got) - len(seg) + 1))]
    s = max(range(len(score)), key=score.__getitem__)
    run = got[s:s + len(seg)]
    return " ".join(run[:12]) + (" …" if len(run) > 12 else "")
