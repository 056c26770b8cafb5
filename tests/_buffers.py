"""Where a streamed run's channel buffers are: memfds that processes hold, no file.

A buffer is shared memory with no name in any file system; it shows only in
``/proc/PID/fd`` of the processes holding it, as ``/memfd:ltm-channel-... (deleted)``.
The kernel frees it with the last of them, so "nothing left" is "no process holds one".
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["buffers_held", "left_in_shm", "shm_entries"]

_PREFIX = "/memfd:ltm-channel"


def buffers_held(pids: list[int] | None = None) -> list[tuple[int, str, int]]:
    """(pid, buffer name, mode) of every channel buffer the processes ``pids`` (all
    processes when None) hold open or mapped."""
    if pids is None:
        pids = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    found = []
    for pid in pids:
        seen = set()
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith(_PREFIX) and link not in seen:
                    seen.add(link)
                    mode = os.stat(f"/proc/{pid}/fd/{fd}").st_mode & 0o777
                    found.append((pid, link[len("/memfd:"):].split(" ")[0], mode))
            with open(f"/proc/{pid}/maps") as fh:
                for line in fh:
                    if _PREFIX in line:
                        name = line.split(_PREFIX, 1)[1].split(" ")[0]
                        link = f"{_PREFIX}{name} (deleted)"
                        if link not in seen:
                            seen.add(link)
                            found.append((pid, f"ltm-channel{name}",
                                          _mode(f"/proc/{pid}/map_files/{line.split()[0]}")))
        except OSError:
            continue  # ended meanwhile, or not ours to look into
    return found


def shm_entries() -> set[str]:
    """The harness's entries in ``/dev/shm`` (it should make none)."""
    shm = Path("/dev/shm")
    return {p.name for p in shm.glob("ltm-*")} if shm.is_dir() else set()


def _mode(path: str) -> int:
    """A mapping's file mode (root may look), or -1."""
    try:
        return os.stat(path).st_mode & 0o777
    except OSError:
        return -1


def left_in_shm(before: set[str]) -> list[str]:
    """The entries of ``/dev/shm`` made since ``before`` that no live process of another
    session owns: those this session left. (Concurrent sessions on one machine may
    have entries there while they run; an entry names its owner's pid,
    ``ltm-stream-PID-...``, and one whose owner lives on outside this process tree is
    theirs.)"""
    mine = {os.getpid(), *_descendants(os.getpid())}
    left = []
    for name in sorted(shm_entries() - before):
        parts = name.split("-")
        owner = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else None
        if owner is not None and owner not in mine and Path(f"/proc/{owner}").exists():
            continue
        left.append(name)
    return left


def _descendants(root: int) -> set[int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parents[int(entry)] = int(fh.read().rsplit(")", 1)[-1].split()[1])
            except OSError:
                continue
    found, frontier = set(), [root]
    while frontier:
        pid = frontier.pop()
        children = [c for c, p in parents.items() if p == pid]
        found.update(children)
        frontier += children
    return found
