"""Running each MPC party on its own host over SSH (paramiko).

:class:`SshCluster` is a :class:`harness.engine.Cluster`. Its :meth:`~SshCluster.prepare`
is the stream: each server's host agent takes its own shares as the clients make
them (here, or on the inventory's ``[[client]]`` machines, each a contiguous range of
chunks), summing them, writing its share file, or, where the job's route feeds the
parties (``fast``), feeding them to its party, started first (:meth:`~SshCluster.launch`)
and waiting at its public input; it times it there (the figures come back in each
party's statistics). Where the route writes ``here`` (the data owner's input text,
which hosts with only MP-SPDZ can run), this machine writes it and ``run`` sends
party 0's host only what that party may see: the compiled program, the public input,
its own TLS key with everyone's certificates, and that text. No share file is sent
whole. The parties start together and
are one unit (:mod:`harness.remote._group`): if one fails, all are stopped and
one :class:`HostGroupError` names the failing host(s).

Host keys are checked against the inventory's known_hosts file, which
``ltm hosts trust`` fills (see :mod:`harness.remote._trust`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from harness.clients import Prepared
from harness.engine import (
    PROTOCOL,
    ClientJob,
    CompiledProgram,
    MpSpdz,
    PartyRun,
    PartyStaging,
    holdable,
    make_certificates,
    parse_stats,
    protocol_for,
)
from harness.errors import InputError, LtmError
from harness.remote._client import ClientHost
from harness.remote._connect import (
    ConnectOptions,
    HostKeyError,
    SshConnectError,
    describe,
    trust_hint,
)
from harness.remote._group import PartyGroup, upload_size
from harness.remote._party import ConnectionLost, RemoteParty, Upload
from harness.remote._results import HostGroupError, HostResult, parallel
from harness.remote._steps import CERT_NAME, input_file_there
from harness.remote._streamed import SCHEDULE_FILE, stream_to_hosts
from harness.remote._trust import HostCheck, TrustResult, check_hosts, trust_hosts
from harness.remote.hosts import Inventory
from harness.stream import Streamed, write_owner

if TYPE_CHECKING:
    from harness.privacy import ServerStep

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

# What the clients send a server (as opposed to the program, keys and certificates).
_CLIENT_DATA = ("Persistence/", "Player-Data/Input-P")


class SshCluster(PartyStaging):
    """The parties of an inventory, one per host; the clients' side here or on the
    inventory's client host."""

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
        super().__init__(len(inventory.hosts), workdir)
        # Bytes of the clients' data that reached each server, counted as sent: set by run.
        self._sent_bytes: list[int] | None = None
        # With client machines the shares are made there and streamed from there; they
        # all present one certificate, the clients' side's for this run.
        self._clients: list[ClientHost] = []
        # A streamed run: its servers' group, held open from prepare to run.
        self._open_group: PartyGroup | None = None
        self._streamed: Streamed | None = None
        self._schedule_here: Path | None = None  # the data owner's, written here, sent
        self._feed: tuple[CompiledProgram, int | None] | None = None  # launched: fed
        self._fed_group = False  # the open group's parties run already, fed
        if inventory.clients:
            [(key, cert, _)] = make_certificates(1, workdir / "client-cert")
            self._clients = [ClientHost(host, inventory.known_hosts, inventory_path,
                                        self.connect_options, (key, cert),
                                        several=len(inventory.clients) > 1)
                             for host in inventory.clients]

    # --- the Cluster protocol ----------------------------------------------------------

    @contextlib.contextmanager
    def launch(self, job: ClientJob, program: CompiledProgram, *,
               timeout: float, port: int | None = None) -> Iterator[bool]:
        """Where the job's route feeds the parties (``fifo``), :meth:`prepare` starts
        each on its host before its stream, waiting at its public input, which its
        server then feeds; :meth:`run` waits for them. Yields whether they start so."""
        if not job.route.fed or not holdable(program.threads):
            yield False
            return
        self._feed = (program, port)
        try:
            yield True
        finally:
            self._feed = None

    def prepare(self, job: ClientJob) -> Prepared:
        """Each server sums (or writes, or feeds to its party) its stream on its host as
        the clients make it (here, or on the inventory's client hosts); the parties'
        group stays open, with their directories, for :meth:`run`. Where the route says
        ``here``, this machine writes the data owner's text, which :meth:`run` sends."""
        if job.route.here:
            return self._write_owner(job)
        base = self._base_port(None if self._feed is None else self._feed[1])
        group = self._party_group(base, job.timeout)
        fed = None
        if self._feed is not None:
            program = self._feed[0]
            fed = (program.name, [self.uploads(i, program, base) for i in range(self.parties)])
        try:
            streamed = stream_to_hosts(group, job, self._clients,
                                       [self.party_dir(i) for i in range(self.parties)],
                                       self.workdir, base, fed=fed)
            job.fp.check_bucket_bound(streamed.prepared.abs_sums)
        except BaseException:
            group.close()
            self._remove_clients()
            raise
        self._open_group = group
        self._fed_group = fed is not None
        self._streamed = streamed
        return streamed.outcome()

    def _write_owner(self, job: ClientJob) -> Prepared:
        """The data owner's input text for party 0's host and the public schedule,
        written here a chunk of clients at a time (bounded memory), which :meth:`run`
        uploads like any other file: the hosts need only MP-SPDZ."""
        plan = job.stream_plan(self.parties)
        schedule = self.workdir / "public-input"
        self._schedule_here = schedule
        prepared = write_owner(plan, job.sketch, job.rows, job.noise, job.fp,
                               self.input_file(), schedule, job.blocks)
        job.fp.check_bucket_bound(prepared.abs_sums)
        return prepared

    def run_server_step(self, step: ServerStep, *, after_aggregate: bool,
                        digest_key: bytes) -> int:
        """Each server's agent runs ``step`` on its host, into its input file there
        (0600, in its private working directory, removed with it): only the step's
        public parameters, the cells' shape and the run's public digest key go there,
        and only the count of cells and their digest come back."""
        group = self._open_group
        if group is None:  # the table of modes routes these streams to the servers' agents
            raise LtmError(f"{step.what} by each host's agent, and this run reached its "
                           "hosts without them")
        m, d = step.shape
        args = [["input", step.mechanism, step.params, input_file_there(i), "--cells", str(m),
                 str(d), "--digest-key", digest_key.hex(),
                 *(["--append"] if after_aggregate else [])]
                for i in range(self.parties)]
        replies = group.agent_step(args, step.what)
        total = 0
        for party, reply in zip(group.parties, replies, strict=True):
            if reply.get("cells") != m * d:
                raise LtmError(f"{party.label}: its agent's step wrote {reply.get('cells')} "
                               f"cells, not {m * d}")
            digest = reply.get("digest")
            if not isinstance(digest, int) or not 0 <= digest < 2**64:
                raise LtmError(f"{party.label}: its agent reported no digest of its step's "
                               f"input ({digest!r}); run `ltm hosts setup` again")
            total += digest
        return total % 2**64

    def _remove_clients(self) -> None:
        # Each its own connection; one that is gone must not keep the others' files.
        parallel(lambda c: c.remove(), self._clients, "ltm-client-cleanup")

    def session(self) -> AbstractContextManager[None]:
        return self._held_session()

    @contextlib.contextmanager
    def _held_session(self) -> Iterator[None]:
        try:
            yield
        finally:
            # A streamed run's hosts, still held if the run never came to use them.
            group, self._open_group = self._open_group, None
            if group is not None:
                group.close()
                self._remove_clients()

    def upload_bytes(self, prepared: Prepared) -> list[int]:
        """What each server received of the clients' data, once :meth:`run` has run."""
        return list(self._sent_bytes if self._sent_bytes is not None
                    else prepared.upload_bytes)

    @property
    def reuses_inputs(self) -> bool:
        return False  # every run removes the hosts' working directories

    def _base_port(self, port: int | None) -> int:
        base = self.inventory.base_port if port is None else port
        if not 1024 <= base <= 65536 - self.parties:
            raise InputError(f"--port {base} is out of range; pick a base in "
                             f"[1024, {65536 - self.parties}]")
        return base

    def run(self, program: CompiledProgram, *, timeout: float,
            port: int | None = None) -> list[PartyRun]:
        base = self._base_port(port)
        # Fed parties took everything before their stream; they run already.
        uploads = ([[] for _ in range(self.parties)] if self._fed_group
                   else [self.uploads(i, program, base) for i in range(self.parties)])
        held, self._open_group = self._open_group, None
        group = held or self._party_group(base, timeout)
        parties = group.parties
        try:
            results = group.run(uploads, program.name, timeout, opened=held is not None)
        finally:
            self._remove_clients()
        runs = []
        for party, result in zip(parties, results, strict=True):
            assert result.completed is not None
            stats = parse_stats(party.name, result.completed.stderr)
            stats["upload_s"] = party.upload_s
            runs.append(PartyRun(party.index, result.completed, stats))
        if held is not None and self._streamed is not None and self._streamed.upload:
            # As counted by each server on its stream, framing included.
            self._sent_bytes = [self._streamed.upload[i]["upload_bytes_sent"]
                                for i in range(self.parties)]
        else:
            self._sent_bytes = [sum(upload_size(u) for u in party_uploads
                                    if u.remote.startswith(_CLIENT_DATA))
                                for party_uploads in uploads]
        return runs

    def _party_group(self, base: int, timeout: float) -> PartyGroup:
        spec = protocol_for(self.protocol)
        parties = [RemoteParty(i, h, self.workdir / "logs", spec.binary,
                               spec.party_count_args(self.parties))
                   for i, h in enumerate(self.inventory.hosts)]
        return PartyGroup(parties, self.inventory.known_hosts, self.inventory_path,
                          self.connect_options, timeout=timeout, base_port=base)

    # --- what goes where -----------------------------------------------------------------

    def ip_file(self, base_port: int) -> str:
        return "".join(f"{h.mpc_host}:{base_port + j}\n"
                       for j, h in enumerate(self.inventory.hosts))

    def uploads(self, i: int, program: CompiledProgram, base_port: int) -> list[Upload]:
        """Party ``i``'s files: never another party's key, input or share."""
        files = []
        for sub in ("Bytecode", "Schedules"):
            for path in sorted((program.programs_dir / sub).iterdir()):
                if path.is_file():
                    files.append(Upload(f"Programs/{sub}/{path.name}", local=path))
        if self._feed is not None:  # the party's FIFO, which its server feeds
            pass
        elif self._schedule_here is not None:  # the data owner's, written here
            files.append(Upload(f"Programs/Public-Input/{program.name}",
                                local=self._schedule_here))
        elif self._streamed is not None and self._streamed.layout.get("kind"):
            # A streamed fast run: each server wrote the public schedule as its shares came.
            files.append(Upload(f"Programs/Public-Input/{program.name}",
                                moved_from=SCHEDULE_FILE))
        else:
            files.append(Upload(f"Programs/Public-Input/{program.name}",
                                content=b""))
        for path in sorted((self.party_dir(i) / "Player-Data").iterdir()):
            name = path.name
            if CERT_NAME.fullmatch(name):
                files.append(Upload(f"Player-Data/{name}", local=path))
            elif name == f"P{i}.key" or name.startswith(f"Input-P{i}-"):
                files.append(Upload(f"Player-Data/{name}", local=path, mode=0o600))
        files.append(Upload("ip", content=self.ip_file(base_port).encode()))
        return files
