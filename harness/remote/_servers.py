"""sshd servers as processes: finding them, waiting for them, stopping them.

A server is found by its command line (the configuration it runs), so that nothing
depends on a pid file a dying server may not have written; it is stopped with every
session it started, each of which leads a session of its own.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

from harness.errors import LtmError
from harness.stream import pid_alive

__all__ = ["cmdline", "descendants", "one_line", "servers_of", "stop_server", "wait_ready"]

_START_SECONDS = 10.0
_STOP_SECONDS = 5.0


def servers_of(config: Path) -> list[int]:
    """The live sshd processes started on ``config`` (found by their command lines, so
    that nothing depends on a pid file a dying server may not have written)."""
    needle = f" -f {config} "
    return [pid for pid in _parents() if needle in f" {cmdline(pid)} " and pid_alive(pid)]


def wait_ready(address: str, port: int, alive: Callable[[], bool], log: Callable[[], str],
               name: str, timeout: float = _START_SECONDS) -> None:
    """Until the server at ``address:port`` sends its SSH banner; its log if it never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise LtmError(f"sshd for {name} exited: {one_line(log())}")
        try:
            with socket.create_connection((address, port), timeout=1) as sock:
                sock.settimeout(2)
                if sock.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.02)
    raise LtmError(f"sshd for {name} did not answer on {address}:{port} within "
                   f"{timeout:g} s: {one_line(log())}")


def one_line(log: str) -> str:
    """A log's last lines as one line (an error's)."""
    return "; ".join(line.strip() for line in log.strip().splitlines()[-3:])[-600:]


def _parents() -> dict[int, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parents[int(entry)] = int(fh.read().rsplit(")", 1)[-1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return parents


def descendants(root_pid: int) -> list[int]:
    """Every process below ``root_pid`` (from /proc), children before grandchildren."""
    parents = _parents()
    found, frontier = [], [root_pid]
    while frontier:
        pid = frontier.pop(0)
        children = [c for c, p in parents.items() if p == pid]
        found += children
        frontier += children
    return found


def stop_server(pid: int, reap: Callable[[float], bool] | None = None) -> None:
    """Stop the sshd ``pid`` (the leader of its own session) and every session it started.

    Each connection's sshd and each party lead their own sessions, so they are found
    as descendants before the server goes and they are orphaned. ``reap(seconds)``
    waits for the server if this process started it (True once it is gone).
    """
    sessions = descendants(pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        if (reap or _gone(pid))(_STOP_SECONDS):
            break
    for child in sessions:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _gone(pid: int) -> Callable[[float], bool]:
    def wait(seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while pid_alive(pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True
    return wait


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
