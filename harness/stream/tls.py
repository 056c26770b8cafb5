"""A streamed run through the emulated network: each chunk crosses a TLS link as it is made.

The transport of :mod:`harness.stream.transport` for ``--network``. Each server
process enters its party's network namespace, listens on the party's address
and accepts one TLS connection per client worker; each client worker enters the
clients' namespace and connects to every server. So a worker's shares cross
the emulated link of the server they are for, shaped as the profile says, while
the worker prepares its next chunk and the server sums the last: preparation,
upload and aggregation overlap. Both sides pin the other's per-run certificate,
the only trust anchor either accepts (:func:`tls_context`): the servers' are
MP-SPDZ's ``P<i>.pem``, the clients' is made for the run.

On the wire (:mod:`.wire`) a connection carries a hello (the worker's
index), then one frame per chunk and one for the stream's end, which the server
acknowledges once it has read it. The server takes its client workers'
connections at once, dropping any stranger's (:mod:`.accept`). Behind each
socket a thread turns the frames back into the stream's usual messages over a pipe
in its own process, with a two-slot buffer on each side, so the worker and the
server's summing see what they see over shared memory, checks included: a chunk
out of order or of the wrong size, an end too early or more than announced is
refused by the server; an end is acknowledged only if it and the chunks before
it are the ones the plan announces (any other is refused unacknowledged). What
the thread cannot turn into a message is a protocol violation, named with its
reason; a cut connection is a lost stream, named; and the whole stream has one
deadline, the run's timeout, however slowly it trickles.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import queue
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.retry import retry
from harness.stream.accept import accept_workers
from harness.stream.buffer import ChannelBuffer
from harness.stream.plan import StreamPlan
from harness.stream.transport import ClientEnd, Link, ServerEnd
from harness.stream.wire import (
    ACK,
    HELLO,
    MAGIC,
    DeadlineReader,
    Malformed,
    chunk_frame,
    end_frame,
    read_message,
)

__all__ = ["TlsRoute", "TlsTransport", "enter_namespace", "tls_context"]

_CLONE_NEWNET = 0x40000000  # <sched.h>; os.setns is 3.12+
_CONNECT_RETRY_S = 30.0  # a server still starting refuses connections for a moment


def tls_context(server: bool, cert: Path, key: Path, peer: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    # The peer's own self-signed certificate is the only trust anchor: pinning.
    ctx.load_verify_locations(cafile=str(peer))
    ctx.verify_mode = ssl.CERT_REQUIRED
    if not server:
        ctx.check_hostname = False  # names are "P<i>", not host names; the pin decides
    return ctx


def enter_namespace(name: str) -> None:
    """Move this process (its only thread) into the named network namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"cannot enter network namespace {name}: "
                          f"{os.strerror(errno)}")
    finally:
        os.close(fd)


@dataclass(frozen=True)
class TlsRoute:
    """Where the servers listen and how each side proves who it is; makes the transport.

    Party i listens at ``addresses[i]:ports[i]`` (bound to ``bind`` when set: the
    address a host's inventory entry gives it to listen on) with its
    ``certs[i]``/``keys[i]``; the clients connect with ``client_cert``/``client_key``.
    Through an emulated network each side first enters its namespace
    (``namespaces[i]``, ``client_namespace``); between hosts there are none.
    Only the certificates a side opens are needed where it runs: a client host has
    the servers' certificates and the clients' key, a server its own key.
    """

    namespaces: tuple[str, ...]
    addresses: tuple[str, ...]
    ports: tuple[int, ...]
    certs: tuple[Path, ...]
    keys: tuple[Path, ...]
    client_namespace: str
    client_cert: Path
    client_key: Path
    timeout: float
    bind: str = ""

    def __call__(self, plan: StreamPlan, ctx: Any) -> TlsTransport:
        return TlsTransport(self)

    @classmethod
    def between_hosts(cls, addresses: tuple[str, ...], ports: tuple[int, ...],
                      certs: tuple[Path, ...], client_cert: Path, client_key: Path,
                      timeout: float) -> TlsRoute:
        """The clients' side of a run whose servers are on their own hosts: no namespace,
        every server's certificate pinned."""
        return cls((), addresses, ports, certs, (), "", client_cert, client_key, timeout)

    @classmethod
    def on_host(cls, party: int, parties: int, port: int, cert: Path, key: Path,
                client_cert: Path, timeout: float, bind: str) -> TlsRoute:
        """Server ``party``'s side on its own host, listening on ``bind`` (one of its
        addresses): its key, the clients' pinned certificate; the other servers'
        entries are never read there."""
        return cls((), ("",) * parties, (port,) * parties, (cert,) * parties,
                   (key,) * parties, "", client_cert, Path(), timeout, bind)


class TlsTransport:
    """Nothing shared between the processes: each end opens its own sockets and buffers."""

    def __init__(self, route: TlsRoute) -> None:
        self.route = route

    def client_end(self, worker: int) -> ClientEnd:
        return _ClientEnd(self.route, worker)

    def server_end(self, party: int) -> ServerEnd:
        return _ServerEnd(self.route, party)

    def listening_end(self, party: int) -> ServerEnd:
        """Server ``party``'s end with its port already bound (a host's agent says
        "listening" only then)."""
        end = _ServerEnd(self.route, party)
        end.listen()
        return end

    def started(self) -> None:
        pass  # the parent holds no end


def _close_all(sockets: list[Any], buffers: list[ChannelBuffer]) -> None:
    for sock in sockets:
        try:
            sock.close()
        except OSError:
            pass
    for b in buffers:
        try:
            b.close()
        except BufferError:
            pass  # a thread still blocked on it; the process is ending anyway


class _Sender:
    """One worker's link to one server: a thread sends each chunk from its slot, and
    the slot is free again once its bytes are handed to the socket."""

    def __init__(self, tls: ssl.SSLSocket, buffer: ChannelBuffer, timeout: float) -> None:
        self.tls, self.buffer, self.timeout = tls, buffer, timeout
        self.todo: queue.SimpleQueue[tuple] = queue.SimpleQueue()
        self.freed: queue.SimpleQueue[tuple | None] = queue.SimpleQueue()
        self.error = ""
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def send(self, message: tuple) -> None:
        if self.error:
            raise OSError(self.error)
        self.todo.put(message)
        if message[0] == "end":  # the stream is delivered only once the server says so
            self.thread.join(self.timeout)
            if self.error or self.thread.is_alive():
                raise OSError(self.error or "sent no acknowledgement of the stream's end")

    def recv(self) -> tuple:
        message = self.freed.get()
        if message is None:
            raise EOFError(self.error)
        return message

    def _run(self) -> None:
        try:
            while True:
                message = self.todo.get()
                if message[0] == "end":
                    self.tls.sendall(end_frame(message[1], message[2:]))
                    ack = DeadlineReader(self.tls, time.monotonic() + self.timeout)
                    if ack.exactly(len(ACK)) != ACK:
                        raise ConnectionError("the server did not acknowledge the stream")
                    return
                _, k, slot, words, *fields = message
                self.tls.sendall(chunk_frame(k, words, fields))
                with self.buffer.raw(slot, 8 * words) as view:
                    self.tls.sendall(view[: 8 * words])
                self.freed.put(("free", slot))
        except Exception as exc:  # the worker names the server when it next calls
            self.error = f"{type(exc).__name__}: {exc}"
            self.freed.put(None)


def _connect(host: str, port: int, timeout: float) -> socket.socket:
    deadline = time.monotonic() + min(timeout, _CONNECT_RETRY_S)
    return retry(lambda: socket.create_connection((host, port), timeout=timeout),
                 when=(ConnectionRefusedError, TimeoutError), delay=0.01, factor=2,
                 max_delay=0.2, give_up=lambda: time.monotonic() + 0.01 > deadline)


class _ClientEnd:
    def __init__(self, route: TlsRoute, worker: int) -> None:
        self.route, self.worker = route, worker
        self.sockets: list[Any] = []
        self.buffers: list[ChannelBuffer] = []

    def open(self, plan: StreamPlan) -> tuple[list[ChannelBuffer], list[Link]]:
        r = self.route
        if r.client_namespace:
            enter_namespace(r.client_namespace)
        links: list[Link] = []
        for i, address in enumerate(r.addresses):
            try:
                raw = _connect(address, r.ports[i], r.timeout)
            except OSError as exc:
                raise ConnectionError(f"cannot reach server P{i} at {address}:{r.ports[i]} "
                                      f"({exc})") from None
            self.sockets.append(raw)
            tls = tls_context(False, r.client_cert, r.client_key, r.certs[i]).wrap_socket(raw)
            self.sockets.append(tls)
            tls.sendall(HELLO.pack(MAGIC, self.worker))
            buffer = ChannelBuffer(plan.slot_bytes, name=f"ltm-channel-w{self.worker}-P{i}")
            self.buffers.append(buffer)
            links.append(_Sender(tls, buffer, r.timeout))
        return self.buffers, links

    def close(self) -> None:
        _close_all(self.sockets, self.buffers)


class _Receiver:
    """One worker's stream into one server: frames read into the two slots in turn,
    each announced over a pipe to the summing thread, which frees it when summed.

    Its end is acknowledged only if every chunk and the end's count were the ones
    the plan announces of this worker (``owed``: each chunk's index and words, in
    order): a worker told "ok" has delivered its stream. Any other end is passed on
    unacknowledged, for the server to refuse and name.

    Its last word, unless the stream ended as it should, says why it stopped:
    ``("failed", "lost" | "violation" | "expired", chunks arrived, reason)``. The
    pipe stays open (the server closes it): a slot freed meanwhile is no error.
    """

    def __init__(self, tls: ssl.SSLSocket, buffer: ChannelBuffer, pipe: Any,
                 plan: StreamPlan, deadline: float, owed: list[tuple[int, int]]) -> None:
        self.tls, self.buffer, self.pipe, self.plan = tls, buffer, pipe, plan
        self.owed = owed
        self.wire = DeadlineReader(tls, deadline)
        self.first = self.last = 0.0
        self.bytes = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        held = arrived = 0
        as_owed = True  # every chunk so far the one the plan announces next
        why = "lost"
        try:
            while True:
                said, size = read_message(self.wire, self.plan)
                self.first = self.first or time.perf_counter()
                self.bytes += size
                if said[0] == "end":
                    self.last = time.perf_counter()
                    # Acknowledged before the summing thread sees it (once it has every
                    # end, the server may finish and close this socket), so only the
                    # end the plan announces, after the chunks it announces.
                    if as_owed and said[1] == arrived == len(self.owed):
                        self.tls.sendall(ACK)
                    self.pipe.send(said)
                    return  # the pipe stays open: the summing thread may still free slots
                _, k, words, counts = said
                as_owed = as_owed and arrived < len(self.owed) and \
                    self.owed[arrived] == (k, words)
                slot = arrived % 2
                if held == 2:
                    self.pipe.recv()  # ("free", slot): this worker's chunks are summed in order
                    held -= 1
                nbytes = 8 * words
                if nbytes > self.plan.slot_bytes:  # refused by the server, naming the chunk
                    self.pipe.send(("chunk", k, slot, words, counts))
                    return
                with self.buffer.raw(slot, nbytes) as view:
                    self.wire.into(view[:nbytes])
                self.bytes += nbytes
                self.pipe.send(("chunk", k, slot, words, counts))
                held += 1
                arrived += 1
        except Malformed as exc:
            why, reason = "violation", str(exc)
        except TimeoutError:
            why, reason = "expired", "the stream's deadline passed"
        except Exception as exc:  # a cut stream: the summing thread names the worker
            reason = str(exc) or type(exc).__name__
        try:
            self.pipe.send(("failed", why, arrived, reason))
        except OSError:
            pass  # the server is closing this stream already


class _ServerEnd:
    def __init__(self, route: TlsRoute, party: int) -> None:
        self.route, self.party = route, party
        self.sockets: list[Any] = []
        self.buffers: list[ChannelBuffer] = []
        self.receivers: list[_Receiver] = []
        self.listener: socket.socket | None = None

    def listen(self) -> None:
        """Bind the server's port now (in its namespace, if any): clients may connect
        from here on, and a port in use fails before any client starts."""
        r, i = self.route, self.party
        if r.namespaces:
            enter_namespace(r.namespaces[i])
        self.listener = socket.create_server((r.bind or r.addresses[i], r.ports[i]))
        self.sockets.append(self.listener)

    def open(self, plan: StreamPlan) -> tuple[list[ChannelBuffer], list[Any]]:
        r, i = self.route, self.party
        if self.listener is None:
            self.listen()
        assert self.listener is not None
        # One deadline for the whole stream, the run's timeout: not one per read.
        deadline = time.monotonic() + r.timeout
        ctx = tls_context(True, r.certs[i], r.keys[i], r.client_cert)
        streams = accept_workers(self.listener, ctx, plan.workers, deadline, f"server P{i}")
        self.sockets += streams
        self.listener.close()
        ends = []
        for w, stream in enumerate(streams):
            buffer = ChannelBuffer(plan.slot_bytes, name=f"ltm-channel-r{w}-P{i}")
            self.buffers.append(buffer)
            mine, theirs = multiprocessing.Pipe(duplex=True)
            self.sockets += [mine, theirs]
            ends.append(mine)
            owed = [(k, plan.chunk_words(k, i)) for k in plan.chunks_of(w)]
            self.receivers.append(_Receiver(stream, buffer, theirs, plan, deadline, owed))
        return self.buffers, ends

    def stats(self) -> dict[str, float]:
        """The upload as this server saw it: its first chunk's arrival to its last
        stream's end, and the bytes of every stream (frames included)."""
        if not self.receivers:
            return {}
        first = min(r.first for r in self.receivers)
        last = max(r.last for r in self.receivers)
        return {"upload_s": max(0.0, last - first),
                "upload_bytes": float(sum(r.bytes for r in self.receivers))}

    def close(self) -> None:
        _close_all(self.sockets, self.buffers)
