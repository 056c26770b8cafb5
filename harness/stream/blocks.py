"""The blocked share file made a chunk of clients at a time, for streamed ``fast`` runs.

Grouping all n * s slots at once, in one layout of the whole file,
holds an O(n) array. Here the same file shape (chunks of R row-slabs of K
blocks x d shares, what ``fast.mpc.j2`` reads) is made per chunk of clients:
within a chunk the slots are grouped by accumulator (the grouping the stream
already uses) and cut into blocks of R rows. An accumulator's rows that do not
fill a block are carried to the next chunk (at most R - 1 rows per
accumulator), so blocks are padded only once, at the end: padding is what the
global layout pays (R/2 rows per accumulator on average), not that per chunk.
Every K blocks make an engine chunk, (R, K, d), into which each block is copied
in its place (:class:`BlockedFile`); the last is completed with padding blocks
(accumulator 2m). Memory is the carry and one engine chunk, whatever n is.

R follows the global rule (:func:`~harness.clients.layout.choose_block_rows`,
from n, m and s alone), capped so the carry stays small. The public schedule
(each block's accumulator) is written as a stream beside the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, Protocol

import numpy as np

from harness.clients import CHUNK_SHARES, choose_block_rows, format_integers

if TYPE_CHECKING:
    from harness.stream.plan import StreamPlan

__all__ = ["BlockShape", "BlockedFile", "ChunkFile", "FileShape", "ScheduleWriter"]

# The schedule's first line, the number of engine chunks, is known only at the end:
# it is written as this many spaces first and filled in (C++ streams skip the blanks).
_COUNT_WIDTH = 20
# Bytes of rows carried between chunks, at most: 2m accumulators x (R - 1) rows.
_CARRY_BYTES = 1 << 25


class ChunkFile(Protocol):
    """A server's share file (and, for one server, the public schedule) made as chunks come."""

    def add(self, counts: np.ndarray, shares: np.ndarray) -> None:
        """Chunk after chunk in the plan's order: its shares ``(d, slots, words)``,
        grouped by accumulator with ``counts`` slots per accumulator."""

    def finish(self) -> dict:
        """Write what is held; the file's shape (``file_rows``, ``padding_rows``, ...)."""


class FileShape(Protocol):
    """How the servers of a streamed run lay out their share files: blocked per chunk of
    clients (:class:`BlockShape`, ``fast``) or one row per slot
    (:class:`~harness.stream.slots.SlotShape`, ``reference``)."""

    def open(self, fh: BinaryIO, schedule: BinaryIO | None, plan: StreamPlan, *,
             text: bool = False) -> ChunkFile:
        """The writer into ``fh`` (its header written) and, if given, ``schedule``; with
        ``text``, of one value per slot and column as MP-SPDZ input text (the data
        owner's), not of binary shares."""

    def describe(self) -> dict:
        """The layout's public description, for result.json."""


@dataclass(frozen=True)
class BlockShape:
    """R rows per block and K blocks per engine chunk, fixed before the stream starts."""

    block_rows: int
    chunk_blocks: int

    def open(self, fh: BinaryIO, schedule: BinaryIO | None, plan: StreamPlan, *,
             text: bool = False) -> ChunkFile:
        return BlockedFile(fh, schedule, self, plan, text=text)

    def describe(self) -> dict:
        return {"kind": "blocked-per-chunk", "block_rows": self.block_rows,
                "chunk_blocks": self.chunk_blocks}

    @classmethod
    def choose(cls, n: int, m: int, s: int, d: int, share_words: int) -> BlockShape:
        """From n, m, s and the share's size alone: nothing drawn is needed."""
        R = choose_block_rows(n, m, s)
        while R > 1 and 2 * m * R * d * share_words * 8 > _CARRY_BYTES:
            R //= 2
        # At most every block of the run: a tiny run is not mostly padding.
        most = -(-n * s // R) + 2 * m
        K = max(1, min(CHUNK_SHARES // (R * d * share_words), most))
        return cls(R, K)


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


class BlockedFile:
    """The ``fast`` program's share file, made with one copy of each share.

    A chunk's rows are grouped by accumulator and arrive column-major,
    ``(d, slots, words)``; a file row is one slot's d shares. Each accumulator's run
    is copied, transposed, straight into its blocks' places in the engine chunk
    being built, ``(R, K, d)``: whole blocks from the run itself (several at once
    where they are neighbours there), the first after the rows carried from earlier
    chunks, and what is short of a block into the carry (at most R - 1 rows per
    accumulator). A share is moved as one opaque element of ``8 * words`` bytes,
    so a transposing copy moves whole shares, and an engine chunk is written as
    soon as its K blocks are in place. Blocks are padded only once, at the end.
    """

    def __init__(self, fh: BinaryIO, schedule: BinaryIO | None, shape: BlockShape,
                 plan: StreamPlan, text: bool = False) -> None:
        self.fh, self.text = fh, text
        self.shape, self.slots, self.m = shape, plan.n * plan.s, plan.m
        self.R, self.K = shape.block_rows, shape.chunk_blocks
        words = 1 if text else plan.fmt.words  # a text row: one value per column
        self.share = np.dtype((np.void, 8 * words))
        self.zero = np.zeros((), dtype=self.share)
        self.carry = np.zeros((2 * plan.m, self.R, plan.d), dtype=self.share)
        self.held = [0] * (2 * plan.m)
        self.building = np.empty((self.R, self.K, plan.d), dtype=self.share)
        self.filled = 0  # blocks of ``building`` in place
        self.chunks = 0  # engine chunks written
        self.schedule = ScheduleWriter(schedule, shape, plan.m) if schedule else None

    def add(self, counts: np.ndarray, shares: np.ndarray) -> None:
        R, K, carry, held = self.R, self.K, self.carry, self.held
        d = shares.shape[0]
        src = np.ascontiguousarray(shares).view(self.share).reshape(d, -1)
        made: list[int] = []  # each completed block's accumulator, in file order
        first = 0
        for a, c in enumerate(counts.tolist()):
            if not c:
                continue
            run = src[:, first:first + c]  # (d, c): this accumulator's rows, by column
            first += c
            h = held[a]
            if h + c < R:
                carry[a, h:h + c] = run.T
                held[a] = h + c
                continue
            p = 0
            if h:  # the carried rows, then the run's first, make one block
                p = R - h
                block = self.building[:, self.filled]
                block[:h] = carry[a, :h]
                block[h:] = run[:, :p].T
                made.append(a)
                self._placed(1)
            full = (c - p) // R
            while full:
                j = min(full, K - self.filled)
                # (d, j * R) -> (R, j, d): blocks j side by side in the engine chunk.
                self.building[:, self.filled:self.filled + j] = \
                    run[:, p:p + j * R].reshape(d, j, R).transpose(2, 1, 0)
                made.extend([a] * j)
                self._placed(j)
                p += j * R
                full -= j
            rest = c - p
            carry[a, :rest] = run[:, p:].T
            held[a] = rest
        if self.schedule is not None:
            self.schedule.add(np.array(made, dtype=np.int64))

    def _placed(self, blocks: int) -> None:
        self.filled += blocks
        if self.filled == self.K:
            self._write()

    def _write(self) -> None:
        words = self.building.view(np.uint64)
        if self.text:
            self.fh.write(format_integers(words.view(np.int64).ravel()))
        else:
            self.fh.write(words.data.cast("B"))
        self.chunks += 1
        self.filled = 0

    def finish(self) -> dict:
        """The carried rows as one last block per accumulator, padded with zero rows;
        the last engine chunk completed with zero blocks (accumulator 2m)."""
        made = []
        for a, h in enumerate(self.held):
            if h:
                block = self.building[:, self.filled]
                block[:h] = self.carry[a, :h]
                block[h:] = self.zero
                made.append(a)
                self._placed(1)
                self.held[a] = 0
        if self.schedule is not None:
            self.schedule.add(np.array(made, dtype=np.int64))
        if self.filled or not self.chunks:
            self.building[:, self.filled:] = self.zero
            self._write()
        chunks = self.chunks
        if self.schedule is not None and self.schedule.finish() != chunks:
            raise RuntimeError("layout bug: the schedule and the share file disagree")
        file_rows = chunks * self.R * self.K
        return {"engine_chunks": chunks, "file_rows": file_rows,
                "padding_rows": file_rows - self.slots}
