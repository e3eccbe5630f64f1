"""Reading the files a user hands to fedsde (internal): problems, sweep specs, report configs, CSV data.

Every reader goes through :func:`read_text` (or :func:`decode_text` for bytes already read), so a file that is not
UTF-8 is one :class:`~fedsde.errors.FedsdeInputError` naming the file and the byte offset of the first bad byte,
which the command line turns into a one-line error with exit status 2.
"""

from __future__ import annotations

from pathlib import Path

from fedsde.errors import FedsdeInputError


def decode_text(data: bytes, path: str | Path, what: str = "file") -> str:
    """``data`` decoded as UTF-8 (a leading byte-order mark is dropped), or a one-line error naming ``path`` and
    the offset of the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = data[exc.start:exc.start + 1]
        raise FedsdeInputError(
            f"{what} {str(path)!r}: not UTF-8 text (byte 0x{bad.hex()} at offset {exc.start}); save it as UTF-8"
        ) from None


def read_bytes(path: str | Path) -> bytes:
    """The bytes of ``path`` (missing files and folders raise the operating system's error, which the command line
    reports in one line)."""
    return Path(path).read_bytes()


def read_text(path: str | Path, what: str = "file") -> str:
    """The text of ``path``, decoded as UTF-8 (see :func:`decode_text`)."""
    return decode_text(read_bytes(path), path, what)
