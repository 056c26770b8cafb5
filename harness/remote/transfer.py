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
The transfer itself is :mod:`harness.engine.upload`'s, the same one that carries
the clients' upload through the emulated network (``--network``).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import threading
from pathlib import Path

from harness.engine.upload import TIMEOUT, receive_files, send_files

__all__ = ["main"]


def receive(bind: str, port: int, cert: Path, key: Path, peer: Path, out: Path,
            aggregate: tuple[Path, Path] | None = None) -> None:
    """Receive this server's shares; with ``aggregate`` (plan, dest), the ``local``
    program's aggregation follows at once, its modules loaded while waiting."""
    loader = None
    if aggregate is not None:
        loader = threading.Thread(target=__import__, args=("harness.engine.aggregate",))

    def listening() -> None:
        print("listening", flush=True)
        if loader is not None:
            loader.start()

    # The runner decides where this server's one file goes, whatever the sender calls it.
    got, seconds = receive_files(bind, port, cert, key, peer, lambda _name: out,
                                 timeout=TIMEOUT, on_listening=listening)
    print(f"received {got} {seconds:.6f}", flush=True)
    if aggregate is not None:
        assert loader is not None
        loader.join()
        from harness.engine.aggregate import aggregate_file

        plan, dest = aggregate
        print(f"aggregate_s {aggregate_file(out, plan, dest):.6f}", flush=True)
        out.unlink()


def send(targets: list[dict], cert: Path, key: Path) -> dict[int, float]:
    """Each target: party, host, port, peer (its certificate), file. All at once."""
    return send_files([{**t, "files": [[t["file"], Path(t["file"]).name]]} for t in targets],
                      cert, key, timeout=TIMEOUT)


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
