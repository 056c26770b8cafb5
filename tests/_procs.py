"""Processes for the checks: one that has exited and is not reaped yet, which they must count
gone, and a process's children as /proc lists them."""

from __future__ import annotations

import os
import subprocess
import time


def zombie() -> subprocess.Popen:
    """A child that has exited and is not reaped yet (the caller reaps it: ``wait()``)."""
    proc = subprocess.Popen(["true"])
    deadline = time.monotonic() + 30
    while state(proc.pid) != "Z":
        assert time.monotonic() < deadline, f"child {proc.pid} never exited"
        time.sleep(0.01)
    return proc


def state(pid: int) -> str:
    """The process's state letter in ``/proc/PID/stat`` (R, S, Z, ...)."""
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[-1].split()[0]


def children(pid: int) -> list[tuple[int, str]]:
    """The live children of ``pid``: (pid, command line)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                parent = int(fh.read().rsplit(")", 1)[-1].split()[1])
            if parent == pid:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    found.append((int(entry), fh.read().replace(b"\0", b" ").decode()))
        except (OSError, ValueError, IndexError):
            continue
    return found
