"""Text matrices (``.csv``, ``.txt``): one reader for the whole file and for a streamed
run's chunks, so that both take the same rows with the same values.

One pass over the file indexes it (the byte offset of every 4096th row) and checks
its shape as it goes: a blank line between rows, or a row with more or fewer values
than the first (where the separator is a comma or a tab and can be counted), is
refused there, before anything is drawn. The values are parsed a range of rows at a
time, by :meth:`CsvRows.read_into`, whether the range is a streamed chunk or the whole
file; a text cell, an empty one, NaN or infinity, or an invisible character such as
a no-break space beside a number is refused there. Every refusal is one line naming
the line as an editor numbers it (1-based, the header line counted) and the fix.

What spreadsheets and editors write loads every row: UTF-8 with or without a
byte-order mark, LF or CRLF line ends, a last line with or without its newline,
blank lines after the last row, and quoted numbers (Python's ``csv`` ``unix``
dialect quotes every field). A header line is detected (:func:`detect_header`)
unless the caller says whether there is one.
"""

from __future__ import annotations

import csv
import io
import math
import re
import unicodedata
from pathlib import Path

import numpy as np

from harness.clients.entries import check_matrix
from harness.errors import InputError

__all__ = ["CsvRows", "detect_header"]

BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
# Every this many rows a CSV's byte offset is kept: n / 4096 offsets find any row.
_CSV_STRIDE = 4096
_SCAN_BYTES = 1 << 24
# Rows parsed at once: reading a whole file holds one such range's text, not the file's.
_PARSE_ROWS = 1 << 16


# The white space the parser skips: ASCII only (str.split and str.strip would also take a
# no-break space, which the parser reads as part of the number).
_SPACE = " \t\n\r\x0b\x0c"
_SPACES = re.compile(f"[{_SPACE}]+")


def _fields(text: str, sep: str | None) -> list[str]:
    """One line's fields: split at ``sep`` (quotes respected), or at runs of white space."""
    if sep is None:
        return [f.strip('"') for f in _SPACES.split(text.strip(_SPACE)) if f]
    try:
        return next(csv.reader([text], delimiter=sep), [])
    except csv.Error:  # a quote left open, a stray control character: not numbers anyway
        return text.split(sep)


# A number as a CSV writes it: Python's float() also takes "1_000" and other scripts'
# digits, which the parser does not.
_NUMBER = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf|infinity)",
                     re.IGNORECASE | re.ASCII)


def _is_number(text: str) -> bool:
    return _NUMBER.fullmatch(text.strip(_SPACE)) is not None


def detect_header(first: list[str], second: list[str] | None, comment: bool) -> bool:
    """Whether a first line with ``first``'s fields is a header rather than a row.

    A header: a line starting with ``#`` (numpy.savetxt's header), a line with a
    field that is text, or one whose first field is empty (pandas' header over its
    index column), or pandas' default names 0, 1, ..., d-1 over rows that are not
    all integers. A line of numbers with an empty cell is a row (with a missing
    value, which the reader then names).
    """
    if comment:
        return True
    cells = [f.strip() for f in first]
    if any(c and not _is_number(c) for c in cells) or (len(cells) > 1 and not cells[0]):
        return True
    indices = [str(i) for i in range(len(cells))]
    return (len(cells) > 1 and cells == indices and second is not None
            and not all(f.strip().lstrip("+-").isdigit() for f in second))


class CsvRows:
    """A ``.csv`` or ``.txt`` matrix read a range of rows at a time (see the module).

    Values are separated by commas if the first two lines hold one, else by tabs if
    they hold one, else by white space. ``header``: True skips the first line, False
    reads it as a row, None detects it; :attr:`header` says what was done and
    :attr:`names` are the columns' names ("0", "1", ... without a header line).
    """

    seed = None

    def __init__(self, path: Path, eta: float, header: bool | None = None) -> None:
        self.path, self.eta = Path(path), eta
        self.detected = header is None  # else the caller said whether line 1 is a header
        with open(self.path, "rb") as fh:
            head = fh.read(4)
            if head.startswith(_UTF16_BOMS):
                raise InputError(f"data file {self.path} is UTF-16 text; save it as UTF-8 "
                                 "(a spreadsheet's \"CSV UTF-8\")")
            start = len(BOM) if head.startswith(BOM) else 0
            fh.seek(start)
            first, second = fh.readline(), fh.readline()
        if b"\r" in first.rstrip(b"\r\n"):
            raise InputError(f"data file {self.path} ends its lines with a bare carriage "
                             "return (old Mac OS); save it with LF or CRLF line ends")
        lines = [_decode(raw) for raw in (first, second)]
        if not lines[0].strip():
            raise self._refuse(1, "a blank line before the first row; remove it")
        both = lines[0] + lines[1]
        self.sep = "," if "," in both else "\t" if "\t" in both else None
        comment = lines[0].lstrip().startswith("#")
        fields = _fields(lines[0].lstrip().lstrip("#") if comment else lines[0], self.sep)
        following = _fields(lines[1], self.sep) if lines[1].strip() else None
        self.header = (detect_header(fields, following, comment) if header is None
                       else header)
        data_line = following if self.header else fields
        if not data_line:
            raise InputError(f"data file {self.path} has no data rows; it must be an n x d "
                             "matrix" + (" (its first line is a header)" if self.header else ""))
        self.d = len(data_line)
        self.first_line = 2 if self.header else 1
        self.names = [str(i) for i in range(self.d)]
        if self.header and not comment:
            if len(fields) != self.d:
                raise InputError(f"data file {self.path}, line 1: the header names "
                                 f"{len(fields)} columns but line 2 holds {self.d} values; "
                                 "name every column, or remove the header line")
            self.names = [f.strip() for f in fields]
        elif self.header and len(fields) == self.d:  # "# a b c" over three columns
            self.names = [f.strip() for f in fields]
        data_start = start + (len(first) if self.header else 0)
        with open(self.path, "rb") as fh:
            self.offsets, self.n = self._index(fh, data_start)
        if self.n == 0:
            raise InputError(f"data file {self.path} has no data rows; it must be an n x d "
                             "matrix")

    # -- what a message names

    def line_of(self, row: int) -> int:
        """The line (1-based, as an editor numbers it) that holds data row ``row``."""
        return self.first_line + row

    def _column(self, c: int) -> str:
        name = self.names[c]
        if name == str(c):
            return f"column {c + 1}"
        return f"column {c + 1} ({name!r})" if name else f"column {c + 1} (unnamed)"

    def _refuse(self, line: int, problem: str) -> InputError:
        if line == 1 and not self.detected and "not a number" in problem:
            problem += " (if it is a header line, pass --header)"
        return InputError(f"data file {self.path}, line {line}: {problem}")

    def problem(self, raw: bytes, missing_ok: bool = False) -> str | None:
        """What is wrong with one line of the file and its fix, or None if it is a row."""
        try:
            text = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            return "not UTF-8 text; save the file as UTF-8 (a spreadsheet's \"CSV UTF-8\")"
        if not text.strip():
            return "a blank line between rows; remove it (every line must be a row)"
        if "\r" in text:
            return ("a bare carriage return inside the line; save the file with LF or CRLF "
                    "line ends")
        fields = _fields(text, self.sep)
        if len(fields) != self.d:
            kind, fix = (("short", "complete it") if len(fields) < self.d
                         else ("long", "remove the extra values"))
            values = f"{len(fields)} value{'s' if len(fields) != 1 else ''}"
            return (f"{values} where the first row has {self.d} (a {kind} "
                    f"row); {fix}, or remove the line")
        for c, field in enumerate(fields):
            cell = field.strip(_SPACE)
            if not cell:
                if missing_ok:
                    continue
                return f"{self._column(c)} is empty; fill it in, or remove the line"
            # A no-break space or another invisible character: shown, the cell would look
            # like a number.
            odd = next((ch for ch in cell if not ch.isascii()
                        and unicodedata.category(ch)[0] in "ZC"), None)
            if odd is not None:
                shown = cell if len(cell) <= 40 else cell[:37] + "..."
                name = unicodedata.name(odd, "unnamed").lower()
                return (f"{self._column(c)} holds {shown!r}, whose character U+{ord(odd):04X} "
                        f"({name}) is not part of a number; delete it (or save the file "
                        "with plain ASCII digits), or remove the line")
            if not _is_number(cell):
                shown = cell if len(cell) <= 40 else cell[:37] + "..."
                return (f"{self._column(c)} holds {shown!r}, not a number; write a number "
                        "there, or remove the line")
            if not math.isfinite(float(cell)) and not missing_ok:
                return (f"{self._column(c)} holds {cell}, which cannot be encoded; write a "
                        "finite number there, or remove the line")
        return None

    # -- the index

    def _index(self, fh, start: int) -> tuple[np.ndarray, int]:
        """Byte offsets of data rows 0, _CSV_STRIDE, ..., and the number of rows; a blank
        line before the last row, or (comma or tab) a row of another width, is refused."""
        offsets: list[int] = []
        rows, base, carry = 0, start, b""
        trailing_blank: int | None = None  # the first of the blank lines seen since a row
        sep_byte = None if self.sep is None else ord(self.sep)
        fh.seek(start)
        while True:
            block = fh.read(_SCAN_BYTES)
            buf = carry + block
            if not buf:
                break
            raw = np.frombuffer(buf, dtype=np.uint8)
            ends = np.flatnonzero(raw == 10)
            if not block:  # end of file: a last line without its newline
                ends = np.append(ends, len(buf))
            if ends.size == 0:  # a line longer than the block: read on
                carry = buf
                continue
            starts = np.concatenate(([0], ends[:-1] + 1))
            lengths = ends - starts
            blank = (lengths == 0) | ((lengths == 1) & (raw[np.maximum(ends - 1, 0)] == 13))
            filled = np.flatnonzero(~blank)
            if filled.size:
                gaps = np.flatnonzero(blank[: filled[-1]])
                if trailing_blank is not None or gaps.size:
                    line = (trailing_blank if trailing_blank is not None
                            else self.line_of(rows + int(gaps[0])))
                    raise self._refuse(line, "a blank line between rows; remove it (every "
                                             "line must be a row)")
            if sep_byte is not None and filled.size:
                # Separators per line: those before its end less those before the last's.
                before = np.searchsorted(np.flatnonzero(raw == sep_byte), ends)
                width = np.diff(before, prepend=0) + 1
                wrong = filled[width[filled] != self.d]
                for i in wrong[:1].tolist():
                    found = self.problem(buf[starts[i]:ends[i]])
                    if found is not None:  # else a quoted separator: the parse decides
                        raise self._refuse(self.line_of(rows + i), found)
            keep = filled[(rows + filled) % _CSV_STRIDE == 0]
            offsets.extend((base + starts[keep]).tolist())
            if filled.size < ends.size and trailing_blank is None:
                trailing_blank = self.line_of(rows + int(filled.size))
            rows += int(filled.size)
            if not block:
                break
            carry = buf[int(ends[-1]) + 1:]
            base += int(ends[-1]) + 1
        return np.asarray(offsets or [start], dtype=np.int64), rows

    # -- the values

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.read_into(start, stop, np.empty((stop - start, self.d)))

    def read_into(self, start: int, stop: int, out: np.ndarray,
                  missing_ok: bool = False) -> np.ndarray:
        """Rows [start, stop) into ``out``'s first rows, each checked (and against eta,
        unless ``missing_ok``, which leaves empty and non-finite cells as NaN)."""
        view = out[: stop - start]
        with open(self.path, "rb") as fh:
            fh.seek(int(self.offsets[start // _CSV_STRIDE]))
            _lines(fh, start % _CSV_STRIDE)  # to row start
            for first in range(start, stop, _PARSE_ROWS):
                last = min(stop, first + _PARSE_ROWS)
                text = _lines(fh, last - first)
                view[first - start: last - start] = self._parse(text, first, last - first,
                                                                missing_ok)
        if not missing_ok:
            check_matrix(view, self.eta, first_row=start, where=self._where)
        return view

    def _where(self, row: int, column: int) -> str:
        return f"data file {self.path}, line {self.line_of(row)}, {self._column(column)}"

    def _parse(self, text: bytes, first: int, count: int, missing_ok: bool) -> np.ndarray:
        """The ``count`` lines of rows first, first + 1, ... as a float64 array; the first
        bad line is refused by name."""
        import pandas as pd

        values = None
        try:
            frame = pd.read_csv(io.BytesIO(text), header=None, dtype=np.float64,
                                sep=r"\s+" if self.sep is None else self.sep,
                                skip_blank_lines=False, encoding="utf-8")
            if frame.shape == (count, self.d):
                values = frame.to_numpy(dtype=np.float64)
        except (ValueError, UnicodeDecodeError):  # pandas' parser errors are ValueErrors
            pass
        if values is not None and np.isfinite(values).all():
            return values
        # pandas pads a short row with NaN, as it reads an empty cell or "NA": only the
        # line itself tells them apart.
        lines = text.split(b"\n")[:count]  # the last row's newline starts no line
        for i, raw in enumerate(lines):
            found = self.problem(raw, missing_ok)
            if found is not None:
                raise self._refuse(self.line_of(first + i), found)
        if values is not None:  # every bad cell was missing, which the caller allows
            return values
        raise InputError(f"cannot read data file {self.path}, lines {self.line_of(first)}.."
                         f"{self.line_of(first + count - 1)}: a quoted value spans lines "
                         "or holds a separator; write one plain number per cell")

    def __getstate__(self) -> dict:
        return self.__dict__  # a path and the offsets: each worker opens the file itself


def _lines(fh, count: int) -> bytes:
    """The next ``count`` lines of ``fh`` (the last may lack its newline), read in blocks
    with their newlines found by numpy; ``fh`` is left after them."""
    if count <= 0:
        return b""
    start, parts, found = fh.tell(), [], 0
    while found < count:
        block = fh.read(1 << 20)
        if not block:
            break
        ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
        if found + ends.size >= count:
            block = block[: int(ends[count - found - 1]) + 1]
        parts.append(block)
        found += ends.size
    text = b"".join(parts)
    fh.seek(start + len(text))
    return text


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").rstrip("\r\n")
