"""Writing results safely: files appear complete or not at all."""

from __future__ import annotations

import csv
import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path


def atomic_write_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence]) -> Path:
    """Atomically write a CSV file (numbers with full precision)."""
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    for row in rows:
        w.writerow([f"{v:.10g}" if isinstance(v, float) else v for v in row])
    return atomic_write_text(path, buf.getvalue())


def write_json(path: Path, obj) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, default=str) + "\n")


def save_figure(fig, path: Path, *, formats: Sequence[str] = ("png",), dpi: int = 130) -> list[Path]:
    """Save a matplotlib figure atomically in each format (``path`` without suffix)."""
    out = []
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for fmt in formats:
        target = path.with_suffix(f".{fmt}")
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=f".{fmt}")
        os.close(fd)
        try:
            fig.savefig(tmp, format=fmt, dpi=dpi, bbox_inches="tight")
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        out.append(target)
    return out
