"""Stopping work that runs on several hosts at once, within a moment of a signal.

The CLI turns SIGINT, SIGTERM and SIGHUP into a :class:`KeyboardInterrupt`
raised in the main thread (``harness.cli.Interrupted``). Work on hosts runs in
worker threads (:func:`harness.remote._results.parallel`), where no signal
arrives, so the thread that waits for them calls :meth:`Stop.stop` when it is
interrupted: every worker registered what undoes its work at once (closing its
SSH connection, which ends its remote commands: see
:func:`harness.remote._shell.guarded`), and workers that check between steps
see :attr:`Stop.stopped`. Anything that waits for a host (a connection retry's
back-off) waits through :meth:`Stop.sleep`, which ends when the stop comes.

Nothing here knows about SSH: anything with a ``close`` (a cloud API's
session, a waiter) can be registered, which is how other commands that act on
many machines (creating or deleting cloud instances) stop the same way.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

__all__ = ["Closeable", "Stop", "Stopped"]


class Stopped(Exception):
    """Raised in a worker once the work was stopped (a signal, or another host failed)."""


class Closeable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=Closeable)


class Stop:
    """A stop shared by the workers of one command: set once, seen by all."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._undo: dict[int, Callable[[], None]] = {}
        self._next = 0

    @property
    def stopped(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        """Raise :class:`Stopped` if the work was stopped."""
        if self._event.is_set():
            raise Stopped

    def sleep(self, seconds: float) -> None:
        """``time.sleep`` that ends, with :class:`Stopped`, as soon as the work is stopped."""
        if self._event.wait(seconds):
            raise Stopped

    def on_stop(self, undo: Callable[[], None]) -> Callable[[], None]:
        """Call ``undo`` when the work is stopped (at once if it was); returns what
        unregisters it, for when the work it undoes has ended by itself."""
        with self._lock:
            key = self._next
            self._next += 1
            if not self._event.is_set():
                self._undo[key] = undo
                return lambda: self._forget(key)
        _quietly(undo)
        raise Stopped

    @contextlib.contextmanager
    def closing(self, thing: C) -> Iterator[C]:
        """``thing``, closed when the block ends or, at once, when the work is stopped."""
        forget = self.on_stop(thing.close)
        try:
            yield thing
        finally:
            forget()
            thing.close()

    def stop(self) -> None:
        """Stop the work: every registered undo runs once, here; errors are ignored (the
        connection it closes may be gone already)."""
        with self._lock:
            self._event.set()
            undo, self._undo = list(self._undo.values()), {}
        for fn in undo:
            _quietly(fn)

    def _forget(self, key: int) -> None:
        with self._lock:
            self._undo.pop(key, None)


def _quietly(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001 - stopping must go on whatever one close raises
        pass
