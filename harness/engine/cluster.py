"""A set of local parties: one working directory each, certificates, ports.

Each party runs in its own directory, as on its own server: ``Programs/``
(linked to the compiled program), ``Player-Data/`` (its key and everyone's
certificates, plus party 0's input file) and ``Persistence/`` (its own share
file and nothing else).

With a network profile (``--network``) each party also runs in its own network
namespace behind an emulated, shaped link (:mod:`harness.engine.netns`); the parties
then find each other through an ip file instead of ``localhost``. The clients write
no files: the servers run in their namespaces and take each chunk over TLS as it is
made (:mod:`harness.stream.tls`), expanding its seeds if seeded, and sum it
(``local``) or write it into the party's share file (``fast``, ``reference``; server
0 the public schedule beside the parties' directories). The network stays up from
the stream to the end of the MPC, so a profile's credits spent on the upload stay
spent.

:class:`LocalCluster` implements :class:`harness.engine.interface.Cluster`: a run
talks to it only through that protocol, as it does to the SSH cluster.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from harness.clients import Prepared
from harness.engine.certs import make_certificates
from harness.engine.held import HeldParties, holdable
from harness.engine.interface import ClientJob, PartyRun, completed_runs
from harness.engine.mpspdz import MpSpdz
from harness.engine.process import Command, run_group
from harness.engine.programs import CompiledProgram, link_program
from harness.engine.protocols import DEFAULT_PROTOCOL, protocol_for
from harness.engine.staging import PartyStaging, party_input_file
from harness.errors import InputError
from harness.fileio import private_dir
from harness.stream import (
    ShmTransport,
    StreamError,
    TransportFactory,
    start_fork_server,
    stream_inputs,
    write_owner,
)

if TYPE_CHECKING:
    from harness.engine.netns import NetworkEmulation, Profile
    from harness.stream import TlsRoute

__all__ = ["LocalCluster", "PROTOCOL", "find_free_ports", "check_ports_free", "PartyRun",
           "party_input_file"]

PROTOCOL = DEFAULT_PROTOCOL
# Every party prints what it reveals (MP-SPDZ: "'.' for stdout on all parties"), so
# that verification sees each party's view: under replicated-ring a bad word
# of one party falsifies only its neighbour's output.
_ALL_OUTPUT = ("-OF", ".")
# Each party has its namespace to itself, so any port is free there; MP-SPDZ's default.
_NETNS_PORT = 5000
# The receivers' port in each party's namespace (they are gone before the parties start).
_UPLOAD_PORT = 4999


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def check_ports_free(base: int, count: int) -> None:
    if not 1024 <= base <= 65535 - count:
        raise InputError(f"--port {base} is out of range; pick a base in [1024, {65535 - count}]")
    busy = [p for p in range(base, base + count) if not _port_free(p)]
    if busy:
        raise InputError(f"port {busy[0]} is in use (the parties need ports {base}.."
                         f"{base + count - 1}); pick another --port or leave it out")


def find_free_ports(count: int, attempts: int = 100) -> int:
    rng = random.SystemRandom()
    for _ in range(attempts):
        # Below Linux's ephemeral range (32768-60999): an outgoing connection
        # could take a port there between this check and the party's bind.
        base = rng.randrange(20000, 32768 - count)
        if all(_port_free(p) for p in range(base, base + count)):
            return base
    raise InputError("found no free range of ports; pass --port")


class LocalCluster(PartyStaging):
    def __init__(self, mp: MpSpdz, parties: int, workdir: Path,
                 protocol: str = PROTOCOL, network: str | Profile | None = None) -> None:
        spec = protocol_for(protocol)
        spec.check_parties(parties)
        # Before any work: a wrong profile, or no root, should not surface after a compile.
        self.network: Profile | None = None
        if network is not None:
            # Loaded only for a network: the loopback's run never needs them.
            from harness.engine.netns import check_requirements, profile_for

            self.network = profile_for(network)
            check_requirements()
        self.mp = mp
        self.protocol = protocol
        self.binary = mp.binary(spec.binary)
        self._count_args = spec.party_count_args(parties)
        self._net: NetworkEmulation | None = None
        self._held: ExitStack | None = None  # a network opened before its session
        self._schedule: Path | None = None  # a streamed fast run's public input
        self._waiting: tuple[str, HeldParties] | None = None  # launched, held at inputs
        self._fed = False  # the held parties read their servers' stream as it comes
        super().__init__(parties, workdir)

    # --- the Cluster protocol -----------------------------------------------------------

    def prepare(self, job: ClientJob) -> Prepared:
        """Clients and servers side by side; each server leaves only its aggregate, or
        (``job.blocks``, the fast and reference programs) its share file. With
        ``--input party`` the data owner writes its input text instead, a chunk at a time."""
        plan = job.stream_plan(self.parties)
        if job.route.sink == "owner":
            public = self.workdir / "public-input"
            prepared = write_owner(plan, job.sketch, job.rows, job.noise, job.fp,
                                   self.input_file(), public, job.blocks)
            job.fp.check_bucket_bound(prepared.abs_sums)
            self._schedule = public
            return prepared
        dests = [party_input_file(self.party_dir(i), i) if job.as_input else self.share_file(i)
                 for i in range(self.parties)]
        # Fed parties (launch) take the schedule from their servers, each at its gate.
        gates = (list(zip(self._waiting[1].gates, self._waiting[1].pids, strict=True))
                 if self._fed and self._waiting else None)
        schedule = (self.workdir / "public-input" if job.blocks is not None and not gates
                    else None)
        transport: TransportFactory = ShmTransport
        try:
            if job.route.transport == "tls":  # each chunk crosses its server's link
                start_fork_server()  # its imports overlap making the network
                transport = self._tls_route(self._hold_network(), job.timeout)
            try:
                streamed = stream_inputs(plan, job.sketch, job.rows, job.noise, job.fp, dests,
                                         as_input=job.as_input, timeout=job.timeout,
                                         transport=transport, blocks=job.blocks,
                                         schedule=schedule, gates=gates)
            except StreamError as exc:
                if gates and exc.lost and self._waiting is not None:
                    self._waiting[1].check()  # a fed party that failed is the cause: named
                raise
            job.fp.check_bucket_bound(streamed.prepared.abs_sums)
        except BaseException:  # no session will follow to close the network
            self._release_network()
            raise
        self._schedule = schedule
        return streamed.outcome()

    def session(self) -> AbstractContextManager[None]:
        return self.network_session()

    def upload_bytes(self, prepared: Prepared) -> list[int]:
        # Without a network the servers' streams cross no link: what the clients sent.
        return list(prepared.upload_bytes)

    @property
    def reuses_inputs(self) -> bool:
        # Through an emulated network the upload is measured: every run sends anew. Fed
        # parties read their shares as they came, from a ring that is gone.
        return self.network is None and not self._fed

    # --- the emulated network ---------------------------------------------------------

    @contextmanager
    def network_session(self) -> Iterator[None]:
        """The emulated network (with the clients' namespace) for everything inside.

        A streamed run opens it for its clients (:meth:`prepare`); the session that
        follows then keeps it, and closes it at its end.
        """
        if self._held is not None:
            held, self._held = self._held, None
            try:
                with held:
                    yield
            finally:
                self._net = None
            return
        if self.network is None or self._net is not None:
            yield
            return
        from harness.engine.netns import NetworkEmulation

        with NetworkEmulation(self.network, self.parties, client=True) as net:
            self._net = net
            try:
                yield
            finally:
                self._net = None

    def _hold_network(self) -> NetworkEmulation:
        """The emulated network, opened now and kept up until the session that follows
        (the MPC's) ends: the profile's credits spent by the upload stay spent."""
        assert self.network is not None
        if self._net is None:
            from harness.engine.netns import NetworkEmulation

            stack = ExitStack()
            self._net = stack.enter_context(
                NetworkEmulation(self.network, self.parties, client=True))
            self._held = stack
        return self._net

    def _release_network(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            self._net = None
            held.close()

    def _tls_route(self, net: NetworkEmulation, timeout: float) -> TlsRoute:
        """Where each server takes its stream: its namespace, address and certificate."""
        from harness.stream import TlsRoute

        client_dir = private_dir(self.workdir / "client")
        [(key, cert, _)] = make_certificates(1, client_dir / "cert")
        parties = range(self.parties)
        return TlsRoute(tuple(net.namespace(i) for i in parties),
                        tuple(net.address(i) for i in parties), (_UPLOAD_PORT,) * self.parties,
                        tuple(self._cert(i) for i in parties),
                        tuple(self._key(i) for i in parties), net.client_namespace,
                        cert, key, timeout)

    def _cert(self, i: int) -> Path:
        return self.party_dir(i) / "Player-Data" / f"P{i}.pem"

    def _key(self, i: int) -> Path:
        return self.party_dir(i) / "Player-Data" / f"P{i}.key"

    # --- the MPC ------------------------------------------------------------------------

    @contextmanager
    def launch(self, job: ClientJob, program: CompiledProgram, *,
               timeout: float, port: int | None = None) -> Iterator[bool]:
        """Where the job's route starts the parties first (its feeding ``held`` or
        ``fifo``) they start now, held at their inputs (:mod:`.held`) while the clients
        stream; :meth:`run` releases them. Fed ones (``fifo``) each read their server's
        share file and schedule as they are written, and sum the stream while it comes.
        Stopped if the block ends first. Yields whether they started (a program of
        several threads cannot be held: its parties start in :meth:`run`)."""
        self._fed = False
        if job.route.feeding == "files" or not holdable(program.threads):
            yield False
            return
        commands = self._loopback_commands(program, port)
        gates = [self.party_dir(i) / "Programs" / "Public-Input" / program.name
                 for i in range(self.parties)]
        self._waiting = (program.name, HeldParties(commands, gates))
        self._fed = job.route.fed
        try:
            yield True
        finally:
            waiting, self._waiting = self._waiting, None
            if waiting is not None:
                waiting[1].stop()

    def run(self, program: CompiledProgram, *, timeout: float,
            port: int | None = None) -> list[PartyRun]:
        if self._waiting is not None:  # started by launch, held at their inputs
            (name, held), self._waiting = self._waiting, None
            assert name == program.name, "run on another program than launched"
            runs = completed_runs(held.release(timeout, fed=self._fed))
            if self._fed:  # they summed the stream as it came: their time after it
                for r in runs:
                    r.stats["after_stream_s"] = max(0.0, r.completed.wall_seconds)
            return runs
        if self.network is not None:
            return self._run_emulated(program, timeout=timeout, port=port)
        return completed_runs(run_group(self._loopback_commands(program, port),
                                        timeout))

    def _loopback_commands(self, program: CompiledProgram, port: int | None) -> list[Command]:
        if port is None:
            port = find_free_ports(self.parties)
        else:
            check_ports_free(port, self.parties)
        commands = []
        for i in range(self.parties):
            link_program(program, self.party_dir(i), self._schedule)
            argv = [str(self.binary), "-p", str(i), *self._count_args, "-pn", str(port),
                    "-h", "localhost", *_ALL_OUTPUT, program.name]
            commands.append(self._command(i, argv))
        return commands

    def _run_emulated(self, program: CompiledProgram, *, timeout: float,
                      port: int | None) -> list[PartyRun]:
        assert self.network is not None
        if port is None:
            port = _NETNS_PORT
        elif not 1024 <= port <= 65535 - self.parties:
            raise InputError(f"--port {port} is out of range; pick a base in "
                             f"[1024, {65535 - self.parties}]")
        for i in range(self.parties):
            link_program(program, self.party_dir(i), self._schedule)
        with self.network_session():
            net = self._net
            assert net is not None
            # Ports in the file override -pn; party i is reached at its namespace's address.
            ip_file = self.workdir / "ip-file"
            ip_file.write_text("".join(f"{net.address(i)}:{port + i}\n"
                                       for i in range(self.parties)))
            commands = []
            for i in range(self.parties):
                argv = [str(self.binary), "-p", str(i), *self._count_args,
                        "-ip", str(ip_file.resolve()), *_ALL_OUTPUT, program.name]
                commands.append(self._command(i, net.wrap(i, argv)))
            # run_group stops every party (its finally) before the namespaces go.
            done = run_group(commands, timeout)
        return completed_runs(done)

    def _command(self, i: int, argv: list[str]) -> Command:
        return Command(f"P{i}", argv, self.party_dir(i), log_dir=self.workdir / "logs")

