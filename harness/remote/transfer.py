"""What the client host and the servers do for a ``[client]`` inventory.

:func:`prepare` (on the client host) prepares every server's share file (or,
with seeded sharing, per component it holds, its seeds and the full words of
the clients that send that one in full) from the clients' data in a
directory, exactly as :func:`harness.clients.prepare_inputs` does on this
machine, and returns what the runner needs to verify the result (the
plaintext sketch's encoding) and the files it made for each server, never the
shares.

:func:`receive` (on server i) accepts one TLS connection from the client host
and writes the files it sends, which must be exactly the ones it was told to
expect. :func:`send` (on the client host) sends each server its own files, to
all servers at once. Both sides pin the other's per-run certificate (the
servers' are MP-SPDZ's own ``P<i>.pem``; the client's is made for the run),
so nobody else can send a server shares or receive them. The wire is
:func:`harness.engine.send_files`', the same one that carries the clients'
upload through the emulated network (``--network``): each file travels with
its name and length, so a cut connection is an error, not a short file.

The hosts run these through :mod:`harness.remote.agent`.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from pathlib import Path

from harness.engine import TIMEOUT, receive_files, send_files

__all__ = ["prepare", "receive", "send"]


def receive(bind: str, port: int, cert: Path, key: Path, peer: Path, names: list[str], *,
            on_listening: Callable[[], None] | None = None) -> tuple[int, float]:
    """Receive this server's files (``names``, relative to here) and nothing else;
    (bytes, seconds). ``on_listening`` runs once the port accepts connections."""
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

    return receive_files(bind, port, cert, key, peer, place, timeout=TIMEOUT,
                         on_listening=on_listening, before_ack=complete)


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
