"""What the client host and the servers run for a ``[client]`` inventory.

``python -m harness.remote.transfer prepare DIR`` (on the client host) prepares
every server's share file from the clients' data in DIR, exactly as
:func:`harness.clients.prepare.prepare_inputs` does on this machine, and prints
what the runner needs to verify the result (the plaintext sketch's encoding),
never the shares.

``python -m harness.remote.transfer receive ...`` (on server i) accepts one
TLS connection from the client host and writes what it sends to its share file;
``python -m harness.remote.transfer send ...`` (on the client host) sends each
server its own file, to all servers at once. Both sides pin the other's
per-run certificate (the servers' are MP-SPDZ's own ``P<i>.pem``; the client's
is made for the run), so nobody else can send a server shares or receive them.
Each transfer starts with its length, so a cut connection is an error, not a
short file.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import struct
import sys
import threading
import time
from pathlib import Path

__all__ = ["main"]

_CHUNK = 1 << 20
_TIMEOUT = 600.0
_HEADER = struct.Struct("!Q")


def _context(server: bool, cert: Path, key: Path, peer: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    # The peer's own self-signed certificate is the only trust anchor: pinning.
    ctx.load_verify_locations(cafile=str(peer))
    ctx.verify_mode = ssl.CERT_REQUIRED
    if not server:
        ctx.check_hostname = False  # names are "P<i>", not host names; the pin decides
    return ctx


def receive(bind: str, port: int, cert: Path, key: Path, peer: Path, out: Path,
            aggregate: tuple[Path, Path] | None = None) -> None:
    """Receive this server's shares; with ``aggregate`` (plan, dest), the ``local``
    program's aggregation follows at once, its modules loaded while waiting."""
    ctx = _context(True, cert, key, peer)
    loader = None
    if aggregate is not None:
        loader = threading.Thread(target=__import__, args=("harness.engine.aggregate",))
    with socket.create_server((bind, port), reuse_port=False) as listener:
        listener.settimeout(_TIMEOUT)
        print("listening", flush=True)
        if loader is not None:
            loader.start()
        conn, _ = listener.accept()
    conn.settimeout(_TIMEOUT)
    with ctx.wrap_socket(conn, server_side=True, suppress_ragged_eofs=False) as tls:
        started = time.perf_counter()
        (size,) = _HEADER.unpack(_read_exactly(tls, _HEADER.size))
        got = 0
        out.parent.mkdir(parents=True, exist_ok=True)
        # Private from creation: these are secret shares.
        with open(out, "wb", opener=lambda p, f: os.open(p, f, 0o600)) as fh:
            while got < size:
                data = tls.recv(min(_CHUNK, size - got))
                if not data:
                    raise ConnectionError(f"the client host sent {got} of {size} bytes")
                fh.write(data)
                got += len(data)
        tls.sendall(b"ok")
    print(f"received {got} {time.perf_counter() - started:.6f}", flush=True)
    if aggregate is not None:
        assert loader is not None
        loader.join()
        from harness.engine.aggregate import aggregate_file

        plan, dest = aggregate
        print(f"aggregate_s {aggregate_file(out, plan, dest):.6f}", flush=True)
        out.unlink()


def _read_exactly(tls: ssl.SSLSocket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        data = tls.recv(n - len(buf))
        if not data:
            raise ConnectionError("the connection closed early")
        buf += data
    return buf


def send(targets: list[dict], cert: Path, key: Path) -> dict[int, float]:
    """Each target: party, host, port, peer (its certificate), file. All at once."""
    seconds: dict[int, float] = {}
    errors: list[str] = []

    def one(t: dict) -> None:
        try:
            ctx = _context(False, cert, key, Path(t["peer"]))
            started = time.perf_counter()
            path = Path(t["file"])
            size = path.stat().st_size
            with socket.create_connection((t["host"], t["port"]), timeout=_TIMEOUT) as raw, \
                    ctx.wrap_socket(raw) as tls, open(path, "rb") as fh:
                tls.sendall(_HEADER.pack(size))
                while block := fh.read(_CHUNK):
                    tls.sendall(block)
                if _read_exactly(tls, 2) != b"ok":
                    raise ConnectionError("no acknowledgement")
            seconds[t["party"]] = time.perf_counter() - started
        except Exception as exc:  # reported for the runner to name the server
            errors.append(f"P{t['party']} at {t['host']}:{t['port']}: {exc}")

    threads = [threading.Thread(target=one, args=(t,)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise ConnectionError("; ".join(errors))
    return seconds


def prepare(directory: Path) -> dict:
    import numpy as np

    from harness.clients.encoding import FixedPoint
    from harness.clients.layout import Layout
    from harness.clients.noise import NoiseSpec, noise_rng
    from harness.clients.prepare import ShareSink, prepare_inputs
    from harness.clients.sketch import Sketch

    os.umask(0o077)  # the share files are secret from creation
    params = json.loads((directory / "params.json").read_text())
    data = np.load(directory / "data.npy", allow_pickle=False)
    sketch = Sketch.load(directory / "sketch.npz")
    d = data.shape[1]
    if params["layout"] == "blocked":
        layout = Layout.blocked(sketch, d, params["block_rows"], params["chunk_blocks"])
    else:
        layout = Layout.plain(sketch, d)
    fp = FixedPoint(params["frac_bits"])
    sink = ShareSink([directory / f"Transactions-P{i}.data" for i in range(params["parties"])])
    prepared = prepare_inputs(data, sketch, layout, NoiseSpec(**params["noise"]), fp, sink,
                              noise_rng())
    # The shares stay here; only what verification needs goes back to the runner.
    (directory / "data.npy").unlink()
    return {"expected": base64.b64encode(prepared.expected.astype("<u8").tobytes()).decode(),
            "abs_sums": base64.b64encode(prepared.abs_sums.astype("<f8").tobytes()).decode(),
            "shape": list(prepared.expected.shape), "upload_bytes": prepared.upload_bytes,
            "seconds": prepared.seconds, "stats": prepared.stats}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command = args[0] if args else ""
    if command == "prepare" and len(args) == 2:
        print(json.dumps(prepare(Path(args[1]))))
    elif command == "receive" and len(args) in (7, 9):
        bind, port, cert, key, peer, out = args[1:7]
        aggregate = (Path(args[7]), Path(args[8])) if len(args) == 9 else None
        receive(bind, int(port), Path(cert), Path(key), Path(peer), Path(out), aggregate)
    elif command == "send" and len(args) == 4:
        targets = json.loads(Path(args[1]).read_text())
        print(json.dumps(send(targets, Path(args[2]), Path(args[3]))))
    else:
        print("usage: python -m harness.remote.transfer prepare DIR | receive BIND PORT CERT "
              "KEY PEER OUT [PLAN DEST] | send TARGETS.json CERT KEY", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
