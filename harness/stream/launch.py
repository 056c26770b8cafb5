"""A streamed ``local`` run on this machine: servers aggregate while the shares arrive.

Client workers (:func:`harness.stream.produce`, one process per core) and one
process per server run side by side. Each server takes its chunks as they come,
adds each into its 2m x d accumulators (one ``reduceat``, the grouping
recomputed from the public sketch's seed), and hands the slot back; when every
worker's stream has ended it writes its m x d aggregate share, the only file the
MPC then reads. With seeded sharing a server expands the seeds of each chunk
as it comes (:class:`harness.stream.SeededReader`) before summing it. No share
file of the clients' rows is written, and memory is a few chunks per process
whatever n is.

A stream is checked as it goes: chunks must come in each worker's order with the
words the plan announces, and each worker's count at its end must match what
arrived. Any process that fails or dies stops all of them; the error names the
server (or client worker) and nothing is left behind but the run's workdir.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from harness.clients import FixedPoint, Prepared, Rows, Sketch, components
from harness.errors import DiskFullError, InputError
from harness.privacy import NoiseSpec
from harness.stream.blocks import FileShape
from harness.stream.chunks import Lost as _Lost
from harness.stream.chunks import Refused as _Refused
from harness.stream.chunks import Violation as _Violation
from harness.stream.files import partial
from harness.stream.forkserver import context as forkserver_context
from harness.stream.forkserver import start_fork_server
from harness.stream.plan import StreamPlan
from harness.stream.procs import Processes, StreamError
from harness.stream.produce import ProducerTotals, StreamBroken, produce
from harness.stream.serve import serve_party
from harness.stream.transport import (
    ClientEnd,
    ServerEnd,
    ShmTransport,
    TransportFactory,
    sweep_stale_buffers,
)

__all__ = ["StreamError", "Streamed", "assemble_stream", "stream_clients", "stream_inputs",
           "worker_count"]

_PR_SET_PDEATHSIG = 1  # <sys/prctl.h>
_MAX_WORKERS = 100


@dataclass
class Streamed:
    """What a streamed run's clients and servers measured."""

    prepared: Prepared
    aggregate_s: list[float]  # each server's busy time, inside the stream's wall time
    stages: dict[str, float] = field(default_factory=dict)
    # Per server {"upload_s", "upload_bytes_sent"} when the transport crossed a network.
    upload: dict[int, dict] | None = None
    # The share files' shape when the servers wrote the clients' shares (``blocks``).
    layout: dict = field(default_factory=dict)

    def outcome(self) -> Prepared:
        """The clients' :class:`~harness.clients.Prepared`, carrying what the stream
        measured: its stages, the files' shape, each server's time and the upload."""
        prepared = self.prepared
        prepared.stages.update(self.stages)
        prepared.layout.update(self.layout)
        prepared.servers_s, prepared.upload = list(self.aggregate_s), self.upload
        return prepared


def worker_count() -> int:
    """Client worker processes: one per core this process may run on, up to 100 (a
    server's start passes it every worker's pipe and buffer, and a process's start
    passes fewer than 252 descriptors)."""
    return max(1, min(_MAX_WORKERS, len(os.sched_getaffinity(0))))


def _context() -> Any:
    """Processes forked from the stream's fork server (:mod:`.forkserver`), started
    here unless it is running already.

    Every streamed run starts here, and first removes what a killed run of an earlier
    release left in /dev/shm (:func:`sweep_stale_buffers`). The fork server starts
    once per process and serves every later run.
    """
    sweep_stale_buffers()
    start_fork_server()
    return forkserver_context()


def stream_inputs(plan: StreamPlan, sketch: Sketch, rows: Rows, noise: NoiseSpec,
                  fp: FixedPoint, dests: list[Path], *, as_input: bool, timeout: float,
                  transport: TransportFactory = ShmTransport, blocks: FileShape | None = None,
                  schedule: Path | None = None,
                  gates: Sequence[tuple[Path, int]] | None = None) -> Streamed:
    """Run the clients and servers of a streamed run; server i writes ``dests[i]``.

    ``as_input``: the aggregates as each server's MP-SPDZ input text (additive only),
    else as share files in the protocol's format. ``transport`` carries the chunks
    (:mod:`harness.stream.transport`): shared memory here, or TLS through an
    emulated network.

    ``blocks``: the servers do not sum, they write the clients' shares into share
    files of this shape (``fast``'s blocked or ``reference``'s one row per slot,
    :mod:`.files`), and
    server 0 the public ``schedule`` the program reads beside them. With ``gates``
    (blocked files only), server i feeds both to its MPC party (process id
    ``gates[i][1]``), which waits at the FIFO ``gates[i][0]`` and sums the chunks as
    they are written (:func:`.files.fed`).

    The processes start through :mod:`multiprocessing`, so a Python script that
    calls this (or a streamed :func:`harness.experiments.run`) needs the usual
    ``if __name__ == "__main__":`` guard; ``ltm`` and notebooks need nothing.
    """
    ctx = _context()
    started = time.perf_counter()
    complete = False
    carrier = transport(plan, ctx)
    try:
        with Processes(ctx) as procs:
            for i in range(plan.parties):
                procs.start(f"server P{i}", _server_main,
                            (i, plan, sketch, carrier.server_end(i), dests[i], as_input, blocks,
                             schedule if i == 0 else None, gates[i] if gates else None,
                             timeout))
            for w in range(plan.workers):
                procs.start(f"client worker {w}", _worker_main,
                            (w, plan, sketch, rows, noise, fp, carrier.client_end(w)))
            carrier.started()
            # A fed party that is stopped stops the stream: named if the clock runs out.
            results = procs.collect(started + timeout,
                                    {f"party P{i}": pid for i, (_, pid) in enumerate(gates or [])})
        complete = True
    finally:
        carrier.started()
        if blocks is not None and not complete:  # nothing half-written stays
            for path in [*dests, *([schedule] if schedule else [])]:
                for leftover in (path, partial(path)):
                    leftover.unlink(missing_ok=True)
    return assemble_stream(plan, [results[f"client worker {w}"] for w in range(plan.workers)],
                           [results[f"server P{i}"] for i in range(plan.parties)],
                           time.perf_counter() - started, blocks)


def stream_clients(plan: StreamPlan, sketch: Sketch, rows: Rows, noise: NoiseSpec,
                   fp: FixedPoint, transport: TransportFactory, *, workers: Sequence[int],
                   timeout: float) -> list[ProducerTotals]:
    """Only the clients' side, here: client workers ``workers`` of the plan, streaming
    to servers that run elsewhere (on their hosts, :func:`serve_party`). Each
    worker's totals, in that order; a failure is a :class:`StreamError` naming it."""
    ctx = _context()
    carrier = transport(plan, ctx)
    try:
        with Processes(ctx) as procs:
            for w in workers:
                procs.start(f"client worker {w}", _worker_main,
                            (w, plan, sketch, rows, noise, fp, carrier.client_end(w)))
            carrier.started()
            results = procs.collect(time.perf_counter() + timeout)
    finally:
        carrier.started()
    return [results[f"client worker {w}"] for w in workers]


def assemble_stream(plan: StreamPlan, workers: list[ProducerTotals],
                    servers: list[dict[str, Any]], wall: float,
                    blocks: FileShape | None = None) -> Streamed:
    """One streamed run from its parts: every client worker's totals and every server's
    figures (as :func:`serve_party` returns them), over ``wall`` seconds."""
    m, d = plan.m, plan.d
    expected = np.zeros((2 * m, d), dtype=np.uint64)
    abs_sums = np.zeros((2 * m, d))
    noise_sum = noise_sq = 0.0
    for totals in workers:
        expected += totals.expected
        abs_sums += totals.abs_sums
        noise_sum += totals.noise_sum
        noise_sq += totals.noise_sq
    count = plan.n * plan.s * plan.d
    mean = noise_sum / count
    if plan.seeded:
        comps = components(plan.fmt, plan.parties)
        per_server = [comps.upload_bytes(i, plan.n, plan.s * plan.d)
                      for i in range(plan.parties)]
    else:
        per_server = [plan.n * plan.s * plan.d * plan.fmt.words * 8] * plan.parties
    clients_s = max(t.busy_s for t in workers)
    servers_s = max(s["busy_s"] for s in servers)
    stages = {"stream_wall_s": wall, "stream_clients_s": clients_s,
              "stream_servers_s": servers_s, "stream_workers": float(plan.workers),
              # CPU time summed over the processes: the work itself, whatever the sharing
              # of the cores made of the clocks above.
              "stream_clients_cpu_s": sum(t.cpu_s for t in workers),
              "stream_servers_cpu_s": sum(s["cpu_s"] for s in servers)}
    # A transport that crosses a network times its upload: each server's first byte to
    # its last, and the bytes on the wire (framing included), the slowest server's.
    upload = ({i: {"upload_s": s["upload_s"], "upload_bytes_sent": int(s["upload_bytes"])}
               for i, s in enumerate(servers)} if "upload_s" in servers[0] else None)
    upload_s = 0.0
    if upload is not None:
        upload_s = max(u["upload_s"] for u in upload.values())
        stages["stream_upload_s"] = upload_s
        stages["stream_upload_bytes"] = float(max(u["upload_bytes_sent"]
                                                  for u in upload.values()))
    # Above 1: the stages ran at the same time (their sum over the wall time they took).
    stages["stream_overlap"] = (clients_s + upload_s + servers_s) / wall if wall else 0.0
    if plan.seeded:
        # Inside the clocks above: the slowest server's expansion of the seeds it got,
        # and the client workers' of their own (summed, as their CPU time is).
        stages["stream_expand_s"] = max(s["expand_s"] for s in servers)
        stages["stream_clients_expand_s"] = sum(t.expand_s for t in workers)
    prepared = Prepared(expected[:m] - expected[m:], abs_sums[:m] + abs_sums[m:],
                        per_server, wall,
                        {"noise_mean": mean, "noise_var": noise_sq / count - mean**2,
                         # client hosts draw through their own installs: each way, once
                         "sampler": " and ".join(sorted({t.sampler for t in workers}))})
    streamed = Streamed(prepared, [s["busy_s"] for s in servers], stages, upload)
    if blocks is not None:
        first = servers[0]
        streamed.layout = {**blocks.describe(),
                           "clients_per_chunk": plan.clients_per_chunk,
                           **{key: first[key] for key in ("file_rows", "padding_rows",
                                                          "ring_chunks") if key in first}}
    return streamed


def _quiet() -> None:
    """A child leaves signals to its parent: Ctrl-C reaches the whole process group, and
    the parent stops every child itself, so a child never prints a traceback of it.

    It also dies with the fork server that started it, which ends when the parent
    does: a parent killed outright (a host agent's, say) leaves no worker streaming
    on, holding its connections and its SSH session's output open.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The fork server lives on while any process holds the parent's end of its "alive"
    # pipe, and each child inherits one: dropped here, so that the fork server ends with
    # the parent, and this child (PDEATHSIG) with the fork server.
    server = multiprocessing.forkserver._forkserver
    alive = server._forkserver_alive_fd  # type: ignore[attr-defined]
    if alive is not None:
        os.close(alive)
        server._forkserver_alive_fd = None  # type: ignore[attr-defined]
    if ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL)) == 0 \
            and os.getppid() == 1:
        os._exit(1)  # the fork server was gone already: nobody to work for


def _tell(report: Connection, kind: str, payload: object) -> None:
    try:
        report.send((kind, payload))
    except OSError:
        pass  # the parent is gone or stopping everything: nobody to tell


def _worker_main(w: int, plan: StreamPlan, sketch: Sketch, rows: Rows, noise: NoiseSpec,
                 fp: FixedPoint, end: ClientEnd, report: Connection) -> None:
    _quiet()
    try:
        buffers, conns = end.open(plan)
        _tell(report, "ok", produce(w, plan, sketch, rows, noise, fp, buffers, conns))
    except InputError as exc:
        _tell(report, "input", str(exc))
    except StreamBroken as exc:
        _tell(report, "broken", f"lost its stream: {exc}")
    except Exception as exc:  # reported to the parent, which names this worker
        _tell(report, "error", f"failed: {type(exc).__name__}: {exc}")
    finally:
        end.close()


def _server_main(party: int, plan: StreamPlan, sketch: Sketch, end: ServerEnd, dest: Path,
                 as_input: bool, blocks: FileShape | None, schedule: Path | None,
                 gate: tuple[Path, int] | None, timeout: float, report: Connection) -> None:
    """Server ``party`` in its own process (:func:`serve_party`), reporting to the parent."""
    _quiet()
    try:
        _tell(report, "ok", serve_party(party, plan, sketch, end, dest, as_input, blocks,
                                        schedule, gate, timeout))
    except DiskFullError as exc:
        _tell(report, "disk", str(exc))
    except _Violation as exc:
        _tell(report, "violation", str(exc))
    except _Lost as exc:
        _tell(report, "lost", str(exc))
    except _Refused as exc:
        _tell(report, "error", str(exc))
    except Exception as exc:
        _tell(report, "error", f"failed: {type(exc).__name__}: {exc}")
