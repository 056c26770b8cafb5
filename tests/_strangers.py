"""Strangers at a streamed run's TLS port: connections that are not the run's client workers.

:class:`Strangers` connects to each given port, in a process of its own, five
times: plain TCP saying nothing, plain TCP saying garbage, TLS without a client
certificate, TLS with a certificate that is not the run's, and a trickle of
bytes (from a network namespace, if given). It returns once every connection is
established (queued at the server
before any client worker's, when the workers start after it); each then
misbehaves in a thread and holds on until :meth:`Strangers.leave`.
"""

from __future__ import annotations

import multiprocessing
import socket
import ssl
import threading
import time
from pathlib import Path

from harness.engine import make_certificates
from harness.stream.tls import enter_namespace
from harness.stream.wire import HELLO, MAGIC

__all__ = ["PROMPTLY", "Strangers", "reach"]

PROMPTLY = 60.0  # what a test waits at most: far below a stream's timeout


def reach(host: str, port: int) -> socket.socket:
    """A TCP connection to a server's port, once it listens."""
    deadline = time.monotonic() + PROMPTLY
    while True:
        try:
            return socket.create_connection((host, port), timeout=PROMPTLY)
        except ConnectionRefusedError:
            assert time.monotonic() < deadline, f"nothing ever listened on {host}:{port}"
            time.sleep(0.01)


class Strangers:
    """See the module's docstring. A spawned process: the test process may hold threads
    (inside OpenSSL, say) that a forked child would inherit mid-call."""

    def __init__(self, tmp_path: Path, ports: list[tuple[str, int]],
                 namespace: str = "") -> None:
        [(key, cert, _)] = make_certificates(1, tmp_path / "stranger-cert")
        ctx = multiprocessing.get_context("spawn")
        ready, said = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=_main, args=(ports, cert, key, said, namespace),
                                daemon=True)
        self.proc.start()
        said.close()
        assert ready.poll(PROMPTLY), "the strangers never reached the ports"
        ready.recv()

    def leave(self) -> None:
        self.proc.kill()
        self.proc.join()


def _main(ports: list[tuple[str, int]], cert: Path, key: Path, said, namespace: str) -> None:
    if namespace:  # where the run's client workers connect from
        enter_namespace(namespace)
    acts = [_silent, _garbage, _tls_without_cert, _tls_other_cert(cert, key), _trickle]
    socks = []
    for host, port in ports:
        for act in acts:
            sock = reach(host, port)
            socks.append(sock)
            threading.Thread(target=_quietly, args=(act, sock), daemon=True).start()
    said.send("connected")
    time.sleep(10 * PROMPTLY)


def _quietly(act, sock: socket.socket) -> None:
    try:
        act(sock)
    except OSError:
        pass  # dropped by the server: as it should be


def _silent(sock: socket.socket) -> None:
    pass


def _garbage(sock: socket.socket) -> None:
    sock.sendall(b"GET / HTTP/1.1\r\nHost: ltm\r\n\r\n" + bytes(range(256)) * 8)


def _tls(sock: socket.socket, cert: Path | None = None, key: Path | None = None) -> None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    with ctx.wrap_socket(sock) as tls:
        tls.sendall(HELLO.pack(MAGIC, 0))  # as client worker 0
        tls.recv(1)


def _tls_without_cert(sock: socket.socket) -> None:
    _tls(sock)


def _tls_other_cert(cert: Path, key: Path):
    return lambda sock: _tls(sock, cert, key)


def _trickle(sock: socket.socket) -> None:
    for byte in b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" * 100:
        sock.sendall(bytes([byte]))
        time.sleep(0.2)
