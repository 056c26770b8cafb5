"""Loopback hosts: OpenSSH servers on this machine standing in for the parties' machines.

``ltm hosts loopback start N --dir DIR`` runs N real ``sshd`` servers on loopback
ports, each with its own host key, configuration and home directory, and writes
``DIR/hosts.toml`` naming them; ``ltm hosts loopback stop --dir DIR`` stops them
(and every session they started) and removes ``DIR``. So a ``--hosts`` run can be
tried, exactly as on real machines (pinned host keys, SSH, SFTP, TLS between the
parties), without a second machine.

Each host has the harness as ``ltm hosts setup`` leaves a real one: its home's
venv python (:data:`~harness.remote.hosts.REMOTE_PYTHON`) runs this machine's
Python on this harness, and its ``mp_spdz`` is this machine's MP-SPDZ. The login
user is the one running the command: as root, sshd runs as a real server; as
another user, it runs unprivileged and accepts only that user, with its key.

The pieces (host keys, the server's configuration, starting it; waiting for it and
stopping it with its sessions, from :mod:`._servers`) are also what the test suite's
fake hosts are made of.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.errors import InputError, LtmError
from harness.fileio import (
    PRIVATE_FILE_MODE,
    check_output_dir,
    private_dir,
    write_atomic,
    write_private,
)
from harness.remote._servers import (
    descendants,
    one_line,
    servers_of,
    stop_server,
    wait_ready,
)
from harness.remote.hosts import REMOTE_PYTHON, Host, Inventory, format_inventory

__all__ = ["INVENTORY", "MAX_HOSTS", "SSHD", "LoopbackHost", "check_loopback", "check_sshd",
           "descendants", "free_port", "host_keypair", "install_harness", "loopback_servers",
           "servers_of", "sshd_config", "start_daemon", "start_loopback", "start_server",
           "stop_loopback", "stop_server", "wait_ready"]

SSHD = Path("/usr/sbin/sshd")
MAX_HOSTS = 16  # parties on one machine's cores; more only measures the contention
INVENTORY = "hosts.toml"
_STATE = "loopback.json"  # what `stop` reads: the hosts' names (and ports), written last
_START_SECONDS = 10.0
_TREE = Path(__file__).resolve().parents[2]  # the directory this harness is imported from
_UNSAFE = '"\\%'  # quoting, escapes and sshd's %-tokens, in a quoted configuration value


# --- the pieces --------------------------------------------------------------------

def host_keypair(path: Path, comment: str) -> None:
    """An Ed25519 key pair: ``path`` (OpenSSH private key, 0600 from its creation) and
    ``path.pub``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    write_private(path, key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.OpenSSH,
                                          serialization.NoEncryption()))
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH)
    write_private(path.with_name(path.name + ".pub"), f"{public.decode()} {comment}\n")


def sshd_config(*, port: int, host_key: Path, pid_file: Path, authorized_keys: str,
                address: str = "127.0.0.1", env: dict[str, str] | None = None,
                allow_users: str | None = None) -> str:
    """An sshd configuration for one stand-in host: keys only, no PAM, SFTP in-process.

    ``authorized_keys`` is sshd's ``AuthorizedKeysFile`` (absolute, or relative to the
    user's home); ``env`` is set in every session (``HOME`` gives the host a home of
    its own). StrictModes is off: the files live in this machine's directories, not in
    a home sshd would check.
    """
    setenv = " ".join(f'"{k}={v}"' for k, v in (env or {}).items())
    return "\n".join([
        f"Port {port}",
        f"ListenAddress {address}",
        f'HostKey "{host_key}"',
        f'PidFile "{pid_file}"',
        f'AuthorizedKeysFile "{authorized_keys}"',
        *([f"AllowUsers {allow_users}"] if allow_users else []),
        "PermitRootLogin prohibit-password",
        "StrictModes no",
        "UsePAM no",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PubkeyAuthentication yes",
        "UseDNS no",
        "PrintMotd no",
        "MaxStartups 100",
        "Subsystem sftp internal-sftp",
        *([f"SetEnv {setenv}"] if setenv else []),
        "",
    ])


def check_sshd() -> None:
    if not SSHD.is_file():
        raise LtmError(f"{SSHD} is missing: install the openssh-server package (e.g. "
                       "`apt-get install openssh-server`)")
    if os.geteuid() == 0:
        # Root's sshd separates privileges into this directory (a package's service
        # would make it at boot).
        Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)


def start_server(config: Path, log: Path, argv_prefix: tuple[str, ...] = ()
                 ) -> subprocess.Popen:
    """``sshd -D`` on ``config`` as this process's child, in a session of its own,
    logging to ``log`` (the test suite's hosts, which live as long as a test)."""
    with open(log, "ab") as out:
        return subprocess.Popen([*argv_prefix, str(SSHD), "-D", "-e", "-f", str(config)],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True)


def start_daemon(config: Path, log: Path) -> None:
    """sshd on ``config`` as a daemon of its own (it outlives this process): the command
    returns once the daemon has forked; a configuration it refuses is an error here."""
    try:
        done = subprocess.run([str(SSHD), "-f", str(config), "-E", str(log)],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=_START_SECONDS, umask=0o077)
    except subprocess.TimeoutExpired:
        raise LtmError(f"sshd on {config} did not start within {_START_SECONDS:g} s") from None
    if done.returncode != 0:
        why = one_line(done.stderr) or one_line(_tail(log)) or f"exit {done.returncode}"
        raise LtmError(f"sshd refused {config}: {why}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def install_harness(home: Path) -> Path:
    """What ``ltm hosts setup`` leaves a host, cheaply: in ``home``, the venv python the
    host agent is started with, running this machine's Python on this harness."""
    python = home / REMOTE_PYTHON.removeprefix("~/")
    private_dir(python.parent)
    fd = os.open(python, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(_TREE))} "
                 f'exec {shlex.quote(sys.executable)} "$@"\n')
    return python


# --- one host ----------------------------------------------------------------------

@dataclass
class LoopbackHost:
    """One stand-in host's files, under ``root``: its host key, sshd's configuration,
    pid file and log, and (with the harness) the home its sessions get."""

    name: str
    root: Path
    port: int
    authorized_keys: Path

    @property
    def host_key(self) -> Path:
        return self.root / "ssh_host_ed25519_key"

    @property
    def config(self) -> Path:
        return self.root / "sshd_config"

    @property
    def pid_file(self) -> Path:
        return self.root / "sshd.pid"

    @property
    def log_file(self) -> Path:
        return self.root / "sshd.log"

    @property
    def home(self) -> Path:
        return self.root / "home"

    def write_config(self, *, home: bool) -> None:
        env = {"HOME": str(self.home)} if home else None
        write_private(self.config, sshd_config(port=self.port, host_key=self.host_key,
                                           pid_file=self.pid_file,
                                           authorized_keys=str(self.authorized_keys),
                                           env=env))

    def log(self) -> str:
        return _tail(self.log_file)

    def running(self) -> bool:
        # A daemon forks before it binds: alive while a process runs on its config.
        return bool(servers_of(self.config))

    def as_host(self, user: str, client_key: Path, mp_spdz: Path | str, **overrides: object
                ) -> Host:
        fields: dict = dict(name=self.name, ssh_host="127.0.0.1", ssh_port=self.port,
                            user=user, key=str(client_key), mpc_host="127.0.0.1",
                            mp_spdz=str(mp_spdz))
        fields.update(overrides)
        return Host(**fields)


# --- the command -------------------------------------------------------------------

def check_loopback(count: int, directory: Path, client_hosts: int = 0) -> tuple[Path, Path]:
    """Refuse, before anything is made, what :func:`start_loopback` could not start;
    ``directory`` as given and absolute."""
    if isinstance(count, bool) or not 2 <= count <= MAX_HOSTS:
        raise InputError(f"the number of hosts must be between 2 and {MAX_HOSTS} (one per "
                         f"party), got {count}")
    if isinstance(client_hosts, bool) or not 0 <= client_hosts <= MAX_HOSTS:
        raise InputError(f"the number of client hosts must be between 0 and {MAX_HOSTS}, "
                         f"got {client_hosts}")
    shown, directory = _checked_dir(directory)
    check_output_dir(directory, option="--dir", whole=False)
    check_sshd()
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise InputError(f"{directory} exists and is not an empty directory; choose a new "
                         "--dir (or stop the hosts there with `ltm hosts loopback stop`)")
    return shown, directory


def start_loopback(count: int, directory: Path, mp_spdz: Path, *, base_port: int,
                   client_hosts: int = 0, echo: Callable[[str], None] = print) -> Path:
    """Start ``count`` loopback hosts (and ``client_hosts`` client hosts) in the new
    directory ``directory`` and write their inventory there (returned). On any failure
    nothing is left running or written."""
    shown, directory = check_loopback(count, directory, client_hosts)
    user = pwd.getpwuid(os.geteuid()).pw_name
    created = not directory.exists()
    private_dir(directory)
    hosts: list[LoopbackHost] = []
    try:
        client_key = directory / "client_key"
        host_keypair(client_key, f"ltm-loopback-{user}")
        authorized = directory / "authorized_keys"
        write_private(authorized, client_key.with_name("client_key.pub").read_text())
        names = [f"p{i}" for i in range(count)] + [f"client{k}" for k in range(client_hosts)]
        for name in names:
            host = LoopbackHost(name, directory / name, free_port(), authorized)
            hosts.append(host)
            private_dir(host.root)
            host_keypair(host.host_key, f"{host.name}-loopback")
            install_harness(host.home)
            host.write_config(home=True)
            start_daemon(host.config, host.log_file)
        for host in hosts:
            try:
                wait_ready("127.0.0.1", host.port, host.running, host.log, host.name)
            except LtmError as exc:
                raise LtmError(f"{exc}; nothing was left running (start again: it takes "
                               "new ports)") from None
        state = {"hosts": [{"name": h.name, "port": h.port} for h in hosts]}
        write_atomic(directory / _STATE, json.dumps(state, indent=1) + "\n",
                     mode=PRIVATE_FILE_MODE)
        entries = tuple(h.as_host(user, client_key, mp_spdz) for h in hosts)
        inventory = Inventory(hosts=entries[:count], clients=entries[count:],
                              known_hosts=directory / "known_hosts", base_port=base_port)
        path = directory / INVENTORY
        write_atomic(path, format_inventory(inventory, base_dir=directory),
                     mode=PRIVATE_FILE_MODE)
    except BaseException:
        _stop_hosts(hosts)
        _remove(directory, keep=not created)
        raise
    for host in hosts:
        echo(f"{host.name}  sshd on 127.0.0.1 port {host.port}")
    echo(f"your key to log in to them: {shown / 'client_key'} (private, 0600; `stop` "
         "removes it with the hosts)")
    clients = f" and {client_hosts} client host(s)" if client_hosts else ""
    echo(f"wrote {shown / INVENTORY}: {count} loopback hosts{clients} with this machine's "
         f"harness and MP-SPDZ; stop them with `ltm hosts loopback stop --dir "
         f"{shlex.quote(str(shown))}`")
    return path


def stop_loopback(directory: Path, *, echo: Callable[[str], None] = print) -> int:
    """Stop the loopback hosts of ``directory`` and remove it (their keys, homes and
    logs with it); how many servers were running."""
    shown, directory = _checked_dir(directory)
    state_file = directory / _STATE
    try:
        state = json.loads(state_file.read_text())
        names = [str(h["name"]) for h in state["hosts"]]
    except FileNotFoundError:
        raise InputError(f"{directory} holds no loopback hosts (no {_STATE}); pass the --dir "
                         "that `ltm hosts loopback start` was given") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{state_file} is unreadable ({exc}); stop its sshd servers by hand "
                         f"and remove {directory}") from None
    if any(not name or "/" in name or name.startswith(".") for name in names):
        raise InputError(f"{state_file} names a host {names!r} outside {directory}; remove "
                         "the directory by hand")
    running = _stop_hosts([LoopbackHost(name, directory / name, 0, Path()) for name in names])
    _remove(directory, keep=False)
    echo(f"stopped {running} loopback host(s); removed {shown}")
    return running


def loopback_servers(directory: Path) -> dict[str, int]:
    """The pid of each running sshd that ``start_loopback`` started in ``directory``, by
    host name (for measuring what a host runs: its sessions are below it)."""
    directory = Path(directory).absolute()
    names = [str(h["name"]) for h in json.loads((directory / _STATE).read_text())["hosts"]]
    return {name: pid for name in names for pid in servers_of(directory / name / "sshd_config")}


def _stop_hosts(hosts: list[LoopbackHost]) -> int:
    running = 0
    for host in hosts:
        pids = servers_of(host.config)
        running += bool(pids)
        for pid in pids:
            stop_server(pid)
    return running


def _checked_dir(directory: Path) -> tuple[Path, Path]:
    """``directory`` as given and absolute, refused if sshd's configuration could not
    name the files in it (its lines would be cut, its tokens expanded)."""
    absolute = Path(directory).absolute()
    bad = sorted({c for c in str(absolute) if not c.isprintable() or c in _UNSAFE})
    if bad:
        raise InputError(f"--dir {str(directory)!r}: sshd's configuration cannot name a "
                         f"path holding {' '.join(map(repr, bad))}; choose another --dir")
    return Path(directory), absolute


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-2000:]
    except OSError:
        return ""


def _remove(directory: Path, *, keep: bool) -> None:
    """Remove what the hosts left (their keys above all); ``keep`` the directory itself."""
    if not directory.exists():
        return
    if keep:
        for entry in directory.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    else:
        shutil.rmtree(directory)
