"""Running each MPC party on its own host over SSH (paramiko).

:class:`SshCluster` is a :class:`harness.engine.Cluster`. Its :meth:`~SshCluster.prepare`
is the stream: each server's host agent takes its own shares as the clients make
them (here, or on the inventory's ``[[client]]`` machines, each a contiguous range of
chunks), summing them or writing its share file, and times it there (the figures come
back in each party's statistics). Where the table of run modes routes a combination
``here`` (hosts with only MP-SPDZ), the stream runs on this machine into each
server's file, and ``run`` sends each host only what that party may see: the
compiled program, the public input, its own TLS key with everyone's certificates,
and its own share file. The parties start together and
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
from harness.remote._steps import CERT_NAME, input_file_there, share_file_there
from harness.remote._streamed import SCHEDULE_FILE, stream_to_hosts
from harness.remote._trust import HostCheck, TrustResult, check_hosts, trust_hosts
from harness.remote.hosts import Inventory
from harness.stream import Streamed, stream_inputs, write_owner

if TYPE_CHECKING:
    from harness.clients import ServerNoise

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
        self._schedule_here: Path | None = None  # a fast run streamed here, files sent
        if inventory.clients:
            [(key, cert, _)] = make_certificates(1, workdir / "client-cert")
            self._clients = [ClientHost(host, inventory.known_hosts, inventory_path,
                                        self.connect_options, (key, cert),
                                        several=len(inventory.clients) > 1)
                             for host in inventory.clients]

    # --- the Cluster protocol ----------------------------------------------------------

    def prepare(self, job: ClientJob) -> Prepared:
        """Each server sums (or writes) its stream on its host as the clients make it
        (here, or on the inventory's client hosts); the parties' group stays open, with
        their directories, for :meth:`run`. Where the route says ``here``, the stream
        runs on this machine into the files :meth:`run` sends."""
        if job.route.here:
            return self._stream_here(job)
        group = self._party_group(self.inventory.base_port, job.timeout)
        try:
            streamed = stream_to_hosts(group, job, self._clients,
                                       [self.party_dir(i) for i in range(self.parties)],
                                       self.workdir, self.inventory.base_port)
            job.fp.check_bucket_bound(streamed.prepared.abs_sums)
        except BaseException:
            group.close()
            self._remove_clients()
            raise
        self._open_group = group
        self._streamed = streamed
        return streamed.outcome()

    def _stream_here(self, job: ClientJob) -> Prepared:
        """The stream runs here (bounded memory) into each server's share file (or party
        0's input text) and the public schedule, which :meth:`run` uploads like any
        other file: the hosts need only MP-SPDZ."""
        plan = job.stream_plan(self.parties)
        schedule = self.workdir / "public-input"
        self._schedule_here = schedule
        if job.route.sink == "owner":  # the data owner's text, for party 0's host
            prepared = write_owner(plan, job.sketch, job.rows, job.noise, job.fp,
                                   self.input_file(), schedule, job.blocks)
            job.fp.check_bucket_bound(prepared.abs_sums)
            return prepared
        streamed = stream_inputs(plan, job.sketch, job.rows, job.noise, job.fp,
                                 [self.share_file(i) for i in range(self.parties)],
                                 as_input=False, timeout=job.timeout,
                                 blocks=job.blocks, schedule=schedule)
        job.fp.check_bucket_bound(streamed.prepared.abs_sums)
        streamed.upload = None  # the files go by SFTP, timed as any upload is
        self._streamed = streamed
        return streamed.outcome()

    def input_servers_noise(self, noise: ServerNoise, shape: tuple[int, int], *,
                            after_aggregate: bool, digest_key: bytes) -> int:
        """Each server's agent draws its noise on its host, into its input file there
        (0600, in its private working directory, removed with it): only the noise's
        public parameters, the cells' shape and the run's public digest key go there,
        and only the count of cells and the noise's digest come back."""
        group = self._open_group
        if group is None:  # the table of modes routes dng's streams to the servers' agents
            raise LtmError("the servers' noise is drawn by each host's agent, and this run "
                           "reached its hosts without them")
        m, d = shape
        args = [["noise", noise.to_json(), input_file_there(i), "--cells", str(m), str(d),
                 "--digest-key", digest_key.hex(), *(["--append"] if after_aggregate else [])]
                for i in range(self.parties)]
        replies = group.agent_step(args, "--mechanism dng draws each server's noise there")
        total = 0
        for party, reply in zip(group.parties, replies, strict=True):
            if reply.get("cells") != m * d:
                raise LtmError(f"{party.label}: its agent drew {reply.get('cells')} cells of "
                               f"noise, not {m * d}")
            digest = reply.get("digest")
            if not isinstance(digest, int) or not 0 <= digest < 2**64:
                raise LtmError(f"{party.label}: its agent reported no digest of its noise "
                               f"({digest!r}); run `ltm hosts setup` again")
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

    def run(self, program: CompiledProgram, *, timeout: float,
            port: int | None = None) -> list[PartyRun]:
        base = self.inventory.base_port if port is None else port
        if not 1024 <= base <= 65536 - self.parties:
            raise InputError(f"--port {base} is out of range; pick a base in "
                             f"[1024, {65536 - self.parties}]")
        uploads = [self.uploads(i, program, base) for i in range(self.parties)]
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
        if self._schedule_here is not None:  # streamed here into a file, sent as any file
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
        if self.share_file(i).exists():  # streamed here into the share file: sent whole
            files.append(Upload(share_file_there(i), local=self.share_file(i), mode=0o600))
        files.append(Upload("ip", content=self.ip_file(base_port).encode()))
        return files
