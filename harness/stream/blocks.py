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
is written as a stream beside the file, a line per engine chunk written after
the chunk itself (:class:`ScheduleLines`). So the program can read both while
they are made: on this machine each server writes its engine chunks into a ring
of :data:`RING_CHUNKS` and its schedule into a FIFO that its MPC party reads
(:func:`harness.stream.files.serve_file`); the party sums the stream as it comes.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, Protocol

import numpy as np

from harness.clients import CHUNK_SHARES, choose_block_rows, format_integers
from harness.fileio import reserve
from harness.stream.placing import Placer, placer

if TYPE_CHECKING:
    from harness.stream.plan import StreamPlan

__all__ = ["LINE_BYTES", "RING_CHUNKS", "BlockShape", "BlockedFile", "ChunkFile",
           "FileShape", "ScheduleLines", "parse_schedule"]

# Engine chunks a fed share file holds before it wraps. The party is never more than
# a few behind its schedule (:class:`ScheduleLines`), so a wrapped slot was read long ago.
RING_CHUNKS = 64
# A FIFO's schedule line is padded to this (a page, the least a pipe holds), so that
# the pipe and the reader's 8 KiB stream buffer hold three lines at most between them.
LINE_BYTES = 4096
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

    feedable: bool  # whether its program can read the file as it is written (``ring``)

    def open(self, fh: BinaryIO, schedule: BinaryIO | None, plan: StreamPlan, *,
             text: bool = False, ring: int = 0) -> ChunkFile:
        """The writer into ``fh`` (its header written) and, if given, ``schedule``; with
        ``text``, of one value per slot and column as MP-SPDZ input text (the data
        owner's), not of binary shares; with ``ring``, of a file that wraps after
        ``ring`` engine chunks, read as it is written (only where ``feedable``)."""

    def describe(self) -> dict:
        """The layout's public description, for result.json."""


@dataclass(frozen=True)
class BlockShape:
    """R rows per block and K blocks per engine chunk, fixed before the stream starts."""

    block_rows: int
    chunk_blocks: int
    feedable = True

    def open(self, fh: BinaryIO, schedule: BinaryIO | None, plan: StreamPlan, *,
             text: bool = False, ring: int = 0) -> ChunkFile:
        return BlockedFile(fh, schedule, self, plan, text=text, ring=ring)

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
        K = max(1, min(CHUNK_SHARES // (R * d * share_words), cls.most_blocks(n, m, s, R)))
        return cls(R, K)

    @staticmethod
    def most_blocks(n: int, m: int, s: int, block_rows: int) -> int:
        """A bound on a run's blocks: its slots' whole blocks and one short per accumulator."""
        return -(-n * s // block_rows) + 2 * m

    def most_chunks(self, plan: StreamPlan) -> int:
        """A bound on a run's engine chunks."""
        return -(-self.most_blocks(plan.n, plan.m, plan.s, self.block_rows)
                 // self.chunk_blocks)


class ScheduleLines:
    """The program's public input as a stream of lines: first the ring (engine chunks
    the share file holds before it wraps; 0, it never does), then for each engine
    chunk ``1`` and its K blocks' accumulators, written once the chunk is in the
    file, and ``0`` at the end.

    With ``pad``, every line is padded with blanks to a multiple of ``pad`` bytes and
    flushed: the party reads a chunk only after its line, and the FIFO (a pipe of one
    page) and the party's 8 KiB stream buffer then hold at most three lines, so the
    writer of chunk c, its lines through c - 1 taken, knows chunks up to c - 4 read.
    """

    def __init__(self, fh: BinaryIO, ring: int = 0, pad: int = 0) -> None:
        self.fh, self.pad = fh, pad
        self._line(str(ring).encode())

    def add(self, block_acc: np.ndarray) -> None:
        # Plain decimals: accumulators are small non-negative integers.
        self._line(b"1 " + " ".join(map(str, block_acc.tolist())).encode())

    def finish(self) -> None:
        self._line(b"0")

    def _line(self, line: bytes) -> None:
        if self.pad:
            line = line.ljust(-(-(len(line) + 1) // self.pad) * self.pad - 1)
        self.fh.write(line + b"\n")
        if self.pad:
            self.fh.flush()


def parse_schedule(text: bytes, chunk_blocks: int) -> tuple[int, np.ndarray]:
    """What :class:`ScheduleLines` wrote, read as the program reads it: the ring, and
    each engine chunk's blocks' accumulators in file order (ValueError if malformed)."""
    numbers = np.array(text.split(), dtype=np.int64)
    if numbers.size < 2 or numbers[-1] != 0:
        raise ValueError("a schedule is its ring, its chunks' lines and a final 0")
    lines = numbers[1:-1].reshape(-1, 1 + chunk_blocks)
    if not np.all(lines[:, 0] == 1):
        raise ValueError("every chunk's line of a schedule starts with 1")
    return int(numbers[0]), lines[:, 1:].ravel()


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
    soon as its K blocks are in place (the copy: :mod:`harness.stream.placing`).
    Blocks are padded only once, at the end.

    With ``ring``, engine chunk c goes to the file's slot c mod ``ring`` (after the
    header), and the schedule (a FIFO) gets its line once it is there.
    """

    def __init__(self, fh: BinaryIO, schedule: BinaryIO | None, shape: BlockShape,
                 plan: StreamPlan, text: bool = False, ring: int = 0,
                 placing: Placer | None = None) -> None:
        if ring:  # never more slots than the run has engine chunks
            ring = min(ring, shape.most_chunks(plan))
        self.fh, self.text, self.ring = fh, text, ring
        self.shape, self.slots, self.m = shape, plan.n * plan.s, plan.m
        self.R, self.K = shape.block_rows, shape.chunk_blocks
        words = 1 if text else plan.fmt.words  # a text row: one value per column
        self.share = np.dtype((np.void, 8 * words))
        self.zero = np.zeros((), dtype=self.share)
        self.carry = np.zeros((2 * plan.m, self.R, plan.d), dtype=self.share)
        self.held = np.zeros(2 * plan.m, dtype=np.int64)  # rows carried, per accumulator
        self.placer = placing or placer()
        if ring:  # the engine chunks are built in place, in the file's mapped slots
            fh.flush()  # the header
            start = fh.tell()
            size = self.R * self.K * plan.d * self.share.itemsize
            # Reserved before it is mapped: a disk that fills meanwhile is one line here,
            # not SIGBUS at the first page of the ring the disk cannot hold.
            reserve(fh.fileno(), ring * size, "the ring of shares its MPC party reads",
                    offset=start, path=os.readlink(f"/proc/self/fd/{fh.fileno()}"))
            self.mapped = mmap.mmap(fh.fileno(), start + ring * size)
            self.ring_slots = np.ndarray((ring, self.R, self.K, plan.d), dtype=self.share,
                                    buffer=self.mapped, offset=start)
            self.building = self.ring_slots[0]
        else:
            self.building = np.empty((self.R, self.K, plan.d), dtype=self.share)
        self.block_acc = np.empty(self.K, dtype=np.int64)  # each block's accumulator
        self.filled = 0  # blocks of ``building`` in place
        self.chunks = 0  # engine chunks written
        self.padding = 2 * plan.m  # the accumulator of padding blocks
        self.schedule = (ScheduleLines(schedule, ring, LINE_BYTES if ring else 0)
                         if schedule else None)

    def add(self, counts: np.ndarray, shares: np.ndarray) -> None:
        d = shares.shape[0]
        src = np.ascontiguousarray(shares).view(self.share).reshape(d, -1)
        counts = np.ascontiguousarray(counts, dtype=np.int64)
        state = np.zeros(3, dtype=np.int64)
        while True:
            self.filled = self.placer.place(src, counts, state, self.held, self.carry,
                                            self.building, self.filled, self.block_acc)
            if self.filled < self.K:
                return
            self._write()

    def _placed(self, blocks: int, acc: int) -> None:
        self.block_acc[self.filled:self.filled + blocks] = acc
        self.filled += blocks
        if self.filled == self.K:
            self._write()

    def _write(self) -> None:
        words = self.building.view(np.uint64)
        if self.text:
            self.fh.write(format_integers(words.view(np.int64).ravel()))
        elif not self.ring:  # a ring's chunk was built in its slot
            self.fh.write(words.data.cast("B"))
        if self.schedule is not None:  # the chunk is in the file: its line may follow
            self.schedule.add(self.block_acc)
        self.chunks += 1
        self.filled = 0
        if self.ring:
            self.building = self.ring_slots[self.chunks % self.ring]

    def finish(self) -> dict:
        """The carried rows as one last block per accumulator, padded with zero rows;
        the last engine chunk completed with zero blocks (accumulator 2m)."""
        for a, h in enumerate(self.held.tolist()):
            if h:
                block = self.building[:, self.filled]
                block[:h] = self.carry[a, :h]
                block[h:] = self.zero
                self._placed(1, a)
                self.held[a] = 0
        if self.filled or not self.chunks:
            self.building[:, self.filled:] = self.zero
            self.block_acc[self.filled:] = self.padding
            self._write()
        chunks = self.chunks
        if self.schedule is not None:
            self.schedule.finish()
        file_rows = chunks * self.R * self.K
        shaped = {"engine_chunks": chunks, "file_rows": file_rows,
                  "padding_rows": file_rows - self.slots}
        if self.ring:  # the file the party read as it was written: its slots
            shaped["ring_chunks"] = self.ring
        return shaped
