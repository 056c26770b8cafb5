"""Reading one field of a streamed run's wire: linear in its size, not quadratic.

A server reads each field of a frame (:mod:`harness.stream.wire`) into one
buffer of the announced size, with ``recv_into``. Appending each received piece
to a ``bytes`` instead copies everything read so far at every piece, a TLS record
(16 KiB) at a time: quadratic. Both read the same array field through real TLS
(the run's own kind of per-run certificates) over a socket pair, for each size
in turn, interleaved, best of ``--repeat``; the report gives each time and the
ratio of each size's time to the first's. Linear: doubling the size doubles the
time (ratio 2 for 16 and 32 MiB); quadratic: four times.

    python -m benchmarks.stream_read [--mib 16 32] [--repeat 3] [--no-appending]
                                     [--json FILE] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks._cli import parse_arguments
from harness.engine import make_certificates
from harness.stream.tls import tls_context
from harness.stream.wire import DeadlineReader, pack_fields, read_fields

# The smallest size (--smoke): small fields, in seconds.
SMOKE = {"mib": [1, 2], "repeat": 1}


def _appending(sock: ssl.SSLSocket, n: int) -> bytes:
    """The quadratic read this replaced: a bytes object grown piece by piece."""
    buf = b""
    while len(buf) < n:
        data = sock.recv(n - len(buf))
        if not data:
            raise ConnectionError("the connection closed early")
        buf += data
    return buf


def _read_appending(sock: ssl.SSLSocket, count: int, limit: int) -> None:
    # The field's tag, header length, header and size, then its bytes, appended.
    _appending(sock, 1)
    length = int.from_bytes(_appending(sock, 8), "big")
    _appending(sock, length)
    nbytes = int.from_bytes(_appending(sock, 8), "big")
    assert nbytes <= limit
    _appending(sock, nbytes)


def _read_preallocated(sock: ssl.SSLSocket, count: int, limit: int) -> None:
    read_fields(DeadlineReader(sock, time.monotonic() + 3600), count, limit)


def _pair(certs: Path) -> tuple[ssl.SSLSocket, ssl.SSLSocket]:
    """Both ends of a TLS connection over a socket pair: the server's and the client's."""
    (skey, scert, _), (ckey, ccert, _) = make_certificates(2, certs)
    a, b = socket.socketpair()
    server = tls_context(True, scert, skey, ccert).wrap_socket(
        a, server_side=True, do_handshake_on_connect=False)
    client = tls_context(False, ccert, ckey, scert).wrap_socket(
        b, do_handshake_on_connect=False)
    shake = threading.Thread(target=client.do_handshake)
    shake.start()
    server.do_handshake()
    shake.join()
    return server, client


def measure(sizes_mib: list[int], repeat: int, readers: dict) -> dict[str, dict[int, float]]:
    with tempfile.TemporaryDirectory(prefix="ltm-bench-") as tmp:
        server, client = _pair(Path(tmp) / "certs")
        with server, client:
            best = {name: dict.fromkeys(sizes_mib, float("inf")) for name in readers}
            for _ in range(repeat):
                for mib in sizes_mib:
                    field = pack_fields([np.zeros(mib << 17, dtype=np.uint64)])
                    for name, read in readers.items():
                        sender = threading.Thread(target=client.sendall, args=(field,))
                        sender.start()
                        started = time.perf_counter()
                        read(server, 1, mib << 20)
                        best[name][mib] = min(best[name][mib], time.perf_counter() - started)
                        sender.join()
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stream_read",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, nargs="+", default=[16, 32],
                        help="field sizes, MiB (default: 16 32)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-appending", action="store_true",
                        help="leave out the quadratic read (slow at large sizes)")
    parser.add_argument("--json", type=Path, help="also write the times here")
    args = parse_arguments(parser, argv, SMOKE)
    if args.json is not None and args.json.exists():
        print(f"benchmarks.stream_read: error: {args.json} exists; not overwriting it",
              file=sys.stderr)
        return 1
    if args.repeat < 1 or min(args.mib) < 1 or max(args.mib) > 1024:
        print("benchmarks.stream_read: error: --repeat must be positive and --mib in "
              "[1, 1024]", file=sys.stderr)
        return 1
    readers = {"preallocated": _read_preallocated}
    if not args.no_appending:
        readers["appending"] = _read_appending
    best = measure(args.mib, args.repeat, readers)
    first = args.mib[0]
    print("| read | " + " | ".join(f"{mib} MiB (s)" for mib in args.mib) + " | "
          + " | ".join(f"{mib}/{first}" for mib in args.mib[1:]) + " |")
    print("|---|" + "---:|" * (2 * len(args.mib) - 1))
    for name, times in best.items():
        print(f"| {name} | " + " | ".join(f"{times[mib]:.3f}" for mib in args.mib) + " | "
              + " | ".join(f"{times[mib] / times[first]:.2f}" for mib in args.mib[1:]) + " |")
    if args.json is not None:
        args.json.write_text(json.dumps({"mib": args.mib, "repeat": args.repeat, "seconds": {
            name: {str(mib): t for mib, t in times.items()} for name, times in best.items()}},
            indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
