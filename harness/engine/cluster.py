"""A set of local parties: one working directory each, certificates, ports.

Each party runs in its own directory, as on its own server: ``Programs/``
(linked to the compiled program), ``Player-Data/`` (its key and everyone's
certificates, plus party 0's input file) and ``Persistence/`` (its own share
file and nothing else).

With a network profile (``--network``) each party also runs in its own network
namespace behind an emulated, shaped link (:mod:`harness.engine.netns`); the parties
then find each other through an ip file instead of ``localhost``.
"""

from __future__ import annotations

import random
import socket
from dataclasses import dataclass
from pathlib import Path

from harness.engine.mpspdz import MpSpdz
from harness.engine.netns import NetworkEmulation, Profile, check_requirements, profile_for
from harness.engine.parse import parse_stats
from harness.engine.process import Command, Completed, run_group
from harness.engine.programs import CompiledProgram, link_program
from harness.engine.protocols import DEFAULT_PROTOCOL, protocol_for
from harness.engine.staging import PartyStaging
from harness.errors import InputError

__all__ = ["LocalCluster", "PROTOCOL", "find_free_ports", "check_ports_free", "PartyRun"]

PROTOCOL = DEFAULT_PROTOCOL
# Every party prints what it reveals (MP-SPDZ: "'.' for stdout on all parties"), so
# that verification sees each party's view: under replicated-ring a bad word
# of one party falsifies only its neighbour's output.
_ALL_OUTPUT = ("-OF", ".")
# Each party has its namespace to itself, so any port is free there; MP-SPDZ's default.
_NETNS_PORT = 5000


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


@dataclass
class PartyRun:
    party: int
    completed: Completed
    stats: dict


class LocalCluster(PartyStaging):
    def __init__(self, mp: MpSpdz, parties: int, workdir: Path,
                 protocol: str = PROTOCOL, network: str | Profile | None = None) -> None:
        spec = protocol_for(protocol)
        spec.check_parties(parties)
        # Before any work: a wrong profile, or no root, should not surface after a compile.
        self.network = profile_for(network) if network is not None else None
        if self.network is not None:
            check_requirements()
        self.mp = mp
        self.protocol = protocol
        self.binary = mp.binary(spec.binary)
        self._count_args = spec.party_count_args(parties)
        super().__init__(parties, workdir)


    def run(self, program: CompiledProgram, public_input: str, *, timeout: float,
            port: int | None = None) -> list[PartyRun]:
        if self.network is not None:
            return self._run_emulated(program, public_input, timeout=timeout, port=port)
        if port is None:
            port = find_free_ports(self.parties)
        else:
            check_ports_free(port, self.parties)
        commands = []
        for i in range(self.parties):
            link_program(program, self.party_dir(i), public_input)
            argv = [str(self.binary), "-p", str(i), *self._count_args, "-pn", str(port),
                    "-h", "localhost", *_ALL_OUTPUT, program.name]
            commands.append(self._command(i, argv))
        return self._results(run_group(commands, timeout))

    def _run_emulated(self, program: CompiledProgram, public_input: str, *, timeout: float,
                      port: int | None) -> list[PartyRun]:
        assert self.network is not None
        if port is None:
            port = _NETNS_PORT
        elif not 1024 <= port <= 65535 - self.parties:
            raise InputError(f"--port {port} is out of range; pick a base in "
                             f"[1024, {65535 - self.parties}]")
        for i in range(self.parties):
            link_program(program, self.party_dir(i), public_input)
        with NetworkEmulation(self.network, self.parties) as net:
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
        return self._results(done)

    def _command(self, i: int, argv: list[str]) -> Command:
        return Command(f"P{i}", argv, self.party_dir(i), log_dir=self.workdir / "logs")

    @staticmethod
    def _results(done: list[Completed]) -> list[PartyRun]:
        return [PartyRun(i, c, parse_stats(c.name, c.stderr)) for i, c in enumerate(done)]
