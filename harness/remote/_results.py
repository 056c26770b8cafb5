"""What happened on each host of a group, and running one step on every host at once.

Shared by the SSH cluster (one party per host) and ``ltm hosts setup``: both
act on all hosts in parallel and collect every host's failure into one
:class:`HostGroupError`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import paramiko

from harness.engine import Completed
from harness.errors import LtmError
from harness.remote._connect import describe
from harness.remote._stop import Stop, Stopped
from harness.remote.hosts import Host

__all__ = ["Abandoned", "HostGroupError", "HostResult", "labelled", "parallel"]

T = TypeVar("T")
U = TypeVar("U")
# How long interrupted workers get to end once their connections are closed: with the
# CLI's own exit, well inside the 2 seconds a stopped command may take.
_GRACE_SECONDS = 1.0
_JOIN_SECONDS = 0.05  # a signal is handled between two joins


class Abandoned(Stopped):
    """The group gave up on this host (another failed, timeout, Ctrl-C)."""


@dataclass
class HostResult:
    """What happened on one host: its party's output, or the exception it raised."""

    party: int
    host: Host
    completed: Completed | None = None
    error: BaseException | None = None
    # Had not failed when the group was stopped (timeout, or another host failed first): a
    # failure it shows was caused by the stop, so the error does not blame this host.
    stopped: bool = False
    ended: float | None = None  # time.monotonic() when it ended

    @property
    def label(self) -> str:
        return describe(self.host)

    @property
    def failed(self) -> bool:
        if self.error is not None:
            return not isinstance(self.error, Stopped)
        return self.completed is not None and self.completed.returncode != 0


class HostGroupError(LtmError):
    """One or more hosts failed; ``results`` holds every host's outcome."""

    def __init__(self, message: str, results: Sequence[HostResult]) -> None:
        self.results = list(results)
        super().__init__(message)

    @property
    def failed(self) -> list[HostResult]:
        """The hosts that failed by themselves."""
        return [r for r in self.results if r.failed and not r.stopped]


def labelled(label: str, exc: BaseException) -> str:
    """``exc``'s message, starting with the host's label exactly once."""
    text = reason(exc)
    return text if text.startswith(label) else f"{label}: {text}"


def reason(exc: BaseException) -> str:
    """What went wrong, in words, for errors whose own text may be empty.

    A connection that drops under paramiko surfaces as a bare ``EOFError()`` (or an
    empty ``SSHException``), whose text is nothing at all.
    """
    text = str(exc).strip()
    if isinstance(exc, EOFError) or (not text and isinstance(exc, (OSError,
                                                                   paramiko.SSHException))):
        return "the SSH connection closed unexpectedly (was sshd stopped, or the host " \
               "rebooted?)"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[:1].lower() + exc.strerror[1:]
    return text or type(exc).__name__


def parallel(fn: Callable[[U], T], items: Sequence[U], name: str = "ltm-host", *,
             stop: Stop | None = None, grace: float = _GRACE_SECONDS) -> list[T | BaseException]:
    """``fn`` on every item at once, each on its own thread; each result or the exception it
    raised.

    The threads are daemons and the caller waits for them in short joins, so a signal
    (a KeyboardInterrupt in the main thread) is seen at once: ``stop`` is then stopped,
    which makes the workers give up (their connections closed), they get ``grace``
    seconds to end, and the interrupt goes on up without waiting longer for a host
    that does not answer.
    """
    out: list[T | BaseException] = [RuntimeError("not run")] * len(items)

    def call(i: int) -> None:
        try:
            out[i] = fn(items[i])
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=call, args=(i,), name=f"{name}-{i}", daemon=True)
               for i in range(len(items))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(_JOIN_SECONDS)
    except BaseException:
        if stop is not None:
            stop.stop()
        deadline = time.monotonic() + grace
        for thread in threads:
            if thread.ident is not None:
                thread.join(max(0.0, deadline - time.monotonic()))
        raise
    return out
