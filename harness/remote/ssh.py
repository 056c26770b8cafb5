"""Running each MPC party on its own host over SSH (paramiko).

:class:`SshCluster` is a :class:`harness.engine.Cluster`: the clients prepare
their inputs into local staging directories (``party_dir(i)``), or, when the
inventory has a ``[client]`` machine, on that machine; ``run`` copies to each
host only what that party may see: the compiled program, the public input,
its own TLS key with everyone's certificates, and its own share file (with
seeded sharing: per component it holds, its seeds and the full words of the
clients that send that one in full, which it expands on its host before the
run). :meth:`~SshCluster.deliver` and :meth:`~SshCluster.aggregate` only
schedule what the servers then do on their own hosts, where it is timed (their
figures come back in each party's statistics). The parties start together and
are one unit (:mod:`harness.remote._group`): if one fails, all are stopped and
one :class:`HostGroupError` names the failing host(s).

Host keys are checked against the inventory's known_hosts file, which
``ltm hosts trust`` fills (see :mod:`harness.remote._trust`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from contextlib import AbstractContextManager
from pathlib import Path

from harness.clients import Prepared, upload_files
from harness.clients import save_plan as save_expand_plan
from harness.engine import (
    PROTOCOL,
    ClientJob,
    CompiledProgram,
    Delivery,
    MpSpdz,
    PartyRun,
    PartyStaging,
    parse_stats,
    protocol_for,
    save_plan,
)
from harness.errors import InputError
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
from harness.remote._results import HostGroupError, HostResult
from harness.remote._steps import AGGREGATE_PLAN, EXPAND_PLAN, HostSteps
from harness.remote._trust import HostCheck, TrustResult, check_hosts, trust_hosts
from harness.remote.hosts import Inventory

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
_CLIENT_DATA = ("Persistence/", "Upload/", "Player-Data/Input-P")
_CERT_NAME = re.compile(r"P\d+\.pem|[0-9a-f]{8}\.\d+")


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
        self._steps = HostSteps()  # what the servers do to their shares on their hosts
        self._expanded_bytes = 0  # each server's share file, once expanded from its seeds
        # Bytes of the clients' data that reached each server, counted as sent: set by run.
        self._sent_bytes: list[int] | None = None
        # With a [client] machine the shares are prepared there and sent from there.
        self._client: ClientHost | None = None
        self._shares_on_client = False
        if inventory.client is not None:
            self._client = ClientHost(inventory.client, inventory.known_hosts,
                                      inventory_path, self.connect_options, workdir)

    # --- the Cluster protocol ----------------------------------------------------------

    def prepare(self, job: ClientJob) -> Prepared:
        """On the inventory's client host when it has one (shares only; the data owner's
        text input is typed in here), else here."""
        if self._client is None or job.input_mode != "shares":
            return self.prepare_here(job)
        self._shares_on_client = True
        try:
            prepared = self._client.prepare(job, self.parties)
            # Before any party starts: a wrapped sum would reveal garbage, not an error.
            job.fp.check_bucket_bound(prepared.abs_sums)
        except BaseException:
            self._client.remove()
            raise
        return prepared

    def session(self) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def deliver(self, job: ClientJob) -> Delivery:
        """Schedules what :meth:`run` does: the upload (timed per party as ``upload_s``)
        and, with seeded sharing, each server's expansion of its own seeds on its host
        (``ltm hosts setup`` installed the harness there), timed there as ``expand_s``."""
        if job.sharing == "seeded":
            plan = self.workdir / EXPAND_PLAN
            save_expand_plan(plan, job.file_layout, job.share_format, self.parties, job.n,
                             job.sketch.s)
            self._steps = dataclasses.replace(self._steps, expand=True)
            fmt, layout = job.share_format, job.file_layout
            self._expanded_bytes = len(fmt.header) + 8 * layout.total_rows * layout.d * fmt.words
        return Delivery()

    def aggregate(self, job: ClientJob, *, as_input: bool = False) -> list[float] | None:
        """The ``local`` program: each server sums its own shares on its host before the run.

        The raw share file goes to the host, whose harness aggregates it there (after
        any expansion), so only the m x d result is fed to MP-SPDZ; the seconds come
        back in each party's statistics as ``aggregate_s``.
        """
        save_plan(job.file_layout, self.workdir / AGGREGATE_PLAN, job.share_format, as_input)
        self._steps = dataclasses.replace(self._steps, aggregate=True, as_input=as_input)
        return None

    def upload_bytes(self, prepared: Prepared) -> list[int]:
        """What each server received of the clients' data, once :meth:`run` has run."""
        return list(self._sent_bytes if self._sent_bytes is not None
                    else prepared.upload_bytes)

    @property
    def reuses_inputs(self) -> bool:
        return False  # every run removes the hosts' working directories

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
        client = self._client if self._shares_on_client else None
        group = PartyGroup(parties, self.inventory.known_hosts, self.inventory_path,
                           self.connect_options, steps=self._steps, timeout=timeout,
                           base_port=base, client_host=client,
                           client_files=([self.client_files(i) for i in range(self.parties)]
                                         if client is not None else None),
                           extra_bytes=[self._extra_bytes(i) for i in range(self.parties)])
        try:
            results = group.run(uploads, program.name, timeout)
        finally:
            if self._client is not None:
                self._client.remove()
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
        if client is not None:
            # As counted by each receiving server.
            self._sent_bytes = [p.received_bytes or 0 for p in parties]
        else:
            self._sent_bytes = [sum(upload_size(u) for u in party_uploads
                                    if u.remote.startswith(_CLIENT_DATA))
                                for party_uploads in uploads]
        return runs

    # --- what goes where -----------------------------------------------------------------

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
        if not self._shares_on_client:
            if self._steps.expand:
                for path in upload_files(self.party_dir(i)):
                    files.append(Upload(f"Upload/{path.name}", local=path, mode=0o600))
            elif self.share_file(i).exists():
                files.append(Upload(self._steps.arriving_file(i), local=self.share_file(i),
                                    mode=0o600))
        if self._steps.expand:
            files.append(Upload(EXPAND_PLAN, local=self.workdir / EXPAND_PLAN))
        if self._steps.aggregate:
            files.append(Upload(AGGREGATE_PLAN, local=self.workdir / AGGREGATE_PLAN))
        if self._shares_on_client:
            assert self._client is not None
            files.append(Upload("client.pem", local=self._client.cert))
        files.append(Upload("ip", content=self.ip_file(base_port).encode()))
        return files

    def client_files(self, i: int) -> list[tuple[str, str]]:
        """What the client host sends server ``i``: (its path there, the path on server i)."""
        assert self._client is not None
        if self._steps.expand:
            return [(name, f"Upload/{Path(name).name}") for name, _ in self._client.files[i]]
        return [(name, self._steps.arriving_file(i)) for name, _ in self._client.files[i]]

    def _extra_bytes(self, i: int) -> int:
        """Disk a server needs beyond its uploads: the client host's files, its expansion."""
        received = (sum(size for _, size in self._client.files[i])
                    if self._shares_on_client and self._client is not None else 0)
        return received + self._expanded_bytes
