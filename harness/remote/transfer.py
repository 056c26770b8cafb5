"""What the client host and the servers do for a ``[client]`` inventory.

:func:`prepare` (on the client host) prepares every server's share file (or,
with seeded sharing, per component it holds, its seeds and the full words of
the clients that send that one in full) from the clients' data in a
directory, exactly as :func:`harness.clients.prepare_inputs` does on this
machine, and returns what the runner needs to verify the result (the
plaintext sketch's encoding) and the files it made for each server, never the
shares.

:func:`receive` (on server i) accepts one TLS connection from each client host
and writes the files it sends, which must be exactly the ones it was told to
expect; with several client hosts, :func:`join` then puts their share files
end to end (:mod:`harness.clients.ranges`). :func:`send` (on a client host)
sends each server its own files, to all servers at once. Both sides pin the
other's per-run certificate (the servers' are MP-SPDZ's own ``P<i>.pem``; the
clients' is made for the run, one for all client hosts), so nobody else can
send a server shares or receive them. The wire is
:func:`harness.engine.send_files`', the same one that carries the clients'
upload through the emulated network (``--network``): each file travels with
its name and length, so a cut connection is an error, not a short file.

The hosts run these through :mod:`harness.remote.agent`.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from harness.engine import TIMEOUT, receive_files, send_files

__all__ = ["join", "prepare", "receive", "send"]

_COPY_BYTES = 4 << 20


def receive(bind: str, port: int, cert: Path, key: Path, peer: Path,
            senders: list[list[str]], *,
            on_listening: Callable[[], None] | None = None) -> tuple[int, float]:
    """Receive this server's files from each client host (``senders[k]``: host k's names,
    relative to here) and nothing else; (bytes, seconds). Each host sends on its own
    connection, all at once. ``on_listening`` runs once the port accepts connections."""
    waiting = {name for names in senders for name in names}
    done: set[int] = set()
    lock = threading.Lock()

    def place(name: str) -> Path:
        with lock:
            if name not in waiting:
                # Only names the runner gave: a client host cannot write anywhere else.
                raise ConnectionError(f"the client host sent {name!r}, which is not expected "
                                      "here (or twice)")
            waiting.discard(name)
        return Path(name)

    def complete(sent: list[str]) -> None:
        with lock:
            for k, names in enumerate(senders):
                if k not in done and set(sent) == set(names):
                    done.add(k)
                    return
        missing = sorted(set(next((n for n in senders if set(sent) <= set(n)), [])) - set(sent))
        raise ConnectionError(f"the client host did not send {missing or 'the expected files'}")

    return receive_files(bind, port, cert, key, peer, place, timeout=TIMEOUT,
                         on_listening=on_listening, before_ack=complete, senders=len(senders))


def join(fmt_name: str, out: Path, parts: list[Path]) -> tuple[int, float]:
    """The client hosts' share files, each a blocked layout of its own range, end to end in
    host order as one file ``out`` (one header); (bytes, seconds). Each part goes once
    it is copied, so the disk holds at most one part twice."""
    from harness.clients import share_format

    started = time.perf_counter()
    header = share_format(fmt_name).header
    for part in parts:
        with open(part, "rb") as fh:
            if fh.read(len(header)) != header:
                raise ValueError(f"{part} is not a {fmt_name} share file")
    first, rest = parts[0], parts[1:]
    with open(first, "ab") as dest:
        for part in rest:
            with open(part, "rb") as src:
                src.seek(len(header))
                shutil.copyfileobj(src, dest, _COPY_BYTES)
            part.unlink()
    first.replace(out)
    return out.stat().st_size, time.perf_counter() - started


def send(targets: list[dict], cert: Path, key: Path) -> dict[int, float]:
    """Each target: party, host, port, peer (its certificate), files ([local, name] pairs,
    the name being where the server keeps it). All at once; seconds each."""
    return send_files(targets, cert, key, timeout=TIMEOUT)


def prepare(directory: Path) -> dict:
    """Every server's files from the clients' data in ``directory`` (``params.json``,
    ``data.npy``, ``sketch.npz``); what the runner needs back, as JSON-ready values."""
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
    sink: SeededSink | ShareSink
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
