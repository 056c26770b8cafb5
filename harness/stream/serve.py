"""One server's side of a streamed run: its stream, summed or written as it arrives.

:func:`serve_party` is all a server does with its stream, wherever it runs: in
a process beside the clients (:mod:`harness.stream.launch`), or on its own host,
where the host agent calls it (``python -m harness.remote.agent serve``). It
opens the server's end of the transport, takes each client worker's chunks in
that worker's order, checks them against the plan (and, in turn, the slot
counts against the public sketch), and either sums them into its 2m x d
accumulators and writes the m x d aggregate (the ``local`` program), or writes
them into its blocked share file (``blocks``, the ``fast`` program,
:func:`harness.stream.files.serve_file`). A stream out of order, short or
long is :class:`~harness.stream.chunks.Refused`; a cut one is
:class:`~harness.stream.chunks.Lost`.
"""

from __future__ import annotations

import selectors
import time
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from harness.clients import Sketch, format_integers, write_share_file
from harness.fileio import open_private
from harness.stream.blocks import FileShape
from harness.stream.buffer import ChannelBuffer
from harness.stream.chunks import (
    ChunkReader,
    Lost,
    Refused,
    check_counts,
    check_end,
    reader_for,
    receive,
)
from harness.stream.files import serve_file
from harness.stream.noisy import SketchGroups, run_starts
from harness.stream.plan import StreamPlan
from harness.stream.transport import ServerEnd

__all__ = ["serve_party"]


def serve_party(party: int, plan: StreamPlan, sketch: Sketch, end: ServerEnd, dest: Path,
                as_input: bool, blocks: FileShape | None = None,
                schedule: Path | None = None, gate: tuple[Path, int] | None = None,
                timeout: float = 900.0) -> dict[str, float]:
    """Server ``party``: sums its stream into ``dest`` (:func:`_serve`), or, with
    ``blocks``, writes it into its share file of that shape (and ``schedule``, the
    public input, when given), or with ``gate`` (its FIFO and its process id) as well,
    feeds both to its party as they are written (:func:`harness.stream.files.fed`).
    Its figures: busy and CPU seconds, seed expansion, and what the transport measured
    (the upload's seconds and bytes)."""
    try:
        cpu = time.process_time()
        buffers, conns = end.open(plan)
        reader = reader_for(plan, party)
        if blocks is None:
            done = {"busy_s": _serve(party, plan, sketch, conns, buffers, dest, as_input,
                                     reader)}
        else:
            done = serve_file(party, plan, sketch, conns, buffers, dest, blocks, schedule,
                              reader, gate=gate, timeout=timeout)
        return {**done, "cpu_s": time.process_time() - cpu, "expand_s": reader.expand_s,
                **end.stats()}
    finally:
        end.close()


def _serve(party: int, plan: StreamPlan, sketch: Sketch, conns: list[Connection],
           buffers: list[ChannelBuffer], dest: Path, as_input: bool,
           reader: ChunkReader | None = None) -> float:
    """Sum every chunk into the accumulators as it arrives; write the m x d aggregate."""
    width = plan.d * plan.fmt.words
    reader = reader or reader_for(plan, party)
    acc = np.zeros((2 * plan.m, width), dtype=np.uint64)
    received = [0] * plan.workers
    owed = [plan.chunks_of(w) for w in range(plan.workers)]
    # One per worker: each worker's chunks arrive in order, a group at a time.
    columns = [SketchGroups(sketch, plan) for _ in range(plan.workers)]
    busy = 0.0
    # One selector for the whole stream: multiprocessing's wait() builds and fills a
    # new one at every call, a few hundred microseconds of each chunk's CPU.
    with selectors.DefaultSelector() as streams:
        for w, conn in enumerate(conns):
            streams.register(conn, selectors.EVENT_READ, (w, conn))
        while streams.get_map():
            for key, _ in streams.select():
                w, conn = key.data
                mine = owed[w]
                message = receive(conn, w, received[w], len(mine))
                began = time.perf_counter()
                if message[0] == "end":
                    check_end(w, message[1], received[w], len(mine))
                    streams.unregister(conn)
                    continue
                _add_chunk(party, plan, conn, w, message, received, mine, columns, buffers,
                           reader, acc)
                busy += time.perf_counter() - began
    began = time.perf_counter()
    aggregate = acc[:plan.m] - acc[plan.m:]
    fmt = plan.fmt
    if as_input:
        with open_private(dest) as fh:
            fh.write(format_integers(aggregate.view(np.int64).ravel()))
    else:
        shaped = aggregate.reshape(plan.m, plan.d, fmt.words) if fmt.words > 1 else aggregate
        write_share_file(dest, shaped, fmt)
    return busy + time.perf_counter() - began


def _add_chunk(party: int, plan: StreamPlan, conn: Connection, w: int, message: tuple,
               received: list[int], mine: list[int], columns: list[SketchGroups],
               buffers: list[ChannelBuffer], reader: ChunkReader, acc: np.ndarray) -> None:
    """Worker ``w``'s next chunk, checked and summed into ``acc``; its slot freed."""
    _, k, slot, words, counts = message
    if received[w] >= len(mine) or k != mine[received[w]]:
        due = f"chunk {mine[received[w]]}" if received[w] < len(mine) else "nothing more"
        raise Refused(f"got chunk {k} from client worker {w}, which owes {due} "
                      "(more than announced, or out of order)")
    if words != plan.chunk_words(k, party):
        raise Refused(f"got {words} words for chunk {k} from client worker {w}, "
                      f"not the {plan.chunk_words(k, party)} the plan announces")
    counts = check_counts(party, plan, columns[w], k, w, counts)
    # (d, slots, words): each column's accumulator runs are contiguous.
    counts, shares = reader.read(k, counts, columns[w], buffers[w], slot, words)
    live, offsets = run_starts(counts)
    sums = np.add.reduceat(shares, offsets, axis=1)  # (d, live, words)
    acc[live] += sums.transpose(1, 0, 2).reshape(live.size, acc.shape[1])
    try:
        conn.send(("free", slot))
    except OSError:
        raise Lost(f"lost client worker {w}'s stream after {received[w] + 1} of "
                   f"{len(mine)} chunks") from None
    received[w] += 1
