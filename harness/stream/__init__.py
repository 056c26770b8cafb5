"""The stream: how the clients' shares reach the servers, a chunk of clients at a time.

The one path every run's shares take. The plan (:mod:`.plan`) fixes the chunks
and the words each server receives per chunk; the client workers
(:mod:`.produce`) draw each chunk's noise and encode it a block at a time
(:mod:`.noisy`) and split it into shares, full or seeded (:mod:`.seeded`), straight
into each server's channel buffer (:mod:`.buffer`), which a transport carries: shared
memory on this machine (:mod:`.transport`) or TLS to a server elsewhere
(:mod:`.tls`, its wire format :mod:`.wire` and its port :mod:`.accept`). Each
server reads its chunks (:mod:`.chunks`) into a sink (:mod:`.serve`): the sum
of its shares, or its share file in the program's shape (:mod:`.files`,
blocked per chunk of clients, :mod:`.blocks` with its copy :mod:`.placing`, or a
row per slot, :mod:`.slots`). :mod:`.launch` starts the workers and servers as processes
(:mod:`.procs`) and reports what each did; :mod:`.spec` is the stream's
description that a host's agent receives.

May import: the top-level shared modules and :mod:`harness.clients`. Nothing here
knows about MP-SPDZ, hosts, sweeps or the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.optional import lazy_package

if TYPE_CHECKING:
    from harness.stream.accept import accept_workers
    from harness.stream.blocks import (
        RING_CHUNKS,
        BlockedFile,
        BlockShape,
        ChunkFile,
        FileShape,
        ScheduleLines,
        parse_schedule,
    )
    from harness.stream.buffer import ChannelBuffer
    from harness.stream.chunks import (
        ChunkReader,
        FullReader,
        Lost,
        Refused,
        Violation,
        check_counts,
        reader_for,
        receive,
    )
    from harness.stream.chunks import (
        Lost as StreamLost,
    )
    from harness.stream.chunks import (
        Violation as StreamViolation,
    )
    from harness.stream.files import partial, serve_file, write_owner, written
    from harness.stream.forkserver import start_fork_server
    from harness.stream.launch import (
        Streamed,
        StreamError,
        assemble_stream,
        stream_clients,
        stream_inputs,
        worker_count,
    )
    from harness.stream.noisy import (
        BLOCK_VALUES,
        BlockSink,
        NoisyChunks,
        SketchGroups,
        chunk_groups,
        group_slots,
        run_starts,
    )
    from harness.stream.placing import compiled_placer
    from harness.stream.plan import CHUNK_VALUES, SKETCH_GROUP_CLIENTS, SLACK, StreamPlan
    from harness.stream.procs import Processes, pid_alive, pid_stopped
    from harness.stream.produce import ChunkSharer, ProducerTotals, StreamBroken, produce
    from harness.stream.seeded import SeededReader, SeededShares, slot_order
    from harness.stream.serve import serve_party
    from harness.stream.slots import SlotFile, SlotSchedule, SlotShape, write_owner_text
    from harness.stream.spec import OffsetRows, StreamSpec, write_rows
    from harness.stream.tls import TlsRoute, TlsTransport, enter_namespace, tls_context
    from harness.stream.transport import (
        ClientEnd,
        Link,
        ServerEnd,
        ShmTransport,
        StreamTransport,
        TransportFactory,
        sweep_stale_buffers,
    )
    from harness.stream.wire import (
        ACK,
        FRAME,
        HELLO,
        MAGIC,
        DeadlineReader,
        Malformed,
        chunk_frame,
        counts_limit,
        end_frame,
        pack_fields,
        read_fields,
        read_message,
    )

__all__ = [
    "accept_workers",
    "ACK",
    "assemble_stream",
    "BLOCK_VALUES",
    "BlockedFile",
    "BlockShape",
    "BlockSink",
    "ChannelBuffer",
    "compiled_placer",
    "check_counts",
    "chunk_frame",
    "chunk_groups",
    "CHUNK_VALUES",
    "ChunkFile",
    "ChunkReader",
    "ChunkSharer",
    "ClientEnd",
    "counts_limit",
    "DeadlineReader",
    "end_frame",
    "enter_namespace",
    "FileShape",
    "FRAME",
    "FullReader",
    "group_slots",
    "HELLO",
    "Link",
    "Lost",
    "MAGIC",
    "Malformed",
    "NoisyChunks",
    "OffsetRows",
    "pack_fields",
    "partial",
    "pid_alive",
    "pid_stopped",
    "Processes",
    "produce",
    "ProducerTotals",
    "read_fields",
    "read_message",
    "reader_for",
    "receive",
    "Refused",
    "run_starts",
    "RING_CHUNKS",
    "ScheduleLines",
    "parse_schedule",
    "SeededReader",
    "SeededShares",
    "serve_file",
    "serve_party",
    "ServerEnd",
    "ShmTransport",
    "SKETCH_GROUP_CLIENTS",
    "SketchGroups",
    "SLACK",
    "slot_order",
    "SlotFile",
    "SlotSchedule",
    "SlotShape",
    "stream_clients",
    "stream_inputs",
    "StreamBroken",
    "Streamed",
    "StreamError",
    "StreamLost",
    "StreamPlan",
    "StreamSpec",
    "StreamTransport",
    "StreamViolation",
    "start_fork_server",
    "sweep_stale_buffers",
    "tls_context",
    "TlsRoute",
    "TlsTransport",
    "TransportFactory",
    "Violation",
    "worker_count",
    "write_owner",
    "write_owner_text",
    "write_rows",
    "written",
]

lazy_package(__name__)
