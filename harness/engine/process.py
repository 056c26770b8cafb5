"""Child processes for parties and tools.

Every child runs in its own process group so that stopping it also stops
anything it started. A group of parties is one unit: when one fails or the
timeout passes, all are stopped, and the error names the party and shows the
tail of its stderr. Nothing outlives the call (``finally`` kills the groups).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import PartyError, stop_signals_deferred
from harness.fileio import PRIVATE_UMASK, open_private, private_dir

__all__ = ["Command", "Completed", "Group", "run_group", "check_call"]

_POLL_SECONDS = 0.005
_GRACE_SECONDS = 2.0


@dataclass(frozen=True)
class Command:
    name: str
    argv: Sequence[str]
    cwd: Path
    env: dict[str, str] | None = None
    log_dir: Path | None = None  # where stdout/stderr go; defaults to cwd


@dataclass
class Completed:
    name: str
    returncode: int
    stdout: str
    stderr: str
    wall_seconds: float
    extra: dict = field(default_factory=dict)


class _Running:
    def __init__(self, cmd: Command, running: list[_Running]) -> None:
        """Start ``cmd`` and add it to ``running`` before any stop signal can intervene."""
        self.cmd = cmd
        log_dir = cmd.log_dir or cmd.cwd
        if not log_dir.is_dir():
            private_dir(log_dir)
        self.out_path = log_dir / f"{cmd.name}.stdout"
        self.err_path = log_dir / f"{cmd.name}.stderr"
        # Files, not pipes: a party that prints a lot can never block on a full pipe.
        with open_private(self.out_path) as out, open_private(self.err_path) as err:
            self.started = time.monotonic()
            self.ended: float | None = None
            try:
                with stop_signals_deferred():  # a child's pid is never lost
                    self.proc = subprocess.Popen(
                        list(cmd.argv), cwd=cmd.cwd, env=cmd.env, stdin=subprocess.DEVNULL,
                        stdout=out, stderr=err, start_new_session=True,
                        # what a party writes (outputs, persistence) is as private as its
                        # inputs
                        umask=PRIVATE_UMASK)
                    running.append(self)  # from here on, the caller's finally stops it
            except OSError as exc:
                raise PartyError(f"{cmd.name}: cannot start {cmd.argv[0]}: {exc}",
                                 party=cmd.name) from exc

    def poll(self) -> int | None:
        rc = self.proc.poll()
        if rc is not None and self.ended is None:
            self.ended = time.monotonic()
        return rc

    def stop(self) -> None:
        """Terminate, then kill, the whole process group."""
        pgid = self.proc.pid
        if self.proc.poll() is None:
            _signal_group(pgid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                pass
        # The leader may be gone while its children linger in the group.
        _signal_group(pgid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=_GRACE_SECONDS)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
            pass
        self.poll()

    def result(self) -> Completed:
        return Completed(
            self.cmd.name, self.proc.returncode if self.proc.returncode is not None else -1,
            _read(self.out_path), _read(self.err_path),
            (self.ended or time.monotonic()) - self.started)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _describe_exit(rc: int) -> str:
    if rc < 0:
        try:
            return f"was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"was killed by signal {-rc}"
    return f"exited with status {rc}"


def _culprit(failed: list[tuple[_Running, int]]) -> _Running:
    """The process to blame: the first to end, and among those seen in the same poll, one
    killed by a signal (its peers exit with status 1 once it is gone, often by the next
    read, so party order must not decide), SIGPIPE last: a peer that wrote to it got
    that one."""
    earliest = min(r.ended or 0.0 for r, _ in failed)
    same_poll = [(r, rc) for r, rc in failed if (r.ended or 0.0) - earliest <= _POLL_SECONDS]
    return min(same_poll, key=lambda pair: (pair[1] >= 0, pair[1] == -signal.SIGPIPE,
                                            pair[0].ended or 0.0))[0]


class Group:
    """Commands started together and run as one unit: when one fails or the timeout
    passes, all are stopped, and the error names the first to fail. :meth:`stop`
    (which :func:`run_group` always calls) leaves nothing running."""

    def __init__(self, commands: Sequence[Command]) -> None:
        self.running: list[_Running] = []
        try:
            for cmd in commands:
                _Running(cmd, self.running)
        except BaseException:
            self.stop()
            raise

    def check(self) -> list[int | None]:
        """Each command's exit status so far; a failed one stops all and raises
        :class:`PartyError`."""
        codes = [r.poll() for r in self.running]
        failed = [(r, rc) for r, rc in zip(self.running, codes, strict=True)
                  if rc not in (None, 0)]
        if failed:
            first = _culprit(failed)
            self.stop()
            res = first.result()
            others = ", ".join(r.cmd.name for r in self.running if r is not first)
            stopped = others or "nothing else"
            raise PartyError(
                f"{res.name} {_describe_exit(res.returncode)}; stopped {stopped}",
                party=res.name, returncode=res.returncode, stdout=res.stdout,
                stderr=res.stderr)
        return codes

    @property
    def pids(self) -> list[int]:
        """Each command's process id, in order."""
        return [r.proc.pid for r in self.running]

    def restart_clocks(self, at: Sequence[float]) -> None:
        """Time each command from ``at`` (``time.monotonic``) on, not from its start:
        for processes started early that waited to be released."""
        for r, t in zip(self.running, at, strict=True):
            r.started = t

    def wait(self, timeout: float) -> list[Completed]:
        """Every command's result once all succeeded (see :meth:`check`)."""
        deadline = time.monotonic() + timeout
        while True:
            codes = self.check()
            if all(rc == 0 for rc in codes):
                return [r.result() for r in self.running]
            if time.monotonic() > deadline:
                waiting = [r.cmd.name for r, rc in zip(self.running, codes, strict=True)
                           if rc is None]
                self.stop()
                res = next(r for r in self.running if r.cmd.name == waiting[0]).result()
                raise PartyError(
                    f"timed out after {timeout:g} s waiting for {', '.join(waiting)}; "
                    "stopped all parties", party=waiting[0], returncode=res.returncode,
                    stdout=res.stdout, stderr=res.stderr)
            time.sleep(_POLL_SECONDS)

    def stop(self) -> None:
        for r in self.running:
            r.stop()


def run_group(commands: Sequence[Command], timeout: float) -> list[Completed]:
    """Run all commands concurrently; return when all succeeded.

    Raises :class:`PartyError` for the first command that fails (the others are
    stopped first) or when the timeout passes (all are stopped).
    """
    group = Group(commands)
    try:
        return group.wait(timeout)
    finally:
        group.stop()


def check_call(cmd: Command, timeout: float) -> Completed:
    """One command under the same guarantees as a group of one."""
    return run_group([cmd], timeout)[0]
