"""Writing results safely: files appear complete or not at all (see :mod:`fedsde._atomic`)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from fedsde._atomic import atomic_save_figure, atomic_write_text

__all__ = ["atomic_write_text", "save_figure", "write_csv", "write_json"]


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence]) -> Path:
    """Atomically write a CSV file (numbers with full precision)."""
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
    return [atomic_save_figure(fig, Path(path).with_suffix(f".{fmt}"), fmt=fmt, dpi=dpi) for fmt in formats]
