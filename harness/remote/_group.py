"""All parties of an SSH run as one unit: prepared together, started together, stopped
together.

Phase one connects to every host, checks it (engine, harness, disk) and
uploads each party's files, or (a stream to the hosts) starts each server's
``serve`` step; no party runs yet, so one failing host stops the run before any
party starts.
Phase two starts every party at once and waits for all: if one fails, loses
its connection or the timeout passes, all are stopped (their remote process
groups killed) and one :class:`HostGroupError` names the failing host(s).
Remote working directories are removed in every case, Ctrl-C included.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path

import paramiko

from harness.engine import Completed
from harness.errors import LtmError, stderr_tail
from harness.remote._connect import ConnectOptions
from harness.remote._party import RemoteParty, Upload
from harness.remote._results import Abandoned, HostGroupError, HostResult, labelled, parallel

__all__ = ["HOST_ERRORS", "PartyGroup", "upload_size"]

_DIRECTORIES = ["Programs", "Programs/Bytecode", "Programs/Schedules", "Programs/Public-Input",
               "Player-Data", "Persistence"]
_GRACE_SECONDS = 5.0  # for workers to see their killed party's channel close
_SETTLE_SECONDS = 0.5  # after a first failure, for the others' failures to arrive
_COLLATERAL = "another party encountered a problem"  # MP-SPDZ, when a peer went away
# Failures a host can cause; anything else is a bug and keeps its own traceback.
HOST_ERRORS = (LtmError, OSError, EOFError, paramiko.SSHException)


class PartyGroup:
    """All parties as one unit: prepared together, started together, stopped together."""

    def __init__(self, parties: list[RemoteParty], known_hosts: Path,
                 inventory_path: Path | None, options: ConnectOptions, *,
                 timeout: float = 900.0, base_port: int = 0,
                 extra_bytes: list[int] | None = None) -> None:
        self.parties = parties
        self.timeout = timeout
        self.base_port = base_port
        # Disk each server needs apart from the uploads (the share file its stream writes).
        self.extra_bytes = list(extra_bytes or [0] * len(parties))
        self.known_hosts = known_hosts
        self.inventory_path = inventory_path
        self.options = options
        self.results = [HostResult(p.index, p.host) for p in parties]
        self.abandon = threading.Event()
        self._started: set[int] = set()  # parties started before their stream (fed)
        self.pool = ThreadPoolExecutor(max_workers=len(parties), thread_name_prefix="ltm-ssh")

    def run(self, uploads: list[list[Upload]], program: str, timeout: float, *,
            opened: bool = False) -> list[HostResult]:
        """Prepare every party (``opened``: already done by :meth:`open_stream`; only
        the uploads remain), start them all (unless :meth:`open_stream` started them,
        fed by their servers), wait for all, clean up in every case."""
        try:
            if opened:
                self._all(lambda party: party.upload(_DIRECTORIES, uploads[party.index],
                                                     self.abandon))
            else:
                self._prepare(uploads)
            self._execute(program, timeout)
        except BaseException as exc:
            problems = self._cleanup()
            if problems and isinstance(exc, LtmError):
                # On the same line: the cause first, then what is left on a host.
                exc.args = (f"{exc}; also: {problems}",)
            raise
        problems = self._cleanup()
        if problems:
            raise HostGroupError(f"the run finished, but {problems}", self.results)
        return self.results

    # --- a streamed run: the servers take their streams before the run ---------------

    def open_stream(self, uploads: list[list[Upload]], serve: list[list[str]],
                    why: str, *, ports: list[int] | None = None,
                    fed: str | None = None) -> None:
        """Connect, check and upload as for a run, then start each server's ``serve``
        step (``serve[i]``, its agent arguments, listening on ``ports[i]``, by default
        its base port + i; ``why`` it needs the harness, for the message when it is
        missing). With ``fed`` (the program's name; the uploads then hold all the
        party needs) each party starts first, waiting at its public input, a FIFO its
        server then feeds. The group stays open for :meth:`run` (``opened=True``) or
        :meth:`close`."""
        listen = ports or [self.base_port + p.index for p in self.parties]

        def prepare(party: RemoteParty) -> None:
            party.open(self.known_hosts, self.options, self.inventory_path)
            if self.abandon.is_set():
                raise Abandoned
            party.make_dir(why)
            party.check_space(sum(upload_size(u) for u in uploads[party.index])
                              + self.extra_bytes[party.index])
            party.upload(_DIRECTORIES, uploads[party.index], self.abandon)
            if fed is not None:
                party.make_gate(f"Programs/Public-Input/{fed}")
                party.start(party.mpc_args(fed))
                self._started.add(party.index)
            party.start_serve(serve[party.index], listen[party.index], self.timeout, why)

        try:
            self._all(prepare)
        except BaseException:
            self.close()
            raise

    def finish_stream(self) -> list[dict]:
        """Every server's ``serve`` figures once its stream has ended; one error for the
        servers that failed."""
        figures: list[dict] = [{} for _ in self.parties]

        def finish(party: RemoteParty) -> None:
            figures[party.index] = party.finish_serve()

        self._all(finish)
        return figures

    def stream_failures(self, settle: float) -> list[str]:
        """The servers whose ``serve`` step failed of itself (not only by losing a
        client's stream), within ``settle`` seconds: the cause when clients lost theirs."""
        deadline = time.monotonic() + settle
        while not self.abandon.is_set():  # once closed, every step was stopped by us
            failures = [f for f in (p.serve_failure() for p in self.parties) if f]
            causes = [message for message, lost in failures if not lost]
            if causes or time.monotonic() >= deadline:
                return causes
            time.sleep(0.05)
        return []

    def agent_step(self, args: list[list[str]], why: str) -> list[dict]:
        """Each server's agent step ``args[i]`` in its working directory, all at once,
        between the stream and the run; their replies, or one error for all that failed."""
        replies: list[dict] = [{} for _ in self.parties]

        def step(party: RemoteParty) -> None:
            replies[party.index] = party.agent_step(args[party.index], why, self.timeout)

        self._all(step)
        return replies

    def close(self) -> str:
        """Kill what runs, remove every remote directory; describe what is left."""
        return self._cleanup()

    # --- phase 1: connect, check, upload (nothing runs yet) ----------------------------

    def _prepare(self, uploads: list[list[Upload]]) -> None:
        def prepare(party: RemoteParty) -> None:
            party.open(self.known_hosts, self.options, self.inventory_path)
            if self.abandon.is_set():
                raise Abandoned
            party.make_dir(None)
            party.check_space(sum(upload_size(u) for u in uploads[party.index])
                              + self.extra_bytes[party.index])
            party.upload(_DIRECTORIES, uploads[party.index], self.abandon)

        self._all(prepare)

    def _all(self, fn: Callable[[RemoteParty], None]) -> None:
        """``fn`` on every party at once; one error for all that failed, before any start."""
        futures = {self.pool.submit(self._timed, p.index, fn, p): p for p in self.parties}
        _, pending = wait(futures, return_when=FIRST_EXCEPTION)
        if pending:  # one failed: the others need not finish uploading
            self.abandon.set()
            wait(pending)
        failed = [r for r in self.results if r.failed]
        self._reraise_bugs(failed)
        if failed:
            # Each naming its host first, once each, in order.
            messages = dict.fromkeys(labelled(r.label, r.error) for r in failed
                                     if r.error is not None)
            raise HostGroupError("; ".join(messages) + " (no party was started)", self.results)

    # --- phase 2: start every party, wait for all ----------------------------------------

    def _execute(self, program: str, timeout: float) -> None:
        def execute(party: RemoteParty) -> None:
            if party.index not in self._started:
                party.start(party.mpc_args(program))
            self.results[party.index].completed = party.collect(self.abandon)

        futures = {self.pool.submit(self._timed, p.index, execute, p) for p in self.parties}
        deadline = time.monotonic() + timeout
        pending = futures
        while pending:
            _, pending = wait(pending, timeout=max(0.0, deadline - time.monotonic()),
                              return_when=FIRST_COMPLETED)
            if any(r.failed for r in self.results):
                # A failure on one host shows up on the others a moment later; wait for
                # those, so that the host that failed is not mistaken for a stopped one.
                _, pending = wait(pending, timeout=_SETTLE_SECONDS)
                break
            if pending and time.monotonic() >= deadline:
                break
        if not pending and not any(r.failed for r in self.results):
            return
        # Whoever has not failed by now is stopped by us: later failures are our doing.
        for result in self.results:
            result.stopped = not result.failed
        self._stop(pending)
        failed = [r for r in self.results if r.failed and not r.stopped]
        self._reraise_bugs(failed)
        if failed:
            raise HostGroupError(self._failure_message(failed), self.results)
        waiting = [r for r in self.results if r.stopped and (r.completed is None or
                                                             r.completed.returncode != 0)]
        first = waiting[0] if waiting else self.results[0]
        raise HostGroupError(
            f"timed out after {timeout:g} s waiting for {', '.join(r.label for r in waiting)}; "
            f"stopped all parties{_tail(self._stderr(first))}", self.results)

    def _stop(self, pending: set[Future]) -> None:
        """Kill every party's process group that is still running, then collect."""
        parallel(lambda p: p.kill(self.options, self.known_hosts), self.parties,
                 "ltm-ssh-stop")
        wait(pending, timeout=_GRACE_SECONDS)  # their channels close once the group is gone
        self.abandon.set()
        wait(pending)

    def _failure_message(self, failed: list[HostResult]) -> str:
        # Parties that only lost a peer say so, or die of SIGPIPE writing to it; the
        # host that caused it goes first, however late its loss was noticed.
        failed = sorted(failed, key=lambda r: (self._collateral(r),
                                               r.ended or float("inf"), r.party))
        parts = []
        for r in failed:
            if r.completed is not None:
                parts.append(f"{r.label} {_describe_exit(r.completed)}")
            else:
                assert r.error is not None
                parts.append(labelled(r.label, r.error))
        stopped = [r.host.name for r in self.results if r.stopped]
        message = "; ".join(parts) + f"; stopped {', '.join(stopped) or 'nothing else'}"
        for r in failed:
            tail = self._stderr(r)
            if tail.strip():
                message += f"\n  {r.host.name} stderr:{_tail(tail)}"
        return message

    def _collateral(self, result: HostResult) -> bool:
        if _COLLATERAL in self._stderr(result):
            return True
        done = result.completed
        return done is not None and _describe_exit(done) == "was killed by SIGPIPE"

    def _stderr(self, result: HostResult) -> str:
        if result.completed is not None:
            return result.completed.stderr
        party = self.parties[result.party]
        try:
            return (party.log_dir / f"{party.name}.stderr").read_text(errors="replace")
        except OSError:
            return ""

    # --- helpers -----------------------------------------------------------------------

    def _timed(self, index: int, fn: Callable[[RemoteParty], None], party: RemoteParty) -> None:
        result = self.results[index]
        try:
            fn(party)
        except BaseException as exc:
            result.error = exc
            raise
        finally:
            result.ended = time.monotonic()

    @staticmethod
    def _reraise_bugs(failed: list[HostResult]) -> None:
        for r in failed:
            if r.error is not None and not isinstance(r.error, HOST_ERRORS):
                raise r.error

    def _cleanup(self) -> str:
        """Stop the workers, kill what is left, remove remote dirs; describe any leftover."""
        self.abandon.set()
        self.pool.shutdown(wait=True, cancel_futures=True)
        outcomes = parallel(lambda p: p.remove(self.options, self.known_hosts), self.parties,
                            "ltm-ssh-cleanup")
        for party in self.parties:
            party.close()
        problems = [f"{labelled(p.label, o)}; remove {p.remote_dir or 'its ltm-* directory'} "
                    "there and check no semi2k-party.x is left running"
                    for p, o in zip(self.parties, outcomes, strict=True)
                    if isinstance(o, BaseException)]
        return "; ".join(problems)


def upload_size(upload: Upload) -> int:
    return upload.local.stat().st_size if upload.local is not None else len(upload.content or b"")


def _describe_exit(completed: Completed) -> str:
    rc = completed.returncode
    if rc < 0:
        return "ended without an exit status"
    if "did not exit normally" in completed.stderr:  # setsid -w reports a signal this way
        try:
            return f"was killed by {signal.Signals(rc & 0x7F).name}"
        except ValueError:
            return f"was killed by signal {rc & 0x7F}"
    return f"exited with status {rc}"


def _tail(stderr: str) -> str:
    tail = stderr_tail(stderr)
    return f"\n{tail}" if tail else ""
