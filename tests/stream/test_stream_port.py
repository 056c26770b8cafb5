"""A streamed run's TLS port against strangers, malformed frames and slow senders, on the
loopback: real server and client worker processes, real TLS with the run's certificates.

Strangers connect before any client worker does (so the server meets them first):
plain TCP saying nothing or garbage, TLS without a client certificate or with another
one, a trickle of bytes. The run still verifies, within a deadline far below the
stream's timeout. A holder of the clients' key who sends malformed fields is refused
in one line naming the worker, the chunk and the violation; one who trickles is
stopped at the stream's deadline.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import ssl
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from _strangers import PROMPTLY, Strangers, reach

from harness.clients import ADDITIVE, FixedPoint, Sketch, SyntheticRows, read_share_file
from harness.engine import make_certificates
from harness.engine.cluster import find_free_ports
from harness.privacy import NoiseSpec
from harness.stream import BlockShape, SketchGroups, StreamPlan
from harness.stream.launch import _server_main, _worker_main
from harness.stream.procs import Processes
from harness.stream.tls import TlsRoute, tls_context
from harness.stream.wire import ACK, FRAME, HELLO, MAGIC, chunk_frame, end_frame

N, D, M = 3000, 2, 5
TIMEOUT = 120.0  # the stream's; a run held up by a stranger would take all of it


def _route(tmp_path: Path, parties: int, timeout: float = TIMEOUT) -> TlsRoute:
    servers = make_certificates(parties, tmp_path / "certs")
    [(key, cert, _)] = make_certificates(1, tmp_path / "client-cert")
    base = find_free_ports(parties)
    return TlsRoute((), ("127.0.0.1",) * parties, tuple(range(base, base + parties)),
                    tuple(c for _, c, _ in servers), tuple(k for k, _, _ in servers), "",
                    cert, key, timeout)


def _plan(parties: int = 2, workers: int = 2) -> StreamPlan:
    return StreamPlan(N, D, M, 1, parties, ADDITIVE.name, workers=workers, chunk=400)


def _reference(sketch: Sketch, data: np.ndarray, fp: FixedPoint) -> np.ndarray:
    enc = fp.encode(data)
    out = np.zeros((sketch.m, data.shape[1]), dtype=np.uint64)
    plus = sketch.signs[0] > 0
    np.add.at(out, sketch.rows[0][plus], enc[plus])
    np.subtract.at(out, sketch.rows[0][~plus], enc[~plus])
    return out


def test_strangers_at_the_stream_ports_change_nothing(tmp_path, capfd):
    plan, parties = _plan(), 2
    sketch = Sketch.sparse(N, M, 1, seed=4)
    rows = SyntheticRows(N, D, 1.0, seed=4)
    fp = FixedPoint(16)
    route = _route(tmp_path, parties)
    for i in range(parties):
        (tmp_path / f"P{i}").mkdir(mode=0o700)
    dests = [tmp_path / f"P{i}" / "aggregate" for i in range(parties)]
    ctx = multiprocessing.get_context("fork")
    carrier = route(plan, ctx)
    strangers = None
    try:
        with Processes(ctx) as procs:
            for i in range(parties):
                procs.start(f"server P{i}", _server_main, (i, plan, sketch, carrier.server_end(i),
                                                           dests[i], False, None, None, None,
                                                           120.0))
            # The strangers first, then the run's own workers.
            strangers = Strangers(tmp_path, [("127.0.0.1", port) for port in route.ports])
            for w in range(plan.workers):
                procs.start(f"client worker {w}", _worker_main,
                            (w, plan, sketch, rows, NoiseSpec("none", n=N, m=M, d=D, s=1), fp,
                             carrier.client_end(w)))
            # Far below the stream's timeout: a server held up by a stranger fails here.
            results = procs.collect(time.perf_counter() + PROMPTLY)
    finally:
        if strangers is not None:
            strangers.leave()
    assert sorted(results) == ["client worker 0", "client worker 1", "server P0", "server P1"]
    shares = [read_share_file(p, ADDITIVE).reshape(M, D) for p in dests]
    assert np.array_equal(np.sum(shares, axis=0, dtype=np.uint64),
                          _reference(sketch, rows.read(0, N), fp))
    # Said on stderr, once per server and peer address, however many came from there.
    said = [line for line in capfd.readouterr().err.splitlines() if "dropped a" in line]
    for i in range(parties):
        mine = [line for line in said if line.startswith(f"server P{i}: ")]
        assert len(mine) == 1 and "from 127.0.0.1 to its stream port" in mine[0], said


class _Server:
    """Server P0 alone, in its own process, taking one client worker's stream: summing
    it, or with ``writes_file`` writing fast's share file and schedule."""

    def __init__(self, tmp_path: Path, timeout: float = TIMEOUT,
                 writes_file: bool = False) -> None:
        self.plan = _plan(workers=1)
        self.route = _route(tmp_path, 2, timeout)
        self.dest = tmp_path / "agg"
        blocks, schedule = (BlockShape(4, 5), tmp_path / "schedule") if writes_file else \
            (None, None)
        ctx = multiprocessing.get_context("fork")
        end = self.route(self.plan, ctx).server_end(0)
        self.report, sent = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=_server_main,
                                args=(0, self.plan, _SKETCH, end, self.dest, False, blocks,
                                      schedule, None, 120.0, sent))
        self.proc.start()
        sent.close()

    def connect(self) -> ssl.SSLSocket:
        """A connection as client worker 0, with the clients' real key."""
        r = self.route
        tls = tls_context(False, r.client_cert, r.client_key, r.certs[0]).wrap_socket(
            reach("127.0.0.1", r.ports[0]))
        tls.sendall(HELLO.pack(MAGIC, 0))
        return tls

    def verdict(self) -> tuple[str, str]:
        assert self.report.poll(PROMPTLY), "the server never reported"
        kind, message = self.report.recv()
        self.proc.join(PROMPTLY)
        return kind, message

    def close(self) -> None:
        self.proc.kill()
        self.proc.join()


_SKETCH = Sketch.sparse(N, M, 1, seed=4)
_SLOTS = 400  # a chunk's slots (s = 1)
_WORDS = _SLOTS * D


def _counts(values: list[int], dtype=np.int64) -> np.ndarray:
    counts = np.zeros(2 * M, dtype=dtype)
    counts[: len(values)] = values
    return counts


def _chunk0(plan: StreamPlan) -> bytes:
    """Chunk 0 as a client worker sends it: its slot counts as the public sketch has them
    (server P0 checks chunk 0's against the seed, not chunk 1's), then its words."""
    counts = np.bincount(SketchGroups(_SKETCH, plan).chunk(0), minlength=2 * M)
    return chunk_frame(0, _WORDS, [counts]) + bytes(8 * _WORDS)


def _chunk(plan: StreamPlan, k: int) -> bytes:
    """Chunk k as a client worker sends it (the last one holds fewer clients)."""
    counts = np.bincount(SketchGroups(_SKETCH, plan).chunk(k), minlength=2 * M)
    words = plan.chunk_words(k)
    return chunk_frame(k, words, [counts]) + bytes(8 * words)


def _acknowledgement(tls: ssl.SSLSocket) -> bytes:
    """What the server answered an end with before it closed the stream."""
    tls.settimeout(PROMPTLY)
    try:
        return tls.recv(len(ACK))
    except (ssl.SSLError, OSError):
        return b""


def _array_field(header: bytes, nbytes: int) -> bytes:
    return b"a" + len(header).to_bytes(8, "big") + header + nbytes.to_bytes(8, "big")


# What a holder of the clients' key sends after its hello, and what the server says.
_MALFORMED = {
    "counts not an array": (
        lambda plan: chunk_frame(0, _WORDS, [_SLOTS]),
        "violation", r"^refused client worker 0's stream, a protocol violation after 0 of "
                     r"its 8 chunks: it sent chunk 0 with an integer as its slot counts, "
                     r"not 10 integers$"),
    "uint64 counts that wrap": (
        lambda plan: _chunk0(plan) + chunk_frame(
            1, _WORDS, [_counts([2**64 - 1, _SLOTS + 1], np.uint64)]) + bytes(8 * _WORDS),
        "error", r"^got chunk 1 from client worker 0 with slot counts that do not add up to "
                 r"its 400 slots$"),
    "int64 counts that wrap": (
        lambda plan: _chunk0(plan) + chunk_frame(1, _WORDS, [_counts([2**62] * 4 + [_SLOTS])])
        + bytes(8 * _WORDS),
        "error", r"^got chunk 1 from client worker 0 with slot counts that do not add up"),
    "a chunk with too few fields": (
        lambda plan: chunk_frame(0, _WORDS, []),
        "violation", r"after 0 of its 8 chunks: it sent chunk 0 with 0 fields, not its slot "
                     r"counts alone$"),
    "a second chunk with too few fields": (
        lambda plan: _chunk0(plan) + chunk_frame(1, _WORDS, []),
        "violation", r"after 1 of its 8 chunks: it sent chunk 1 with 0 fields"),
    # Two chunks arrived whole, and wait in the server's two slots: they are counted.
    "a third chunk's field of a petabyte": (
        lambda plan: _chunk0(plan) + chunk_frame(1, _WORDS, [_counts([_SLOTS])])
        + bytes(8 * _WORDS) + FRAME.pack(1, 2, _WORDS, 1)
        + _array_field(b'["<i8", [10]]', 1 << 50),
        "violation", r"after 2 of its 8 chunks: it sent chunk 2 with an array field of"),
    "an end with fields": (
        lambda plan: end_frame(0, [np.zeros(3, np.int64)]),
        "violation", r"it sent an end of 0 chunks with 1 fields, not none$"),
    "an unknown frame": (
        lambda plan: FRAME.pack(7, 0, 0, 0),
        "violation", r"it sent a frame of unknown kind 7$"),
    "an array field of a petabyte": (
        lambda plan: FRAME.pack(1, 0, _WORDS, 1) + _array_field(b'["<i8", [10]]', 1 << 50),
        "violation", r"after 0 of its 8 chunks: it sent chunk 0 with an array field of int64 "
                     r"\(10,\) in 1125899906842624 bytes$"),
    "an array field whose size wraps": (  # 2^64 elements: 0 in int64
        lambda plan: FRAME.pack(1, 0, _WORDS, 1)
        + _array_field(b'["<i8", [4294967296, 4294967296]]', 0),
        "violation", r"it sent chunk 0 with an array field of int64 \(4294967296, "
                     r"4294967296\) in 0 bytes$"),
}


@pytest.mark.parametrize("case", list(_MALFORMED))
def test_malformed_fields_from_a_holder_of_the_clients_key_are_one_line(tmp_path, case):
    frames, kind, said = _MALFORMED[case]
    server = _Server(tmp_path)
    try:
        with server.connect() as tls:
            tls.sendall(frames(server.plan))
            got, message = server.verdict()
    finally:
        server.close()
    assert (got, "\n" not in message) == (kind, True), message
    assert "Traceback" not in message and "Error:" not in message, message
    assert re.search(said, message), message
    assert not server.dest.exists()


# (chunks sent, chunks the end announces): what each server says, and that it never
# acknowledges the end ("ok" is a worker's proof its stream was delivered).
_WRONG_ENDS = {
    (8, 9): (r"^got a stream from client worker 0 whose end announced 9 chunks: all 8 of its "
             r"chunks arrived, as the plan says$",) * 2,
    (8, 3): (r"^got a stream from client worker 0 whose end announced 3 chunks: all 8 of its "
             r"chunks arrived, as the plan says$",) * 2,
    (7, 7): (r"^got a stream from client worker 0 that ended early: 7 of 8 chunks arrived, 7 "
             r"announced$", r"^got end 7 from client worker 0, which owes chunk 7 \(an early "
                            r"end"),
}


@pytest.mark.parametrize("writes_file", [False, True], ids=["sums", "writes-fast-file"])
@pytest.mark.parametrize("case", list(_WRONG_ENDS), ids=lambda c: f"{c[0]}-sent-{c[1]}-announced")
def test_an_end_with_a_wrong_count_is_refused_unacknowledged(tmp_path, writes_file, case):
    sent, announced = case
    server = _Server(tmp_path, writes_file=writes_file)
    try:
        with server.connect() as tls:
            tls.sendall(b"".join(_chunk(server.plan, k) for k in range(sent))
                        + end_frame(announced, []))
            answer = _acknowledgement(tls)
            got, message = server.verdict()
    finally:
        server.close()
    assert answer == b"", answer
    assert got == "error" and re.search(_WRONG_ENDS[case][writes_file], message), message
    assert not server.dest.exists() and not list(tmp_path.rglob("*.part"))


@pytest.mark.parametrize("writes_file", [False, True], ids=["sums", "writes-fast-file"])
def test_the_announced_end_is_acknowledged(tmp_path, writes_file):
    server = _Server(tmp_path, writes_file=writes_file)
    try:
        with server.connect() as tls:
            tls.sendall(b"".join(_chunk(server.plan, k) for k in range(8)) + end_frame(8, []))
            answer = _acknowledgement(tls)
            got, message = server.verdict()
    finally:
        server.close()
    assert (answer, got) == (ACK, "ok"), message
    assert server.dest.exists()


@pytest.mark.parametrize("writes_file", [False, True], ids=["sums", "writes-fast-file"])
def test_a_stream_cut_after_two_chunks_counts_its_chunks_not_a_read_s_bytes(tmp_path,
                                                                            writes_file):
    # "after 2 of 8 chunks (... 0 of 8 bytes)" read as a count of none of the chunks.
    server = _Server(tmp_path, writes_file=writes_file)
    try:
        with server.connect() as tls:
            tls.sendall(_chunk(server.plan, 0) + _chunk(server.plan, 1))
            try:
                tls.unwrap()  # sends TLS's close_notify: a clean close between messages
            except ssl.SSLError:
                pass  # the server's own close_notify need not come
            got, message = server.verdict()
    finally:
        server.close()
    assert got != "ok"
    assert "lost client worker 0's stream after 2 of 8 chunks" in message, message
    assert " 0 of " not in message and "bytes of a message still to come" in message


def test_a_sender_that_trickles_is_stopped_at_the_stream_s_deadline(tmp_path):
    # Each byte comes well within any per-read timeout; the stream's deadline stops it.
    server = _Server(tmp_path, timeout=3.0)
    stop = threading.Event()
    try:
        with server.connect() as tls:
            frame = _chunk0(server.plan)

            def trickle() -> None:
                try:
                    for byte in frame * 1000:
                        if stop.is_set():
                            return
                        tls.sendall(bytes([byte]))
                        time.sleep(0.1)
                except OSError:
                    pass  # the server gave up on it

            sender = threading.Thread(target=trickle, daemon=True)
            sender.start()
            got, message = server.verdict()
            stop.set()
            sender.join(PROMPTLY)
    finally:
        server.close()
    assert got == "error", message
    assert message == ("client worker 0's stream did not end within the timeout: 0 of its "
                       "8 chunks arrived; raise --timeout")


def _socket_inodes(pid: int) -> set[str]:
    fds = Path(f"/proc/{pid}/fd")
    found = set()
    for fd in fds.iterdir():
        try:
            target = fd.readlink()
        except OSError:
            continue  # closed meanwhile
        if str(target).startswith("socket:"):
            found.add(str(target))
    return found


def test_a_server_waiting_for_its_workers_holds_no_socket_but_its_port(tmp_path):
    # Its sockets are its port and its workers' streams alone: whoever watches them
    # (a host's runner, a test) sees a connection when there is one, and a dead peer's
    # streams gone.
    server = _Server(tmp_path)
    try:
        inherited = _socket_inodes(os.getpid())
        deadline = time.monotonic() + PROMPTLY
        while not _socket_inodes(server.proc.pid) - inherited:
            assert time.monotonic() < deadline, "the server never listened"
            time.sleep(0.01)
        reach("127.0.0.1", server.route.ports[0]).close()  # its accept loop has run
        time.sleep(0.5)
        assert len(_socket_inodes(server.proc.pid) - inherited) == 1
    finally:
        server.close()
