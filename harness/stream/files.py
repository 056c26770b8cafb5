"""The servers' share files of a streamed ``fast`` or ``reference`` run, written as chunks arrive.

MP-SPDZ reads these programs' shares from each party's
``Persistence/Transactions-P<i>.data``, so there a server does not sum its
stream: it hands each chunk to its file's writer (:class:`harness.stream.FileShape`):
``fast``'s lays it out in blocks (:mod:`harness.stream.blocks`; an
accumulator's rows short of a block wait for the next chunk), ``reference``'s
appends one row per slot (:mod:`harness.stream.slots`).
Every party's file must hold the same slots in the same rows,
so chunks are taken in the plan's order, not as they come: chunk k from the
stream of the worker the plan says sends it (:attr:`StreamPlan.senders`), then
k + 1. Each worker sends its chunks in increasing order and each server frees a
slot once it is written, so no worker waits on a chunk that a server has not
yet asked for (a client host's workers, whose run of chunks comes later, wait
with their slots full).

Party 0 also writes the public schedule as it goes. With ``--input party`` no
server takes a stream: the data owner writes its input text and the schedule a
chunk at a time (:func:`write_owner`). Every file is written beside its name
and renamed only when complete (:func:`written`).

Where the party already waits at its public input (a FIFO, :mod:`harness.engine.held`),
the server *feeds* it instead (:func:`fed`): the share file is a ring of a few engine
chunks, and each chunk's schedule line goes into the FIFO once the chunk is in the
ring, so the party reads and sums every chunk while the stream goes on, and no
server ever holds its whole share file.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from multiprocessing.connection import Connection
from pathlib import Path
from typing import BinaryIO, cast

from harness.clients import FixedPoint, Prepared, Rows, Sketch
from harness.fileio import fdopen_owned, open_fifo_writer, open_private
from harness.privacy import NoiseSpec
from harness.stream.blocks import LINE_BYTES, RING_CHUNKS, FileShape
from harness.stream.buffer import ChannelBuffer
from harness.stream.chunks import (
    ChunkReader,
    Lost,
    Refused,
    check_counts,
    check_end,
    receive,
)
from harness.stream.noisy import SketchGroups
from harness.stream.plan import StreamPlan
from harness.stream.procs import pid_alive
from harness.stream.slots import write_owner_text

__all__ = ["fed", "partial", "serve_file", "write_owner", "written"]


def partial(path: Path) -> Path:
    """Where ``path`` is written until it is complete."""
    return path.with_name(path.name + ".part")


@contextmanager
def written(dest: Path, schedule: Path | None) -> Iterator[tuple[BinaryIO, BinaryIO | None]]:
    """``dest`` and ``schedule`` opened beside their names (0600), renamed into place
    when the block completes; on any failure neither is left, whole or in part."""
    try:
        with open_private(partial(dest)) as fh, \
                (open_private(partial(schedule)) if schedule else nullcontext()) as sh:
            yield fh, sh
        os.replace(partial(dest), dest)
        if schedule is not None:
            os.replace(partial(schedule), schedule)
    except BaseException:
        for path in (dest, schedule):
            if path is not None:
                partial(path).unlink(missing_ok=True)
                path.unlink(missing_ok=True)  # the file renamed before the schedule failed
        raise


@contextmanager
def fed(dest: Path, gate: Path, party: int,
        timeout: float) -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """``dest`` (0600, at its name: the party reads it as it is written) and the FIFO
    ``gate`` its party (process ``party``) waits at, opened once the party has it open
    (within ``timeout``; Lost at once if the party is gone), its pipe shrunk to one
    schedule line. ``dest`` stays until the run's work directory goes: the party may
    still read its last chunks."""
    try:
        with open_private(dest, "w+b") as fh, _open_gate(gate, party, timeout) as sh:
            yield fh, sh
    except BrokenPipeError:  # the consequence: the party's own error says why
        raise Lost(f"its MPC party stopped reading {gate.name!r} before the stream "
                   "ended") from None


def _open_gate(gate: Path, party: int, timeout: float) -> BinaryIO:
    deadline = time.monotonic() + timeout
    while (fd := open_fifo_writer(gate)) is None:  # no reader yet: the party still starts
        if not pid_alive(party):  # the consequence: the party's own error says why
            raise Lost(f"its MPC party ended before it opened {gate.name!r}")
        if time.monotonic() > deadline:
            raise Lost(f"the MPC party never opened its public input {gate.name!r} within "
                       f"{timeout:g} s")
        time.sleep(0.005)
    try:
        os.set_blocking(fd, True)
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, LINE_BYTES)
    except BaseException:
        os.close(fd)
        raise
    return cast(BinaryIO, fdopen_owned(fd, "wb"))


def serve_file(party: int, plan: StreamPlan, sketch: Sketch, conns: list[Connection],
               buffers: list[ChannelBuffer], dest: Path, shape: FileShape,
               schedule: Path | None, reader: ChunkReader, *,
               gate: tuple[Path, int] | None = None,
               timeout: float = 900.0) -> dict:
    """Write every chunk into ``dest`` in ``shape``'s layout, in the plan's order.

    ``reader`` gives each chunk's shares of this server (:mod:`.chunks`): as sent,
    or, with seeded sharing, with the seeds expanded and the full words among them.
    With ``gate``, feed the party that waits there (:func:`fed`): ``dest`` a ring,
    the schedule into the FIFO.

    Returns the busy seconds and the file's shape (rows, padding rows, and for the
    blocked layout its engine chunks). A stream refused or lost leaves neither
    file, whole or in part.
    """
    received = [0] * plan.workers
    owed = [plan.chunks_of(w) for w in range(plan.workers)]
    columns = SketchGroups(sketch, plan)  # chunks come in order: one drawer for all
    busy = 0.0
    ring = RING_CHUNKS if gate is not None else 0
    with (fed(dest, *gate, timeout) if gate is not None
          else written(dest, schedule)) as (fh, sh):
        fh.write(plan.fmt.header)
        out = shape.open(fh, sh, plan, ring=ring)
        for k, w in enumerate(plan.senders):
            message = receive(conns[w], w, received[w], len(owed[w]))
            began = time.perf_counter()
            if message[0] != "chunk" or message[1] != k:
                raise Refused(f"got {message[0]} {message[1]} from client worker {w}, which "
                              f"owes chunk {k} (an early end, or out of order)")
            _, _, slot, words, counts = message
            if words != plan.chunk_words(k, party):
                raise Refused(f"got {words} words for chunk {k} from client worker {w}, "
                              f"not the {plan.chunk_words(k, party)} the plan announces")
            counts = check_counts(party, plan, columns, k, w, counts)
            # (d, slots, words), grouped by accumulator.
            counts, shares = reader.read(k, counts, columns, buffers[w], slot, words)
            out.add(counts, shares)
            try:
                conns[w].send(("free", slot))
            except OSError:
                raise Lost(f"lost client worker {w}'s stream after {received[w] + 1} of "
                           f"{len(owed[w])} chunks") from None
            received[w] += 1
            busy += time.perf_counter() - began
        for w, conn in enumerate(conns):
            message = receive(conn, w, received[w], len(owed[w]))
            if message[0] != "end":
                raise Refused(f"got more than announced from client worker {w}: "
                              f"{message[0]} after its {received[w]} chunks")
            check_end(w, message[1], received[w], len(owed[w]))
        began = time.perf_counter()
        shaped = out.finish()
    return {"busy_s": busy + time.perf_counter() - began, "expand_s": reader.expand_s,
            **shaped}


def write_owner(plan: StreamPlan, sketch: Sketch, rows: Rows, noise: NoiseSpec,
                fp: FixedPoint, dest: Path, schedule: Path,
                shape: FileShape | None = None) -> Prepared:
    """``--input party``: the data owner's input text and the public schedule, written
    a chunk of clients at a time (:func:`harness.clients.write_owner_text`) with the
    share files' guarantees: renamed into place when complete, nothing left on failure."""
    with written(dest, schedule) as (fh, sh):
        assert sh is not None
        return write_owner_text(plan, sketch, rows, noise, fp, fh, sh, shape)
