"""Streamed runs through the emulated network: real namespaces, shaped links, TLS, processes.

The servers run in their parties' namespaces and take their chunks over TLS
from the clients' namespace; their aggregates are checked against numpy (no
MP-SPDZ here), then a whole ``ltm run --network`` with real MP-SPDZ parties.
Faults, with full or seeded sharing, to servers that sum and to servers that write
``fast``'s files: a server killed mid-stream, a stream over TLS that ends early or
carries more than announced; and Ctrl-C.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from _buffers import buffers_held
from _sshd import descendants
from _strangers import Strangers

from harness.clients import (
    ADDITIVE,
    REPLICATED,
    FixedPoint,
    Sketch,
    SyntheticRows,
    read_share_file,
)
from harness.engine import make_certificates
from harness.engine.netns import NetworkEmulation
from harness.experiments import RunConfig, run
from harness.experiments.run import summary
from harness.privacy import NoiseSpec
from harness.stream import (
    BlockShape,
    ChannelBuffer,
    StreamError,
    StreamPlan,
    produce,
    stream_inputs,
)
from harness.stream.launch import _server_main, _worker_main
from harness.stream.procs import Processes
from harness.stream.tls import TlsRoute
from harness.stream.wire import FRAME as _FRAME

IS_ROOT = os.geteuid() == 0
ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.root,
              pytest.mark.skipif(not IS_ROOT, reason="network namespaces need root")]


def _route(net: NetworkEmulation, tmp_path: Path, parties: int) -> TlsRoute:
    servers = make_certificates(parties, tmp_path / "certs")
    [(key, cert, _)] = make_certificates(1, tmp_path / "client-cert")
    return TlsRoute(tuple(net.namespace(i) for i in range(parties)),
                    tuple(net.address(i) for i in range(parties)), (4999,) * parties,
                    tuple(c for _, c, _ in servers), tuple(k for k, _, _ in servers),
                    net.client_namespace, cert, key, 60.0)


def _dests(tmp_path: Path, parties: int) -> list[Path]:
    for i in range(parties):
        (tmp_path / f"P{i}").mkdir(mode=0o700)
    return [tmp_path / f"P{i}" / "aggregate" for i in range(parties)]


def _reference(sketch: Sketch, data: np.ndarray, fp: FixedPoint) -> np.ndarray:
    enc = fp.encode(data)
    out = np.zeros((sketch.m, data.shape[1]), dtype=np.uint64)
    plus = sketch.signs[0] > 0
    np.add.at(out, sketch.rows[0][plus], enc[plus])
    np.subtract.at(out, sketch.rows[0][~plus], enc[~plus])
    return out


@pytest.mark.parametrize(("profile", "fmt"), [("t3.large", ADDITIVE), ("none", REPLICATED)])
def test_servers_sum_what_crossed_their_links(tmp_path, profile, fmt):
    n, d, m, parties = 30_000, 3, 7, 3
    sketch = Sketch.sparse(n, m, 1, seed=6)
    rows = SyntheticRows(n, d, 1.0, seed=6)
    fp = FixedPoint(16)
    plan = StreamPlan(n, d, m, 1, parties, fmt.name, workers=2, chunk=997)
    dests = _dests(tmp_path, parties)
    with NetworkEmulation(profile, parties, client=True) as net:
        done = stream_inputs(plan, sketch, rows, NoiseSpec("none", n=n, m=m, d=d, s=1), fp,
                             dests, as_input=False, timeout=120,
                             transport=_route(net, tmp_path, parties))
    reference = _reference(sketch, rows.read(0, n), fp)
    assert np.array_equal(done.prepared.expected, reference)
    # Replicated: party i holds (a_i, a_{i-1}); the first components add up.
    shares = [read_share_file(p, fmt).reshape(m, d, fmt.words)[..., 0] for p in dests]
    assert np.array_equal(np.sum(shares, axis=0, dtype=np.uint64), reference)
    assert not any(np.array_equal(x, reference) for x in shares)
    stages = done.stages
    # Every server received its words, a frame per chunk and per stream's end, and the
    # messages' small fields (a chunk's slot counts at most): nothing more.
    frames = (plan.chunks + plan.workers) * _FRAME.size
    extra = stages["stream_upload_bytes"] - (n * d * 8 * fmt.words + frames)
    assert 0 <= extra <= plan.chunks * (128 + 2 * m * 8)
    assert 0 < stages["stream_upload_s"] <= stages["stream_wall_s"]
    parts = stages["stream_clients_s"] + stages["stream_upload_s"] + stages["stream_servers_s"]
    assert stages["stream_overlap"] == pytest.approx(parts / stages["stream_wall_s"])


def test_strangers_in_the_clients_namespace_change_nothing(tmp_path):
    # Each server's port is bound to its namespace's address; strangers reach it from the
    # clients' namespace before any client worker does, and the run still verifies.
    n, d, m, parties = 20_000, 2, 5, 2
    sketch = Sketch.sparse(n, m, 1, seed=8)
    rows = SyntheticRows(n, d, 1.0, seed=8)
    fp = FixedPoint(16)
    plan = StreamPlan(n, d, m, 1, parties, ADDITIVE.name, workers=2, chunk=997)
    dests = _dests(tmp_path, parties)
    ctx = multiprocessing.get_context("fork")
    strangers = None
    with NetworkEmulation("none", parties, client=True) as net:
        route = _route(net, tmp_path, parties)
        carrier = route(plan, ctx)
        try:
            with Processes(ctx) as procs:
                for i in range(parties):
                    procs.start(f"server P{i}", _server_main,
                                (i, plan, sketch, carrier.server_end(i), dests[i], False, None,
                                 None, None, 120.0))
                strangers = Strangers(tmp_path, list(zip(route.addresses, route.ports,
                                                         strict=True)),
                                      namespace=net.client_namespace)
                for w in range(plan.workers):
                    procs.start(f"client worker {w}", _worker_main,
                                (w, plan, sketch, rows, NoiseSpec("none", n=n, m=m, d=d, s=1),
                                 fp, carrier.client_end(w)))
                # Below the stream's timeout: a server held up by a stranger fails here.
                results = procs.collect(time.perf_counter() + 0.75 * route.timeout)
        finally:
            if strangers is not None:
                strangers.leave()
    assert len(results) == parties + plan.workers
    shares = [read_share_file(p, ADDITIVE).reshape(m, d) for p in dests]
    assert np.array_equal(np.sum(shares, axis=0, dtype=np.uint64),
                          _reference(sketch, rows.read(0, n), fp))


@pytest.mark.parametrize(("victim", "sharing", "blocks"), [
    ("server P1", "full", None), ("client worker 1", "full", None),
    # seeded: the servers expand seeds as they come; fast's write their files as they go
    ("server P1", "seeded", None), ("server P1", "seeded", BlockShape(4, 64)),
    ("server P1", "full", BlockShape(4, 64))],
    ids=["full-server", "full-worker", "seeded-server", "fast-seeded-server",
         "fast-full-server"])
def test_a_process_killed_mid_stream_is_named(tmp_path, victim, sharing, blocks):
    n, d, m, parties = 4_000_000, 4, 10, 3
    sketch = Sketch.sparse(n, m, 1, seed=1)
    rows = SyntheticRows(n, d, 1.0, seed=1)
    dests = _dests(tmp_path, parties)
    schedule = tmp_path / "public-input" if blocks is not None else None
    killed: list[int] = []
    children: list[int] = []

    def kill_victim() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            # P1 has taken every worker's connection: its receive buffers exist.
            children[:] = [c.pid for c in multiprocessing.active_children() if c.pid]
            if any(name == "ltm-channel-r1-P1" for _, name, _ in buffers_held(children)):
                proc = next(c for c in multiprocessing.active_children() if c.name == victim)
                time.sleep(0.3)  # mid-stream: chunks are crossing the links
                assert proc.pid is not None
                os.kill(proc.pid, signal.SIGKILL)
                killed.append(proc.pid)
                return
            time.sleep(0.01)

    killer = threading.Thread(target=kill_victim)
    with NetworkEmulation("t3.large-baseline", parties, client=True) as net:
        route = _route(net, tmp_path, parties)
        killer.start()
        with pytest.raises(StreamError, match=rf"{victim} exited with status -9 mid-stream"):
            stream_inputs(StreamPlan(n, d, m, 1, parties, ADDITIVE.name, workers=2,
                                     chunk=4096, sharing=sharing),
                          sketch, rows, NoiseSpec("none", n=n, m=m, d=d, s=1),
                          FixedPoint(16), dests, as_input=False, timeout=120, transport=route,
                          blocks=blocks, schedule=schedule)
        killer.join()
    assert killed
    # Nothing half-written: no aggregate, no share file or schedule, whole or in part.
    assert not any(p.exists() for p in dests)
    assert not list(tmp_path.rglob("*.part"))
    assert schedule is None or not schedule.exists()
    assert not multiprocessing.active_children()
    # The memory went with the processes: none is held, nothing is in /dev/shm.
    assert not buffers_held([os.getpid(), *children])


class _Recorder:
    """Stands for a server's link: keeps what a real worker sends it, frees every slot."""

    def __init__(self) -> None:
        self.sent: list[tuple] = []

    def send(self, message: tuple) -> None:
        self.sent.append(message)

    def recv(self) -> tuple:
        return ("free", 0)


def _recorded(tmp_path: Path, plan: StreamPlan, sketch: Sketch) -> list[tuple]:
    """The messages a real client worker sends server 0 for ``plan``, whatever they hold."""
    rows = SyntheticRows(plan.n, plan.d, 1.0, seed=2)
    buffers = [ChannelBuffer(plan.slot_bytes)
               for i in range(plan.parties)]
    links = [_Recorder() for _ in range(plan.parties)]
    produce(0, plan, sketch, rows, NoiseSpec("none", n=plan.n, m=plan.m, d=plan.d, s=1),
            FixedPoint(16), buffers, links)
    return links[0].sent


def _replaying_worker(route: TlsRoute, plan: StreamPlan, messages: list[tuple]) -> None:
    """A client worker whose link to server 0 (the real TLS one) carries ``messages``."""
    end = route(plan, None).client_end(0)
    _, links = end.open(plan)
    try:
        for message in messages:
            links[0].send(message)
            if message[0] == "chunk":
                links[0].recv()  # sent: the slot is free again
    except (OSError, EOFError):
        pass  # the server refused the stream and closed it
    finally:
        end.close()


_EDITS = {
    "ends early": lambda sent: [sent[0], ("end", 1, *sent[-1][2:])],
    "carries more": lambda sent: [*sent[:-1], ("chunk", 3, 1, *sent[0][3:]), sent[-1]],
}
# What a summing server says, and what a server writing fast's share file says.
_SAID = {
    ("ends early", False): "got a stream from client worker 0 that ended early: 1 of 3 "
                           "chunks arrived, 1 announced",
    ("carries more", False): r"got chunk 3 from client worker 0, which owes nothing more "
                             r"\(more than announced",
    ("ends early", True): r"got end 1 from client worker 0, which owes chunk 1 \(an early "
                          r"end",
    ("carries more", True): "got more than announced from client worker 0: chunk after its "
                            "3 chunks",
}


@pytest.mark.parametrize("edit", list(_EDITS))
@pytest.mark.parametrize(("sharing", "writes_file"), [
    ("full", False), ("seeded", False), ("full", True), ("seeded", True)])
def test_a_server_refuses_a_tls_stream_that_is_not_the_announced_one(tmp_path, edit, sharing,
                                                                     writes_file):
    n, d, m = 250, 2, 4
    plan = StreamPlan(n, d, m, 1, 2, ADDITIVE.name, workers=1, chunk=97, sharing=sharing)
    sketch = Sketch.sparse(n, m, 1, seed=2)
    sent = _recorded(tmp_path, plan, sketch)
    assert [x[0] for x in sent] == ["chunk"] * 3 + ["end"]
    dest = tmp_path / "agg"
    blocks = BlockShape(4, 5) if writes_file else None
    schedule = tmp_path / "public-input" if writes_file else None
    ctx = multiprocessing.get_context("fork")
    with NetworkEmulation("none", 2, client=True) as net:
        route = _route(net, tmp_path, 2)
        end = route(plan, ctx).server_end(0)
        only_p0 = dataclasses.replace(route, namespaces=route.namespaces[:1],
                                      addresses=route.addresses[:1], certs=route.certs[:1],
                                      keys=route.keys[:1])
        got, report = ctx.Pipe(duplex=False)
        server = ctx.Process(target=_server_main,
                             args=(0, plan, sketch, end, dest, False, blocks, schedule,
                                   None, 120.0, report))
        client = ctx.Process(target=_replaying_worker,
                             args=(only_p0, plan, _EDITS[edit](sent)))
        server.start()
        client.start()
        assert got.poll(60)
        kind, message = got.recv()
        server.join(10)
        client.join(10)
        client.kill()
    said = _SAID[edit, writes_file]
    assert kind == "error" and re.search(said, message), message
    assert not dest.exists() and not list(tmp_path.rglob("*.part"))
    assert schedule is None or not schedule.exists()


@pytest.mark.mpspdz
def test_a_streamed_network_run_verifies_and_reports_its_stages(tmp_path, mp_spdz,
                                                                program_cache):
    out = tmp_path / "out"
    cfg = RunConfig(out=out, cache_dir=program_cache, timeout=120, program="local",
                    parties=3, clients=200_000, dim=3, rows=20, seed=7,
                    network="t3.large-baseline", keep_work=True)
    result = run(cfg)
    assert result["verification"]["ok"] and result["verification"]["mismatches"] == 0
    assert result["parameters"]["layout"]["kind"] == "streamed"
    t = result["timings"]
    assert t["stream_upload_bytes"] >= 200_000 * 3 * 8  # each server's words crossed its link
    assert 0 < t["stream_upload_s"] <= t["stream_wall_s"] == t["prepare_s"]
    parts = t["stream_clients_s"] + t["stream_upload_s"] + t["stream_servers_s"]
    assert t["stream_overlap"] == pytest.approx(parts / t["stream_wall_s"])
    assert result["upload_measured"]
    # Each server timed its own upload; the slowest is the stage, inside the stream.
    uploads = [p["upload_s"] for p in result["parties"]]
    assert t["client_upload_s"] == t["stream_upload_s"] == max(uploads) > 0
    assert [p["upload_bytes_sent"] for p in result["parties"]] == \
        [int(t["stream_upload_bytes"])] * 3
    mpc = max(p["mpc_time_s"] for p in result["parties"])
    assert result["t_end_to_end_s"] == pytest.approx(t["prepare_s"] + mpc)
    line = next(x for x in summary(result, out).splitlines()
                if "T_end_to_end" in x)
    assert f"upload {t['stream_upload_s']:.3f} (4.8 MB per server)" in line
    assert f"their times add up to {t['stream_overlap']:.2f}x the stream's" in line
    # No server wrote a share file of the clients' rows: each holds its aggregate only.
    for i in range(3):
        files = [p for p in (out / "work" / f"P{i}").rglob("*") if p.is_file()
                 and ("Persistence" in p.parts or p.name.startswith("Input-P"))]
        assert files and all(p.stat().st_size < 20 * 3 * 8 * 30 for p in files)
    assert not (out / "work" / "client" / "outbox").exists()


def _ours(pid: int) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in out.stdout.splitlines()
            if line.startswith(f"ltm-{pid}-")]


@pytest.mark.mpspdz
@pytest.mark.parametrize(("program", "sharing", "dim"), [
    ("local", "full", "10"), ("local", "seeded", "10"), ("fast", "seeded", "2")])
def test_ctrl_c_mid_stream_stops_everything_and_removes_the_network(tmp_path, mp_spdz,
                                                                    program, sharing, dim):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", "--program", program, "--parties", "3",
         "--clients", "20000000", "--rows", "10", "--dim", dim, "--noise", "none",
         "--sharing", sharing, "--seed", "1", "--network", "t3.large-baseline",
         "--out", str(out)],
        cwd=ROOT, env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    # Streaming: server P2 has taken worker 1's connection.
    children: list[int] = []
    while not any(name == "ltm-channel-r1-P2" for _, name, _ in buffers_held(children)):
        children = descendants(proc.pid)
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the stream never started"
        time.sleep(0.01)
    assert _ours(proc.pid)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "Traceback" not in err
    assert not out.exists()
    assert not buffers_held(children)
    assert _ours(proc.pid) == []


@pytest.mark.mpspdz
def test_bad_input_found_while_streaming_is_one_line_and_removes_the_network(tmp_path, mp_spdz,
                                                                       program_cache):
    from harness.errors import InputError

    data = tmp_path / "rows.csv"
    lines = ["0.5,-0.25"] * 3000
    lines[2500] = "0.5,abc"
    data.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    cfg = RunConfig(out=out, cache_dir=program_cache, timeout=120, program="local",
                    parties=3, rows=10, seed=3, data=data, noise="none", network="none")
    with pytest.raises(InputError) as caught:
        run(cfg)
    assert "abc" in str(caught.value) and "\n" not in str(caught.value)
    assert not out.exists()
    assert _ours(os.getpid()) == []


def test_message_fields_cross_as_numbers_and_nothing_else():
    from harness.stream.wire import DeadlineReader, Malformed, pack_fields, read_fields

    counts = np.arange(8, dtype=np.int64).reshape(2, 4)
    a, b = socket.socketpair()
    with a, b:
        wire = DeadlineReader(b, time.monotonic() + 60)
        a.sendall(pack_fields([7, counts]))
        fields, size = read_fields(wire, 2, counts.nbytes)
        assert fields[0] == 7 and np.array_equal(fields[1], counts)
        assert fields[1].dtype == counts.dtype and size > counts.nbytes
        # An object array would be unpickled: refused, as is a size that lies.
        header = b'["|O", [1]]'
        a.sendall(b"a" + len(header).to_bytes(8, "big") + header + (8).to_bytes(8, "big"))
        with pytest.raises(Malformed, match="an array field of object"):
            read_fields(wire, 1, 64)
        header = b'["<i8", [4]]'
        a.sendall(b"a" + len(header).to_bytes(8, "big") + header + (8).to_bytes(8, "big"))
        with pytest.raises(Malformed, match="an array field of int64"):
            read_fields(wire, 1, 64)
