"""A client host's working directory lives no longer than the SSH session that made it.

It holds the clients' private key and rows. On real sshd servers: when the
connection drops (sshd's session processes killed, the runner unable to come back),
the host removes the directory itself; when the connection is gone but the host is
up, the runner's cleanup reconnects to make sure.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest
from _sshd import descendants, trusted_inventory

from harness.remote._client import ClientHost
from harness.remote._connect import ConnectOptions, SshConnectError
from harness.remote.hosts import load_inventory

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the fake hosts are sshd servers logged into "
                       "as root"),
]


def _client_host(tmp_path: Path, farm) -> tuple[ClientHost, object]:
    path, fakes = trusted_inventory(tmp_path, farm, tmp_path / "no-mp-spdz", 2, clients=1)
    inventory = load_inventory(path)
    key = tmp_path / "client.key"
    key.write_bytes(b"a private key")
    host = ClientHost(inventory.clients[0], inventory.known_hosts, path,
                      ConnectOptions(timeout=5, attempts=2, backoff=0.1), (key, key))
    return host, fakes[-1]


def _sessions(fake) -> list[int]:
    """The sshd processes serving the fake host's connections (not its listener)."""
    return [pid for pid in descendants(fake.proc.pid) if _comm(pid) == "sshd"]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""  # ended meanwhile


def _kill(pid: int) -> None:
    """SIGKILL ``pid``; one that ended already (with its listener, say) is as good."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _gone(path: Path, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return not path.exists()


@pytest.mark.parametrize("listener", ["killed", "up"])
def test_the_host_removes_the_directory_when_the_connection_drops(tmp_path, farm, listener):
    host, fake = _client_host(tmp_path, farm)
    assert host.workers() >= 1  # connected: the directory is made
    assert host.remote_dir is not None
    remote = Path(host.remote_dir)
    host._put({"client.key": b"a private key", "rows.npy": b"the clients' rows"})
    assert (remote / "client.key").read_bytes() == b"a private key"
    assert oct(remote.stat().st_mode & 0o777) == "0o700"
    doomed = _sessions(fake)
    assert doomed
    if listener == "killed":  # nobody can come back to this host
        os.kill(fake.proc.pid, signal.SIGKILL)
    for pid in doomed:
        _kill(pid)
    assert _gone(remote), sorted(p.name for p in remote.iterdir())
    # The runner's cleanup reconnects to make sure, which fails if the host is gone.
    with pytest.raises(SshConnectError) if listener == "killed" else contextlib.nullcontext():
        host.remove()
    assert host.client is None


def test_the_runners_cleanup_reconnects_when_the_connection_died(tmp_path, farm):
    host, fake = _client_host(tmp_path, farm)
    host.workers()
    assert host.remote_dir is not None and host.session_dir is not None
    remote = Path(host.remote_dir)
    # The shell that would remove it is killed outright, and this side's connection is
    # cut: only a new connection can remove the directory.
    for pid in _sessions(fake):
        for child in descendants(pid):
            if _comm(child) in ("sh", "bash", "dash"):
                _kill(child)
    assert host.client is not None
    transport = host.client.get_transport()
    assert transport is not None
    transport.sock.close()
    time.sleep(0.5)
    assert remote.is_dir()
    host.remove()
    assert not remote.exists()
