"""The servers' share files of a streamed ``fast`` or ``reference`` run, written as chunks arrive.

MP-SPDZ reads these programs' shares from each party's
``Persistence/Transactions-P<i>.data``, so there a server does not sum its
stream: it hands each chunk to its file's writer (:class:`harness.stream.FileShape`):
``fast``'s lays it out in blocks (:mod:`harness.stream.blocks`; an
accumulator's rows short of a block wait for the next chunk), ``reference``'s
appends one row per slot (:mod:`harness.stream.slots`).
Every party's file must hold the same slots in the same rows,
so chunks are taken in the plan's order, not as they come: chunk k from its
worker's stream, then k + 1. Each worker sends its chunks in increasing order
and each server frees a slot once it is written, so no worker waits on a chunk
that a server has not yet asked for.

Party 0 also writes the public schedule as it goes. With ``--input party`` no
server takes a stream: the data owner writes its input text and the schedule a
chunk at a time (:func:`write_owner`). Every file is written beside its name
and renamed only when complete (:func:`written`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from multiprocessing.connection import Connection
from pathlib import Path
from typing import BinaryIO

from harness.clients import FixedPoint, NoiseSpec, Prepared, Rows, Sketch
from harness.fileio import open_private
from harness.stream.blocks import FileShape
from harness.stream.buffer import ChannelBuffer
from harness.stream.chunks import ChunkReader, Lost, Refused, check_counts, receive
from harness.stream.noisy import SketchGroups
from harness.stream.plan import StreamPlan
from harness.stream.slots import write_owner_text

__all__ = ["partial", "serve_file", "write_owner", "written"]


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


def serve_file(party: int, plan: StreamPlan, sketch: Sketch, conns: list[Connection],
               buffers: list[ChannelBuffer], dest: Path, shape: FileShape,
               schedule: Path | None, reader: ChunkReader) -> dict:
    """Write every chunk into ``dest`` in ``shape``'s layout, in the plan's order.

    ``reader`` gives each chunk's shares of this server (:mod:`.chunks`): as sent,
    or, with seeded sharing, with the seeds expanded and the full words among them.

    Returns the busy seconds and the file's shape (rows, padding rows, and for the
    blocked layout its engine chunks). A stream refused or lost leaves neither
    file, whole or in part.
    """
    received = [0] * plan.workers
    owed = [plan.chunks_of(w) for w in range(plan.workers)]
    columns = SketchGroups(sketch, plan)  # chunks come in order: one drawer for all
    busy = 0.0
    with written(dest, schedule) as (fh, sh):
        fh.write(plan.fmt.header)
        out = shape.open(fh, sh, plan)
        for k in range(plan.chunks):
            w = (k // plan.group) % plan.workers
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
            if message[0] != "end" or message[1] != received[w]:
                raise Refused(f"got more than announced from client worker {w}: "
                              f"{message[0]} after its {received[w]} chunks")
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
