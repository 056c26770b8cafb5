"""The clients' upload: files sent to a server over TLS, both sides' certificates pinned.

One connection per server carries any number of files, each framed as its
name (a relative path below the receiver's directory), its length and its
bytes; a zero-length name ends the upload, and the receiver acknowledges only
once every file is written. A cut connection is therefore an error, never a
short file. Both sides pin the other's per-run certificate (the servers' are
MP-SPDZ's own ``P<i>.pem``, the client's is made for the run): nobody else can
send a server shares, or receive them.

TLS rather than plain TCP with ``sendfile``: it is what real clients would
use, and here AES-GCM in OpenSSL encrypts and decrypts several hundred MB/s per
core, well above one t3.large link (64 MB/s); the sender reads and sends 4 MiB
at a time so that Python's overhead per call does not count.

``python -m harness.engine.upload receive BIND PORT CERT KEY PEER ROOT`` runs a
receiver (inside a party's network namespace, or on a server host);
``python -m harness.engine.upload send TARGETS.json CERT KEY`` sends every
target its files, all targets at once, and prints the seconds each took.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from harness.fileio import open_private, private_dir
from harness.retry import retry

__all__ = ["TIMEOUT", "read_exactly", "receive_files", "safe_destination", "send_files",
           "tls_context", "main"]

TIMEOUT = 600.0
_CHUNK = 4 << 20
_NAME = struct.Struct("!H")
_SIZE = struct.Struct("!Q")
_ACK = b"ok"
# A receiver that is still starting refuses connections: retried, not counted.
_CONNECT_RETRY_S = 30.0


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


def read_exactly(sock: socket.socket, n: int) -> bytearray:
    # One buffer of n bytes, filled in place: linear in n (appending to bytes is not).
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise ConnectionError("the connection closed early")
        got += k
    return buf


def safe_destination(root: Path, name: str) -> Path:
    """``root/name`` for a plain relative name; anything reaching outside is refused."""
    rel = PurePosixPath(name)
    # Only names that are already in normal form: "a//b" or "./a" are not what was meant.
    if not name or rel.as_posix() != name or rel.is_absolute() or ".." in rel.parts:
        raise ConnectionError(f"refused the file name {name!r}: not a plain relative path")
    return root.joinpath(*rel.parts)


def receive_files(bind: str, port: int, cert: Path, key: Path, peer: Path,
                  place: Callable[[str], Path], *, timeout: float = TIMEOUT,
                  on_listening: Callable[[], None] | None = None,
                  before_ack: Callable[[list[str]], None] | None = None,
                  senders: int = 1) -> tuple[int, float]:
    """Accept ``senders`` connections from the pinned peer and write every file they send
    where ``place(name)`` says, private from creation. Returns (bytes, seconds).

    ``before_ack`` sees the names one connection sent and may raise to refuse an
    upload that is complete on the wire but not what was expected: that sender
    then gets no acknowledgement, no success. Several senders (client hosts)
    upload at once, each on its own connection; the first that fails closes the
    port, so the receiver does not wait for the others to time out.
    """
    ctx = tls_context(True, cert, key, peer)
    errors: list[BaseException] = []
    spans: list[tuple[float, float]] = []
    totals: list[int] = []
    threads = []
    with socket.create_server((bind, port), reuse_port=False,
                              backlog=max(1, senders)) as listener:
        listener.settimeout(timeout)
        if on_listening is not None:
            on_listening()

        def serve(conn: socket.socket) -> None:
            try:
                totals.append(_receive_one(ctx, conn, place, before_ack, timeout, spans))
            except BaseException as exc:
                errors.append(exc)
                # Wakes the accept below (close alone would not): one failure ends it all.
                with contextlib.suppress(OSError):
                    listener.shutdown(socket.SHUT_RDWR)

        for _ in range(senders):
            try:
                conn, _ = listener.accept()
            except OSError:
                if errors:
                    break
                raise
            thread = threading.Thread(target=serve, args=(conn,))
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
    started = min(a for a, _ in spans)
    return sum(totals), max(b for _, b in spans) - started


def _receive_one(ctx: ssl.SSLContext, conn: socket.socket, place: Callable[[str], Path],
                 before_ack: Callable[[list[str]], None] | None, timeout: float,
                 spans: list[tuple[float, float]]) -> int:
    """One sender's files over one connection; its bytes. Its (start, end) goes to spans."""
    conn.settimeout(timeout)
    total = 0
    names: list[str] = []
    buf = memoryview(bytearray(_CHUNK))
    with ctx.wrap_socket(conn, server_side=True, suppress_ragged_eofs=False) as tls:
        started = time.perf_counter()
        while True:
            (length,) = _NAME.unpack(read_exactly(tls, _NAME.size))
            if length == 0:
                break
            name = read_exactly(tls, length).decode()
            dest = place(name)
            names.append(name)
            (size,) = _SIZE.unpack(read_exactly(tls, _SIZE.size))
            private_dir(dest.parent)
            got = 0
            with open_private(dest) as fh:
                while got < size:
                    # TLS hands over one record (16 KiB) per call: gather a whole chunk
                    # for each write, so the writes cost nothing beside the decryption.
                    want = min(_CHUNK, size - got)
                    filled = 0
                    while filled < want:
                        k = tls.recv_into(buf[filled:want])
                        if not k:
                            raise ConnectionError(f"the client sent {got + filled} of {size} "
                                                  f"bytes of {dest.name}")
                        filled += k
                    fh.write(buf[:filled])
                    got += filled
            total += size
        if before_ack is not None:
            before_ack(names)
        tls.sendall(_ACK)
    spans.append((started, time.perf_counter()))
    return total


def _connect(host: str, port: int, timeout: float) -> socket.socket:
    # The receiver may not listen yet: retry a refused connection for a short while.
    deadline = time.monotonic() + min(timeout, _CONNECT_RETRY_S)
    return retry(lambda: socket.create_connection((host, port), timeout=timeout),
                 when=(ConnectionRefusedError, TimeoutError), delay=0.01, factor=2,
                 max_delay=0.2, give_up=lambda: time.monotonic() + 0.01 > deadline)


def send_files(targets: list[dict], cert: Path, key: Path, *,
               timeout: float = TIMEOUT) -> dict[int, float]:
    """Send every target its files, all at once; the seconds each took, by party.

    A target is a dict: party, host, port, peer (the path of its pinned
    certificate) and files, a list of (local path, name at the receiver).

    Each target's clock runs from the TLS handshake to the acknowledgement that
    its last file is written; the connections are made first (a receiver still
    starting is waited for), then all targets start together.
    """
    seconds: dict[int, float] = {}
    errors: list[str] = []
    start = threading.Barrier(len(targets))

    def one(t: dict) -> None:
        raw = None
        try:
            try:
                ctx = tls_context(False, cert, key, Path(t["peer"]))
                raw = _connect(t["host"], t["port"], timeout)
            except BaseException:
                start.abort()  # the others need not wait for this one
                raise
            try:
                start.wait(timeout)
            except threading.BrokenBarrierError:
                return  # another target failed and says why
            started = time.perf_counter()
            buf = memoryview(bytearray(_CHUNK))
            with ctx.wrap_socket(raw) as tls:
                for local, name in t["files"]:
                    encoded = name.encode()
                    with open(local, "rb") as fh:
                        size = Path(local).stat().st_size
                        tls.sendall(_NAME.pack(len(encoded)) + encoded + _SIZE.pack(size))
                        while k := fh.readinto(buf):
                            tls.sendall(buf[:k])
                tls.sendall(_NAME.pack(0))
                if read_exactly(tls, len(_ACK)) != _ACK:
                    raise ConnectionError("no acknowledgement")
            seconds[t["party"]] = time.perf_counter() - started
        except Exception as exc:  # reported for the caller to name the server
            errors.append(f"P{t['party']} at {t['host']}:{t['port']}: {exc}")
        finally:
            if raw is not None:
                raw.close()

    threads = [threading.Thread(target=one, args=(t,)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise ConnectionError("; ".join(errors))
    return seconds


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command = args[0] if args else ""
    if command == "receive" and len(args) == 7:
        bind, port, cert, key, peer, root = args[1:7]
        got, seconds = receive_files(
            bind, int(port), Path(cert), Path(key), Path(peer),
            lambda name: safe_destination(Path(root), name),
            on_listening=lambda: print("listening", flush=True))
        print(f"received {got} {seconds:.6f}", flush=True)
    elif command == "send" and len(args) == 4:
        targets = json.loads(Path(args[1]).read_text())
        print(json.dumps(send_files(targets, Path(args[2]), Path(args[3]))), flush=True)
    else:
        print("usage: python -m harness.engine.upload receive BIND PORT CERT KEY PEER ROOT "
              "| send TARGETS.json CERT KEY", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
