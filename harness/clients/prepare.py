"""Client side: the share files and input text MP-SPDZ reads, and what preparing gave.

A server's share file is its protocol's header then its 8-byte words
(:func:`write_share_file`, :func:`read_share_file`); an input text file is
whitespace-separated decimal integers (:func:`format_integers`). The streamed
preparation (:mod:`harness.stream`) returns a :class:`Prepared`: the plaintext result
sum_i S_i enc(X_i) mod 2^64 the revealed sketch is checked against, its bound,
and the upload each server received.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.clients.sharing import ADDITIVE, ShareFormat
from harness.fileio import open_private

__all__ = ["SHARE_HEADER", "Prepared", "format_integers", "read_share_file",
           "tamper_share_file", "tamper_text_file", "write_share_file"]

# Persistence/Transactions-P<i>.data of semi2k: header length, descriptor, then 8-byte shares.
SHARE_HEADER = ADDITIVE.header
# What --tamper adds: any nonzero change of one word breaks the sum; 5 is one.
TAMPER_DELTA = 5


def write_share_file(path: Path, shares: np.ndarray, fmt: ShareFormat = ADDITIVE) -> None:
    with open_private(path) as fh:
        fh.write(fmt.header)
        fh.write(np.ascontiguousarray(shares, dtype="<u8").tobytes())


def read_share_file(path: Path, fmt: ShareFormat = ADDITIVE) -> np.ndarray:
    """The file's words (``fmt.words`` per share, in file order) as uint64."""
    with open(path, "rb") as fh:
        if fh.read(len(fmt.header)) != fmt.header:
            raise ValueError(f"{path} is not a {fmt.descriptor.decode()} share file")
        return np.fromfile(fh, dtype="<u8")


def tamper_share_file(path: Path, fmt: ShareFormat, word: int) -> None:
    """Add :data:`TAMPER_DELTA` to the ``word``-th word after the header (a test aid)."""
    with open(path, "r+b") as fh:
        fh.seek(len(fmt.header) + 8 * word)
        raw = fh.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path} has no word {word} to tamper with")
        value = (int.from_bytes(raw, "little") + TAMPER_DELTA) % 2**64
        fh.seek(len(fmt.header) + 8 * word)
        fh.write(value.to_bytes(8, "little"))


def tamper_text_file(path: Path) -> None:
    """Add :data:`TAMPER_DELTA` to the first number of an MP-SPDZ input text file."""
    tokens = path.read_bytes().split(b" ", 1)
    first = int(tokens[0]) + TAMPER_DELTA
    path.write_bytes(b" ".join([str(first).encode(), *tokens[1:]]))


def format_integers(values: np.ndarray) -> bytes:
    """``values`` as whitespace-separated decimal text, formatted with numpy.

    Every number gets a sign and the same number of digits (``+000123``, which
    C++ streams read as 123): fixed width turns formatting into a few vector
    operations, about ten times faster than ``str()`` per number.
    """
    values = np.asarray(values, dtype=np.int64)
    if values.size == 0:
        return b"\n"
    # |int64 min| does not fit in int64; the uint64 view of the negation does.
    magnitude = np.where(values < 0, -values.view(np.uint64), values.view(np.uint64))
    width = len(str(int(magnitude.max())))
    text = np.empty((values.size, width + 2), dtype=np.uint8)
    text[:, 0] = np.where(values < 0, ord("-"), ord("+"))
    # Up to 9 digits fit in uint32, whose divisions cost half; one divmod per digit.
    rest = magnitude.astype(np.uint32) if width <= 9 else magnitude
    digit = np.empty_like(rest)
    for k in range(width, 0, -1):
        np.divmod(rest, 10, out=(rest, digit))
        np.add(digit, ord("0"), out=text[:, k], casting="unsafe")
    text[:, -1] = ord(" ")
    text[-1, -1] = ord("\n")
    return text.tobytes()


@dataclass
class Prepared:
    expected: np.ndarray  # (m, d) uint64
    abs_sums: np.ndarray  # (m, d) float64 bound on |T| in encoded units
    upload_bytes: list[int]
    seconds: float
    stats: dict = field(default_factory=dict)
    # A streamed run's stages (clients, servers, overlap), reported beside the timings.
    stages: dict = field(default_factory=dict)
    # A streamed run's share-file shape, when its servers wrote blocked files.
    layout: dict = field(default_factory=dict)
    # Each server's own time on its stream (``local``: summing its shares as they
    # arrived), when timed here; None when no server streams here or its host reports it.
    servers_s: list[float] | None = None
    # Per server {"upload_s", "upload_bytes_sent"} when the stream crossed a network and
    # was timed here (else None: written in place, or the hosts report it in their stats).
    upload: dict[int, dict] | None = None
