"""The one loader for data matrices (CSV, text, ``.npy``) and the clients' checks on A.

``ltm run --data``, ``ltm analyze`` and ``ltm utility`` all read their matrices
here, so they accept the same files and word their errors the same way. A file
is checked for its size, type and shape before anything large is read: a
``.npy`` header that promises more than the file holds is refused without
allocating what it claims.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

import numpy as np

from harness.clients.sketch import public_words
from harness.errors import InputError, check_memory

__all__ = ["ArrayRows", "CsvRows", "NpyRows", "Rows", "SUFFIXES", "SyntheticRows", "all_rows",
           "check_matrix", "load_matrix", "open_rows"]

SUFFIXES = (".csv", ".txt", ".npy")
_FORMATS = "a .csv, .txt or .npy file"


def load_matrix(path: str | os.PathLike, *, header: bool | None = None,
                drop_missing: bool = False) -> tuple[np.ndarray, list[str]]:
    """A numeric n x d float64 matrix and its column names.

    ``.csv`` is comma-separated and ``.txt`` separated by commas or white space;
    a header line is detected (a first line of numbers is data) unless
    ``header`` says otherwise, and columns without one are named "0", "1", ...
    Rows with missing or non-finite values are an error unless ``drop_missing``.
    """
    path = Path(path)
    if path.exists() and not path.is_file():
        raise InputError(f"data file {path} is not a regular file; pass {_FORMATS}")
    if not path.is_file():
        raise InputError(f"data file {path} does not exist; pass an existing {_FORMATS}")
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise InputError(f"data file {path}: unknown format {path.suffix!r}; use {_FORMATS}")
    if path.stat().st_size == 0:
        raise InputError(f"data file {path} is empty; it must hold an n x d matrix")
    if suffix == ".npy":
        matrix = _read_npy(path)
        names = [str(i) for i in range(matrix.shape[1])]
    else:
        # Parsed text takes at most about 4 bytes per byte of the file (8 per 2-byte "1,").
        check_memory(4.0 * path.stat().st_size, f"data file {path}",
                     "save it as .npy, or use a machine with more memory")
        matrix, names = _frame_to_matrix(_read_table(path, header), path)
    if matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise InputError(f"data file {path} has shape {matrix.shape}; it must be an n x d "
                         "matrix with at least one row and one column")
    return _handle_missing(matrix, path, drop_missing), names


def _read_npy(path: Path) -> np.ndarray:
    matrix = _map_npy(path)
    # A sparse file can hold what its header claims and still not fit in memory.
    check_memory(8.0 * matrix.size, f"data file {path} (shape {matrix.shape})",
                 "use a smaller matrix, or a machine with more memory")
    return np.array(matrix, dtype=np.float64, order="C")


def _map_npy(path: Path) -> np.ndarray:
    # Mapped, not read: numpy checks the header's shape against the file's size
    # before anything is allocated, so a damaged header cannot exhaust memory.
    try:
        mapped = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"cannot read data file {path}: {npy_error(exc)} (save it with "
                         "numpy.save)") from exc
    if mapped.dtype.kind not in "biuf":
        raise InputError(f"data file {path} holds {mapped.dtype} values; it must be numeric "
                         "(integers or floats)")
    if mapped.ndim not in (1, 2):
        raise InputError(f"data file {path} has shape {mapped.shape}; it must be an n x d "
                         "matrix")
    return mapped[:, None] if mapped.ndim == 1 else mapped


def npy_error(exc: BaseException) -> str:
    """numpy's reason for refusing a .npy file, in one line (numpy's own may take three)."""
    text = str(exc)
    if text.startswith("Header info length"):
        # numpy refuses headers over max_header_size (10000 bytes) as unsafe to parse;
        # a real array's header is a few hundred bytes.
        size = text.split("(", 1)[-1].split(")", 1)[0]
        return (f"its header is {size} bytes, more than numpy parses safely: the file is "
                "damaged or not an array numpy.save wrote")
    return " ".join(text.split())


def _read_table(path: Path, header: bool | None):
    import pandas as pd

    options = ({"sep": ","} if path.suffix.lower() == ".csv"
               else {"sep": r"[,\s]+", "engine": "python"})

    def read(first_line_is_header: bool):
        try:
            return pd.read_csv(path, header=0 if first_line_is_header else None, **options)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            # pandas' parser errors are ValueErrors
            raise InputError(f"cannot read data file {path}: {exc}") from exc

    frame = read(header is not False)
    if header is None and all(_is_number(c) for c in frame.columns):
        # The first line held numbers, not names: it is data.
        frame, header = read(False), False
    if header is False:
        frame.columns = [str(i) for i in range(frame.shape[1])]
    return frame


def _is_number(text: object) -> bool:
    try:
        float(str(text))
    except ValueError:
        return False
    return True


def _frame_to_matrix(frame, path: Path) -> tuple[np.ndarray, list[str]]:
    import pandas as pd

    names = [str(c) for c in frame.columns]
    bad = [name for name, column in zip(names, frame.columns, strict=True)
           if not pd.api.types.is_numeric_dtype(frame[column])
           or pd.api.types.is_complex_dtype(frame[column])]
    if bad:
        raise InputError(f"data file {path} is not a numeric CSV matrix: column(s) "
                         f"{', '.join(bad[:5])} are not numeric; drop or encode them")
    return frame.to_numpy(dtype=np.float64), names


def _handle_missing(matrix: np.ndarray, path: Path, drop_missing: bool) -> np.ndarray:
    finite = np.isfinite(matrix).all(axis=1)
    if finite.all():
        return matrix
    if not drop_missing:
        first = int(np.argmin(finite))
        raise InputError(f"data file {path}: {int((~finite).sum())} row(s) hold missing or "
                         f"non-finite values (the first is row {first}); remove them, or "
                         "pass --drop-missing where the command has it")
    kept = matrix[finite]
    if kept.shape[0] == 0:
        raise InputError(f"data file {path}: every row holds a missing value; nothing is left")
    return kept


# The counter's last word for synthetic data (the sketch uses 0 under the same seed).
DATA_STREAM = 1


class Rows(Protocol):
    """The clients' rows, read a range at a time: nothing proportional to n is held."""

    n: int
    d: int
    eta: float
    @property
    def seed(self) -> int | None:
        """The public seed the rows are a function of (synthetic rows), else None: a
        host given the seed makes any range of them itself."""
        ...

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) as a float64 (stop - start, d) array, checked against eta."""
        ...

    def read_into(self, start: int, stop: int, out: np.ndarray) -> np.ndarray:
        """:meth:`read` into ``out``'s first rows where that saves an allocation (a
        reused buffer); may instead return a view of rows already in memory."""
        ...


class ArrayRows:
    """Rows already in memory (a CSV or text file, or a caller's matrix)."""

    seed = None

    def __init__(self, data: np.ndarray, eta: float) -> None:
        check_matrix(data, eta)
        self.data = data
        self.n, self.d = (int(x) for x in data.shape)
        self.eta = eta

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.data[start:stop]

    def read_into(self, start: int, stop: int, out: np.ndarray) -> np.ndarray:
        return self.data[start:stop]


class NpyRows:
    """A ``.npy`` file, memory-mapped and read (and checked) a range at a time."""

    seed = None

    def __init__(self, path: Path, eta: float) -> None:
        self.path = path
        self.mapped = _map_npy(path)
        self.n, self.d = (int(x) for x in self.mapped.shape)
        self.eta = eta

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.read_into(start, stop, np.empty((stop - start, self.d)))

    def read_into(self, start: int, stop: int, out: np.ndarray) -> np.ndarray:
        view = out[: stop - start]
        np.copyto(view, self.mapped[start:stop], casting="unsafe")
        check_matrix(view, self.eta, first_row=start)
        return view

    def __getstate__(self) -> dict:
        # A worker process maps the file again rather than pickling the mapping.
        return {"path": self.path, "eta": self.eta}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"], state["eta"])  # type: ignore[misc]


class SyntheticRows:
    """Uniform entries in [-eta, eta), a function of (seed, client): generated per chunk.

    Entry (j, c) is the (j d + c)-th 32-bit half of the public data stream under the
    seed, scaled to [-eta, eta) (steps of 2 eta / 2^32, far below the fixed point's
    2^-16), so any range is computed on its own and two runs with one seed share
    their data whatever their chunking.
    """

    def __init__(self, n: int, d: int, eta: float, seed: int) -> None:
        self.n, self.d, self.eta, self.seed = n, d, eta, seed
        self._words: np.ndarray | None = None

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.read_into(start, stop, np.empty((stop - start, self.d)))

    def read_into(self, start: int, stop: int, out: np.ndarray) -> np.ndarray:
        """:meth:`read` into ``out`` (a reused buffer): no allocation per chunk."""
        count = (stop - start) * self.d
        halves = (count + 1) // 2 + (start * self.d) % 2
        if self._words is None or self._words.size < halves + 3:
            self._words = np.empty(halves + 3, dtype=np.uint64)
        # Entry e is the e-th 32-bit half of the data stream: two entries per word.
        first = start * self.d
        words = public_words(self.seed, DATA_STREAM, first // 2, halves, self._words)
        entries = words.view(np.uint32)[first % 2: first % 2 + count]
        view = out[: stop - start]
        flat = view.reshape(-1)
        np.multiply(entries, 2.0 * self.eta / 2.0**32, out=flat)  # [0, 2 eta)
        flat -= self.eta
        return view


def all_rows(rows: Rows) -> np.ndarray:
    """Every row in memory at once, for the paths and analyses that need the matrix."""
    check_memory(8.0 * rows.n * rows.d, f"n={rows.n}, d={rows.d}",
                 "lower --clients or --dim, or use --program local or fast, which stream")
    return np.ascontiguousarray(rows.read(0, rows.n))


# Every this many rows a CSV's byte offset is kept: n / 4096 offsets find any row.
_CSV_STRIDE = 4096
_SCAN_BYTES = 1 << 24


class CsvRows:
    """A ``.csv`` or ``.txt`` read a range of rows at a time: one pass finds every 4096th
    row's byte offset, then a chunk is a seek and a parse of its own rows (checked as it
    is read).

    Numbers separated by commas (a ``.txt`` whose first line has no comma: by white
    space), with an optional header line (a first line that is not all numbers); a
    blank line is refused, naming it, since it would shift the rows.
    """

    seed = None

    def __init__(self, path: Path, eta: float) -> None:
        self.path, self.eta = path, eta
        with open(path, "rb") as fh:
            first = fh.readline()
            line = first.decode("utf-8", "replace").strip()
            self.sep = "," if path.suffix.lower() == ".csv" or "," in line else r"\s+"
            fields = line.split(",") if self.sep == "," else line.split()
            self.header = not all(_is_number(f) for f in fields)
            self.d = len(fields)
            data_start = len(first) if self.header else 0
            self.offsets, self.n = _index_lines(fh, path, data_start)
        if self.n == 0:
            raise InputError(f"data file {path} has no data rows; it must be an n x d matrix")

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.read_into(start, stop, np.empty((stop - start, self.d)))

    def read_into(self, start: int, stop: int, out: np.ndarray) -> np.ndarray:
        import pandas as pd

        with open(self.path, "rb") as fh:
            fh.seek(int(self.offsets[start // _CSV_STRIDE]))
            for _ in range(start % _CSV_STRIDE):
                fh.readline()
            try:
                frame = pd.read_csv(fh, header=None, nrows=stop - start, sep=self.sep,
                                    skip_blank_lines=False)
            except (ValueError, UnicodeDecodeError) as exc:
                raise InputError(f"cannot read data file {self.path} from row {start}: "
                                 f"{exc}") from exc
        if frame.shape != (stop - start, self.d):
            raise InputError(f"data file {self.path}: rows {start}..{stop - 1} have shape "
                             f"{frame.shape}, not ({stop - start}, {self.d}); every row needs "
                             f"{self.d} numbers")
        view = out[: stop - start]
        try:
            view[:] = frame.to_numpy(dtype=np.float64)
        except (ValueError, TypeError) as exc:
            kind = "CSV" if self.sep == "," else "text"
            raise InputError(f"data file {self.path} is not a numeric {kind} matrix in rows "
                             f"{start}..{stop - 1}: {exc}") from exc
        check_matrix(view, self.eta, first_row=start)
        return view

    def __getstate__(self) -> dict:
        return self.__dict__  # a path and the offsets: each worker opens the file itself


def _index_lines(fh, path: Path, offset: int) -> tuple[np.ndarray, int]:
    """Byte offsets of data rows 0, _CSV_STRIDE, 2 _CSV_STRIDE, ... from ``offset``, and
    the number of rows (a last line without a newline counts)."""
    kept, count, position, line_start = [offset], 0, offset, offset
    fh.seek(offset)
    while block := fh.read(_SCAN_BYTES):
        ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10) + position
        starts = np.concatenate(([line_start], ends[:-1] + 1))
        empty = np.flatnonzero(ends == starts)
        if empty.size:
            raise InputError(f"data file {path} has a blank line (data row "
                             f"{count + int(empty[0])}); remove it: every line must be a row")
        index = np.arange(count, count + ends.size)
        kept.extend((ends[(index + 1) % _CSV_STRIDE == 0] + 1).tolist())
        count += ends.size
        if ends.size:
            line_start = int(ends[-1]) + 1
        position += len(block)
    if position > line_start:
        count += 1
    return np.asarray(kept[: max(1, -(-count // _CSV_STRIDE))], dtype=np.int64), count


def open_rows(path: str | os.PathLike, eta: float) -> Rows:
    """``--data FILE`` as rows to stream: a ``.npy`` is mapped and a ``.csv`` or ``.txt``
    indexed, and all are read in chunks (any size)."""
    path = Path(path)
    if path.suffix.lower() == ".npy" and path.is_file() and path.stat().st_size:
        rows = NpyRows(path, eta)
        if rows.n == 0 or rows.d == 0:
            raise InputError(f"data file {path} has shape {rows.mapped.shape}; it must be an "
                             "n x d matrix with at least one row and one column")
        return rows
    if path.suffix.lower() in (".csv", ".txt") and path.is_file() and path.stat().st_size:
        return CsvRows(path, eta)
    return ArrayRows(load_matrix(path)[0], eta)


def check_matrix(data: np.ndarray, eta: float, first_row: int = 0) -> None:
    """Every entry finite and within eta; ``first_row`` numbers a chunk's rows in the file."""
    finite = np.isfinite(data)
    if not finite.all():
        r, c = np.argwhere(~finite)[0]
        r += first_row
        raise InputError(f"data holds a non-finite value at row {r}, column {c}; "
                         "clean the data (NaN and infinity cannot be encoded)")
    worst = np.abs(data)
    if worst.size and float(worst.max()) > eta:
        r, c = np.unravel_index(int(np.argmax(worst)), worst.shape)
        raise InputError(f"|A[{r + first_row}, {c}]| = {worst[r, c]:g} exceeds the bound "
                         f"eta = {eta:g} the noise is calibrated for; pass --eta at least that "
                         "large or scale the data")
