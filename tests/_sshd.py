"""Real OpenSSH servers on loopback ports, standing in for the parties' machines.

Each :class:`FakeHost` is one ``/usr/sbin/sshd -D`` with its own host key,
config and ``workdir``, so the SSH runner is tested against the same server it
meets in production. All of them share the test process's file system, which
lets the tests look into the "remote" working directories and ``/proc``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import harness
from harness.engine.cluster import find_free_ports
from harness.remote.hosts import REMOTE_PYTHON, Host, Inventory, format_inventory

__all__ = ["FakeHost", "SshFarm", "descendants", "free_port", "mpc_base_port",
           "processes_under", "trusted_inventory", "write_inventory_file"]

SSHD = Path("/usr/sbin/sshd")
_START_SECONDS = 10.0


def mpc_base_port(count: int) -> int:
    """A free range for the parties (below the ephemeral ports the SSH sessions use)."""
    return find_free_ports(count)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def descendants(root_pid: int) -> list[int]:
    """Every process below ``root_pid`` (from /proc), children before grandchildren."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parents[int(entry)] = int(fh.read().rsplit(")", 1)[-1].split()[1])
            except OSError:
                continue
    found, frontier = [], [root_pid]
    while frontier:
        pid = frontier.pop(0)
        children = [c for c, p in parents.items() if p == pid]
        found += children
        frontier += children
    return found


def processes_under(root: Path) -> list[tuple[int, str]]:
    """Live processes whose working directory lies inside ``root``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        if cwd.startswith(str(root)) and stat.rsplit(")", 1)[-1].split()[0] != "Z":
            found.append((int(entry), stat.split("(", 1)[1].rsplit(")", 1)[0]))
    return found


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment,
                    "-f", str(path)], check=True, capture_output=True, timeout=30)


@dataclass
class FakeHost:
    """One sshd; ``start``/``stop`` may be repeated (``new_key`` simulates a rebuilt host)."""

    name: str
    root: Path
    port: int
    authorized_keys: Path
    proc: subprocess.Popen | None = field(default=None, repr=False)
    home: Path | None = None  # the sessions' $HOME, if not root's own

    @property
    def workdir(self) -> Path:
        return self.root / "remote"

    def install_harness(self) -> None:
        """What ``ltm hosts setup`` leaves, cheaply: a $HOME of this host's own whose
        venv python is this test's interpreter running this tree's harness."""
        self.home = self.root / "home"
        python = self.home / REMOTE_PYTHON.removeprefix("~/")
        python.parent.mkdir(parents=True)
        tree = Path(harness.__file__).resolve().parent.parent
        python.write_text(f'#!/bin/sh\nPYTHONPATH={tree} exec {sys.executable} "$@"\n')
        python.chmod(0o755)

    @property
    def host_key(self) -> Path:
        return self.root / "ssh_host_ed25519_key"

    def new_key(self) -> None:
        for path in (self.host_key, self.host_key.with_suffix(".pub")):
            path.unlink(missing_ok=True)
        _keygen(self.host_key, f"{self.name}-host")

    def start(self, wait: bool = True) -> None:
        if not self.host_key.exists():
            self.new_key()
        config = self.root / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {self.host_key}",
            f"PidFile {self.root / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.authorized_keys}",
            "PermitRootLogin yes",
            "StrictModes no",
            "UsePAM no",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            "UseDNS no",
            "PrintMotd no",
            "MaxStartups 100",
            "Subsystem sftp internal-sftp",
            *([f"SetEnv HOME={self.home}"] if self.home else []),
            "",
        ]))
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege separation dir
        log = open(self.root / "sshd.log", "ab")  # noqa: SIM115 - owned by the child
        try:
            self.proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True)
        finally:
            log.close()
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + _START_SECONDS
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"sshd for {self.name} exited: {self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.settimeout(2)
                    if sock.recv(4).startswith(b"SSH-"):
                        return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"sshd for {self.name} did not answer: {self.log()}")

    def stop(self) -> None:
        """Stop the server and everything it started.

        Each connection's sshd and each party lead their own sessions, so they
        are found as descendants (before the server goes and they are orphaned).
        """
        if self.proc is None:
            return
        sessions = descendants(self.proc.pid)
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        self.proc = None
        for pid in sessions:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def log(self) -> str:
        try:
            return (self.root / "sshd.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def as_host(self, client_key: Path, engine: Path, **overrides: object) -> Host:
        """This server as an inventory entry; ``overrides`` replace fields (e.g. mp_spdz)."""
        fields: dict = dict(name=self.name, ssh_host="127.0.0.1", ssh_port=self.port,
                            user="root", key=str(client_key), mpc_host="127.0.0.1",
                            mp_spdz=str(engine), workdir=str(self.workdir))
        fields.update(overrides)
        return Host(**fields)


class SshFarm:
    """Creates fake hosts on demand and stops every one of them in ``close``."""

    def __init__(self, root: Path) -> None:
        if not SSHD.exists():
            pytest.fail(f"{SSHD} is missing: install openssh-server (the CI script does)")
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.client_key = root / "client_key"
        _keygen(self.client_key, "ltm-test-client")
        self.authorized_keys = root / "authorized_keys"
        self.authorized_keys.write_text(self.client_key.with_suffix(".pub").read_text())
        self.hosts: list[FakeHost] = []

    def add(self, name: str, *, start: bool = True, port: int | None = None,
            harness: bool = False) -> FakeHost:
        """``harness``: the host has the harness, as after ``ltm hosts setup``."""
        host = FakeHost(name, self.root / name, port or free_port(), self.authorized_keys)
        host.root.mkdir()
        host.new_key()
        if harness:
            host.install_harness()
        self.hosts.append(host)
        if start:
            host.start()
        return host

    def close(self) -> None:
        for host in self.hosts:
            host.stop()


def write_inventory_file(path: Path, hosts: list[Host], base_port: int,
                         known_hosts: Path | None = None, client: Host | None = None,
                         clients: tuple[Host, ...] = ()) -> Path:
    inv = Inventory(hosts=tuple(hosts), known_hosts=known_hosts or path.parent / "known_hosts",
                    base_port=base_port, clients=(client,) if client else clients)
    path.write_text(format_inventory(inv, base_dir=path.parent))
    return path


def trusted_inventory(tmp_path: Path, farm: SshFarm, mp_root: Path, parties: int,
                      clients: int = 0) -> tuple[Path, list[FakeHost]]:
    """``parties`` servers and ``clients`` client hosts, all with the harness, in an
    inventory whose host keys are pinned; the inventory's path and the hosts."""
    from harness.remote.ssh import trust_hosts

    fakes = [farm.add(f"p{i}", harness=True) for i in range(parties)]
    fakes += [farm.add(f"client{k}", harness=True) for k in range(clients)]
    hosts = [f.as_host(farm.client_key, mp_root) for f in fakes]
    path = write_inventory_file(tmp_path / "hosts.toml", hosts[:parties],
                                mpc_base_port(parties), clients=tuple(hosts[parties:]))
    trust_hosts(path, echo=lambda line: None)
    return path, fakes
