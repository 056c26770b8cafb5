"""The host agent's streamed steps as real processes on this machine (two servers'
``serve``, one client host's ``stream``), stopped mid-stream by a signal: SIGTERM (what
a lost SSH session or the runner's cleanup sends), SIGHUP, SIGINT, or SIGKILL. However
it ends, nothing of it is left: no process, no channel buffer's memory, nothing in
/dev/shm; a signal it can handle is said in one line, with status 128 + the signal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _buffers import buffers_held, left_in_shm, shm_entries
from _sshd import descendants

import harness
from harness.clients import ADDITIVE, Sketch
from harness.engine import make_certificates
from harness.engine.cluster import find_free_ports
from harness.privacy import NoiseSpec
from harness.remote.agent import LOST
from harness.stream import StreamPlan, StreamSpec, pid_alive

TREE = Path(harness.__file__).resolve().parent.parent
N, D, M = 20_000_000, 3, 10


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    cwd.mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "harness.remote.agent", *args], cwd=cwd,
                            env={**os.environ, "PYTHONPATH": str(TREE)},
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _streaming(tmp_path: Path) -> tuple[list[subprocess.Popen], subprocess.Popen]:
    """Two servers listening, and a client host streaming to them."""
    plan = StreamPlan(N, D, M, 1, 2, ADDITIVE.name, workers=2, chunk=4096, hosts=(2,))
    sketch = Sketch.sparse(N, M, 1, seed=1)
    [(client_key, client_cert, _)] = make_certificates(1, tmp_path / "client-cert")
    servers = make_certificates(2, tmp_path / "server-certs")
    base = find_free_ports(2)
    spec = tmp_path / "stream.json"
    spec.write_text(StreamSpec(plan, sketch).to_json())
    host_spec = tmp_path / "host-stream.json"
    host_spec.write_text(StreamSpec(plan, sketch, noise=NoiseSpec("none", n=N, m=M, d=D, s=1),
                                    rows={"kind": "synthetic", "seed": 1, "eta": 1.0}).to_json())
    procs: list[subprocess.Popen] = []
    try:
        for i, (key, cert, _) in enumerate(servers):
            procs.append(_start(["serve", str(spec), str(i), str(base + i), str(cert),
                                 str(key), str(client_cert), "aggregate", "--bind",
                                 "127.0.0.1"], tmp_path / f"P{i}"))
            said = procs[-1].stdout.readline()  # type: ignore[union-attr]
            assert said and json.loads(said) == {"step": "listening"}, \
                procs[-1].communicate(timeout=30)
        targets = tmp_path / "targets.json"
        targets.write_text(json.dumps([{"host": "127.0.0.1", "port": base + i,
                                        "peer": str(cert)}
                                       for i, (_, cert, _) in enumerate(servers)]))
        client = _start(["stream", str(host_spec), str(targets), "0", str(client_cert),
                         str(client_key)], tmp_path / "client")
    except BaseException:
        _stop(procs)  # a server that never listened leaves no process (nor its pipes)
        raise
    return procs, client


def _stop(procs: list[subprocess.Popen]) -> None:
    """End and reap each of ``procs``, closing its pipes."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT,
                                    signal.SIGKILL])
@pytest.mark.parametrize("victim", ["client host", "server"])
def test_an_agent_stopped_mid_stream_leaves_nothing(tmp_path, signum, victim):
    shm_before = shm_entries()
    servers, client = _streaming(tmp_path)
    everyone = [*servers, client]
    target = client if victim == "client host" else servers[1]
    try:
        deadline = time.monotonic() + 60
        tree: list[int] = []
        # Mid-stream: every client worker is connected to every server (a server's
        # agent holds its listener and a connection per worker).
        # Every server's, not only the target's: a worker still connecting to a server
        # would retry it, not lose its stream.
        def connected() -> bool:
            return all(sum(_sockets(pid) for pid in [s.pid, *descendants(s.pid)]) >= 3
                       for s in servers)

        while sum(_sockets(pid) for pid in tree) < (4 if target is client else 3) or \
                not connected():
            assert target.poll() is None, target.communicate()
            assert time.monotonic() < deadline, "the stream never started"
            time.sleep(0.01)
            tree = [target.pid, *descendants(target.pid)]
        time.sleep(0.3)
        target.send_signal(signum)
        _, err = target.communicate(timeout=30)
        for proc in everyone:
            proc.communicate(timeout=30)
    finally:
        _stop(everyone)
    step = "stream" if victim == "client host" else "serve"
    if signum == signal.SIGKILL:
        assert target.returncode == -signal.SIGKILL
    else:
        assert target.returncode == 128 + signum, err
        assert err == f"agent {step}: stopped by {signal.Signals(signum).name}\n"
    # The others only lost their streams, and say so by their status.
    assert [p.returncode for p in everyone if p is not target] == [LOST] * 2
    deadline = time.monotonic() + 5
    while (buffers_held(tree) or _running(tree)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not buffers_held(tree)
    assert not _running(tree)
    assert left_in_shm(shm_before) == []
    assert not list(tmp_path.rglob("aggregate*"))  # no server wrote its aggregate


def _running(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (not ended, not a zombie)."""
    return [pid for pid in pids if pid_alive(pid)]


def _sockets(pid: int) -> int:
    try:
        return sum(os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
                   for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0
