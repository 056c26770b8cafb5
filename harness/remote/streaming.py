"""A streamed run's steps on its hosts: a server sums its stream, a client host makes its own.

These run through the host agent (:mod:`harness.remote.agent`), in the host's
private working directory, from a public stream description
(:class:`harness.stream.StreamSpec`, ``stream.json``) that the runner
uploaded:

* :func:`serve`, on each server: binds its port on the address its inventory
  entry gives (``listen``, else ``mpc_host``), says it is listening, then takes
  one TLS connection per client worker (the clients' per-run certificate
  pinned; any other connection is dropped) and sums the chunks into its accumulators as they arrive
  (:func:`harness.engine.serve_party`), or, for the ``fast`` program, writes
  them into its blocked share file and the public schedule. Only its m x d
  aggregate (or that share file) is left, where MP-SPDZ then reads it. Where
  the route feeds the parties (``fast``), its party was started first and waits
  at its public input, a FIFO: the server feeds it each chunk as it comes
  (:func:`harness.stream.files.fed`), and no share file is ever whole.
* :func:`produce`, on a client host: runs that host's client workers over its
  own contiguous range of clients, each connecting to every server
  (:func:`harness.stream.stream_clients`), and reports what verification needs:
  the plaintext sums of its clients, never a share.

Each returns the JSON-ready figures the agent prints.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import numpy as np

from harness.errors import LtmError
from harness.stream import (
    ProducerTotals,
    StreamSpec,
    TlsRoute,
    TlsTransport,
    serve_party,
    stream_clients,
    sweep_stale_buffers,
)

__all__ = ["encode_totals", "decode_totals", "produce", "serve"]


def serve(spec_path: Path, party: int, bind: str, port: int, cert: Path, key: Path,
          peer: Path, dest: Path, schedule: Path | None, timeout: float,
          on_listening: object = None, gate: Path | None = None,
          party_pid_file: Path | None = None) -> dict:
    """Server ``party``'s stream into ``dest`` (and ``schedule``), listening on
    ``bind:port``; or with ``gate``, fed to its party (whose process id
    ``party_pid_file`` holds) through that FIFO as it comes. Its figures."""
    spec = StreamSpec.from_json(spec_path.read_text())
    fed = None
    if gate is not None:
        assert party_pid_file is not None
        fed = (gate, _party_pid(party_pid_file, timeout))
    sweep_stale_buffers()  # what a killed run of an earlier release left on this host
    route = TlsRoute.on_host(party, spec.plan.parties, port, cert, key, peer, timeout, bind)
    try:
        end = TlsTransport(route).listening_end(party)
    except OSError as exc:
        raise LtmError(f"cannot listen on {bind}:{port} ({exc.strerror or exc}); if "
                       f"{bind} is not an address of this host, give one as `listen` in "
                       "its inventory entry") from None
    if callable(on_listening):
        on_listening()
    return serve_party(party, spec.plan, spec.sketch, end, dest, spec.as_input, spec.blocks,
                       schedule, gate=fed, timeout=timeout)


def _party_pid(path: Path, timeout: float) -> int:
    """The process id its party's wrapper writes as it starts (before this step)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            text = ""
        if text.isdigit():
            return int(text)
        if time.monotonic() > deadline:
            raise LtmError(f"its MPC party never started: {path} holds no process id "
                           f"after {timeout:g} s")
        time.sleep(0.01)


def produce(spec_path: Path, targets_path: Path, host: int, cert: Path, key: Path,
            timeout: float) -> dict:
    """Client host ``host``'s workers, streaming to the servers in ``targets.json``
    (address, port and pinned certificate of each, in party order)."""
    spec = StreamSpec.from_json(spec_path.read_text())
    if spec.noise is None:
        raise ValueError("the stream description has no noise parameters")
    targets = json.loads(targets_path.read_text())
    route = TlsRoute.between_hosts(tuple(str(t["host"]) for t in targets),
                                   tuple(int(t["port"]) for t in targets),
                                   tuple(Path(str(t["peer"])).resolve() for t in targets),
                                   cert.resolve(), key.resolve(), timeout)
    workers = spec.plan.host_workers(host)
    totals = stream_clients(spec.plan, spec.sketch, spec.open_rows(Path.cwd()), spec.noise,
                            spec.fp, route, workers=workers, timeout=timeout)
    return {"workers": [encode_totals(t) for t in totals]}


def encode_totals(totals: ProducerTotals) -> dict:
    """A worker's totals as JSON: the plaintext sums as base64 little-endian arrays."""
    return {"shape": list(totals.expected.shape),
            "expected": base64.b64encode(totals.expected.astype("<u8").tobytes()).decode(),
            "abs_sums": base64.b64encode(totals.abs_sums.astype("<f8").tobytes()).decode(),
            "noise_sum": totals.noise_sum, "noise_sq": totals.noise_sq,
            "busy_s": totals.busy_s, "wait_s": totals.wait_s, "cpu_s": totals.cpu_s,
            "expand_s": totals.expand_s, "sampler": totals.sampler}


def decode_totals(raw: dict) -> ProducerTotals:
    shape = tuple(int(x) for x in raw["shape"])
    expected = np.frombuffer(base64.b64decode(raw["expected"]), "<u8").reshape(shape)
    abs_sums = np.frombuffer(base64.b64decode(raw["abs_sums"]), "<f8").reshape(shape)
    figures = {k: float(raw[k]) for k in ("noise_sum", "noise_sq", "busy_s", "wait_s",
                                          "cpu_s", "expand_s")}
    return ProducerTotals(expected.astype(np.uint64), abs_sums.astype(np.float64),
                          **figures, sampler=str(raw["sampler"]))
