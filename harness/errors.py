"""Error types. Every error a user can cause is an :class:`LtmError`.

The CLI prints an ``LtmError`` as one line and exits with status 1; anything
else is a bug and keeps its traceback. The checks every user-supplied number
and size goes through (:func:`check_number`, :func:`check_memory`) live here too,
so that every layer words them the same way, and so does the one way a process is
stopped by a signal (:class:`Interrupted`, :func:`stop_on_signals`): ``ltm`` and
the host agent both clean up on the way out.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# SIGTERM (kill, systemd, a batch scheduler, a host's lost SSH session) and SIGHUP (a
# closed terminal) stop a process the way Ctrl-C does, through the same cleanup.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A stop signal, raised where the main thread is, so every cleanup path runs."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


def _on_stop_signal(signum: int, _frame: object) -> None:
    # Once: a second signal must not cut the cleanup the first one started short.
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(signum)


def stop_on_signals() -> dict:
    """Make :data:`STOP_SIGNALS` raise :class:`Interrupted` in the main thread; the
    handlers they had (for the caller to restore), empty when not called from it."""
    previous = {}
    for sig in STOP_SIGNALS:
        try:
            previous[sig] = signal.signal(sig, _on_stop_signal)
        except ValueError:  # not the main thread (main() called from a worker): leave them
            break
    return previous


@contextmanager
def stop_signals_deferred() -> Iterator[None]:
    """Hold :data:`STOP_SIGNALS` for the block; one that arrived is handled just after.

    For the few steps a stop must not cut in two: a child started (its pid would be
    lost, and with it the way to stop it), a request to the fork server, a descriptor
    being handed to the file object that will close it (cut there, both would close it).
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers run in the main thread only
        return
    caught: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: caught.append(signum))
                for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        for signum in caught[:1]:
            signal.raise_signal(signum)  # to the handler it was meant for


class LtmError(Exception):
    """A problem the user can fix; the message names the problem and the fix."""


class InputError(LtmError):
    """Bad parameters or data."""


class MpSpdzError(LtmError):
    """MP-SPDZ is missing, incomplete, or failed to compile a program."""


class PartyError(LtmError):
    """A party process failed, timed out or was killed.

    Carries what is needed to diagnose it without rerunning: the party, its
    exit status, and its captured output.
    """

    def __init__(
        self,
        message: str,
        *,
        party: int | str | None = None,
        returncode: int | None = None,
        stdout: str = "",
        stderr: str = "",
    ) -> None:
        self.party = party
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        tail = stderr_tail(stderr)
        super().__init__(f"{message}\n{tail}" if tail else message)


class DiskFullError(LtmError):
    """The disk filled while a run wrote to it: the message names where and how much."""


class VerificationError(LtmError):
    """The revealed sketch differs from the plaintext computation."""


class TamperDetectedError(LtmError):
    """A malicious protocol's servers found inconsistent shares and aborted."""


def stderr_tail(text: str, lines: int = 8) -> str:
    """The last non-empty lines of a party's stderr, indented for display."""
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join("    " + line for line in kept)


def check_number(option: str, value: object, *, low: float | None = None,
                 high: float | None = None, integer: bool = False,
                 open_low: bool = False) -> None:
    """Refuse a user-supplied number that is not finite or not in [low, high].

    ``open_low`` excludes ``low`` itself (a positive epsilon). Every numeric
    option goes through here before any data is drawn, so a bad one is one line.
    """
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or (integer and not isinstance(value, int)):
        raise InputError(f"{option} must be {kind}, got {value!r}")
    if not math.isfinite(value):
        raise InputError(f"{option} must be a finite number, got {value}")

    def show(x: float) -> str:
        return str(x) if isinstance(x, int) else f"{x:g}"

    too_low = low is not None and (value <= low if open_low else value < low)
    if too_low or (high is not None and value > high):
        if low is not None and high is not None:
            bounds = f"lie in {'(' if open_low else '['}{show(low)}, {show(high)}]"
        elif low is not None:
            bounds = f"be {'greater than' if open_low else 'at least'} {show(low)}"
        elif high is not None:
            bounds = f"be at most {show(high)}"
        raise InputError(f"{option} must {bounds}, got {show(value)}")


def available_memory() -> int:
    """Bytes this machine can still give a process (MemAvailable), or its total memory."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_disk(needed: float, where: Path, what: str, fix: str) -> None:
    """Refuse, before writing, files that cannot fit on the disk holding ``where``."""
    place = where
    while not place.exists() and place != place.parent:
        place = place.parent
    free = shutil.disk_usage(place).free
    if needed > free:
        raise InputError(f"{what} needs about {needed / 1e9:.3g} GB of disk, but only "
                         f"{free / 1e9:.3g} GB are free at {place}; {fix}")


def check_memory(needed: float, what: str, fix: str) -> None:
    """Refuse, before allocating, work whose arrays cannot fit in memory."""
    have = available_memory()
    if needed > have:
        raise InputError(f"{what} needs about {needed / 1e9:.3g} GB of memory, but only "
                         f"{have / 1e9:.3g} GB are available; {fix}")
