"""Waiting for a new machine's SSH server, and recording its host key.

A freshly launched instance is "running" well before sshd listens, so the
provisioner polls port 22 with plain TCP connects before it scans host keys.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from harness.errors import LtmError
from harness.retry import retry

from ._sleep import nap

__all__ = ["known_hosts_line", "scan_host_key", "wait_for_ssh"]


def wait_for_ssh(host: str, port: int = 22, *, timeout: float = 300.0,
                 interval: float = 5.0, connect_timeout: float = 5.0,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = nap) -> float:
    """Block until a TCP connect to ``host:port`` succeeds; return the seconds it took.

    Raises LtmError once ``timeout`` seconds have passed without an answer.
    """
    start = clock()
    deadline = start + timeout

    def knock() -> float:
        remaining = deadline - clock()
        # Not socket.create_connection: an interrupt inside it leaves its socket open.
        error: OSError = OSError(f"no address for {host}")
        for family, kind, proto, _, address in socket.getaddrinfo(host, port,
                                                                  type=socket.SOCK_STREAM):
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(max(0.1, min(connect_timeout, remaining)))
                try:
                    sock.connect(address)
                except OSError as exc:
                    error = exc
                    continue
                return clock() - start
        raise error

    try:
        return retry(knock, when=OSError, delay=interval,
                     give_up=lambda: clock() + interval > deadline, sleep=sleep)
    except OSError as exc:
        last_error = str(exc) or type(exc).__name__
        raise LtmError(f"SSH on {host}:{port} did not answer within {timeout:g} s "
                       f"(last error: {last_error}); check the security group allows "
                       "your address, or wait and retry") from None


def scan_host_key(host: str, port: int = 22, *, timeout: float = 15.0) -> str:
    """The server's host key as a known_hosts line (trust on first use).

    Only the key exchange is run: nothing is authenticated, so no credentials
    are sent to a server that is not yet trusted.
    """
    # Imported here: only `ltm aws up` needs paramiko, and it is slow to load.
    import paramiko

    from harness.remote import fetch_host_key

    try:
        key = fetch_host_key(host, port, timeout=timeout)
    except (paramiko.SSHException, OSError) as exc:
        raise LtmError(f"could not read the SSH host key of {host}:{port}: {exc}; "
                       "retry, or add it yourself with ssh-keyscan") from None
    return known_hosts_line(host, port, key.key_type, key.base64)


def known_hosts_line(host: str, port: int, key_type: str, key_base64: str) -> str:
    from harness.remote import known_target

    return f"{known_target(host, port)} {key_type} {key_base64}"
