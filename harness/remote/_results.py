"""What happened on each host of a group, and running one step on every host at once.

Shared by the SSH cluster (one party per host) and ``ltm hosts setup``: both
act on all hosts in parallel and collect every host's failure into one
:class:`HostGroupError`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from harness.engine import Completed
from harness.errors import LtmError
from harness.remote._connect import describe
from harness.remote.hosts import Host

__all__ = ["Abandoned", "HostGroupError", "HostResult", "labelled", "parallel"]

T = TypeVar("T")
U = TypeVar("U")


class Abandoned(Exception):
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
            return not isinstance(self.error, Abandoned)
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
    text = str(exc) or type(exc).__name__
    return text if text.startswith(label) else f"{label}: {text}"


def parallel(fn: Callable[[U], T], items: Sequence[U],
             name: str = "ltm-host") -> list[T | BaseException]:
    """``fn`` on every item at once, each on its own thread; each result or the exception it
    raised."""
    out: list[T | BaseException] = [RuntimeError("not run")] * len(items)

    def call(i: int) -> None:
        try:
            out[i] = fn(items[i])
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=call, args=(i,), name=f"{name}-{i}")
               for i in range(len(items))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out
