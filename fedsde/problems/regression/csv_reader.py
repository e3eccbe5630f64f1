"""The records of a least-squares CSV file (:func:`csv_blocks`), read at once where a stretch of the file is plain.

The file (UTF-8, a leading byte-order mark dropped, header row, comma separated) is read in stretches of about
``chars`` characters cut at a line end.  A *plain* stretch — no quote character, no NUL, no blank line, every line
with the header's number of fields, a client in every row, finite numbers — is parsed at once by pandas' C parser
(:func:`_plain_stretch`; in a short file only if pandas is imported already); every other stretch is read record
by record with the :mod:`csv` module, as the whole file was before (a quoted field may run past the cut: its
record is read to its end).  Both give the same records,
values and client names, and the records are yielded in the same blocks (``block`` records of the file, blank
lines included, then the blank lines dropped), so everything computed from the blocks is the same bit for bit.

Values are the numbers ``float(cell)`` gives, correctly rounded: pandas ≥ 3 converts with ``fast_float`` (exact
IEEE round to nearest even), pandas 2 with ``float_precision="round_trip"`` (CPython's ``PyOS_string_to_double``,
the function behind ``float``; slower: 1.7 µs a row against 0.7 with pandas 3.1 and 5–6 with the csv module, in
``benchmarks/bench_csv_reader.py``).  Where the two readers could differ the stretch is read by the csv module: a ``+``
that is not an exponent's (pandas 3.1 rounds ``" +3e23"`` to a neighbour of ``float``'s number), a cell that pandas
refuses (``1_000``, non-ASCII digits or spaces: ``float`` reads them) or that is not finite, and a column that
pandas read as booleans (``true``/``false`` in any case become 1 and 0: a stretch with a column of only 0 and 1
that contains those words).

Errors (field counts, empty or non-numeric cells, NaN/inf) are those of a second reading of the file record by
record (:func:`_raise_first_error`): the row, its line and the column.
"""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
import math
import operator
import sys
from collections.abc import Sequence

import numpy as np

from fedsde._io import read_text
from fedsde.errors import FedsdeInputError

#: records per block of :func:`csv_blocks`
CSV_BLOCK = 1 << 14
#: characters per stretch of :func:`csv_blocks` (then to the end of the line)
CSV_CHARS = 1 << 21
#: a stretch shorter than this is read by the csv module unless pandas is imported already (importing it takes
#: longer than reading a few thousand rows record by record)
PANDAS_FROM = 1 << 20


def csv_blocks(path, features: Sequence[str], target: str, client_column: str, block: int = CSV_BLOCK,
               chars: int = CSV_CHARS):
    """The records of a CSV file in blocks of at most ``block``, in file order, without holding the file: yields
    ``(clients, values)``: client names (list of str, stripped) and ``values`` (n, F + 1) float64 (the features,
    then the target).  Checks: header, columns, field counts, empty or non-numeric cells, NaN/inf; blank lines are
    skipped; a file with no record is refused.  A plain stretch of about ``chars`` characters is parsed at once,
    any other record by record (module docstring), and an error is reported with its row and line from a second
    reading of the file up to it.  Magnitudes are checked by the caller
    (:func:`fedsde.problems.regression.data.check_magnitudes`, which needs the number of rows; :func:`csv_cell`
    names a cell)."""
    with _opened(path) as fh:
        names, cols, c_col = _header(csv.reader(iter(fh.readline, "")), path, features, target, client_column)
        width, take = len(names), _taker(cols)
        pieces, filled, count = [], 0, 0  # the current block: its converted pieces and its records so far
        while text := fh.read(chars):
            text += fh.readline()  # to the end of the line
            rows = (_plain_stretch(text, width, cols, c_col) if len(text) >= PANDAS_FROM or "pandas" in sys.modules
                    else None)
            try:
                records = None if rows is not None else _csv_records(text, fh)
            except csv.Error:  # reported with its line by the record-by-record reading
                _raise_first_error(path, features, target, client_column)
                raise
            n, i = (len(rows[0]) if rows is not None else len(records)), 0
            while i < n:
                k = min(n - i, block - filled)
                if rows is not None:
                    got = rows[0][i:i + k], rows[1][i:i + k]
                else:
                    chunk = records[i:i + k]
                    got = _fast_block(chunk, width, c_col, take, len(cols)) or _exact_block(chunk, width, c_col,
                                                                                            cols)
                    if got is None:
                        _raise_first_error(path, features, target, client_column)
                pieces.append(got)
                filled, i = filled + k, i + k
                if filled == block:
                    count += yield from _emit(pieces, len(cols))
                    pieces, filled = [], 0
        count += yield from _emit(pieces, len(cols))
    if not count:
        raise FedsdeInputError(f"data file {str(path)!r}: has a header but no rows")


def _emit(pieces, ncols):
    """Yield the block made of ``pieces`` (if it has a row); returns its number of rows."""
    clients = list(itertools.chain.from_iterable(p[0] for p in pieces))
    if clients:
        yield clients, (np.concatenate([p[1] for p in pieces]) if len(pieces) > 1 else pieces[0][1]).reshape(-1,
                                                                                                               ncols)
    return len(clients)


def _taker(cols):
    return operator.itemgetter(*cols) if len(cols) > 1 else (lambda r, j=cols[0]: (r[j],))


def _csv_records(text, fh) -> list[list[str]]:
    """The csv module's records of ``text`` (whole lines), blank lines as ``[]``; a record still open at its end (a
    quoted field running past the cut) is read on from ``fh`` to its end."""
    lines = text.count("\n") + text.count("\r") - text.count("\r\n") + (text[-1] not in "\r\n")
    reader = csv.reader(itertools.chain(io.StringIO(text, newline=""), iter(fh.readline, "")))
    records = []
    for record in reader:
        records.append(record)
        if reader.line_num >= lines:
            break
    return records


def _plain_stretch(text: str, width: int, cols: list[int], c_col: int):
    """``(clients, values)`` of a stretch of whole lines parsed at once by pandas, or None when in doubt (module
    docstring)."""
    if '"' in text or "\0" in text or text[0] == "\ufeff" or c_col in cols:
        return None
    if "+" in text and text.count("+") != text.count("e+") + text.count("E+"):
        return None  # a + sign before a number (with spaces about it pandas 3.1 may round it differently)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if text[-1] != "\n":
        text += "\n"
    if text[0] == "\n" or "\n\n" in text:
        return None  # a blank line
    data = text.encode()
    b = np.frombuffer(data, dtype=np.uint8)
    seps = b[np.flatnonzero((b == 44) | (b == 10))]  # every comma and line end, in order
    if seps.size % width or (seps.reshape(-1, width) != _separators(width)).any():
        return None  # a line with a wrong number of fields
    import pandas as pd

    exact = {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}
    try:
        df = pd.read_csv(io.BytesIO(data), header=None, names=list(range(width)), usecols=sorted({*cols, c_col}),
                         dtype={c_col: object} | dict.fromkeys(cols, np.float64), na_filter=False, index_col=False,
                         skip_blank_lines=False, encoding="utf-8", engine="c", **exact)
    except (ValueError, OverflowError):
        return None
    if len(df) != seps.size // width:
        return None
    values = np.ascontiguousarray(df[list(cols)].to_numpy(dtype=np.float64))
    if not np.isfinite(values).all():
        return None
    if ((values == 0) | (values == 1)).all(0).any() and ("rue" in (low := text.lower()) or "alse" in low):
        return None  # maybe a column of true/false, which pandas reads as 1/0
    clients = list(map(str.strip, df[c_col].tolist()))
    return (clients, values) if all(clients) else None


def _separators(width: int) -> np.ndarray:
    return np.array([44] * (width - 1) + [10], dtype=np.uint8)


@contextlib.contextmanager
def _opened(path):
    """``path`` opened as UTF-8 text (a leading byte-order mark dropped); bytes that are not UTF-8 are the one-line
    message of :func:`fedsde._io.read_text` naming the first one's offset."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            yield fh
    except UnicodeDecodeError:
        read_text(path, "data file")
        raise


def _header(reader, path, features, target, client_column) -> tuple[list[str], list[int], int]:
    where = f"data file {str(path)!r}"
    header = next(reader, None)
    if not header or not any(h.strip() for h in header):
        raise FedsdeInputError(f"{where}: empty (it needs a header row naming the columns)")
    names = [h.strip() for h in header]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise FedsdeInputError(f"{where}: column name(s) {', '.join(map(repr, dup))} appear more than once")
    wanted = [*features, target, client_column]
    missing = [c for c in wanted if c not in names]
    if missing:
        raise FedsdeInputError(f"{where}: no column(s) {', '.join(map(repr, missing))} (columns: "
                               f"{', '.join(names)})")
    return names, [names.index(c) for c in (*features, target)], names.index(client_column)


def _fast_block(chunk, width, c_col, take, ncols):
    """A block of plain records at once (every record of ``width`` fields, a client, finite numbers), else None."""
    if set(map(len, chunk)) != {width}:
        return None
    clients = [r[c_col].strip() for r in chunk]
    if not all(clients):
        return None
    try:  # float() strips white space as _number does
        values = np.fromiter(map(float, itertools.chain.from_iterable(map(take, chunk))), dtype=np.float64,
                             count=len(chunk) * ncols).reshape(len(chunk), ncols)
    except ValueError:
        return None
    return (clients, values) if np.isfinite(values).all() else None


def _exact_block(chunk, width, c_col, cols):
    """The block record by record (blank lines skipped); None at a record that fails a check."""
    clients, values = [], []
    for r in chunk:
        if not r or not "".join(r).strip():
            continue
        if len(r) != width or not r[c_col].strip():
            return None
        try:
            v = [float(r[j]) for j in cols]
        except ValueError:
            return None
        if not all(map(math.isfinite, v)):
            return None
        clients.append(r[c_col].strip())
        values.append(v)
    return clients, np.asarray(values, dtype=np.float64).reshape(-1, len(cols))


def _records(path, features, target, client_column):
    """``(row, line, record, names, cols, c_col)`` of every record, one by one (blank lines skipped)."""
    with _opened(path) as fh:
        reader = csv.reader(fh)
        names, cols, c_col = _header(reader, path, features, target, client_column)
        count, records = 0, iter(reader)
        while True:
            start = reader.line_num + 1
            try:
                record = next(records)
            except StopIteration:
                return
            except csv.Error as exc:  # e.g. an opening quote without its closing one: the rest is one field
                raise FedsdeInputError(
                    f"data file {str(path)!r}, the record from line {start} (after row {count}): not readable as "
                    f"CSV ({exc}; is a quote left open?)") from None
            if not record or not "".join(record).strip():
                continue  # blank line
            count += 1
            yield count, reader.line_num, record, names, cols, c_col


def _raise_first_error(path, features, target, client_column) -> None:
    """Read the file record by record and raise the first record's error (row, line, column)."""
    where = f"data file {str(path)!r}"
    for count, line, record, names, cols, c_col in _records(path, features, target, client_column):
        at = f"{where}, row {count} (line {line})"
        if len(record) != len(names):
            raise FedsdeInputError(f"{at}: has {len(record)} fields, the header has {len(names)}")
        if not record[c_col].strip():
            raise FedsdeInputError(f"{at}, column {names[c_col]!r}: empty (every row needs a client)")
        for j in cols:
            _number(record[j], at, names[j])
    raise AssertionError("a block failed its checks but no record does")  # pragma: no cover


def csv_cell(path, row: int, column: str) -> str:
    """``data file '…', row r (line l), column 'c'`` for record ``row`` (from 0) of a file that reads without
    errors (a second reading up to it)."""
    for count, line, *_ in _records(path, [], column, column):
        if count == row + 1:
            return f"data file {str(path)!r}, row {count} (line {line}), column {column!r}"
    raise IndexError(row)


def _number(cell: str, at: str, column: str) -> float:
    s = cell.strip()
    if not s:
        raise FedsdeInputError(f"{at}, column {column!r}: empty (a number is needed)")
    try:
        v = float(s)
    except ValueError:
        raise FedsdeInputError(f"{at}, column {column!r}: {s!r} is not a number") from None
    if not math.isfinite(v):
        raise FedsdeInputError(f"{at}, column {column!r}: {s!r} is not a finite number (NaN and inf are refused)")
    return v
