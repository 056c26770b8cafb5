"""The servers' engine: MP-SPDZ and the parties that run it on this machine.

Owns finding and installing MP-SPDZ (:mod:`.mpspdz`), the protocols it runs and
their binaries (:mod:`.protocols`), rendering and compiling
the ``.mpc`` programs (:mod:`.programs`), the one subprocess wrapper
(:mod:`.process`), per-run certificates and party directories (:mod:`.certs`,
:mod:`.staging`), the local cluster (:mod:`.cluster`), its emulated network
(:mod:`.netns`) and the clients' TLS upload through it (:mod:`.upload`), parsing
what parties print (:mod:`.parse`) and the servers' local aggregation
(:mod:`.aggregate`).

May import: the top-level shared modules and :mod:`harness.clients` (for the
share-file format and layout the programs read).
"""

from harness.engine.cluster import LocalCluster, PartyRun
from harness.engine.mpspdz import (
    MpSpdz,
    default_home,
    doctor,
    ensure_mpspdz,
    find_mpspdz,
    install,
)
from harness.engine.process import Command, Completed, check_call, run_group
from harness.engine.programs import CompiledProgram, compile_program
from harness.engine.protocols import PROTOCOLS, Protocol, protocol_for

__all__ = [
    "Command",
    "CompiledProgram",
    "Completed",
    "LocalCluster",
    "MpSpdz",
    "PROTOCOLS",
    "Protocol",
    "PartyRun",
    "check_call",
    "compile_program",
    "default_home",
    "doctor",
    "ensure_mpspdz",
    "find_mpspdz",
    "install",
    "protocol_for",
    "run_group",
]
