"""Opening a verified SSH connection to one inventory host, with retries.

Host keys are checked against the inventory's known_hosts file only (never
``~/.ssh/known_hosts``, never trust on first use): an unknown or changed key
is refused at once. Only transient failures are retried (refused or timed-out
connections, a server that hangs up during the handshake), because retrying a
bad key or a rejected login cannot succeed and only delays the message.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import paramiko

from harness.errors import InputError, LtmError
from harness.remote._keys import ServerKey
from harness.remote.hosts import Host
from harness.retry import retry

__all__ = [
    "ConnectOptions",
    "HostKeyError",
    "SshConnectError",
    "connect",
    "describe",
    "trust_hint",
]


_KEEPALIVE_SECONDS = 30


@dataclass(frozen=True)
class ConnectOptions:
    timeout: float = 10.0  # per attempt: TCP connect, banner, authentication
    attempts: int = 4
    backoff: float = 1.0  # seconds before the 2nd attempt, doubling after each


class HostKeyError(InputError):
    """A host's SSH key is not pinned, or differs from the pinned one."""


class SshConnectError(LtmError):
    """A host could not be reached or refused the login."""


def describe(host: Host) -> str:
    return f"{host.name} ({host.user}@{host.ssh_host}:{host.ssh_port})"


def trust_hint(inventory_path: Path | None) -> str:
    return f"ltm hosts trust {inventory_path if inventory_path else 'INVENTORY'}"


class _RejectUnknown(paramiko.RejectPolicy):
    """RejectPolicy, but raising our error so it is never mistaken for a transient one."""

    def __init__(self, host: Host, known_hosts: Path, inventory_path: Path | None) -> None:
        self.host, self.known_hosts, self.inventory_path = host, known_hosts, inventory_path

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        seen = ServerKey(key.get_name(), key.get_base64())
        raise HostKeyError(
            f"{describe(self.host)}: its SSH host key ({seen.key_type} {seen.fingerprint}) is "
            f"not pinned in {self.known_hosts}; check the fingerprint and run "
            f"`{trust_hint(self.inventory_path)}`")


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, (paramiko.AuthenticationException, paramiko.BadHostKeyException,
                        HostKeyError)):
        return False
    if isinstance(exc, socket.gaierror):
        return False  # a misspelt host name does not start resolving on retry
    # Refused/timed-out connects, resets, and a server hanging up mid-handshake
    # (sshd still starting, or over MaxStartups) are worth another try.
    return isinstance(exc, (OSError, EOFError, paramiko.SSHException))


def _explain(host: Host, known_hosts: Path, inventory_path: Path | None,
             exc: BaseException) -> LtmError:
    where = describe(host)
    if isinstance(exc, HostKeyError):
        return exc
    if isinstance(exc, paramiko.BadHostKeyException):
        seen = ServerKey(exc.key.get_name(), exc.key.get_base64())
        pinned = ServerKey(exc.expected_key.get_name(), exc.expected_key.get_base64())
        return HostKeyError(
            f"{where}: its SSH host key CHANGED (now {seen.key_type} {seen.fingerprint}, "
            f"pinned {pinned.fingerprint} in {known_hosts}); this may be an attack "
            "(man in the middle). If the machine was rebuilt, verify the new fingerprint and "
            f"run `{trust_hint(inventory_path)} --replace`")
    if isinstance(exc, paramiko.AuthenticationException):
        key = f"the key {host.key}" if host.key else "the SSH agent / default keys"
        return SshConnectError(
            f"{where}: login refused ({exc}); check 'user' and 'key' for this party in the "
            f"inventory ({key} must be authorized for {host.user} on that host)")
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        # Its own text ("[Errno None] Unable to connect to port ...") hides the reason.
        detail = "; ".join(sorted({e.strerror or str(e) for e in exc.errors.values()}))
    else:
        detail = str(exc) or type(exc).__name__
    return SshConnectError(f"{where}: cannot connect over SSH: {detail}")


def connect(host: Host, known_hosts: Path, *, options: ConnectOptions = ConnectOptions(),
            inventory_path: Path | None = None,
            sleep: Callable[[float], None] = time.sleep) -> paramiko.SSHClient:
    """A logged-in client for ``host``, its key checked against ``known_hosts``."""
    if not known_hosts.is_file():
        raise HostKeyError(f"{known_hosts} (the inventory's known_hosts) does not exist, so no "
                           f"SSH host key can be checked; run `{trust_hint(inventory_path)}` "
                           "first")
    if host.key is not None and not Path(host.key).is_file():
        what = ("is a directory, not a private key file" if Path(host.key).is_dir()
                else "is not a regular file" if Path(host.key).exists() else "does not exist")
        raise InputError(f"{describe(host)}: the SSH key {host.key} {what}; fix 'key' for this "
                         "party in the inventory (the private key's file, e.g. "
                         "~/.ssh/id_ed25519, or remove it to use the SSH agent)")

    def attempt() -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        try:
            client.load_host_keys(str(known_hosts))
            client.set_missing_host_key_policy(_RejectUnknown(host, known_hosts,
                                                              inventory_path))
            client.connect(
                host.ssh_host, port=host.ssh_port, username=host.user,
                key_filename=host.key, look_for_keys=host.key is None,
                timeout=options.timeout, banner_timeout=options.timeout,
                auth_timeout=options.timeout)
            transport = client.get_transport()
            if transport is not None:
                # Traffic on an idle connection, so NAT/firewalls keep it during long runs.
                transport.set_keepalive(_KEEPALIVE_SECONDS)
        except BaseException:
            client.close()
            raise
        return client

    try:
        return retry(attempt, when=_transient, attempts=options.attempts,
                     delay=options.backoff, factor=2.0, sleep=sleep)
    except Exception as exc:
        error = _explain(host, known_hosts, inventory_path, exc)
        if not _transient(exc):
            raise error from None
        raise SshConnectError(f"{error} (gave up after {options.attempts} attempts; check the "
                              "host is up, sshd runs and the firewall allows "
                              f"port {host.ssh_port})") from None
