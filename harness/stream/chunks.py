"""How a server takes one chunk of a stream, whatever it then does with it.

A chunk arrives with its slot counts per accumulator. :func:`check_counts` refuses
counts that do not add up, and for the groups of chunks this server checks (one
server per group, in turn) counts that differ from the public sketch's. A
:class:`ChunkReader` then gives the server's shares of the chunk, grouped by
accumulator: as they lie in the slot (full sharing), or with the seeds it holds
expanded and its full words placed among them (seeded sharing). The summing
servers (:mod:`.serve`) and the file-writing ones (:mod:`.files`) both
take chunks this way.
"""

from __future__ import annotations

from multiprocessing.connection import Connection
from typing import Protocol

import numpy as np

from harness.errors import LtmError
from harness.stream.buffer import ChannelBuffer
from harness.stream.noisy import SketchGroups
from harness.stream.plan import StreamPlan
from harness.stream.seeded import SeededReader

__all__ = ["ChunkReader", "FullReader", "Lost", "Refused", "Violation", "check_counts",
           "check_end", "reader_for", "receive"]


class Refused(LtmError):
    """A server refuses its stream (it is not what the plan announced)."""


class Lost(Refused):
    """A server's client worker went away: a consequence, named after its cause."""


class Violation(Refused):
    """An authenticated client worker sent what is no message of the stream: a cause."""


def receive(conn: Connection, w: int, got: int, owed: int) -> tuple:
    """Client worker ``w``'s next message, ``got`` of its ``owed`` chunks taken so far.

    A transport that reads a wire says why it stopped, with the chunks that arrived
    whole: ``("failed", why, arrived, reason)``, raised here as a lost stream, a
    protocol violation or a stream too slow for the timeout.
    """
    try:
        message: tuple = conn.recv()
    except (EOFError, OSError):
        raise Lost(f"lost client worker {w}'s stream after {got} of {owed} chunks") from None
    if message[0] != "failed":
        return message
    _, why, arrived, reason = message
    if why == "violation":
        raise Violation(f"refused client worker {w}'s stream, a protocol violation after "
                        f"{arrived} of its {owed} chunks: it sent {reason}")
    if why == "expired":
        raise Refused(f"client worker {w}'s stream did not end within the timeout: "
                      f"{arrived} of its {owed} chunks arrived; raise --timeout")
    raise Lost(f"lost client worker {w}'s stream after {arrived} of {owed} chunks ({reason})")


def check_end(w: int, count: int, got: int, owed: int) -> None:
    """Client worker ``w``'s end, announcing ``count`` chunks once ``got`` of its ``owed``
    have arrived: refused, saying which of the three disagree, unless all are one."""
    if got < owed:
        raise Refused(f"got a stream from client worker {w} that ended early: {got} of "
                      f"{owed} chunks arrived, {count} announced")
    if count != got:
        raise Refused(f"got a stream from client worker {w} whose end announced {count} "
                      f"chunks: all {owed} of its chunks arrived, as the plan says")


def check_counts(party: int, plan: StreamPlan, columns: SketchGroups, k: int, w: int,
                 counts: object) -> np.ndarray:
    """Chunk k's announced slot counts per accumulator, as int64; refused unless they
    are 2m integers that sum to its slots and, for the groups of chunks this server
    checks, equal the seed's."""
    start, stop = plan.span(k)
    slots = (stop - start) * plan.s
    # Each count within [0, slots] first, then their sum in Python integers: uint64 or
    # int64 counts cannot wrap around to the right total.
    if (not isinstance(counts, np.ndarray) or counts.shape != (2 * plan.m,)
            or counts.dtype.kind not in "iu" or int(counts.min()) < 0
            or int(counts.max()) > slots or sum(counts.tolist()) != slots):
        raise Refused(f"got chunk {k} from client worker {w} with slot counts that do not "
                       f"add up to its {slots} slots")
    counts = counts.astype(np.int64)
    # Every group is checked by one server in turn: one sketch draw in all, not S.
    if (k // plan.group) % plan.parties == party:
        drawn = np.bincount(columns.chunk(k), minlength=2 * plan.m)
        if not np.array_equal(drawn, counts):
            raise Refused(f"got chunk {k} from client worker {w} grouped unlike the public "
                           "sketch: its slot counts per accumulator differ from the seed's")
    return counts


class ChunkReader(Protocol):
    """How a server reads a chunk's shares out of its slot."""

    expand_s: float

    def read(self, k: int, counts: np.ndarray, columns: SketchGroups, buffer: ChannelBuffer,
             slot: int, words: int) -> tuple[np.ndarray, np.ndarray]:
        """The counts per accumulator to sum by, and the shares as ``(d, slots, words)``,
        grouped by accumulator. ``counts`` are the chunk's announced ones (checked
        already); ``columns`` draws its accumulators from the seed where needed."""


class FullReader:
    """Full sharing: the slot holds the server's shares as they are."""

    expand_s = 0.0

    def __init__(self, plan: StreamPlan) -> None:
        self.plan = plan

    def read(self, k: int, counts: np.ndarray, columns: SketchGroups, buffer: ChannelBuffer,
             slot: int, words: int) -> tuple[np.ndarray, np.ndarray]:
        # The clients grouped the slots; the counts alone say where each run starts.
        return counts, buffer.slot(slot, words).reshape(self.plan.d, -1, self.plan.fmt.words)


def reader_for(plan: StreamPlan, party: int) -> ChunkReader:
    """Server ``party``'s reader of the plan's chunks."""
    return SeededReader(plan, party) if plan.seeded else FullReader(plan)
