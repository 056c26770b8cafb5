"""Streaming to real sshd hosts: each server's host agent takes its TLS stream and sums it
(``local``), writes its share file (``reference``) or feeds its party (``fast``) as the
shares arrive, and the run
verifies bit for bit. No file of the clients' shares is ever uploaded. A server killed
mid-stream, or a client host killed while it streams, stops the run and is named
first; nothing is left on any host, whatever signal ended its agent: no directory, no
process, nothing in /dev/shm and no channel buffer's memory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _buffers import buffers_held, left_in_shm, shm_entries
from _sshd import (
    descendants,
    mpc_base_port,
    processes_under,
    trusted_inventory,
    write_inventory_file,
)

from harness.cli import main
from harness.experiments import RunConfig, run
from harness.remote._party import RemoteParty
from harness.remote.ssh import trust_hosts

pytestmark = [
    pytest.mark.root, pytest.mark.mpspdz,
    pytest.mark.skipif(os.geteuid() != 0, reason="the fake hosts are sshd servers logged into "
                       "as root"),
]


def left_behind(fakes, seconds: float = 5.0) -> tuple[list, list]:
    """Remote directories and processes still there (processes get a moment to end)."""
    deadline = time.monotonic() + seconds
    while True:
        procs = [p for f in fakes for p in processes_under(f.workdir)]
        if not procs or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    dirs = [p for f in fakes if f.workdir.exists() for p in f.workdir.iterdir()]
    return dirs, procs


@pytest.mark.parametrize(("program", "protocol", "sharing", "parties"), [
    ("local", "semi2k", "full", 2), ("local", "replicated-ring", "seeded", 3),
    ("fast", "ps-rep-ring", "seeded", 3), ("reference", "semi2k", "full", 2)])
def test_this_machine_streams_to_the_hosts_and_the_run_verifies(
        tmp_path, farm, mp_spdz, program_cache, monkeypatch, program, protocol, sharing,
        parties):
    path, fakes = trusted_inventory(tmp_path, farm, mp_spdz.root, parties)
    uploaded: list[str] = []
    original = RemoteParty.upload

    def spy(self, directories, uploads, abandon):  # every file sent to a server by SFTP
        uploaded.extend(u.remote for u in uploads)
        return original(self, directories, uploads, abandon)

    monkeypatch.setattr(RemoteParty, "upload", spy)
    cfg = RunConfig(out=tmp_path / "out", clients=5000, rows=10, dim=3, seed=5,
                    cache_dir=program_cache, parties=parties, program=program,
                    protocol=protocol, sharing=sharing, hosts=path, input_mode="shares")
    result = run(cfg)
    assert result["verification"]["ok"], result["verification"]
    kind = {"local": "streamed", "fast": "blocked-per-chunk",
            "reference": "slots-per-chunk"}[program]
    assert result["parameters"]["layout"]["kind"] == kind
    timings = result["timings"]
    assert timings["stream_upload_bytes"] > 0 and timings["stream_servers_s"] > 0
    assert ("stream_expand_s" in timings) == (sharing == "seeded")
    # The shares crossed the TLS streams only: no share, seed or input file went by SFTP.
    assert not [name for name in uploaded
                if name.startswith(("Persistence/", "Player-Data/Input-P"))]
    for row in result["parties"]:
        assert row["upload_bytes_sent"] > 0
        if program == "local":
            assert row["aggregate_s"] > 0
    assert left_behind(fakes) == ([], [])


def test_a_protocol_without_client_shares_inputs_each_hosts_aggregate(
        tmp_path, farm, mp_spdz, program_cache):
    # spdz2k: the clients share additively, each server sums its stream on its host
    # into its MP-SPDZ input text, and the protocol takes the sums as private inputs.
    path, fakes = trusted_inventory(tmp_path, farm, mp_spdz.root, 2)
    cfg = RunConfig(out=tmp_path / "out", clients=3000, rows=10, dim=3, seed=5,
                    cache_dir=program_cache, parties=2, program="local", protocol="spdz2k",
                    hosts=path)
    assert cfg.validate().inputs_aggregates
    result = run(cfg)
    assert result["verification"]["ok"], result["verification"]
    assert result["timings"]["stream_upload_bytes"] > 0
    assert all(row["aggregate_s"] > 0 for row in result["parties"])
    assert left_behind(fakes) == ([], [])


@pytest.mark.parametrize(("program", "input_mode", "kind", "dense"), [
    ("reference", "party", "party-text-per-chunk", False),
    ("fast", "party", "party-text-per-chunk", False),
    # the dense sketch, drawn here, goes where the stream runs here (to the hosts' own
    # servers it is refused in one line: tests/experiments/test_modes.py)
    ("fast", "party", "party-text-per-chunk", True)])
def test_streams_here_into_files_when_the_hosts_have_only_mp_spdz(
        tmp_path, farm, mp_spdz, program_cache, program, input_mode, kind, dense):
    # The data owner's input: written here into party 0's input text, with bounded
    # memory, and sent by SFTP to hosts without the harness. (No share file goes so:
    # tests/remote/test_host_fed.py.)
    fakes = [farm.add(f"p{i}") for i in range(3)]
    path = write_inventory_file(tmp_path / "hosts.toml",
                                [f.as_host(farm.client_key, mp_spdz.root) for f in fakes],
                                mpc_base_port(3))
    trust_hosts(path, echo=lambda line: None)
    cfg = RunConfig(out=tmp_path / "out", clients=3000, rows=10, dim=3, seed=5,
                    cache_dir=program_cache, parties=3, program=program,
                    input_mode=input_mode, hosts=path, dense=dense)
    assert cfg.validate().route.here
    result = run(cfg)
    assert result["verification"]["ok"], result["verification"]
    assert result["parameters"]["layout"]["kind"] == kind
    assert "stream_upload_s" not in result["timings"] and result["upload_measured"]
    t = result["timings"]
    # the files' upload follows the stream: counted once, after it
    assert result["t_end_to_end_s"] == pytest.approx(
        t["prepare_s"] + t["client_upload_s"] + result["t_mpc_s"])
    sent = result["client_upload_bytes"]
    assert result["parameters"]["dense"] == dense
    # the data owner's text, to party 0 only
    assert sent[0] > 3000 * 3 and sent[1:] == [0, 0]
    assert left_behind(fakes) == ([], [])


def _sockets(pid: int) -> int:
    try:
        return sum(os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
                   for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def _agents(root: Path, step: bytes) -> list[int]:
    """The host agents running ``step`` under ``root``."""
    found = []
    for pid, _ in processes_under(root):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"harness.remote.agent" in cmdline and step in cmdline:
            found.append(pid)
    return found


def _kill_when_seen(root: Path, step: bytes, killed: list[int], stop: threading.Event,
                    sockets: int, signum: int, tree: list[int]) -> None:
    """Send ``signum`` to the host agent's ``step`` under ``root`` once it holds
    ``sockets`` sockets (a server: its listener and a client's connection; mid-stream);
    ``tree`` gets the agent and its processes as they were."""
    while not stop.is_set() and not killed:
        for pid in _agents(root, step):
            if _sockets(pid) >= sockets:
                tree.extend([pid, *descendants(pid)])
                os.kill(pid, signum)
                killed.append(pid)
                break
        time.sleep(0.002)


def _run_and_kill(tmp_path: Path, path: Path, victim, step: bytes, sockets: int,
                  capsys, signum: int = signal.SIGKILL) -> tuple[int, str, Path]:
    """``ltm run`` on the hosts while the victim's agent ``step`` gets ``signum``
    mid-stream; its exit code, its stderr and its --out. Nothing the agent had is left:
    no channel buffer held by its processes, nothing in /dev/shm."""
    killed: list[int] = []
    tree: list[int] = []
    stop = threading.Event()
    shm_before = shm_entries()
    killer = threading.Thread(target=_kill_when_seen,
                              args=(victim.workdir, step, killed, stop, sockets, signum, tree))
    killer.start()
    out = tmp_path / "out"
    try:
        code = main(["run", "--hosts", str(path), "--program", "local", "--clients", "2000000",
                     "--rows", "10", "--dim", "3", "--out", str(out)])
    finally:
        stop.set()
        killer.join()
    err = capsys.readouterr().err
    assert killed, f"the victim's `agent {step.decode()}` was never seen: {err}"
    assert code == 1 and err.count("\n") == 1 and err.startswith("ltm: error: "), err
    assert "(no party was started)" in err
    assert not (out / "result.json").exists()  # no partial output
    deadline = time.monotonic() + 5
    while buffers_held(tree) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not buffers_held(tree)
    assert left_in_shm(shm_before) == []
    return code, err, out


@pytest.mark.parametrize(("clients", "signum"), [
    (0, signal.SIGKILL), (2, signal.SIGKILL), (2, signal.SIGTERM)])
def test_a_server_killed_mid_stream_is_named_and_nothing_is_left(
        tmp_path, farm, mp_spdz, program_cache, capsys, monkeypatch, clients, signum):
    import harness.engine.programs as programs

    monkeypatch.setattr(programs, "default_cache_dir", lambda: program_cache)
    path, fakes = trusted_inventory(tmp_path, farm, mp_spdz.root, 3, clients=clients)
    victim = fakes[1]
    # once a client has connected: the listener and that connection
    _, err, _ = _run_and_kill(tmp_path, path, victim, b"serve", 2, capsys, signum)
    # the server first, before what the clients then saw
    assert err.index(f"p1 (root@127.0.0.1:{victim.port})") < err.index("the clients then")
    if signum == signal.SIGKILL:  # sshd reports the signal, not a status
        assert "`agent serve` was killed there" in err
    else:  # it stopped through its cleanup, and says which signal stopped it
        assert "`agent serve` was killed by SIGTERM there (status 143)" in err
    assert left_behind(fakes) == ([], [])


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_client_host_killed_mid_stream_is_named_and_nothing_is_left(
        tmp_path, farm, mp_spdz, program_cache, capsys, monkeypatch, signum):
    import harness.engine.programs as programs

    monkeypatch.setattr(programs, "default_cache_dir", lambda: program_cache)
    path, fakes = trusted_inventory(tmp_path, farm, mp_spdz.root, 2, clients=2)
    victim = fakes[-1]  # client1
    _, err, _ = _run_and_kill(tmp_path, path, victim, b"stream", 0, capsys, signum)
    name = signal.Signals(signum).name
    assert (f"the client host client1 (root@127.0.0.1:{victim.port}): `agent stream` was "
            f"killed by {name} there (status {128 + signum})") in err
    # the servers that lost its streams are not blamed, nor the other client host
    assert "client0" not in err and "p0 (" not in err
    assert left_behind(fakes) == ([], [])


def test_a_client_hosts_dead_worker_is_blamed_never_the_other_client_host(
        tmp_path, farm, mp_spdz, program_cache, capsys, monkeypatch):
    """The other client host's report (it lost its streams when the servers stopped)
    may come in first: here it does, the victim's agent being held up a moment."""
    import harness.engine.programs as programs

    monkeypatch.setattr(programs, "default_cache_dir", lambda: program_cache)
    path, fakes = trusted_inventory(tmp_path, farm, mp_spdz.root, 2, clients=2)
    victim = fakes[-1]  # client1
    done = threading.Event()
    killed: list[int] = []

    def kill_a_worker() -> None:
        while not done.is_set() and not killed:
            for agent in _agents(victim.workdir, b"stream"):
                # a client worker, connected to both servers
                workers = sorted(pid for pid in descendants(agent) if _sockets(pid) >= 2)
                if workers:
                    time.sleep(0.2)  # mid-stream
                    os.kill(agent, signal.SIGSTOP)
                    os.kill(workers[0], signal.SIGKILL)
                    killed.append(workers[0])
                    time.sleep(1.0)  # the other client host reports first
                    os.kill(agent, signal.SIGCONT)
                    return
            time.sleep(0.005)

    killer = threading.Thread(target=kill_a_worker)
    killer.start()
    try:
        code = main(["run", "--hosts", str(path), "--program", "local", "--clients", "2000000",
                     "--rows", "10", "--dim", "3", "--out", str(tmp_path / "out")])
    finally:
        done.set()
        killer.join()
    err = capsys.readouterr().err
    assert killed, err
    assert code == 1 and err.count("\n") == 1, err
    assert f"the client host client1 (root@127.0.0.1:{victim.port})" in err
    assert "exited with status -9 mid-stream" in err
    assert "client0" not in err and "p0 (" not in err
    assert left_behind(fakes) == ([], [])


def test_a_client_host_whose_ssh_connection_drops_removes_its_working_directory(
        tmp_path, farm, mp_spdz, program_cache, capsys, monkeypatch):
    """Its sshd dies mid-stream, listener and sessions: the runner cannot come back to
    remove the client host's directory (its private key, its clients' rows), so the
    host removes it itself, and stops its agent, as its session ends."""
    import harness.engine.programs as programs

    monkeypatch.setattr(programs, "default_cache_dir", lambda: program_cache)
    path, fakes = trusted_inventory(tmp_path, farm, mp_spdz.root, 2, clients=1)
    victim = fakes[-1]
    done = threading.Event()
    dropped: list[list[Path]] = []

    def drop_the_connection() -> None:
        while not done.is_set() and not dropped:
            if _agents(victim.workdir, b"stream"):
                time.sleep(0.3)  # mid-stream
                dropped.append(list(victim.workdir.rglob("client.key")))
                assert victim.proc is not None
                sshd = [victim.proc.pid, *(pid for pid in descendants(victim.proc.pid)
                                           if _comm(pid) == "sshd")]
                for pid in sshd:
                    os.kill(pid, signal.SIGKILL)
                return
            time.sleep(0.005)

    killer = threading.Thread(target=drop_the_connection)
    killer.start()
    try:
        code = main(["run", "--hosts", str(path), "--program", "local", "--clients", "2000000",
                     "--rows", "10", "--dim", "3", "--out", str(tmp_path / "out")])
    finally:
        done.set()
        killer.join()
    err = capsys.readouterr().err
    assert dropped and dropped[0], err  # the key was there while it streamed
    assert code == 1 and err.startswith("ltm: error: the client host client0"), err
    deadline = time.monotonic() + 10
    while left_behind(fakes, 0) != ([], []) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left_behind(fakes, 0) == ([], [])
    assert not dropped[0][0].exists()


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@pytest.mark.parametrize("clients", [0, 1])
def test_a_runner_killed_outright_mid_stream_leaves_nothing_on_any_host(
        tmp_path, farm, mp_spdz, program_cache, clients):
    """SIGKILL: the runner cleans nothing up. Each host notices its SSH session end and
    stops what runs there and removes its working directory (keys, shares, rows)."""
    path, fakes = trusted_inventory(tmp_path, farm, mp_spdz.root, 2, clients=clients)
    victim = fakes[-1] if clients else fakes[0]
    step = b"stream" if clients else b"serve"
    runner = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", "--hosts", str(path), "--program", "local",
         "--clients", "2000000", "--rows", "10", "--dim", "3", "--out", str(tmp_path / "out")],
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    # mid-stream: a server holds its listener and a connection, a client host's workers
    # their connections
    while not any(sum(_sockets(p) for p in [pid, *descendants(pid)]) >= 2
                  for pid in _agents(victim.workdir, step)):
        assert runner.poll() is None, runner.communicate()
        assert time.monotonic() < deadline, "the stream never started"
        time.sleep(0.01)
    assert [p for f in fakes for p in f.workdir.iterdir()]  # the hosts' directories
    runner.kill()
    runner.communicate(timeout=60)
    deadline = time.monotonic() + 20
    while left_behind(fakes, 0) != ([], []) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left_behind(fakes, 0) == ([], [])
