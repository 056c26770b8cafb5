"""The blocked share file made a chunk of clients at a time, for streamed ``fast`` runs.

:class:`~harness.clients.layout.Layout` groups all n * s slots at once, which
holds an O(n) array. Here the same file shape (chunks of R row-slabs of K
blocks x d shares, what ``fast.mpc.j2`` reads) is made per chunk of clients:
within a chunk the slots are grouped by accumulator (the grouping the stream
already uses), each accumulator's run is padded with zero rows to whole blocks
of R rows, and the chunk's blocks are appended to the file's. Every K blocks
make an engine chunk, written transposed as (R, K, d); the last is completed
with padding blocks (accumulator 2m). Memory is one engine chunk plus one
client chunk's blocks, whatever n is.

R comes from the client chunk's size, not n: a client chunk of c clients fills
an accumulator with about c * s / (2m) rows, and padding costs R/2 rows per
accumulator and chunk, so R near 1/16 of that keeps padding near 3%. The
public schedule (each block's accumulator) is written as a stream beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from harness.clients.layout import CHUNK_SHARES, choose_block_rows

__all__ = ["BlockShape", "BlockWriter", "ScheduleWriter", "chunk_blocks"]

# The schedule's first line, the number of engine chunks, is known only at the end:
# it is written as this many spaces first and filled in (C++ streams skip the blanks).
_COUNT_WIDTH = 20


@dataclass(frozen=True)
class BlockShape:
    """R rows per block and K blocks per engine chunk, fixed before the stream starts."""

    block_rows: int
    chunk_blocks: int

    @classmethod
    def choose(cls, clients_per_chunk: int, m: int, s: int, d: int,
               share_words: int) -> BlockShape:
        """From the client chunk's size alone (no global information)."""
        R = choose_block_rows(clients_per_chunk, m, s)
        # A client chunk's blocks, at most: a bound, so a tiny run is not mostly padding.
        most = -(-clients_per_chunk * s // R) + 2 * m
        K = max(1, min(CHUNK_SHARES // (R * d * share_words), most))
        return cls(R, K)


def chunk_blocks(counts: np.ndarray, R: int) -> tuple[np.ndarray, np.ndarray]:
    """A client chunk's blocks: each block's accumulator, and each grouped slot's row.

    ``counts`` are the chunk's slots per accumulator (in grouped order, as
    :func:`~harness.clients.stream.group_slots` gives them). Grouped slot t of
    accumulator a goes to row ``t + (padded start of a) - (start of a)`` of the
    chunk's blocks, laid end to end as (blocks * R) rows.
    """
    blocks = -(-counts // R)
    block_acc = np.repeat(np.arange(counts.size, dtype=np.int64), blocks)
    start = np.cumsum(counts) - counts
    padded_start = (np.cumsum(blocks) - blocks) * R
    rows = np.arange(int(counts.sum()), dtype=np.int64)
    rows += np.repeat(padded_start - start, counts)
    return block_acc, rows


class BlockWriter:
    """Blocks of (R, d * words) words in, engine chunks of (R, K, d * words) out to ``fh``."""

    def __init__(self, fh: BinaryIO, shape: BlockShape, width: int) -> None:
        self.fh = fh
        self.R, self.K, self.width = shape.block_rows, shape.chunk_blocks, width
        self._pending = np.zeros((self.K, self.R, width), dtype=np.uint64)
        self._held = 0
        self.chunks = 0  # engine chunks written

    def add(self, blocks: np.ndarray) -> None:
        """Append blocks (count, R, width); written whenever K are held."""
        taken = 0
        while taken < blocks.shape[0]:
            step = min(self.K - self._held, blocks.shape[0] - taken)
            self._pending[self._held: self._held + step] = blocks[taken: taken + step]
            self._held += step
            taken += step
            if self._held == self.K:
                self._flush()

    def _flush(self) -> None:
        self.fh.write(np.ascontiguousarray(self._pending.transpose(1, 0, 2)).data.cast("B"))
        self._pending[:] = 0
        self._held = 0
        self.chunks += 1

    def finish(self) -> int:
        """Write the last engine chunk, padded with zero blocks; the number of chunks."""
        if self._held or not self.chunks:
            self._flush()
        return self.chunks


class ScheduleWriter:
    """The program's public input as a stream: engine chunks, then each block's accumulator."""

    def __init__(self, fh: BinaryIO, shape: BlockShape, m: int) -> None:
        self.fh, self.K, self.padding = fh, shape.chunk_blocks, 2 * m
        self.blocks = 0
        fh.write(b" " * _COUNT_WIDTH + b"\n")

    def add(self, block_acc: np.ndarray) -> None:
        if block_acc.size:
            # Plain decimals: accumulators are small non-negative integers.
            self.fh.write(" ".join(map(str, block_acc.tolist())).encode() + b"\n")
        self.blocks += block_acc.size

    def finish(self) -> int:
        """Pad to whole engine chunks and fill in their count; the number of chunks."""
        chunks = max(1, -(-self.blocks // self.K))
        pad = chunks * self.K - self.blocks
        if pad:
            self.fh.write((f"{self.padding} " * pad).encode() + b"\n")
        self.fh.flush()
        self.fh.seek(0)
        self.fh.write(str(chunks).rjust(_COUNT_WIDTH).encode())
        return chunks
