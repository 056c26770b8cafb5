"""Text data files as real tools write them: every row loaded, the same values whether
the file is read whole (``load_matrix``) or a chunk at a time (``open_rows``), and
every malformed row refused in one line naming its line and the fix."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import harness.clients.csvfile as csvfile
from harness.clients import load_matrix, open_rows
from harness.errors import InputError

TABLE = np.random.default_rng(7).uniform(-1, 1, size=(500, 10))
NAMES = [f"c{i}" for i in range(10)]


def _csv_module(dialect: str, header: bool = False, encoding: str = "utf-8"):
    def write(path: Path) -> None:
        with open(path, "w", newline="", encoding=encoding) as fh:
            writer = csv.writer(fh, dialect=dialect)
            if header:
                writer.writerow(NAMES)
            writer.writerows(TABLE.tolist())
    return write


def _bytes(then):  # a file as another writer left it, changed by ``then``
    def write(path: Path) -> None:
        np.savetxt(path, TABLE, delimiter=",")
        path.write_bytes(then(path.read_bytes()))
    return write


# (file name, writer, whether its first line is a header)
WRITERS = [
    ("excel.csv", _csv_module("excel"), False),  # CRLF line ends
    ("excel-header.csv", _csv_module("excel", header=True), True),
    ("excel-tab.txt", _csv_module("excel-tab"), False),
    ("unix.csv", _csv_module("unix"), False),  # every value quoted, LF
    ("unix-header.csv", _csv_module("unix", header=True), True),
    ("excel-bom.csv", _csv_module("excel", encoding="utf-8-sig"), False),
    ("excel-bom-header.csv", _csv_module("excel", True, encoding="utf-8-sig"), True),
    ("pandas.csv", lambda p: pd.DataFrame(TABLE, columns=NAMES).to_csv(p, index=False), True),
    # pandas' default column names 0, 1, ..., 9 are a header, not a row of integers
    ("pandas-default.csv", lambda p: pd.DataFrame(TABLE).to_csv(p, index=False), True),
    ("pandas-no-header.csv",
     lambda p: pd.DataFrame(TABLE).to_csv(p, index=False, header=False), False),
    ("savetxt.csv", lambda p: np.savetxt(p, TABLE, delimiter=","), False),
    ("savetxt-header.csv",  # numpy's header is a comment line: "# c0,c1,..."
     lambda p: np.savetxt(p, TABLE, delimiter=",", header=",".join(NAMES)), True),
    ("savetxt-plain-header.csv",
     lambda p: np.savetxt(p, TABLE, delimiter=",", header=",".join(NAMES), comments=""), True),
    ("savetxt.txt", lambda p: np.savetxt(p, TABLE), False),
    ("savetxt-header.txt", lambda p: np.savetxt(p, TABLE, header=" ".join(NAMES)), True),
    ("savetxt-crlf.csv", lambda p: np.savetxt(p, TABLE, delimiter=",", newline="\r\n"), False),
    ("bom.csv", _bytes(lambda b: b"\xef\xbb\xbf" + b), False),
    ("trailing-blank.csv", _bytes(lambda b: b + b"\n"), False),
    ("trailing-blanks-crlf.csv", _bytes(lambda b: b.replace(b"\n", b"\r\n") + b"\r\n\r\n"),
     False),
    ("no-final-newline.csv", _bytes(lambda b: b.rstrip(b"\n")), False),
    ("bom-crlf-no-final-newline.csv",
     _bytes(lambda b: b"\xef\xbb\xbf" + b.replace(b"\n", b"\r\n").rstrip(b"\r\n")), False),
]


@pytest.fixture
def small_blocks(monkeypatch):
    # Many index entries and scan blocks in a small file: lines straddle the blocks.
    monkeypatch.setattr(csvfile, "_CSV_STRIDE", 7)
    monkeypatch.setattr(csvfile, "_SCAN_BYTES", 333)
    monkeypatch.setattr(csvfile, "_PARSE_ROWS", 50)


@pytest.mark.parametrize(("name", "write", "header"), WRITERS, ids=[w[0] for w in WRITERS])
def test_files_real_tools_write_load_every_row_the_same_both_ways(tmp_path, small_blocks,
                                                                   name, write, header):
    path = tmp_path / name
    write(path)
    whole, names = load_matrix(path)
    assert np.array_equal(whole, TABLE)  # all 500 rows, every value as written
    named = header and "default" not in name
    assert names == (NAMES if named else [str(i) for i in range(10)])
    rows = open_rows(path, eta=1.0)
    assert (rows.n, rows.d, rows.header) == (500, 10, header)
    assert np.array_equal(rows.read(0, 500), whole)
    for start, stop in [(0, 1), (6, 8), (7, 14), (123, 377), (499, 500)]:
        assert np.array_equal(rows.read(start, stop), whole[start:stop])


def test_the_header_option_overrides_detection(tmp_path):
    numbers = tmp_path / "a.csv"
    numbers.write_text("1,2\n0.5,0.25\n0.75,1\n")
    assert open_rows(numbers, 9.0).header is False
    given = open_rows(numbers, 9.0, header=True)
    assert (given.n, given.header) == (2, True)
    assert load_matrix(numbers, header=True)[1] == ["1", "2"]
    assert np.array_equal(load_matrix(numbers, header=True)[0], [[0.5, 0.25], [0.75, 1]])
    named = tmp_path / "b.csv"
    named.write_text("x,y\n0.5,0.25\n")
    with pytest.raises(InputError, match=r"b\.csv, line 1: column 1 holds 'x', not a number; "
                                         r".*\(if it is a header line, pass --header\)$"):
        open_rows(named, 9.0, header=False).read(0, 1)


@pytest.mark.parametrize(("lines", "line", "problem"), [
    (["0.1,0.2", "0.3"], 3, "1 value where the first row has 2 (a short row); complete it, "
                            "or remove the line"),
    (["0.1,0.2", "0.3,0.4,0.5"], 3, "3 values where the first row has 2 (a long row); remove "
                                    "the extra values, or remove the line"),
    (["0.1,0.2", "0.3,abc"], 3, "column 2 ('b') holds 'abc', not a number; write a number "
                                "there, or remove the line"),
    (["0.1,0.2", ",0.4"], 3, "column 1 ('a') is empty; fill it in, or remove the line"),
    (["0.1,0.2", "nan,0.4"], 3, "column 1 ('a') holds nan, which cannot be encoded; write a "
                                "finite number there, or remove the line"),
    (["0.1,0.2", "0.3,-inf"], 3, "column 2 ('b') holds -inf, which cannot be encoded"),
    (["0.1,0.2", "", "0.3,0.4"], 3, "a blank line between rows; remove it"),
    (["0.1,0.2", "0.3,0.4", "0.5,9"], 4, "column 2 ('b'): |value| = 9 exceeds the bound eta"),
])
@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_each_malformed_row_is_one_line_naming_it(tmp_path, lines, line, problem, ending):
    path = tmp_path / "d.csv"
    path.write_bytes(b"\xef\xbb\xbf" + ending.join(["a,b", *lines, "0.7,0.8"]).encode())
    n = len(lines) + 1
    whole = (lambda: load_matrix(path)) if "eta" not in problem else (
        lambda: open_rows(path, 1.0).read(0, n))
    chunk = lambda: open_rows(path, 1.0).read(1, n)  # noqa: E731 (a chunk from row 1)
    for call in (whole, chunk):
        with pytest.raises(InputError) as caught:
            call()
        message = str(caught.value)
        assert message.startswith(f"data file {path}, line {line}") and problem in message
        assert "\n" not in message


def test_a_bad_row_far_into_a_large_file_is_named_by_its_line(tmp_path, small_blocks):
    table = np.random.default_rng(8).uniform(-1, 1, size=(3000, 3))
    text = "x,y,z\r\n" + "".join(",".join(repr(float(v)) for v in row) + "\r\n"
                                 for row in table)
    path = tmp_path / "big.csv"
    bad = text.splitlines(keepends=True)
    bad[2718] = "0.5,oops,0.25\r\n"  # line 2719 as an editor numbers it
    path.write_text("".join(bad), newline="")
    rows = open_rows(path, 1.0)  # indexed: every row has three values
    assert np.array_equal(rows.read(0, 2700), table[:2700])
    with pytest.raises(InputError, match=r"line 2719: column 2 \('y'\) holds 'oops'"):
        rows.read(2650, 2800)
    bad[2718] = "0.5,0.25\r\n"
    path.write_text("".join(bad), newline="")
    # A short row is found while indexing, before any row is parsed.
    with pytest.raises(InputError, match=r"line 2719: 2 values where the first row has 3"):
        open_rows(path, 1.0)


@pytest.mark.parametrize(("content", "needle"), [
    (b"a,b\n", "has no data rows; it must be an n x d matrix (its first line is a header)"),
    (b"\n1,2\n", "line 1: a blank line before the first row; remove it"),
    (b"a,b,c\n1,2\n", "line 1: the header names 3 columns but line 2 holds 2 values"),
    ("1,2\n".encode("utf-16"), "is UTF-16 text; save it as UTF-8"),
    (b"1,2\r3,4\r", "bare carriage return (old Mac OS); save it with LF or CRLF"),
    (b"1,2\n3,\xff\n", "line 2: not UTF-8 text; save the file as UTF-8"),
    (b"a,b\n1,2\n3\r4,5\n", "line 3: a bare carriage return inside the line"),
    # Python's float() takes these, the parser does not: named, not a garbled error
    (b"a,b\n1,2\n1_0,4\n", "line 3: column 1 ('a') holds '1_0', not a number"),
    ("a,b\n1,2\n\u0661,4\n".encode(), "line 3: column 1 ('a') holds '\u0661', not a number"),
    # A spreadsheet's no-break space beside a number: named, not "a quoted value spans lines"
    ("a,b\n1,2\n3,\u00a04\n".encode(), "line 3: column 2 ('b') holds '\\xa04', whose "
     "character U+00A0 (no-break space) is not part of a number; delete it"),
    ("1,2\n3,4\u200b\n".encode(), "line 2: column 2 holds '4\\u200b', whose character "
     "U+200B (zero width space) is not part of a number"),
])
def test_unreadable_files_are_one_line(tmp_path, content, needle):
    path = tmp_path / "e.csv"
    path.write_bytes(content)
    with pytest.raises(InputError) as caught:
        load_matrix(path)
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_a_no_break_space_between_values_of_a_text_file_is_named(tmp_path):
    # White space separates a .txt file's values, but only ASCII's: the parser reads a
    # no-break space as part of the value, so "3\u00a04" is no two values.
    path = tmp_path / "f.txt"
    path.write_bytes("1 2\n3 \u00a04\n5 6\n".encode())
    for call in (lambda: load_matrix(path), lambda: open_rows(path, 9.0).read(1, 3)):
        with pytest.raises(InputError) as caught:
            call()
        assert str(caught.value) == (
            f"data file {path}, line 2: column 2 holds '\\xa04', whose character U+00A0 "
            "(no-break space) is not part of a number; delete it (or save the file with "
            "plain ASCII digits), or remove the line")


def test_missing_cells_are_dropped_only_on_request(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("a,b\n0.1,\n0.2,0.3\nnan,1\n")
    assert load_matrix(path, drop_missing=True)[0].tolist() == [[0.2, 0.3]]
    path.write_text("a,b\n0.1,\n0.2\n")  # a short row is no missing value
    with pytest.raises(InputError, match=r"line 3: 1 value where the first row has 2"):
        load_matrix(path, drop_missing=True)
