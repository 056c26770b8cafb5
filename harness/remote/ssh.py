"""Running each MPC party on its own host over SSH (paramiko).

:class:`SshCluster` has :class:`~harness.engine.cluster.LocalCluster`'s interface: the
clients prepare shares into local staging directories (``party_dir(i)``), and
``run`` copies to each host only what that party may see: the compiled
program, the public input, its own TLS key with everyone's certificates, and
its own share file (with seeded sharing: per component it holds, its seeds and
the full words of the clients that send that one in full, which it expands on
its host before the run). The parties then
start together and are one unit, like a local process group: if one fails,
loses its connection or the timeout passes, all are stopped (their remote
process groups killed) and one :class:`HostGroupError` names the failing
host(s). Remote working directories are removed in every case, Ctrl-C
included.

Host keys are checked against the inventory's known_hosts file, which
``ltm hosts trust`` fills (see :mod:`harness.remote._trust`).
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import paramiko

from harness.clients import ADDITIVE, Layout, Prepared, ShareFormat, upload_files
from harness.clients import save_plan as save_expand_plan
from harness.engine import (
    PROTOCOL,
    CompiledProgram,
    Completed,
    MpSpdz,
    PartyRun,
    PartyStaging,
    parse_stats,
    protocol_for,
    save_plan,
)
from harness.errors import InputError, LtmError, stderr_tail
from harness.remote._client import ClientHost
from harness.remote._connect import (
    ConnectOptions,
    HostKeyError,
    SshConnectError,
    describe,
    trust_hint,
)
from harness.remote._party import (
    AGGREGATE_PLAN,
    EXPAND_PLAN,
    Abandoned,
    ConnectionLost,
    RemoteParty,
    Upload,
    why_harness,
)
from harness.remote._trust import HostCheck, TrustResult, check_hosts, trust_hosts
from harness.remote.hosts import Host, Inventory

__all__ = [
    "ConnectOptions",
    "ConnectionLost",
    "HostCheck",
    "HostGroupError",
    "HostKeyError",
    "HostResult",
    "SshCluster",
    "SshConnectError",
    "TrustResult",
    "check_hosts",
    "trust_hosts",
]

_DIRECTORIES = ["Programs", "Programs/Bytecode", "Programs/Schedules", "Programs/Public-Input",
                "Player-Data", "Persistence", "Upload"]
# What the clients send a server (as opposed to the program, keys and certificates).
_CLIENT_DATA = ("Persistence/", "Upload/", "Player-Data/Input-P")
_GRACE_SECONDS = 5.0  # for workers to see their killed party's channel close
_SETTLE_SECONDS = 0.5  # after a first failure, for the others' failures to arrive
_COLLATERAL = "another party encountered a problem"  # MP-SPDZ, when a peer went away
# Failures a host can cause; anything else is a bug and keeps its own traceback.
_HOST_ERRORS = (LtmError, OSError, EOFError, paramiko.SSHException)
_CERT_NAME = re.compile(r"P\d+\.pem|[0-9a-f]{8}\.\d+")

T = TypeVar("T")


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


class SshCluster(PartyStaging):
    """The parties of an inventory, one per host; staging happens locally."""

    def __init__(self, mp: MpSpdz, inventory: Inventory, workdir: Path,
                 protocol: str = PROTOCOL, *, inventory_path: Path | None = None,
                 connect_options: ConnectOptions | None = None) -> None:
        spec = protocol_for(protocol)
        if len(inventory.hosts) < 2:
            raise InputError(f"{protocol} needs at least 2 parties, the inventory has "
                             f"{len(inventory.hosts)}; add [[party]] entries")
        spec.check_parties(len(inventory.hosts))
        for host in inventory.hosts:
            if ":" in host.mpc_host:
                # MP-SPDZ splits ip-file lines at the first colon.
                raise InputError(f"{describe(host)}: mpc_host {host.mpc_host!r} looks like an "
                                 "IPv6 address, which MP-SPDZ cannot use; give an IPv4 "
                                 "address or a host name")
        if not inventory.known_hosts.is_file():
            # Before the clients' inputs are prepared: no run can start without it.
            raise HostKeyError(f"{inventory.known_hosts} (the inventory's known_hosts) does not "
                               "exist, so no SSH host key can be checked; run "
                               f"`{trust_hint(inventory_path)}` first")
        self.mp = mp
        self.inventory = inventory
        self.inventory_path = inventory_path
        self.protocol = protocol
        self.connect_options = connect_options or ConnectOptions()
        self.aggregate_plan: Path | None = None
        self.expand_plan: Path | None = None
        self.expanded_bytes = 0  # each server's share file, once expanded from its seeds
        self.shares_on_client = False
        # Bytes of the clients' data that reached each server, counted as sent: set by run.
        self.client_sent_bytes: list[int] | None = None
        super().__init__(len(inventory.hosts), workdir)
        # With a [client] machine the shares are prepared and sent from there
        # (prepare_on_client); without one, here, as before.
        self.client_host: ClientHost | None = None
        if inventory.client is not None:
            self.client_host = ClientHost(inventory.client, inventory.known_hosts,
                                          inventory_path, self.connect_options, workdir)

    def prepare_on_client(self, data, sketch, layout, noise, frac_bits: int, timeout: float,
                          fmt: ShareFormat = ADDITIVE, sharing: str = "full") -> Prepared:
        assert self.client_host is not None
        self.shares_on_client = True
        try:
            return self.client_host.prepare(data, sketch, layout, noise, frac_bits,
                                            self.parties, timeout, fmt, sharing)
        except BaseException:
            self.client_host.remove()
            raise

    def expand_on_hosts(self, layout: Layout, fmt: ShareFormat, clients: int,
                        copies: int) -> None:
        """Seeded sharing: each server expands its own seeds into its share file on its host
        (``ltm hosts setup`` installed the harness there), timed there as ``expand_s``."""
        self.expand_plan = self.workdir / EXPAND_PLAN
        save_expand_plan(self.expand_plan, layout, fmt, self.parties, clients, copies)
        self.expanded_bytes = len(fmt.header) + 8 * layout.total_rows * layout.d * fmt.words

    def aggregate_on_hosts(self, layout: Layout, fmt: ShareFormat = ADDITIVE) -> None:
        """The ``local`` program: each server sums its own shares on its host before the run.

        The raw share file goes to the host, whose harness (``ltm hosts setup``)
        aggregates it there, so only the m x d result is fed to MP-SPDZ.
        """
        self.aggregate_plan = self.workdir / "aggregate-plan.npz"
        save_plan(layout, self.aggregate_plan, fmt)


    # --- what goes where -------------------------------------------------------------

    def ip_file(self, base_port: int) -> str:
        return "".join(f"{h.mpc_host}:{base_port + j}\n"
                       for j, h in enumerate(self.inventory.hosts))

    def uploads(self, i: int, program: CompiledProgram, public_input: str,
                base_port: int) -> list[Upload]:
        """Party ``i``'s files: never another party's key, input or share."""
        files = []
        for sub in ("Bytecode", "Schedules"):
            for path in sorted((program.programs_dir / sub).iterdir()):
                if path.is_file():
                    files.append(Upload(f"Programs/{sub}/{path.name}", local=path))
        files.append(Upload(f"Programs/Public-Input/{program.name}",
                            content=public_input.encode()))
        for path in sorted((self.party_dir(i) / "Player-Data").iterdir()):
            name = path.name
            if _CERT_NAME.fullmatch(name):
                files.append(Upload(f"Player-Data/{name}", local=path))
            elif name == f"P{i}.key" or name.startswith(f"Input-P{i}-"):
                files.append(Upload(f"Player-Data/{name}", local=path, mode=0o600))
        if not self.shares_on_client:
            if self.expand_plan is not None:
                for path in upload_files(self.party_dir(i)):
                    files.append(Upload(f"Upload/{path.name}", local=path, mode=0o600))
            elif self.share_file(i).exists():
                files.append(Upload(self._received_name(i), local=self.share_file(i),
                                    mode=0o600))
        if self.expand_plan is not None:
            files.append(Upload(EXPAND_PLAN, local=self.expand_plan))
        if self.aggregate_plan is not None:
            files.append(Upload(AGGREGATE_PLAN, local=self.aggregate_plan))
        if self.shares_on_client:
            assert self.client_host is not None
            files.append(Upload("client.pem", local=self.client_host.cert))
        files.append(Upload("ip", content=self.ip_file(base_port).encode()))
        return files

    def _received_name(self, i: int) -> str:
        # The local program aggregates what arrives into the share file MP-SPDZ reads.
        name = f"Transactions-P{i}.data" if self.aggregate_plan is None else f"Received-P{i}.data"
        return f"Persistence/{name}"

    def client_files(self, i: int) -> list[tuple[str, str]]:
        """What the client host sends server ``i``: (its path there, the path on server i)."""
        assert self.client_host is not None
        if self.expand_plan is not None:
            return [(name, f"Upload/{Path(name).name}") for name, _ in self.client_host.files[i]]
        return [(name, self._received_name(i)) for name, _ in self.client_host.files[i]]

    def _extra_bytes(self, i: int) -> int:
        """Disk a server needs beyond its uploads: the client host's files, its expansion."""
        received = (sum(size for _, size in self.client_host.files[i])
                    if self.shares_on_client and self.client_host is not None else 0)
        return received + self.expanded_bytes

    # --- the run ---------------------------------------------------------------------

    def run(self, program: CompiledProgram, public_input: str, *, timeout: float,
            port: int | None = None) -> list[PartyRun]:
        base = self.inventory.base_port if port is None else port
        if not 1024 <= base <= 65536 - self.parties:
            raise InputError(f"--port {base} is out of range; pick a base in "
                             f"[1024, {65536 - self.parties}]")
        spec = protocol_for(self.protocol)
        parties = [RemoteParty(i, h, self.workdir / "logs", spec.binary,
                               spec.party_count_args(self.parties))
                   for i, h in enumerate(self.inventory.hosts)]
        uploads = [self.uploads(i, program, public_input, base) for i in range(self.parties)]
        client_files = ([self.client_files(i) for i in range(self.parties)]
                        if self.shares_on_client else None)
        group = _Group(parties, self.inventory.known_hosts, self.inventory_path,
                       self.connect_options, aggregate=self.aggregate_plan is not None,
                       expand=self.expand_plan is not None, timeout=timeout, base_port=base,
                       client_host=self.client_host if self.shares_on_client else None,
                       client_files=client_files,
                       extra_bytes=[self._extra_bytes(i) for i in range(self.parties)])
        try:
            results = group.run(uploads, program.name, timeout)
        finally:
            if self.client_host is not None:
                self.client_host.remove()
        runs = []
        for party, result in zip(parties, results, strict=True):
            assert result.completed is not None
            stats = parse_stats(party.name, result.completed.stderr)
            stats["upload_s"] = party.upload_s
            if party.aggregate_s is not None:
                stats["aggregate_s"] = party.aggregate_s
            if party.expand_s is not None:
                stats["expand_s"] = party.expand_s
            runs.append(PartyRun(party.index, result.completed, stats))
        if self.shares_on_client:
            # As counted by each receiving server.
            self.client_sent_bytes = [p.received_bytes or 0 for p in parties]
        else:
            self.client_sent_bytes = [sum(_size(u) for u in party_uploads
                                          if u.remote.startswith(_CLIENT_DATA))
                                      for party_uploads in uploads]
        return runs


class _Group:
    """All parties as one unit: prepared together, started together, stopped together."""

    def __init__(self, parties: list[RemoteParty], known_hosts: Path,
                 inventory_path: Path | None, options: ConnectOptions, *,
                 aggregate: bool = False, expand: bool = False, timeout: float = 900.0,
                 base_port: int = 0, client_host: ClientHost | None = None,
                 client_files: list[list[tuple[str, str]]] | None = None,
                 extra_bytes: list[int] | None = None) -> None:
        self.parties = parties
        self.aggregate = aggregate
        self.expand = expand
        self.timeout = timeout
        self.base_port = base_port
        self.client_host = client_host
        self.client_files = client_files
        # Disk each server needs apart from the uploads (client host's files, expansion).
        self.extra_bytes = list(extra_bytes or [0] * len(parties))
        self.known_hosts = known_hosts
        self.inventory_path = inventory_path
        self.options = options
        self.results = [HostResult(p.index, p.host) for p in parties]
        self.abandon = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=len(parties), thread_name_prefix="ltm-ssh")

    def run(self, uploads: list[list[Upload]], program: str, timeout: float) -> list[HostResult]:
        try:
            self._prepare(uploads)
            self._execute(program, timeout)
        except BaseException as exc:
            problems = self._cleanup()
            if problems and isinstance(exc, LtmError):
                exc.args = (f"{exc}\nalso: {problems}",)
            raise
        problems = self._cleanup()
        if problems:
            raise HostGroupError(f"the run finished, but {problems}", self.results)
        return self.results

    # --- phase 1: connect, check, upload (nothing runs yet) ----------------------------

    def _prepare(self, uploads: list[list[Upload]]) -> None:
        receive = self.client_host is not None
        harness_for = (why_harness(self.expand, self.aggregate, receive)
                       if receive or self.expand or self.aggregate else None)

        def prepare(party: RemoteParty) -> None:
            party.open(self.known_hosts, self.options, self.inventory_path)
            if self.abandon.is_set():
                raise Abandoned
            party.make_dir(harness_for)
            party.check_space(sum(_size(u) for u in uploads[party.index])
                              + self.extra_bytes[party.index])
            party.upload(_DIRECTORIES, uploads[party.index], self.abandon)
            if self.client_files is not None:
                party.start_receive(self.base_port + party.index,
                                    [there for _, there in self.client_files[party.index]],
                                    expand=self.expand, aggregate=self.aggregate,
                                    timeout=self.timeout)

        self._all(prepare)
        if self.client_host is not None:
            self._send_from_client()  # a receiver expands and aggregates what it received
        elif self.expand or self.aggregate:
            # Expansion first: the local program aggregates the expanded share file.
            self._all(lambda party: party.process_shares(self.timeout, expand=self.expand,
                                                         aggregate=self.aggregate))

    def _send_from_client(self) -> None:
        """The client host sends each server its own shares, directly."""
        assert self.client_host is not None
        assert self.client_files is not None
        servers = [(p.index, p.host, self.base_port + p.index,
                    p.log_dir.parent / f"P{p.index}" / "Player-Data" / f"P{p.index}.pem",
                    self.client_files[p.index])
                   for p in self.parties]
        try:
            seconds = self.client_host.send(servers, self.timeout)
        except LtmError as exc:
            raise HostGroupError(f"{exc} (no party was started)", self.results) from None
        for party in self.parties:
            party.upload_s = seconds[party.index]
        self._all(lambda party: party.finish_receive())

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
            messages = dict.fromkeys(str(r.error) for r in failed)  # once each, in order
            raise HostGroupError("; ".join(messages) + " (no party was started)", self.results)

    # --- phase 2: start every party, wait for all ----------------------------------------

    def _execute(self, program: str, timeout: float) -> None:
        def execute(party: RemoteParty) -> None:
            party.start(["-p", str(party.index), *party.count_args, "-ip", "ip", program])
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
        _parallel(lambda p: p.kill(self.options, self.known_hosts), self.parties)
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
                parts.append(str(r.error) if isinstance(r.error, LtmError)
                             else f"{r.label}: {type(r.error).__name__}: {r.error}")
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
            if r.error is not None and not isinstance(r.error, _HOST_ERRORS):
                raise r.error

    def _cleanup(self) -> str:
        """Stop the workers, kill what is left, remove remote dirs; describe any leftover."""
        self.abandon.set()
        self.pool.shutdown(wait=True, cancel_futures=True)
        outcomes = _parallel(lambda p: p.remove(self.options, self.known_hosts), self.parties)
        for party in self.parties:
            party.close()
        problems = [f"{_labelled(p.label, o)}; remove {p.remote_dir or 'its ltm-* directory'} "
                    "there and check no semi2k-party.x is left running"
                    for p, o in zip(self.parties, outcomes, strict=True)
                    if isinstance(o, BaseException)]
        return "; ".join(problems)


def _parallel(fn: Callable[[RemoteParty], T],
              parties: list[RemoteParty]) -> list[T | BaseException]:
    """``fn`` on every party at once; each result or the exception it raised."""
    out: list[T | BaseException] = [RuntimeError("not run")] * len(parties)

    def call(i: int) -> None:
        try:
            out[i] = fn(parties[i])
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=call, args=(i,), name=f"ltm-ssh-cleanup-{i}")
               for i in range(len(parties))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out


def _size(upload: Upload) -> int:
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


def _labelled(label: str, exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if text.startswith(label) else f"{label}: {text}"


def _tail(stderr: str) -> str:
    tail = stderr_tail(stderr)
    return f"\n{tail}" if tail else ""
