"""The blocked share file made a chunk of clients at a time, for streamed ``fast`` runs.

Grouping all n * s slots at once, in one layout of the whole file,
holds an O(n) array. Here the same file shape (chunks of R row-slabs of K
blocks x d shares, what ``fast.mpc.j2`` reads) is made per chunk of clients:
within a chunk the slots are grouped by accumulator (the grouping the stream
already uses) and cut into blocks of R rows. An accumulator's rows that do not
fill a block are carried to the next chunk (:class:`RunBlocks`, at most R - 1
rows per accumulator), so blocks are padded only once, at the end: padding is
what the global layout pays (R/2 rows per accumulator on average), not that
per chunk. Every K blocks make an engine chunk, written transposed as
(R, K, d); the last is completed with padding blocks (accumulator 2m). Memory
is the carry, one engine chunk and one client chunk's blocks, whatever n is.

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
    from harness.stream.produce import StreamPlan

__all__ = ["BlockShape", "BlockWriter", "BlockedFile", "ChunkFile", "FileShape", "RunBlocks",
           "ScheduleWriter"]

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


class RunBlocks:
    """Grouped rows in, whole blocks of one accumulator each out; the rest carried.

    ``add`` takes a chunk's rows grouped by accumulator (``counts`` per
    accumulator, as :func:`~harness.stream.produce.group_slots` gives them) and
    returns the blocks they complete, each after the carried rows of its
    accumulator; ``finish`` pads what is carried to one last block per accumulator.
    """

    def __init__(self, accumulators: int, block_rows: int, row: tuple[int, ...]) -> None:
        self.R = block_rows
        self.carry = np.zeros((accumulators, block_rows, *row), dtype=np.uint64)
        self.held = np.zeros(accumulators, dtype=np.int64)

    def add(self, counts: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each block's accumulator, and the blocks, ``(count, R, *row)``, completed by ``rows``.

        ``rows`` may be a strided view (a transpose): each accumulator's run is
        copied as one slice, no row is gathered one by one.
        """
        R, held, carry = self.R, self.held, self.carry
        total = held + counts
        full = total // R
        block_acc = np.repeat(np.arange(counts.size, dtype=np.int64), full)
        # Every row of a full block is written below: carried rows, then new ones.
        out = np.empty((block_acc.size * R, *carry.shape[2:]), dtype=np.uint64)
        starts = (np.cumsum(counts) - counts).tolist()
        out_starts = ((np.cumsum(full) - full) * R).tolist()
        h_all, c_all, f_all = held.tolist(), counts.tolist(), full.tolist()
        for a in np.flatnonzero(counts).tolist():  # at most 2m short slices
            h, c, f, first = h_all[a], c_all[a], f_all[a], starts[a]
            if not f:
                carry[a, h:h + c] = rows[first:first + c]
                continue
            o = out_starts[a]
            out[o:o + h] = carry[a, :h]
            take = f * R - h
            out[o + h:o + f * R] = rows[first:first + take]
            carry[a, :c - take] = rows[first + take:first + c]
        self.held = total % R
        return block_acc, out.reshape(block_acc.size, R, *carry.shape[2:])

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """The carried rows as one block per accumulator, padded with zero rows."""
        live = np.flatnonzero(self.held)
        blocks = self.carry[live]
        for k, h in enumerate(self.held[live].tolist()):
            blocks[k, h:] = 0
        self.held[:] = 0
        return live.astype(np.int64), blocks


class BlockWriter:
    """Blocks of (R, d * words) words in, engine chunks of (R, K, d * words) out to ``fh``
    (as binary words, or with ``text`` as signed decimals: the data owner's input)."""

    def __init__(self, fh: BinaryIO, shape: BlockShape, width: int, text: bool = False) -> None:
        self.fh, self.text = fh, text
        self.R, self.K, self.width = shape.block_rows, shape.chunk_blocks, width
        self._pending = np.zeros((self.K, self.R, width), dtype=np.uint64)
        self._out = np.empty((self.R, self.K, width), dtype=np.uint64)
        self._held = 0
        self.chunks = 0  # engine chunks written

    def add(self, blocks: np.ndarray) -> None:
        """Append blocks (count, R, width); written whenever K are held."""
        taken, count = 0, blocks.shape[0]
        while taken < count:
            if not self._held and count - taken >= self.K:  # a whole chunk: no staging
                self._write(blocks[taken: taken + self.K])
                taken += self.K
                continue
            step = min(self.K - self._held, count - taken)
            self._pending[self._held: self._held + step] = blocks[taken: taken + step]
            self._held += step
            taken += step
            if self._held == self.K:
                self._write(self._pending)
                self._held = 0

    def _write(self, group: np.ndarray) -> None:
        np.copyto(self._out, group.transpose(1, 0, 2))
        if self.text:
            self.fh.write(format_integers(self._out.view(np.int64).ravel()))
        else:
            self.fh.write(self._out.data.cast("B"))
        self.chunks += 1

    def finish(self) -> int:
        """Write the last engine chunk, padded with zero blocks; the number of chunks."""
        if self._held or not self.chunks:
            self._pending[self._held:] = 0
            self._write(self._pending)
            self._held = 0
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


class BlockedFile:
    """The ``fast`` program's share file: rows carried until their blocks fill, blocks
    gathered into engine chunks, and each block's accumulator in the schedule."""

    def __init__(self, fh: BinaryIO, schedule: BinaryIO | None, shape: BlockShape,
                 plan: StreamPlan, text: bool = False) -> None:
        self.shape, self.slots = shape, plan.n * plan.s
        words = 1 if text else plan.fmt.words  # a text row: one value per column
        self.runs = RunBlocks(2 * plan.m, shape.block_rows, (plan.d, words))
        self.blocks = BlockWriter(fh, shape, plan.d * words, text)
        self.schedule = ScheduleWriter(schedule, shape, plan.m) if schedule else None

    def add(self, counts: np.ndarray, shares: np.ndarray) -> None:
        # A file row is one slot's d shares of words each.
        self._emit(self.runs.add(counts, shares.transpose(1, 0, 2)))

    def _emit(self, made: tuple[np.ndarray, np.ndarray]) -> None:
        block_acc, blocks = made
        self.blocks.add(blocks.reshape(*blocks.shape[:2], int(np.prod(blocks.shape[2:]))))
        if self.schedule is not None:
            self.schedule.add(block_acc)

    def finish(self) -> dict:
        self._emit(self.runs.finish())
        chunks = self.blocks.finish()
        if self.schedule is not None and self.schedule.finish() != chunks:
            raise RuntimeError("layout bug: the schedule and the share file disagree")
        file_rows = chunks * self.shape.block_rows * self.shape.chunk_blocks
        return {"engine_chunks": chunks, "file_rows": file_rows,
                "padding_rows": file_rows - self.slots}
