"""How a streamed run's client workers reach its servers: the transport interface.

A transport is made in the parent for one run. It hands each client worker and
each server process an *end* (picklable, passed at the process's start), which
that process opens: the end gives it one :class:`~harness.clients.ChannelBuffer`
(two slots) and one link per peer. The link carries the stream's few small
messages, ``("chunk", k, slot, words)``, ``("end", count)`` and ``("free", slot)``;
the buffers hold the chunks' words. :func:`harness.clients.produce` and the
servers' summing see only that, whichever transport carries the chunks:

* :class:`ShmTransport`: the buffers are shared memory mapped by one worker and
  one server, the links are pipes. Nothing is copied; this machine's loopback.
* :class:`harness.engine.tls_stream.TlsTransport`: each process's buffers are its
  own, the links are TLS connections through the emulated network
  (``--network``): a chunk's words cross the wire as they are sent.

A server's end also reports what it measured of its transport (the upload's
bytes and seconds; nothing for shared memory).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from harness.clients import ChannelBuffer, StreamPlan

__all__ = ["ClientEnd", "Link", "ServerEnd", "ShmTransport", "StreamTransport",
           "TransportFactory"]


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
        """Every process has its end: the parent drops whatever it still holds of them."""
        ...


class TransportFactory(Protocol):
    """Makes a run's transport: the plan, a private 0700 directory on tmpfs for its
    buffers, and the multiprocessing context the processes start from."""

    def __call__(self, plan: StreamPlan, root: Path, ctx: Any) -> StreamTransport: ...


class _ShmClientEnd:
    def __init__(self, paths: Sequence[Path], conns: Sequence[Any]) -> None:
        self.paths, self.conns = list(paths), list(conns)
        self.buffers: list[ChannelBuffer] = []

    def open(self, plan: StreamPlan) -> tuple[list[ChannelBuffer], list[Link]]:
        self.buffers = [ChannelBuffer(p, plan.slot_bytes, create=False) for p in self.paths]
        return self.buffers, list(self.conns)

    def close(self) -> None:
        for b in self.buffers:
            b.close()


class _ShmServerEnd(_ShmClientEnd):
    def stats(self) -> dict[str, float]:
        return {}


class ShmTransport:
    """Shared-memory buffers and pipes: worker w and server i share ``w<w>-P<i>``."""

    def __init__(self, plan: StreamPlan, root: Path, ctx: Any) -> None:
        self.paths = [[root / f"w{w}-P{i}" for i in range(plan.parties)]
                      for w in range(plan.workers)]
        for row in self.paths:
            for path in row:
                ChannelBuffer(path, plan.slot_bytes, create=True).close()
        self.links = [[ctx.Pipe(duplex=True) for _ in range(plan.parties)]
                      for _ in range(plan.workers)]

    def client_end(self, worker: int) -> ClientEnd:
        return _ShmClientEnd(self.paths[worker], [a for a, _ in self.links[worker]])

    def server_end(self, party: int) -> ServerEnd:
        return _ShmServerEnd([row[party] for row in self.paths],
                             [row[party][1] for row in self.links])

    def started(self) -> None:
        # Only the children hold the channel ends now: a dead peer shows as EOF.
        for row in self.links:
            for a, b in row:
                a.close()
                b.close()
