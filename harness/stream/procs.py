"""The processes of a streamed run: started together, watched together, stopped together.

Each process reports once over its own pipe (``("ok", figures)`` or its failure).
:class:`Processes` starts them (a start is never torn by a signal), collects
every report, and, on its way out, kills whatever still runs. When one fails, its
peers get a moment to report their own error, and the most telling failure is
raised: bad input or a full disk first (one line for the user), then a protocol
violation by a client, a server's refusal of its stream, a process that died, and
last those that only lost a stream to another. A run that times out, or whose
streams were only lost, because a process of it was stopped (SIGSTOP) names that
process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

from harness.errors import (
    DiskFullError,
    InputError,
    PartyError,
    stop_signals_deferred,
)

__all__ = ["Processes", "StreamError", "pid_alive", "pid_stopped"]

# Seconds a failed process's peers get to report their own error before all are stopped:
# a server's "ended early" says more than a worker's "server closed its stream".
_GRACE_S = 2.0


class StreamError(PartyError):
    """A server or client worker of a streamed run failed; names which.

    ``lost``: the one named only lost a stream (its peer closed it), the consequence
    of a failure elsewhere, on another host when these processes are a host's share
    of the run.
    """

    lost = False


class Processes:
    """The run's child processes, each reporting over its own pipe; all killed on exit."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.procs: list[tuple[str, Any, Connection]] = []

    def start(self, name: str, target: Callable[..., None], args: tuple) -> None:
        got, sent = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=target, args=(*args, sent), name=name, daemon=True)
        self.procs.append((name, proc, got))  # before start: a signal may come
        with stop_signals_deferred():
            proc.start()
        sent.close()

    def collect(self, deadline: float, watched: dict[str, int] | None = None) -> dict[str, Any]:
        """Every process's result (by ``time.perf_counter`` ``deadline``); ``watched``,
        other processes the run waits on (name: process id), to name one stopped."""
        return _collect(self.procs, deadline, watched or {})

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        for _, proc, got in self.procs:
            if proc.pid is not None:
                proc.kill()
                proc.join()
            got.close()


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs: one that has exited and waits to be reaped
    (a zombie) is gone, whatever it held is free; another user's process runs."""
    if pid <= 0:
        return False  # os.kill would signal a process group, or every process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # the signal found it; /proc may hide another user's processes


def pid_stopped(pid: int) -> str | None:
    """How process ``pid`` is stopped, in words, if it is (a signal such as SIGSTOP or
    Ctrl-Z, or a debugger): it then runs no more until continued. None if it runs,
    is gone, or cannot be seen."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return None
    return {"T": "stopped (SIGSTOP)", "t": "stopped by a debugger"}.get(state)


def _collect(procs: list[tuple[str, Any, Connection]], deadline: float,
             watched: dict[str, int]) -> dict[str, Any]:
    """Every process's result, or the most telling failure once one fails."""
    results: dict[str, Any] = {}
    waiting = {got: (name, proc) for name, proc, got in procs}
    failures: list[tuple[str, str, str]] = []  # (who, kind, message)
    kind: str
    payload: Any
    grace_until = None
    while waiting:
        now = time.perf_counter()
        limit = grace_until if grace_until is not None else deadline
        if now >= limit:
            break
        for got in _ready(list(waiting), limit - now):
            name, proc = waiting.pop(got)
            try:
                kind, payload = got.recv()
            except (EOFError, OSError):
                proc.join(1)
                kind, payload = "died", f"exited with status {proc.exitcode} mid-stream"
            if kind == "ok":
                results[name] = payload
                continue
            failures.append((name, kind, payload))
            if grace_until is None:
                grace_until = time.perf_counter() + _GRACE_S
    # Those not reaped (whose ids no other process can have taken) and the watched.
    pids = {**{name: proc.pid for name, proc in waiting.values()}, **watched}
    if failures:
        if all(kind in ("lost", "broken") for _, kind, _ in failures):
            _raise_stopped(pids, "failed")  # what the streams were lost to
        _raise(failures)
    if waiting:
        names = ", ".join(sorted(name for name, _ in waiting.values()))
        _raise_stopped(pids, f"timed out ({names} still running)")
        raise StreamError(f"the streamed run timed out ({names} still running); raise "
                          "--timeout", party=next(iter(waiting.values()))[0])
    return results


def _raise_stopped(pids: dict[str, int], what: str) -> None:
    """The cause of a timeout (or of streams lost waiting) when it is a process that was
    stopped, not one that was slow or failed: StreamError naming it (else nothing)."""
    stopped = [(name, how) for name, pid in pids.items() if (how := pid_stopped(pid))]
    if not stopped:
        return
    who = ", ".join(f"{name} was {how}" for name, how in stopped)
    raise StreamError(f"the streamed run {what}: {who} and never continued, so the "
                      "stream waited on it; every server and client worker was stopped "
                      "and no output was written: leave a run's processes running, or "
                      "continue a stopped one (SIGCONT) within --timeout",
                      party=stopped[0][0])


def _ready(conns: list[Connection], timeout: float | None) -> list[Connection]:
    """The connections with something to read (or closed), as connections."""
    return [c for c in wait(conns, timeout) if isinstance(c, Connection)]


def _raise(failures: list[tuple[str, str, str]]) -> None:
    # The cause before its consequences: bad input (one line for the user), a client's
    # protocol violation, a server's refusal of its stream, a process that died; then
    # those that lost a stream to them.
    rank = {"input": 0, "disk": 0, "violation": 1, "error": 2, "died": 3, "lost": 4,
            "broken": 5}
    failures.sort(key=lambda f: (rank.get(f[1], 9), not f[0].startswith("server")))
    who, kind, message = failures[0]
    if kind == "input":
        raise InputError(message)
    if kind == "disk":  # a full disk is the cause, said in its own line
        raise DiskFullError(f"{who}: {message}")
    error = StreamError(f"the streamed run failed: {who} {message}; every server and "
                        "client worker was stopped and no output was written", party=who)
    error.lost = kind in ("lost", "broken")
    raise error
