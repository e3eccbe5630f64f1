"""The results store of a sweep: one folder, the spec, one file per finished cell.

Layout of ``DIR``::

    spec.toml          the spec as run (keys normalised to '_'); what load() reads
    spec.sha256        SHA-256 of the canonical spec (what --resume compares)
    cells/ID.json      one finished cell (ID: hash of its coordinates), written atomically
    .lock              held (flock) while a sweep runs in DIR, so two runs cannot interleave

Every file is written with :func:`fedsde._atomic.atomic_write_text` (a temporary file renamed over the target),
so a cell file is complete or absent: a sweep killed at any moment, SIGKILL included, loses no finished cell and
leaves no partial file that looks finished (a left-over ``.ID.json.*.tmp`` is removed by the next run).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tomli_w

from fedsde._atomic import atomic_write_text
from fedsde.errors import FedsdeInputError
from fedsde.sweep.spec import SweepSpec, canonical_json, parse_structure

SPEC_FILE, HASH_FILE, CELLS_DIR, LOCK_FILE = "spec.toml", "spec.sha256", "cells", ".lock"


def read_spec(out: str | os.PathLike) -> SweepSpec:
    """The spec stored in a sweep folder (FedsdeInputError if ``out`` holds no sweep)."""
    path = Path(out) / SPEC_FILE
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FedsdeInputError(f"{str(out)!r}: not a sweep folder (no {SPEC_FILE})") from None
    except tomllib.TOMLDecodeError as exc:
        raise FedsdeInputError(f"{str(path)!r}: not valid TOML: {' '.join(str(exc).split())}") from None
    return parse_structure(data)


def read_cells(out: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Every finished cell stored in ``out``, by id (unreadable files are skipped: they cannot be finished)."""
    cells = {}
    folder = Path(out) / CELLS_DIR
    if not folder.is_dir():
        return cells
    for path in folder.glob("[!.]*.json"):
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(rec, dict) and rec.get("id") == path.stem:
            cells[path.stem] = rec
    return cells


def spec_changes(old: dict, new: dict, prefix: str = "") -> list[str]:
    """What differs between two spec dicts, one short phrase per key (``grid.eta [..] -> [..]``)."""
    changes = []
    for key in sorted(set(old) | set(new), key=str):
        name = f"{prefix}{key}"
        if key not in new:
            changes.append(f"{name} removed")
        elif key not in old:
            changes.append(f"{name} added")
        elif isinstance(old[key], dict) and isinstance(new[key], dict):
            changes += spec_changes(old[key], new[key], prefix=f"{name}.")
        elif canonical_json(old[key]) != canonical_json(new[key]):
            changes.append(f"{name} {canonical_json(old[key])} -> {canonical_json(new[key])}")
    return changes


class Store:
    """A sweep folder opened for one run: created or checked against ``spec``, locked while open."""

    def __init__(self, out: str | os.PathLike, spec: SweepSpec, *, resume: bool):
        self.out = Path(out)
        self.spec = spec
        self.resume = resume
        self._lock_fd: int | None = None
        self._made: list[Path] = []  # folders this run created, outermost first
        self._fresh = False  # this run wrote the spec (the folder held no sweep)
        self._written = 0  # cells stored by this run

    def __enter__(self) -> Store:
        out = self.out
        if out.exists() and not out.is_dir():
            raise FedsdeInputError(f"--out={str(out)!r}: exists and is not a folder")
        has_spec = (out / SPEC_FILE).exists()
        if out.is_dir() and not has_spec and any(p.name != LOCK_FILE for p in out.iterdir()):
            raise FedsdeInputError(f"--out={str(out)!r}: exists, is not empty and holds no sweep; choose another "
                                   "folder")
        self._made = [p for p in [*reversed(out.absolute().parents), out.absolute()] if not p.exists()]
        try:
            out.mkdir(parents=True, exist_ok=True)
            self._lock()
        except OSError as exc:
            self._remove_created()
            raise FedsdeInputError(f"--out={str(out)!r}: cannot create the sweep folder there "
                                   f"({exc.strerror or type(exc).__name__})") from None
        try:
            if has_spec:
                self._check_stored()
            else:
                self._fresh = True
                atomic_write_text(out / SPEC_FILE, tomli_w.dumps(self.spec.to_dict()))
                atomic_write_text(out / HASH_FILE, self.spec.sha256 + "\n")
            (out / CELLS_DIR).mkdir(exist_ok=True)
            for tmp in (out / CELLS_DIR).glob(".*.tmp"):  # left by a killed run; we hold the lock
                tmp.unlink(missing_ok=True)
        except BaseException as exc:
            self.__exit__(type(exc), exc, None)
            if isinstance(exc, OSError):
                raise FedsdeInputError(f"--out={str(out)!r}: cannot write the sweep folder "
                                       f"({exc.strerror or type(exc).__name__})") from None
            raise
        return self

    def __exit__(self, exc_type, *exc) -> None:
        """Unlock; when this run stops on an error before storing any cell, remove what it created."""
        if exc_type is not None and (self._fresh or self._made) and self._written == 0 and not read_cells(self.out):
            self._remove_created()
        self._unlock()

    def _remove_created(self) -> None:
        if not (self._fresh or self._made):
            return
        for name in (SPEC_FILE, HASH_FILE, LOCK_FILE):
            with contextlib.suppress(OSError):
                (self.out / name).unlink()
        with contextlib.suppress(OSError):
            (self.out / CELLS_DIR).rmdir()
        for folder in reversed(self._made):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty

    def _lock(self) -> None:
        fd = os.open(self.out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise FedsdeInputError(f"--out={str(self.out)!r}: another sweep is running in this folder") from None
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _check_stored(self) -> None:
        stored = read_spec(self.out)
        n = len(read_cells(self.out))
        same = stored.sha256 == self.spec.sha256
        if not self.resume and (n or not same):  # the same spec with no cell yet: nothing to lose
            what = (f"this sweep ({n} finished cells); pass --resume to continue it," if same else
                    f"another sweep ({n} finished cells; spec changes: {'; '.join(self._changes(stored))});")
            raise FedsdeInputError(f"--out={str(self.out)!r}: already holds {what} or choose another folder")
        if not same:
            raise FedsdeInputError(f"--resume: the spec differs from the one stored in {str(self.out)!r} "
                                   f"({'; '.join(self._changes(stored))}); resume with the stored spec or choose "
                                   "another folder")

    def _changes(self, stored: SweepSpec) -> list[str]:
        return spec_changes(stored.to_dict(), self.spec.to_dict())

    def finished(self) -> dict[str, dict[str, Any]]:
        """The cells already stored, by id."""
        return read_cells(self.out)

    def write(self, record: dict[str, Any]) -> Path:
        """Store one cell atomically (replacing an earlier record of the same cell)."""
        text = json.dumps(record, allow_nan=True)
        path = atomic_write_text(self.out / CELLS_DIR / f"{record['id']}.json", text)
        self._written += 1
        return path


def iter_records(out: str | os.PathLike, spec: SweepSpec) -> Iterator[tuple[Any, dict[str, Any] | None]]:
    """Pairs (cell, stored record or None) over every cell of the spec, in grid order."""
    stored = read_cells(out)
    for cell in spec.cells():
        yield cell, stored.get(cell.id)
