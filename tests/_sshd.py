"""Real OpenSSH servers on loopback ports, standing in for the parties' machines.

Each :class:`FakeHost` is one ``/usr/sbin/sshd -D`` with its own host key,
config and ``workdir``, so the SSH runner is tested against the same server it
meets in production. All of them share the test process's file system, which
lets the tests look into the "remote" working directories and ``/proc``. The
pieces are :mod:`harness.remote.loopback`'s, which ``ltm hosts loopback`` runs.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from _procs import processes

from harness.engine.cluster import find_free_ports
from harness.remote.hosts import Host, Inventory, format_inventory
from harness.remote.loopback import (
    SSHD,
    LoopbackHost,
    descendants,
    free_port,
    host_keypair,
    install_harness,
    start_server,
    stop_server,
    wait_ready,
)

__all__ = ["FakeHost", "SshFarm", "descendants", "free_port", "mpc_base_port",
           "processes_under", "trusted_inventory", "write_inventory_file"]


def mpc_base_port(count: int) -> int:
    """A free range for ``count`` parties and, past them, their servers' streams (a fed
    run's servers listen while their parties run), below the ephemeral ports the SSH
    sessions use."""
    return find_free_ports(2 * count)


def processes_under(root: Path) -> list[tuple[int, str]]:
    """Live processes whose working directory lies inside ``root``."""
    found = []
    for pid, name, fields in processes():
        if fields[0] == "Z":
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd.startswith(str(root)):
            found.append((pid, name))
    return found


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
    def _files(self) -> LoopbackHost:
        return LoopbackHost(self.name, self.root, self.port, self.authorized_keys)

    @property
    def workdir(self) -> Path:
        return self.root / "remote"

    def install_harness(self) -> None:
        """What ``ltm hosts setup`` leaves, cheaply: a $HOME of this host's own whose
        venv python is this test's interpreter running this tree's harness."""
        self.home = self._files.home
        install_harness(self.home)

    @property
    def host_key(self) -> Path:
        return self._files.host_key

    def new_key(self) -> None:
        for path in (self.host_key, self.host_key.with_suffix(".pub")):
            path.unlink(missing_ok=True)
        host_keypair(self.host_key, f"{self.name}-host")

    def start(self, wait: bool = True) -> None:
        if not self.host_key.exists():
            self.new_key()
        files = self._files
        files.config.unlink(missing_ok=True)
        files.write_config(home=self.home is not None)
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege separation dir
        self.proc = start_server(files.config, files.log_file)
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        proc = self.proc
        wait_ready("127.0.0.1", self.port, lambda: proc is not None and proc.poll() is None,
                   self.log, self.name)

    def stop(self) -> None:
        """Stop the server and everything it started."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None

        def reap(seconds: float) -> bool:
            try:
                proc.wait(seconds)
                return True
            except subprocess.TimeoutExpired:
                return False

        stop_server(proc.pid, reap)
        proc.wait(5)

    def log(self) -> str:
        return self._files.log()

    def as_host(self, client_key: Path, engine: Path, **overrides: object) -> Host:
        """This server as an inventory entry; ``overrides`` replace fields (e.g. mp_spdz)."""
        fields = {"workdir": str(self.workdir), **overrides}
        return self._files.as_host(str(fields.pop("user", "root")), client_key,
                                   fields.pop("mp_spdz", engine), **fields)


class SshFarm:
    """Creates fake hosts on demand and stops every one of them in ``close``."""

    def __init__(self, root: Path) -> None:
        if not SSHD.exists():
            pytest.fail(f"{SSHD} is missing: install openssh-server (the CI script does)")
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.client_key = root / "client_key"
        host_keypair(self.client_key, "ltm-test-client")
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
