"""Peak memory of a process tree: its PSS, sampled in a background thread.

PSS (proportional set size, ``/proc/PID/smaps_rollup``) splits shared pages
between the processes that map them, so three MP-SPDZ parties loading the same
library are not counted three times, as summed RSS would; the page cache (share
files written and read back) is the kernel's and not counted. The tree is the
root and every process below it, found anew at each sample, so children that
start and end during a run are seen while they live. A peak shorter than the
sampling interval can be missed: the figure is a lower bound within one
interval's growth. Linux only; elsewhere every sample reads 0.

    with PeakMemory() as peak:      # this process and its descendants
        ...
    peak.bytes
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import TracebackType

__all__ = ["PeakMemory", "process_tree", "tree_pss_bytes"]

_PROC = Path("/proc")


def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` (every thread's: a thread can fork too)."""
    found: list[int] = []
    try:
        for task in (_PROC / str(pid) / "task").iterdir():
            try:
                found.extend(int(c) for c in (task / "children").read_text().split())
            except FileNotFoundError:
                # Kernels without CONFIG_PROC_CHILDREN: the slow way, every process's parent.
                return _children_by_scan(pid)
            except OSError:  # the thread ended while we looked
                continue
    except OSError:  # the process ended while we looked
        pass
    return found


def _children_by_scan(pid: int) -> list[int]:
    found = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name (field 2) may hold spaces and parentheses: parse after its ')'.
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1] == str(pid):
            found.append(int(entry.name))
    return found


def process_tree(root: int) -> list[int]:
    """``root`` and all its descendants alive now, root first."""
    seen, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in seen:  # a pid reused while we walked: count it once
            continue
        seen.append(pid)
        todo.extend(_children(pid))
    return seen


def _pss_bytes(pid: int) -> int:
    try:
        with open(_PROC / str(pid) / "smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):  # ended, or not ours to read
        pass
    return 0


def tree_pss_bytes(root: int) -> int:
    """PSS of ``root`` and all its descendants now, in bytes."""
    return sum(_pss_bytes(pid) for pid in process_tree(root))


class PeakMemory:
    """The largest PSS of a process tree (default: this process's) while the block runs.

    A sample is taken on entry, every ``interval`` seconds, and on exit, so even a
    block shorter than the interval has a figure.
    """

    def __init__(self, root: int | None = None, *, interval: float = 0.1) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be positive, got {interval!r}")
        self.root = os.getpid() if root is None else root
        self.interval = interval
        self.bytes = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> int:
        """One sample now; the peak so far."""
        self.bytes = max(self.bytes, tree_pss_bytes(self.root))
        self.samples += 1
        return self.bytes

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> PeakMemory:
        self.sample()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="peak-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.sample()

    @property
    def gib(self) -> float:
        return self.bytes / 2**30
