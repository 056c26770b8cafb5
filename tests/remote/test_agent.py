"""The host agent (``python -m harness.remote.agent``) as the hosts run it: a real process,
one JSON line per step on stdout, the files it writes checked word for word."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import harness
from harness.clients import (
    ADDITIVE,
    FixedPoint,
    Layout,
    NoiseSpec,
    SeededSink,
    ShareSink,
    Sketch,
    expand_party,
    prepare_inputs,
    read_share_file,
    upload_files,
)
from harness.clients import save_plan as save_expand_plan
from harness.engine import make_certificates, save_plan

TREE = Path(harness.__file__).resolve().parent.parent
N, M, D, S = 300, 8, 3, 2


def agent(*args: str, cwd: Path, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(TREE)}
    return subprocess.run([sys.executable, "-m", "harness.remote.agent", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120, **kw)


def reply(done: subprocess.CompletedProcess, step: str) -> dict:
    """The step's one JSON line, and nothing else on stdout."""
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    answer = json.loads(line)
    assert answer["step"] == step
    return answer


def workload() -> tuple[np.ndarray, Sketch, Layout, NoiseSpec]:
    data = np.random.default_rng(5).uniform(-1, 1, size=(N, D))
    sketch = Sketch.generate(N, M, S, seed=6)
    layout = Layout.blocked(sketch, D, block_rows=16)
    return data, sketch, layout, NoiseSpec("none", n=N, m=M, d=D, s=S)


def test_aggregate_sums_a_servers_shares_into_shares_of_the_sketch(tmp_path):
    data, sketch, layout, noise = workload()
    files = [tmp_path / f"P{i}" / "Persistence" / f"Received-P{i}.data" for i in range(2)]
    for f in files:
        f.parent.mkdir(parents=True)
    prepared = prepare_inputs(data, sketch, layout, noise, FixedPoint(16),
                              ShareSink(files, ADDITIVE), np.random.default_rng(0))
    total = np.zeros((M, D), dtype=np.uint64)
    for i, source in enumerate(files):
        server = source.parent.parent
        save_plan(layout, server / "aggregate-plan.npz", ADDITIVE)
        dest = f"Persistence/Transactions-P{i}.data"
        done = agent("aggregate", str(source.relative_to(server)), "aggregate-plan.npz", dest,
                     "--remove-source", cwd=server)
        answer = reply(done, "aggregate")
        written = server / dest
        assert answer["seconds"] > 0 and answer["bytes"] == written.stat().st_size
        assert written.stat().st_mode & 0o777 == 0o600 and not source.exists()
        total += read_share_file(written, ADDITIVE).reshape(M, D)
    # Each aggregate alone is a random share; the two together are the plaintext sketch.
    assert np.array_equal(total, prepared.expected)


def test_expand_writes_the_share_file_the_layout_gives(tmp_path):
    data, sketch, layout, noise = workload()
    dirs = [tmp_path / f"P{i}" for i in range(2)]
    prepare_inputs(data, sketch, layout, noise, FixedPoint(16),
                   SeededSink(dirs, layout, ADDITIVE, N, S, D), np.random.default_rng(0))
    save_expand_plan(tmp_path / "expand-plan.npz", layout, ADDITIVE, 2, N, S)
    here = tmp_path / "here"
    (here / "Upload").mkdir(parents=True)
    for path in upload_files(dirs[1]):
        (here / "Upload" / path.name).write_bytes(path.read_bytes())
    expand_party(1, here, tmp_path / "expected.data", layout, ADDITIVE, 2, N, S)

    done = agent("expand", "1", str(tmp_path / "expand-plan.npz"), "share.data", cwd=dirs[1])
    answer = reply(done, "expand")
    share = dirs[1] / "share.data"
    assert answer["party"] == 1 and answer["bytes"] == share.stat().st_size
    assert share.read_bytes() == (tmp_path / "expected.data").read_bytes()
    assert not (dirs[1] / "Upload").exists()  # the seeds are gone once expanded


def test_a_failing_step_says_so_in_one_line_and_prints_no_reply(tmp_path):
    done = agent("aggregate", "missing.data", "missing-plan.npz", "out.data", cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("agent aggregate: ")
    assert "missing-plan.npz" in done.stderr
    assert agent("expand", "x", "plan", "out", cwd=tmp_path).returncode == 2  # usage


def test_receive_and_send_between_two_agents(tmp_path):
    [(server_key, server_cert, _)] = make_certificates(1, tmp_path / "server")
    [(client_key, client_cert, _)] = make_certificates(1, tmp_path / "client")
    server, client = tmp_path / "server-dir", tmp_path / "client-dir"
    server.mkdir()
    client.mkdir()
    payload = client / "Transactions-P0.data"
    payload.write_bytes(os.urandom(100_000))
    port = _port()
    receiver = subprocess.Popen(
        [sys.executable, "-m", "harness.remote.agent", "receive", "127.0.0.1", str(port),
         str(server_cert), str(server_key), str(client_cert),
         "--file", "Persistence/Transactions-P0.data"],
        cwd=server, env={**os.environ, "PYTHONPATH": str(TREE)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout is not None
        assert json.loads(receiver.stdout.readline()) == {"step": "listening"}
        targets = client / "targets.json"
        targets.write_text(json.dumps([{"party": 0, "host": "127.0.0.1", "port": port,
                                        "peer": str(server_cert),
                                        "files": [[payload.name,
                                                   "Persistence/Transactions-P0.data"]]}]))
        sent = reply(agent("send", "targets.json", str(client_cert), str(client_key),
                           cwd=client), "send")
        out, err = receiver.communicate(timeout=60)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
    assert receiver.returncode == 0, err
    [line] = out.splitlines()
    got = json.loads(line)
    assert got["step"] == "receive" and got["bytes"] == payload.stat().st_size
    assert float(sent["seconds"]["0"]) > 0
    received = server / "Persistence" / "Transactions-P0.data"
    assert received.read_bytes() == payload.read_bytes()
    assert received.stat().st_mode & 0o777 == 0o600


def _port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
