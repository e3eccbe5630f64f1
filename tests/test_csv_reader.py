"""The least-squares CSV reader (fedsde.problems.regression.csv_reader): the stretches parsed at once give exactly the
records, values (bit for bit: ``float(cell)``), client names and blocks of a plain record-by-record reading with the csv
module, on generated files with quotes, CRLF, lone CR, spaces, a byte-order mark, blank lines and exponents, cut at
every kind of place; and a cell ``float`` reads differently (or refuses) sends its stretch to the csv module."""

from __future__ import annotations

import csv
import itertools
import random
import struct
from unittest import mock

import numpy as np
import pandas  # noqa: F401  (imported: short files too are parsed by stretches, see csv_reader.PANDAS_FROM)
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedsde.errors import FedsdeInputError
from fedsde.problems.regression import csv_reader
from fedsde.problems.regression.csv_reader import _plain_stretch, csv_blocks

SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# halfway and near-halfway cases, long mantissas, subnormals, overflow and underflow
HARD = ["1.00000000000000011102230246251565404236316680908203125",
        "1.00000000000000011102230246251565404236316680908203124999999999999999999999",
        "1.000000000000000111022302462515654042363166809082031250000000000000000001",
        "9007199254740993", "9007199254740993.0000000000000000000001", "2.2250738585072011e-308",
        "2.2250738585072012e-308", "4.9406564584124654e-324", "2.4703282292062327e-324", "2.4703282292062328e-324",
        "1.7976931348623157e308", "1.7976931348623158e308", "1.7976931348623159e308", "0.1", "-0.0", "+.5e-0",
        "123456789012345678901234567890e-30", "0." + "0" * 400 + "1e400", "1" * 800 + "e-800", " 7.5\t",
        "1e-400", "-1e-400", "1e400", "5e-324", "0x1p3", "1_0", "\u0661\u0662", "\u00a01.5", "1.5\x0c", "infinity",
        "-NaN", "nan", "True", "FALSE", " true ", "1e", ".e1", "1.e1", "+", "1..2", "1e+5e"]

_digits = st.text("0123456789", min_size=1, max_size=30)
_space = st.sampled_from(["", " ", "  ", "\t", " \t"])
# well formed: [space][sign]digits[.digits][e[sign]digits][space]
_number = st.builds(lambda s1, sign, a, dot, b, e, es, ed, s2: f"{s1}{sign}{a}{dot}{b}{e and e + es + ed}{s2}",
                    _space, st.sampled_from(["", "+", "-"]), _digits, st.sampled_from(["", "."]),
                    st.text("0123456789", max_size=25), st.sampled_from(["", "e", "E"]),
                    st.sampled_from(["", "+", "-"]), st.text("0123456789", min_size=1, max_size=4), _space)
_float_repr = st.floats(allow_nan=False, allow_infinity=False).map(repr)
_junk = st.text(" \t+-.eE0123456789_xXinfatyNIFATYruslRUSL\u00a0\u0661\x0b\x0c\x1f\u2003", max_size=14)
_cell = st.one_of(_number, _float_repr, _junk, st.sampled_from(HARD))


def _float(cell):
    try:
        v = float(cell)
    except ValueError:
        return None
    return v if np.isfinite(v) else None


def _bits(values) -> list[bytes]:
    return [struct.pack("<d", v) for v in values]


@SETTINGS
@given(st.lists(_cell, min_size=1, max_size=25))
def test_a_stretch_parsed_at_once_gives_float_of_every_cell_bit_for_bit(cells):
    text = "".join(f"c{i},{c}\n" for i, c in enumerate(cells))
    got = _plain_stretch(text, 2, [1], 0)
    want = [_float(c) for c in cells]
    if got is None:  # in doubt: the csv module reads the stretch (the next test: not for well-formed numbers)
        return
    assert None not in want
    assert got[0] == [f"c{i}" for i in range(len(cells))]
    assert _bits(got[1][:, 0]) == _bits(want)


@SETTINGS
@given(st.lists(st.one_of(_number, _float_repr), min_size=1, max_size=25))
def test_well_formed_numbers_take_the_stretch_path(cells):
    if None in [_float(c) for c in cells] or any(c.strip()[:1] == "+" for c in cells):  # inf; a + sign: in doubt
        return
    text = "".join(f"c{i},{c}\n" for i, c in enumerate(cells))
    got = _plain_stretch(text, 2, [1], 0)
    assert got is not None and _bits(got[1][:, 0]) == _bits(map(float, cells))


def _random_cell(rng, plus):
    d = lambda k: "".join(rng.choice("0123456789") for _ in range(rng.randrange(k)))  # noqa: E731
    a, b = rng.choice([d(3), d(20), d(40), "0" * rng.randrange(5) + d(18)]), rng.choice(["", d(5), d(25), d(60)])
    a = a or ("" if b else "1")
    e = rng.choice(["", "", "e", "E"])
    sign = rng.choice(["", "-", "+"] if plus else ["", "-"])
    space = lambda: rng.choice(["", "", " ", "\t", "  "])  # noqa: E731
    return (space() + sign + a + ("." if b or rng.random() < 0.3 else "") + b
            + (e + rng.choice(["", "+", "-"]) + str(rng.randrange(340)) if e else "") + space())


def test_twenty_thousand_random_decimals_are_float_of_the_cell_bit_for_bit():
    rng = random.Random(0)
    cells = [c for c in (_random_cell(rng, plus=False) for _ in range(20000)) if _float(c) is not None]
    got = _plain_stretch("".join(f"c,{c}\n" for c in cells), 2, [1], 0)
    assert got is not None and _bits(got[1][:, 0]) == _bits(map(float, cells))
    plus = [c for c in (_random_cell(rng, plus=True) for _ in range(2000)) if c.strip()[:1] == "+"]
    assert _plain_stretch("".join(f"c,{c}\n" for c in plus), 2, [1], 0) is None  # read by the csv module


@pytest.mark.parametrize("column", [["true", "False", "TRUE"], ["1", "0", "true"], [" false ", "1.0", "0"]])
def test_a_column_of_true_false_words_is_in_doubt(column):
    text = "".join(f"c{i},{c},2.5\n" for i, c in enumerate(column))
    assert _plain_stretch(text, 3, [1, 2], 0) is None
    assert _plain_stretch(text.replace("true", "1").replace("True", "1").replace("TRUE", "1").replace(
        "false", "0").replace("False", "0"), 3, [1, 2], 0) is not None


@pytest.mark.parametrize("text", ["a,1\n\nb,2\n", '"a",1\n', "a,1,2\n", "a\n", " ,1\n", "a,\n", "a,nan\n",
                                  "a,1e999\n", "\ufeffa,1\n", "a,1\x00\n", "a,1_0\n"])
def test_anomalies_leave_the_stretch_to_the_csv_module(text):
    assert _plain_stretch(text, 2, [1], 0) is None


def _client(rng):
    name = rng.choice(["s", "site", "Zürich", "é", "a b", "x", "\ufeffb", "v\x0b", "f\x0c", "g\x1c", "n\x85",
                       "l\u2028", "t\x1a", "#h"]) + str(rng.randrange(12))
    pad = rng.choice(["", " ", "\t", "  "])
    if rng.random() < 0.08:
        return '"' + rng.choice([name, name + ", inc", name + '""q', name + "\nline", name + "\r\nl"]) + '"'
    return pad + name + rng.choice(["", " "])


def _value(rng):
    v = rng.gauss(0, 10) * 10.0 ** rng.randrange(-30, 30)
    form = rng.randrange(7)
    s = [repr(v), f"{v:.6g}", f"{v:.17e}", f"{v:E}", str(rng.randrange(-999, 999)), f"{v:.30f}", f"{v:.3e}"][form]
    if rng.random() < 0.1:
        s = rng.choice([" ", "\t"]) + s + rng.choice(["", " "])
    if rng.random() < 0.02:
        s = '"' + s + '"'
    return s


def _write(path, rng, rows, *, bom, ends):
    lines = ["site , x1,note,x2 ,y"]
    for _ in range(rows):
        if rng.random() < 0.02:
            lines.append(rng.choice(["", " ", ",,,,", " , ,"]))
            continue
        note = rng.choice(["", "n", '"a, ""b"""', "x y"])
        lines.append(",".join([_client(rng), _value(rng), note, _value(rng), _value(rng)]))
    body = "".join(line + rng.choice(ends) for line in lines)
    path.write_bytes(("\ufeff" if bom else "").encode() + body.encode())


def _reference(path, block):
    """Blocks of ``block`` records (blank ones dropped) read with the csv module alone, cell by cell."""
    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh)
        names = [h.strip() for h in next(reader)]
        cols, c = [names.index(n) for n in ("x1", "x2", "y")], names.index("site")
        out = []
        while chunk := list(itertools.islice(reader, block)):
            recs = [r for r in chunk if r and "".join(r).strip()]
            if recs:
                out.append(([r[c].strip() for r in recs], np.array([[float(r[j]) for j in cols] for r in recs])))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_files_read_as_the_csv_module_reads_them_whatever_the_cuts(tmp_path, seed):
    rng = random.Random(seed)
    path = tmp_path / "d.csv"
    ends = [["\n"], ["\r\n"], ["\r"], ["\n", "\r\n", "\r"]][seed % 4]
    _write(path, rng, 300, bom=seed % 2 == 0, ends=ends)
    for block, chars in [(16384, 1 << 21), (7, 1), (50, 97), (64, 1000), (1, 13)]:
        want = _reference(path, block)
        got = list(csv_blocks(path, ["x1", "x2"], "y", "site", block=block, chars=chars))
        assert [c for c, _ in got] == [c for c, _ in want]
        assert [v.tobytes() for _, v in got] == [v.tobytes() for _, v in want]


def test_a_plain_file_is_parsed_by_stretches(tmp_path):
    path = tmp_path / "d.csv"
    rng = random.Random(1)
    path.write_text("site,x1,x2,y\r\n" + "".join(f"c{rng.randrange(50)}, {rng.gauss(0, 1)!r},{rng.random():.5e},"
                                                 f"{rng.randrange(-9, 9)}\r\n" for _ in range(2000)))
    with mock.patch.object(csv_reader, "_csv_records", side_effect=AssertionError("record by record")):
        got = list(csv_blocks(path, ["x1", "x2"], "y", "site", block=300, chars=5000))
    want = _reference(path, 300)
    assert [c for c, _ in got] == [c for c, _ in want]
    assert [v.tobytes() for _, v in got] == [v.tobytes() for _, v in want]


def test_a_bad_cell_deep_in_a_plain_file_gives_its_row_and_line(tmp_path):
    path = tmp_path / "d.csv"
    rows = [f"c{i % 7},{i}.5,{-i}e-3\n" for i in range(3000)]
    rows[2500] = "c1,2.5,abc\n"
    path.write_text("site,x1,y\n" + "".join(rows))
    with pytest.raises(FedsdeInputError, match=r"row 2501 \(line 2502\), column 'y': 'abc' is not a number"):
        list(csv_blocks(path, ["x1"], "y", "site", chars=4096))


def test_a_quote_left_open_is_one_line_naming_where_the_record_starts(tmp_path):
    """An opening quote without its closing one makes the rest of the file one field: the csv module's field-size
    error becomes one line naming the record's first line (not a traceback, not the line the reader gave up at)."""
    path = tmp_path / "d.csv"
    path.write_text("site,x1,y\nc1,1.0,2.0\nc2,\"3.0,4.0\n" + "c3,1,2\n" * 30000)
    with pytest.raises(FedsdeInputError, match=r"the record from line 3 \(after row 1\): not readable as CSV "
                                               r"\(field larger than field limit .*is a quote left open\?\)"):
        list(csv_blocks(path, ["x1"], "y", "site"))
