"""A server's stream port: its client workers' connections taken at once, strangers dropped.

Whoever reaches the server's address reaches its port, not only the run's client
workers. So each connection is taken in a thread of its own, with a deadline
for its TLS handshake (the clients' per-run certificate pinned) and its hello. A
connection that presents no valid certificate, sends no hello in time, or claims
a worker it cannot be (out of range, or connected already) is closed and said on
stderr, once per peer address: it neither fails the run nor holds it up. The
server waits for exactly its client workers, until the stream's deadline.
"""

from __future__ import annotations

import os
import selectors
import socket
import ssl
import sys
import threading
import time

from harness.stream.chunks import Lost
from harness.stream.wire import HELLO, MAGIC, DeadlineReader

__all__ = ["accept_workers"]

# A client worker handshakes as soon as it connects: seconds are plenty, even on a
# loaded machine behind an emulated link; a stranger is dropped after that.
HANDSHAKE_S = 20.0
_MAX_PENDING = 256  # handshakes under way at once; past that a new connection is dropped


class _Dropped(Exception):
    """Why a connection is not one of the run's client workers."""


def accept_workers(listener: socket.socket, ctx: ssl.SSLContext, workers: int,
                   deadline: float, who: str) -> list[ssl.SSLSocket]:
    """One authenticated TLS stream per client worker, in worker order, accepted on
    ``listener`` by ``deadline`` (``time.monotonic()``); ``who`` names the server."""
    doors = _Doors(ctx, workers, deadline, who)
    try:
        return doors.run(listener)
    finally:
        doors.close()


class _Doors:
    def __init__(self, ctx: ssl.SSLContext, workers: int, deadline: float, who: str) -> None:
        self.ctx, self.deadline, self.who = ctx, deadline, who
        self.streams: list[ssl.SSLSocket | None] = [None] * workers
        self.lock = threading.Lock()
        self.pending = 0
        self.done = False  # once set, a late handshake's stream is closed, not taken
        self.told: set[str] = set()
        # A pipe, not a socket pair: the server's sockets stay its port and its streams.
        self.wake, self.waker = os.pipe()
        os.set_blocking(self.waker, False)

    def run(self, listener: socket.socket) -> list[ssl.SSLSocket]:
        with selectors.DefaultSelector() as selector:
            listener.setblocking(False)
            selector.register(listener, selectors.EVENT_READ)
            selector.register(self.wake, selectors.EVENT_READ)
            while True:
                with self.lock:
                    if None not in self.streams:
                        self.done = True
                        return [s for s in self.streams if s is not None]
                left = self.deadline - time.monotonic()
                if left <= 0:
                    # A consequence, as a lost stream is: the workers' own failure (or
                    # the run's timeout) is the cause, named where it happened.
                    raise Lost(f"client worker(s) {self._missing()} never connected within "
                               "the timeout")
                for key, _ in selector.select(left):
                    if key.fileobj == self.wake:
                        os.read(self.wake, 4096)
                    else:
                        self._accept(listener)

    def _accept(self, listener: socket.socket) -> None:
        try:
            conn, peer = listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return
        with self.lock:
            full = self.pending >= _MAX_PENDING
            self.pending += not full
        if full:
            conn.close()
            self._drop(peer, _Dropped(f"{_MAX_PENDING} handshakes were under way already"))
            return
        threading.Thread(target=self._handshake, args=(conn, peer), daemon=True).start()

    def _handshake(self, conn: socket.socket, peer: tuple) -> None:
        until = min(self.deadline, time.monotonic() + HANDSHAKE_S)
        tls: ssl.SSLSocket | None = None
        try:
            conn.settimeout(max(until - time.monotonic(), 0.001))
            # The handshake's timeout is one deadline for the whole of it (CPython's ssl).
            tls = self.ctx.wrap_socket(conn, server_side=True, suppress_ragged_eofs=False)
            magic, w = HELLO.unpack(DeadlineReader(tls, until).exactly(HELLO.size))
            if magic != MAGIC or not 0 <= w < len(self.streams):
                raise _Dropped("its hello is not a client worker's")
            with self.lock:
                if self.done or self.streams[w] is not None:
                    raise _Dropped(f"it claims client worker {w}, connected already")
                self.streams[w] = tls
        except Exception as exc:
            for sock in (tls, conn):
                if sock is not None:
                    sock.close()
            self._drop(peer, exc)
            return
        finally:
            with self.lock:
                self.pending -= 1
        with self.lock:  # a descriptor closed already may be another file's by now
            if self.waker >= 0:
                try:
                    os.write(self.waker, b"!")
                except BlockingIOError:
                    pass  # woken already

    def _drop(self, peer: tuple, exc: Exception) -> None:
        host = str(peer[0])
        with self.lock:
            if host in self.told:
                return
            self.told.add(host)
        if isinstance(exc, ssl.SSLError):
            why = f"its TLS handshake failed ({exc.reason or exc})"
        elif isinstance(exc, TimeoutError):
            why = f"no TLS handshake and hello within {HANDSHAKE_S:g} s"
        elif isinstance(exc, _Dropped):
            why = str(exc)
        else:
            why = f"it closed before its hello ({exc or type(exc).__name__})"
        print(f"{self.who}: dropped a connection from {host} to its stream port: {why}; not "
              "one of this run's client workers (said once per address)",
              file=sys.stderr, flush=True)

    def _missing(self) -> str:
        with self.lock:
            return ", ".join(str(w) for w, s in enumerate(self.streams) if s is None)

    def close(self) -> None:
        with self.lock:
            self.done = True
            os.close(self.waker)
            self.waker = -1
        os.close(self.wake)
