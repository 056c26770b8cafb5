"""The one loader for data matrices (CSV, text, ``.npy``) and the clients' checks on A.

``ltm run --data``, ``ltm analyze`` and ``ltm utility`` all read their matrices
here, so they accept the same files and word their errors the same way. A file
is checked for its size, type and shape before anything large is read: a
``.npy`` header that promises more than the file holds is refused without
allocating what it claims.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Protocol

import numpy as np

from harness.clients.csvfile import CsvRows
from harness.clients.entries import check_matrix
from harness.clients.sketch import public_words
from harness.errors import InputError, check_memory

__all__ = ["ArrayRows", "CsvRows", "NpyRows", "Rows", "SUFFIXES", "SyntheticRows", "all_rows",
           "check_matrix", "load_matrix", "open_rows"]

SUFFIXES = (".csv", ".txt", ".npy")
_KINDS = ".csv, .txt or .npy file"
_FORMATS = f"a {_KINDS}"


def load_matrix(path: str | os.PathLike, *, header: bool | None = None,
                drop_missing: bool = False) -> tuple[np.ndarray, list[str]]:
    """A numeric n x d float64 matrix and its column names.

    ``.csv`` and ``.txt`` are read by :class:`~harness.clients.csvfile.CsvRows`
    (separated by commas, tabs or white space; a header line detected unless
    ``header`` says whether there is one; columns without one are named "0", "1",
    ...). Rows with empty or non-finite cells are an error unless ``drop_missing``
    drops them; a short, long or text row always is.
    """
    path = Path(path)
    if path.exists() and not path.is_file():
        raise InputError(f"data file {path} is not a regular file; pass {_FORMATS}")
    if not path.is_file():
        raise InputError(f"data file {path} does not exist; pass an existing {_KINDS}")
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise InputError(f"data file {path}: unknown format {path.suffix!r}; use {_FORMATS}")
    if path.stat().st_size == 0:
        raise InputError(f"data file {path} is empty; it must hold an n x d matrix")
    if suffix == ".npy":
        matrix = _read_npy(path)
        names = [str(i) for i in range(matrix.shape[1])]
    else:
        # The streamed reader's own code, over every row: both read the same values.
        rows = CsvRows(path, math.inf, header)
        check_memory(8.0 * rows.n * rows.d, f"data file {path} ({rows.n} x {rows.d})",
                     "save it as .npy, or use a machine with more memory")
        matrix = rows.read_into(0, rows.n, np.empty((rows.n, rows.d)), missing_ok=drop_missing)
        names = rows.names
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
        reason = npy_error(exc)
        fix = ("convert it to numbers (array.astype(float)) and save that with numpy.save"
               if reason.startswith(_OBJECTS)
               else "save the matrix with numpy.save, or as a .csv file")
        raise InputError(f"cannot read data file {path}: {reason}; {fix}") from exc
    if mapped.dtype.kind not in "biuf":
        raise InputError(f"data file {path} holds {mapped.dtype} values; it must be numeric "
                         "(integers or floats)")
    if mapped.ndim not in (1, 2):
        raise InputError(f"data file {path} has shape {mapped.shape}; it must be an n x d "
                         "matrix")
    return mapped[:, None] if mapped.ndim == 1 else mapped


_OBJECTS = "it holds Python objects"


def npy_error(exc: BaseException) -> str:
    """numpy's reason for refusing a .npy file, in one line (numpy's own may take three),
    in words that say what is wrong with the file rather than how numpy could be told to
    load it anyway."""
    text = str(exc)
    if "pickled" in text:
        # No .npy header: numpy then takes the file for a pickle, whatever it is.
        return ("it is not a numpy array file (it lacks the header numpy.save writes: a "
                "pickle, or another format renamed .npy)")
    if "Python objects" in text or "Object arrays" in text:
        return f"{_OBJECTS} (an object array), not numbers"
    if text.startswith("Header info length"):
        # numpy refuses headers over max_header_size (10000 bytes) as unsafe to parse;
        # a real array's header is a few hundred bytes.
        size = text.split("(", 1)[-1].split(")", 1)[0]
        return (f"its header is {size} bytes, more than numpy parses safely: the file is "
                "damaged or not an array numpy.save wrote")
    return " ".join(text.split())


def _handle_missing(matrix: np.ndarray, path: Path, drop_missing: bool) -> np.ndarray:
    finite = np.isfinite(matrix).all(axis=1)
    if finite.all():
        return matrix
    if not drop_missing:  # a .npy file (a text file's reader names the line)
        first = int(np.argmin(finite))
        raise InputError(f"data file {path}: {int((~finite).sum())} row(s) hold missing or "
                         f"non-finite values (the first is row {first}); remove them")
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


def open_rows(path: str | os.PathLike, eta: float, header: bool | None = None) -> Rows:
    """``--data FILE`` as rows to stream: a ``.npy`` is mapped and a ``.csv`` or ``.txt``
    indexed (``header`` as :func:`load_matrix`'s), and all are read in chunks (any size)."""
    path = Path(path)
    if path.suffix.lower() == ".npy" and path.is_file() and path.stat().st_size:
        rows = NpyRows(path, eta)
        if rows.n == 0 or rows.d == 0:
            raise InputError(f"data file {path} has shape {rows.mapped.shape}; it must be an "
                             "n x d matrix with at least one row and one column")
        return rows
    if path.suffix.lower() in (".csv", ".txt") and path.is_file() and path.stat().st_size:
        return CsvRows(path, eta, header)
    return ArrayRows(load_matrix(path, header=header)[0], eta)
