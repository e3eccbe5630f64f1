"""Atomic file writes: a file appears complete or not at all (internal).

Data goes to a temporary file in the target's folder, which then replaces the target (``os.replace``); on any
error the temporary file is removed.  Permissions follow the umask like a plain ``open(path, "w")``.
"""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (parent folders are created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600 files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_save_figure(fig, path: str | os.PathLike, *, fmt: str = "png", dpi: int = 130) -> Path:
    """Render a matplotlib figure in memory and write it to ``path`` atomically."""
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches="tight")
    return atomic_write_bytes(path, buf.getvalue())
