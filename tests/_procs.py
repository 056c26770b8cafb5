"""Processes for the checks: one that has exited and is not reaped yet, which they must count
gone, and a process's children as /proc lists them."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator


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


def processes() -> Iterator[tuple[int, str, list[str]]]:
    """Every process /proc lists: its pid, its name, and the fields of its stat after the
    name (state first, then the parent's pid)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:  # gone while we looked
            continue
        name, rest = stat.split("(", 1)[1].rsplit(")", 1)
        yield int(entry), name, rest.split()


def children(pid: int) -> list[tuple[int, str]]:
    """The live children of ``pid``: (pid, command line)."""
    found = []
    for child, _, fields in processes():
        if int(fields[1]) != pid:
            continue
        try:
            with open(f"/proc/{child}/cmdline", "rb") as fh:
                found.append((child, fh.read().replace(b"\0", b" ").decode()))
        except OSError:
            continue
    return found
