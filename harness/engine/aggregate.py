"""A server's sum of its own shares, read from a blocked share file, and the disk's limit.

T is linear, so each server can apply it to its additive shares alone: the
m x d results are additive shares of T, and nothing is revealed until they are
opened together. Done here with numpy, streaming the blocked share file in
chunks into one reused buffer.

Replicated shares are summed word by word: a server's pairs (a_i, a_{i-1})
summed give (sum a_i, sum a_{i-1}), which is the replicated sharing of the sum
that its neighbours' sums match, so a malicious protocol's open still checks
every server's aggregate against the others'.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from harness.clients import ADDITIVE, FORMATS, Layout, ShareFormat

__all__ = ["aggregate_shares", "read_and_sum"]

_BUFFER_SHARES = 1 << 21


def aggregate_shares(source: Path, layout: Layout, fmt: ShareFormat = ADDITIVE) -> np.ndarray:
    """The server's aggregate shares of T, (m, d) or (m, d, words) uint64."""
    return _sum(source, _plan(layout, fmt))


def _plan(layout: Layout, fmt: ShareFormat = ADDITIVE) -> dict:
    """What aggregation needs of the (public) layout; small, unlike ``file_slot``."""
    if layout.kind != "blocked":
        raise ValueError("local aggregation reads the blocked layout")
    assert layout.block_acc is not None
    return {"block_rows": layout.block_rows, "chunk_blocks": layout.chunk_blocks,
            "d": layout.d, "m": layout.m, "n_chunks": layout.n_chunks,
            "block_acc": layout.block_acc, "format": fmt.name}


def _sum(source: Path, plan: dict) -> np.ndarray:
    fmt = FORMATS[plan.get("format", ADDITIVE.name)]
    R, K, m = plan["block_rows"], plan["chunk_blocks"], plan["m"]
    n_chunks, block_acc = plan["n_chunks"], plan["block_acc"]
    # A share's words are adjacent in the file: summing word by word is a sum over d * words.
    d = plan["d"] * fmt.words
    chunk_shares = R * K * d
    per_read = max(1, _BUFFER_SHARES // chunk_shares)
    buffer = np.empty(per_read * chunk_shares, dtype=np.uint64)
    acc = np.zeros((2 * m + 1, d), dtype=np.uint64)
    block = 0
    with open(source, "rb", buffering=0) as fh:
        if fh.read(len(fmt.header)) != fmt.header:
            raise ValueError(f"{source} is not a {fmt.descriptor.decode()} share file")
        for first in range(0, n_chunks, per_read):
            chunks = min(per_read, n_chunks - first)
            view = buffer[: chunks * chunk_shares]
            _read_exactly(fh, view)
            sums = view.reshape(chunks, R, K * d).sum(axis=1, dtype=np.uint64)
            blocks = sums.reshape(chunks * K, d)
            np.add.at(acc, block_acc[block:block + chunks * K], blocks)
            block += chunks * K
    out = acc[:m] - acc[m:2 * m]
    return out.reshape(m, plan["d"], fmt.words) if fmt.words > 1 else out


def read_and_sum(source: Path, fmt: ShareFormat = ADDITIVE) -> tuple[float, np.uint64]:
    """The I/O limit: stream a share file through numpy and sum it, nothing else.

    Same buffer and reads as :func:`aggregate_shares`, so the difference
    between the two is the aggregation's own work.
    """
    started = time.perf_counter()
    buffer = np.empty(_BUFFER_SHARES, dtype=np.uint64)
    total = np.uint64(0)
    with open(source, "rb", buffering=0) as fh:
        fh.seek(len(fmt.header))
        raw = buffer.data.cast("B")
        while True:
            got = fh.readinto(raw)
            if not got:
                break
            total += buffer[: got // 8].sum(dtype=np.uint64)
    return time.perf_counter() - started, total


def _read_exactly(fh, view: np.ndarray) -> None:
    raw = view.data.cast("B")
    got = 0
    while got < len(raw):
        n = fh.readinto(raw[got:])
        if not n:
            raise ValueError("share file ended early")
        got += n
