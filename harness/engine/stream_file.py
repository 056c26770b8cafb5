"""A streamed ``fast`` run's server: its share file written as the chunks arrive.

MP-SPDZ reads the ``fast`` program's shares from each party's
``Persistence/Transactions-P<i>.data``, so there a server does not sum its
stream: it lays each chunk out in the blocked file (:mod:`harness.clients.blocks`)
and appends it (an accumulator's rows short of a block wait for the next chunk).
Every party's file must hold the same slots in the same rows,
so chunks are taken in the plan's order, not as they come: chunk k from its
worker's stream, then k + 1. Each worker sends its chunks in increasing order
and each server frees a slot once it is written, so no worker waits on a chunk
that a server has not yet asked for.

Party 0 also writes the public schedule (each block's accumulator) as it goes.
A file is written beside its name and renamed only when complete.
"""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from harness.clients import (
    BlockShape,
    BlockWriter,
    ChannelBuffer,
    RunBlocks,
    ScheduleWriter,
    Sketch,
    SketchGroups,
    StreamPlan,
)
from harness.engine.chunks import ChunkReader, Lost, Refused, check_counts
from harness.fileio import open_private

__all__ = ["partial", "serve_file"]


def partial(path: Path) -> Path:
    """Where ``path`` is written until it is complete."""
    return path.with_name(path.name + ".part")


def serve_file(party: int, plan: StreamPlan, sketch: Sketch, conns: list[Connection],
               buffers: list[ChannelBuffer], dest: Path, shape: BlockShape,
               schedule: Path | None, reader: ChunkReader) -> dict:
    """Write every chunk into ``dest`` in the blocked layout, in the plan's order.

    ``reader`` gives each chunk's shares of this server (:mod:`.chunks`): as sent,
    or, with seeded sharing, with the seeds expanded and the full words among them.

    Returns the busy seconds and the file's shape (engine chunks, rows, padding rows).
    A stream refused or lost leaves neither file, whole or in part.
    """
    try:
        return _write(party, plan, sketch, conns, buffers, dest, shape, schedule, reader)
    except BaseException:
        for path in (dest, schedule):
            if path is not None:
                partial(path).unlink(missing_ok=True)
        raise


def _write(party: int, plan: StreamPlan, sketch: Sketch, conns: list[Connection],
           buffers: list[ChannelBuffer], dest: Path, shape: BlockShape,
           schedule: Path | None, reader: ChunkReader) -> dict:
    fmt = plan.fmt
    width = plan.d * fmt.words
    runs = RunBlocks(2 * plan.m, shape.block_rows, (plan.d, fmt.words))
    received = [0] * plan.workers
    owed = [plan.chunks_of(w) for w in range(plan.workers)]
    columns = SketchGroups(sketch, plan)  # chunks come in order: one drawer for all
    busy = 0.0
    with open_private(partial(dest)) as fh, \
            (open_private(partial(schedule)) if schedule else nullcontext()) as sh:
        fh.write(fmt.header)
        blocks_out = BlockWriter(fh, shape, width)
        schedule_out = ScheduleWriter(sh, shape, plan.m) if sh is not None else None
        for k in range(plan.chunks):
            w = (k // plan.group) % plan.workers
            message = _receive(conns[w], w, received[w], len(owed[w]))
            began = time.perf_counter()
            if message[0] != "chunk" or message[1] != k:
                raise Refused(f"got {message[0]} {message[1]} from client worker {w}, which "
                              f"owes chunk {k} (an early end, or out of order)")
            _, _, slot, words, counts = message
            if words != plan.chunk_words(k, party):
                raise Refused(f"got {words} words for chunk {k} from client worker {w}, "
                              f"not the {plan.chunk_words(k, party)} the plan announces")
            check_counts(party, plan, columns, k, w, counts)
            # (d, slots, words); a file row is one slot's d shares of words each.
            counts, shares = reader.read(k, counts, columns, buffers[w], slot, words)
            _emit(runs.add(counts, shares.transpose(1, 0, 2)), blocks_out, schedule_out)
            try:
                conns[w].send(("free", slot))
            except OSError:
                raise Lost(f"lost client worker {w}'s stream after {received[w] + 1} of "
                           f"{len(owed[w])} chunks") from None
            received[w] += 1
            busy += time.perf_counter() - began
        for w, conn in enumerate(conns):
            message = _receive(conn, w, received[w], len(owed[w]))
            if message[0] != "end" or message[1] != received[w]:
                raise Refused(f"got more than announced from client worker {w}: "
                              f"{message[0]} after its {received[w]} chunks")
        began = time.perf_counter()
        _emit(runs.finish(), blocks_out, schedule_out)
        chunks = blocks_out.finish()
        if schedule_out is not None and schedule_out.finish() != chunks:
            raise RuntimeError("layout bug: the schedule and the share file disagree")
    os.replace(partial(dest), dest)
    if schedule is not None:
        os.replace(partial(schedule), schedule)
    file_rows = chunks * shape.block_rows * shape.chunk_blocks
    return {"busy_s": busy + time.perf_counter() - began, "expand_s": reader.expand_s,
            "engine_chunks": chunks,
            "file_rows": file_rows, "padding_rows": file_rows - plan.n * plan.s}


def _emit(made: tuple[np.ndarray, np.ndarray], blocks_out: BlockWriter,
          schedule_out: ScheduleWriter | None) -> None:
    block_acc, blocks = made
    blocks_out.add(blocks.reshape(*blocks.shape[:2], int(np.prod(blocks.shape[2:]))))
    if schedule_out is not None:
        schedule_out.add(block_acc)


def _receive(conn: Connection, w: int, got: int, owed: int) -> tuple:
    try:
        message: tuple = conn.recv()
    except (EOFError, OSError):
        raise Lost(f"lost client worker {w}'s stream after {got} of {owed} chunks") from None
    return message
