"""Where each noisy share sits in a server's share file.

The layout is public: it depends only on the public sketch, never on data.

``plain``: slot order (component i, then client j), one d-vector per row; what
a straightforward program reads.

``blocked``: built for vector operations. Slots are grouped by accumulator
(a = bucket, plus m for negative signs, so the program never multiplies by a
sign), each accumulator's run is padded with zero rows to whole blocks of R
rows, and K blocks form a chunk stored row-major as (R, K, d). Summing a
chunk's R row-slabs of K*d shares gives all K block sums at once, so a program
needs R-1 vector additions per chunk and one small scatter per block, however
large n is. Padding rows are zero in every server's file; the zero shares of
zero cost nothing in security, since their positions are public.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.clients.sketch import Sketch

__all__ = ["CHUNK_SHARES", "Layout", "accumulator_index"]

# Shares per engine read: large enough that a read's fixed cost (open, header
# check) vanishes, small enough to stay in cache-sized register vectors.
CHUNK_SHARES = 1 << 16
MAX_BLOCK_ROWS = 256


def accumulator_index(sketch: Sketch) -> np.ndarray:
    """(s, n) accumulator of each slot: the bucket, shifted by m for sign -1."""
    return sketch.rows.astype(np.int64) + sketch.m * (sketch.signs < 0)


def choose_block_rows(n: int, m: int, s: int) -> int:
    """Rows per block: a power of two near 1/16 of an accumulator's run.

    Padding costs R/2 rows per accumulator on average, about 3% of the file
    at this ratio; larger blocks mean fewer scatters in the program.
    """
    run = s * n / (2 * m)
    return int(min(MAX_BLOCK_ROWS, 2 ** max(0, math.floor(math.log2(max(run / 16, 1))))))


@dataclass(frozen=True)
class Layout:
    kind: str
    m: int
    d: int
    file_slot: np.ndarray  # (total_rows,) slot i*n + j stored in that row, -1 for padding
    block_rows: int = 1
    chunk_blocks: int = 1
    block_acc: np.ndarray | None = None  # (n_blocks,) accumulator of each block; 2m = padding

    @property
    def total_rows(self) -> int:
        return int(self.file_slot.shape[0])

    @property
    def chunk_rows(self) -> int:
        return self.block_rows * self.chunk_blocks

    @property
    def n_chunks(self) -> int:
        return self.total_rows // self.chunk_rows if self.kind == "blocked" else 1

    @property
    def real_rows(self) -> int:
        return int(np.count_nonzero(self.file_slot >= 0))

    @classmethod
    def plain(cls, sketch: Sketch, d: int) -> Layout:
        return cls("plain", sketch.m, d, np.arange(sketch.s * sketch.n, dtype=np.int64))

    @classmethod
    def blocked(cls, sketch: Sketch, d: int, block_rows: int | None = None,
                chunk_blocks: int | None = None, share_words: int = 1) -> Layout:
        """``share_words``: 8-byte words per share in the protocol's files (2 for
        replicated pairs); a chunk keeps the same bytes, so it stays in cache."""
        m = sketch.m
        R = block_rows or choose_block_rows(sketch.n, m, sketch.s)
        acc = accumulator_index(sketch).ravel()
        n_acc = 2 * m
        counts = np.bincount(acc, minlength=n_acc)
        blocks = -(-counts // R)
        # No chunk larger than the data: small runs would be mostly padding.
        K = chunk_blocks or max(1, min(CHUNK_SHARES // (R * d * share_words),
                                       int(blocks.sum())))
        # numpy's stable sort is a radix sort for small integer types: O(s n)
        small = acc.astype(np.int16 if n_acc < 2**15 else np.int32)
        order = np.argsort(small, kind="stable")
        block_start = np.concatenate(([0], np.cumsum(blocks)[:-1]))
        acc_start = np.concatenate(([0], np.cumsum(counts)[:-1]))
        n_chunks = max(1, -(-int(blocks.sum()) // K))
        block_acc = np.full(n_chunks * K, n_acc, dtype=np.int64)
        block_acc[: int(blocks.sum())] = np.repeat(np.arange(n_acc), blocks)
        sorted_acc = acc[order]
        rank = np.arange(order.size, dtype=np.int64) - acc_start[sorted_acc]
        block = block_start[sorted_acc] + rank // R
        row = rank % R
        position = (block // K) * (R * K) + row * K + block % K
        file_slot = np.full(n_chunks * R * K, -1, dtype=np.int64)
        file_slot[position] = order
        return cls("blocked", m, d, file_slot, R, K, block_acc)

    def check(self, acc_of_slot: np.ndarray) -> None:
        """Raise if this layout does not store every slot once, in its accumulator's blocks."""
        slots = self.file_slot
        real = slots >= 0
        if np.count_nonzero(real) != acc_of_slot.size or np.any(
                np.bincount(slots[real], minlength=acc_of_slot.size) != 1):
            raise RuntimeError("layout bug: the share file does not hold every slot exactly once")
        R, K = self.block_rows, self.chunk_blocks
        position = np.flatnonzero(real)
        block = position // (R * K) * K + position % K
        if self.block_acc is None or np.any(self.block_acc[block] != acc_of_slot[slots[real]]):
            raise RuntimeError("layout bug: a row sits in a block of another accumulator")

    def row_accumulators(self, acc_of_slot: np.ndarray, start: int, stop: int) -> np.ndarray:
        """Accumulator of file rows [start, stop) (2m for padding rows)."""
        slots = self.file_slot[start:stop]
        out = np.full(slots.shape, 2 * self.m, dtype=np.int64)
        real = slots >= 0
        out[real] = acc_of_slot[slots[real]]
        return out
