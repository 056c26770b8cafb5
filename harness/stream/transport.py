"""How a streamed run's client workers reach its servers: the transport interface.

A transport is made in the parent for one run. It hands each client worker and
each server process an *end* (picklable, passed at the process's start), which
that process opens: the end gives it one :class:`~harness.stream.ChannelBuffer`
(two slots) and one link per peer. The link carries the stream's few small
messages, ``("chunk", k, slot, words)``, ``("end", count)`` and ``("free", slot)``;
the buffers hold the chunks' words. :func:`harness.stream.produce` and the
servers' summing see only that, whichever transport carries the chunks:

* :class:`ShmTransport`: the buffers are shared memory mapped by one worker and
  one server, the links are pipes. Nothing is copied; this machine's loopback.
  No buffer has a name in any file system (:func:`harness.fileio.private_memory`).
* :class:`harness.stream.tls.TlsTransport`: each process's buffers are its
  own, the links are TLS connections through the emulated network
  (``--network``): a chunk's words cross the wire as they are sent.

A server's end also reports what it measured of its transport (the upload's
bytes and seconds; nothing for shared memory).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from multiprocessing import reduction
from pathlib import Path
from typing import Any, Protocol

from harness.fileio import private_memory
from harness.stream.buffer import ChannelBuffer
from harness.stream.plan import StreamPlan
from harness.stream.procs import pid_alive

__all__ = ["ClientEnd", "Link", "ServerEnd", "ShmTransport", "StreamTransport",
           "TransportFactory", "sweep_stale_buffers"]


class Link(Protocol):
    """One stream's messages, one way and back (a pipe's Connection is one)."""

    def send(self, obj: Any) -> None: ...

    def recv(self) -> Any: ...


class ClientEnd(Protocol):
    """A client worker's side of its streams to every server, opened in the worker."""

    def open(self, plan: StreamPlan) -> tuple[list[ChannelBuffer], list[Link]]:
        """One buffer and one link per server, in party order."""
        ...

    def close(self) -> None: ...


class ServerEnd(Protocol):
    """A server's side of the streams from every client worker, opened in the server.

    Its links are pipe Connections whatever the transport: the server waits on all
    of them at once (:func:`multiprocessing.connection.wait`).
    """

    def open(self, plan: StreamPlan) -> tuple[list[ChannelBuffer], list[Any]]:
        """One buffer and one link per client worker, in worker order."""
        ...

    def stats(self) -> dict[str, float]:
        """What the transport measured, once the stream has ended (may be empty)."""
        ...

    def close(self) -> None: ...


class StreamTransport(Protocol):
    """One run's transport, made in the parent before any process starts."""

    def client_end(self, worker: int) -> ClientEnd: ...

    def server_end(self, party: int) -> ServerEnd: ...

    def started(self) -> None:
        """Every process has its end (or the run ended before): the parent drops
        whatever it still holds of them. Called again, it does nothing."""
        ...


class TransportFactory(Protocol):
    """Makes a run's transport from the plan and the multiprocessing context the
    processes start from."""

    def __call__(self, plan: StreamPlan, ctx: Any) -> StreamTransport: ...


class _Passed:
    """A buffer's descriptor, duplicated into the process whose start pickles it.

    ``multiprocessing`` passes it as it passes a pipe's end (to the fork server, over
    its socket): the process finds its buffers' memory open, never a path to it.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple:
        return _Passed._received, (reduction.DupFd(self.fd),)

    @staticmethod
    def _received(dup: Any) -> _Passed:
        return _Passed(dup.detach())


class _ShmClientEnd:
    def __init__(self, fds: Sequence[_Passed], conns: Sequence[Any]) -> None:
        self.fds, self.conns = list(fds), list(conns)
        self.buffers: list[ChannelBuffer] = []

    def open(self, plan: StreamPlan) -> tuple[list[ChannelBuffer], list[Link]]:
        self.buffers = [ChannelBuffer(plan.slot_bytes, p.fd) for p in self.fds]
        return self.buffers, list(self.conns)

    def close(self) -> None:
        for b in self.buffers:
            b.close()


class _ShmServerEnd(_ShmClientEnd):
    def stats(self) -> dict[str, float]:
        return {}


class ShmTransport:
    """Shared memory and pipes: worker w and server i share one buffer, reserved here.

    The parent holds each buffer's descriptor only until every process has its own
    (:meth:`started`); from then on the buffer lives as long as the worker and the
    server that map it, and nothing of it is left once they end, whatever ends them.
    """

    def __init__(self, plan: StreamPlan, ctx: Any) -> None:
        size = ChannelBuffer.size(plan.slot_bytes)
        self.fds: list[list[_Passed]] = []
        self.links: list[list[tuple[Any, Any]]] = []
        try:
            for w in range(plan.workers):
                self.fds.append([])
                for i in range(plan.parties):
                    fd = private_memory(size, f"ltm-channel-w{w}-P{i}",
                                        "a streamed run's channel buffer")
                    self.fds[-1].append(_Passed(fd))
            self.links = [[ctx.Pipe(duplex=True) for _ in range(plan.parties)]
                          for _ in range(plan.workers)]
        except BaseException:
            self.started()
            raise

    def client_end(self, worker: int) -> ClientEnd:
        return _ShmClientEnd(self.fds[worker], [a for a, _ in self.links[worker]])

    def server_end(self, party: int) -> ServerEnd:
        return _ShmServerEnd([row[party] for row in self.fds],
                             [row[party][1] for row in self.links])

    def started(self) -> None:
        # Only the children hold the buffers and the channel ends now: a dead peer shows
        # as EOF, and the memory goes with the last of them.
        for row in self.fds:
            for passed in row:
                if passed.fd >= 0:
                    os.close(passed.fd)
                    passed.fd = -1
        for pairs in self.links:
            for a, b in pairs:
                a.close()
                b.close()


def sweep_stale_buffers(shm: Path = Path("/dev/shm")) -> list[Path]:
    """Remove the channel buffers earlier releases kept in ``shm`` whose run is over.

    They were directories ``ltm-stream-PID-*`` of files, made by process PID, which a
    process killed outright (SIGKILL) left behind, with the shares in them. Only those
    whose process is gone are removed (a live one is another run's); what was removed.
    """
    removed: list[Path] = []
    try:
        entries = list(shm.glob("ltm-stream-*"))
    except OSError:
        return removed
    for entry in entries:
        pid = entry.name.split("-")[2]
        if not pid.isdigit() or pid_alive(int(pid)):
            continue
        try:
            if entry.lstat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed
