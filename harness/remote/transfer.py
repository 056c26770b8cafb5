"""What the client host and the servers run for a ``[client]`` inventory.

``python -m harness.remote.transfer prepare DIR`` (on the client host) prepares
every server's share file (or, with seeded sharing, per component it holds,
its seeds and the full words of the clients that send that one in full) from
the clients' data in DIR, exactly as :func:`harness.clients.prepare.prepare_inputs`
does on this machine, and prints what the runner needs to verify the result
(the plaintext sketch's encoding) and the files it made for each server, never
the shares.

``python -m harness.remote.transfer receive ...`` (on server i) accepts one
TLS connection from the client host and writes the files it sends, which must
be exactly the ones it was told to expect; then, as told, it expands its seeds
and aggregates its shares. ``python -m harness.remote.transfer send ...`` (on
the client host) sends each server its own files, to all servers at once. Both
sides pin the other's per-run certificate (the servers' are MP-SPDZ's own
``P<i>.pem``; the client's is made for the run), so nobody else can send a
server shares or receive them. The wire is :mod:`harness.engine.upload`'s, the
same one that carries the clients' upload through the emulated network
(``--network``): each file travels with its name and length, so a cut
connection is an error, not a short file.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import threading
from pathlib import Path

from harness.engine import TIMEOUT, receive_files, send_files

__all__ = ["main"]


def receive(bind: str, port: int, cert: Path, key: Path, peer: Path, names: list[str],
            expand: tuple[int, Path, Path] | None = None,
            aggregate: tuple[Path, Path, Path] | None = None) -> None:
    """Receive this server's files (``names``, relative to here) and nothing else.

    ``expand`` (party, plan, out): seeded sharing, the seeds in ``Upload/`` are
    expanded into ``out`` at once; ``aggregate`` (source, plan, dest): the
    ``local`` program's aggregation follows, after any expansion. Their modules
    load while the receiver waits, so neither counts their import.
    """
    modules = (["harness.clients.seeded"] if expand else []) + \
        (["harness.engine.aggregate"] if aggregate else [])
    loader = threading.Thread(target=lambda: [__import__(m) for m in modules])
    waiting = set(names)

    def place(name: str) -> Path:
        if name not in waiting:
            # Only names the runner gave: the client host cannot write anywhere else.
            raise ConnectionError(f"the client host sent {name!r}, which is not expected "
                                  "here (or twice)")
        waiting.discard(name)
        return Path(name)

    def complete() -> None:
        if waiting:
            raise ConnectionError(f"the client host did not send {sorted(waiting)}")

    def listening() -> None:
        print("listening", flush=True)
        loader.start()

    got, seconds = receive_files(bind, port, cert, key, peer, place, timeout=TIMEOUT,
                                 on_listening=listening, before_ack=complete)
    print(f"received {got} {seconds:.6f}", flush=True)
    loader.join()
    if expand is not None:
        from harness.clients import expand_file

        party, plan, out = expand
        print(f"expand_s {expand_file(party, plan, out):.6f}", flush=True)
    if aggregate is not None:
        from harness.engine import aggregate_file

        source, plan, dest = aggregate
        print(f"aggregate_s {aggregate_file(source, plan, dest):.6f}", flush=True)
        source.unlink()


def send(targets: list[dict], cert: Path, key: Path) -> dict[int, float]:
    """Each target: party, host, port, peer (its certificate), files ([local, name] pairs,
    the name being where the server keeps it). All at once; seconds each."""
    return send_files(targets, cert, key, timeout=TIMEOUT)


def prepare(directory: Path) -> dict:
    import numpy as np

    from harness.clients import (
        FixedPoint,
        Layout,
        NoiseSpec,
        SeededSink,
        ShareSink,
        Sketch,
        noise_rng,
        prepare_inputs,
        share_format,
        upload_files,
    )

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
    fmt = share_format(params.get("format", "additive"))
    parties = params["parties"]
    seeded = params.get("sharing", "full") == "seeded"
    if seeded:
        party_dirs = [directory / f"P{i}" for i in range(parties)]
        sink = SeededSink(party_dirs, layout, fmt, sketch.n, sketch.s, d)
    else:
        sink = ShareSink([directory / f"Transactions-P{i}.data" for i in range(parties)], fmt)
    prepared = prepare_inputs(data, sketch, layout, NoiseSpec(**params["noise"]), fp, sink,
                              noise_rng())
    # The shares stay here; only what verification needs goes back to the runner.
    (directory / "data.npy").unlink()
    if seeded:
        files = [[[str(p.relative_to(directory)), p.stat().st_size]
                  for p in upload_files(party_dir)] for party_dir in party_dirs]
    else:
        files = [[[f"Transactions-P{i}.data", (directory / f"Transactions-P{i}.data")
                   .stat().st_size]] for i in range(parties)]
    return {"expected": base64.b64encode(prepared.expected.astype("<u8").tobytes()).decode(),
            "abs_sums": base64.b64encode(prepared.abs_sums.astype("<f8").tobytes()).decode(),
            "shape": list(prepared.expected.shape), "upload_bytes": prepared.upload_bytes,
            "files": files, "seconds": prepared.seconds, "stats": prepared.stats}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.remote.transfer")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("prepare")
    p.add_argument("dir", type=Path)
    p = commands.add_parser("receive")
    for name in ("bind", "port", "cert", "key", "peer"):
        p.add_argument(name)
    p.add_argument("--file", action="append", required=True, dest="files")
    p.add_argument("--expand", nargs=3, metavar=("PARTY", "PLAN", "OUT"))
    p.add_argument("--aggregate", nargs=3, metavar=("SOURCE", "PLAN", "DEST"))
    p = commands.add_parser("send")
    for name in ("targets", "cert", "key"):
        p.add_argument(name, type=Path)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "prepare":
        print(json.dumps(prepare(args.dir)))
    elif args.command == "receive":
        expand = args.expand and (int(args.expand[0]), Path(args.expand[1]),
                                  Path(args.expand[2]))
        aggregate = args.aggregate and tuple(Path(a) for a in args.aggregate)
        receive(args.bind, int(args.port), Path(args.cert), Path(args.key), Path(args.peer),
                args.files, expand or None, aggregate or None)
    else:
        targets = json.loads(args.targets.read_text())
        print(json.dumps(send(targets, args.cert, args.key)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
