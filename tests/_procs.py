"""A process that has exited and is not reaped yet, for the checks that must count it gone."""

from __future__ import annotations

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
