"""The servers' engine: MP-SPDZ and the parties that run it on this machine.

Owns finding MP-SPDZ (:mod:`.mpspdz`), installing it (:mod:`.installer`, unpacking
the release with :mod:`.release`) and reporting on it (:mod:`.checkup`), the
protocols it runs and their binaries (:mod:`.protocols`), the server programs
(:mod:`.server_programs`), rendering and compiling the ``.mpc`` programs
(:mod:`.programs`), the one subprocess wrapper
(:mod:`.process`), per-run certificates and party directories (:mod:`.certs`,
:mod:`.staging`), the local cluster (:mod:`.cluster`), its emulated network
(:mod:`.netns`), parsing
what parties print (:mod:`.parse`), the disk's limit for a program reading a share
file (:mod:`.aggregate`) and the parties held at their inputs until the stream is
done (:mod:`.held`). The shares reach the servers through :mod:`harness.stream`.

May import: the top-level shared modules, :mod:`harness.clients` (for the
share-file format and layout the programs read) and :mod:`harness.stream`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.optional import lazy_package

if TYPE_CHECKING:
    from harness.engine.aggregate import read_and_sum
    from harness.engine.certs import (
        make_certificates,
        start_signer,
    )
    from harness.engine.checkup import doctor
    from harness.engine.cluster import (
        PROTOCOL,
        LocalCluster,
        PartyRun,
        find_free_ports,
    )
    from harness.engine.held import holdable
    from harness.engine.installer import ensure_mpspdz, install
    from harness.engine.interface import ClientJob, Cluster, Route
    from harness.engine.mpspdz import (
        ENV_VAR,
        NO_INSTALL_ENV_VAR,
        OPTIONAL_BINARIES,
        RELEASE_SHA256,
        REQUIRED_BINARIES,
        SHA256_ENV_VAR,
        SUPPORTED_VERSION,
        URL_ENV_VAR,
        MpSpdz,
        default_home,
        find_mpspdz,
        release_url,
    )
    from harness.engine.netns import (
        check_requirements,
        profile_for,
    )
    from harness.engine.parse import (
        OUTPUT_MARKER,
        REJECTED_MARKER,
        parse_output,
        parse_rejected,
        parse_stats,
    )
    from harness.engine.process import Command, Completed, check_call, run_group
    from harness.engine.programs import CompiledProgram, compile_program, compile_source, render
    from harness.engine.protocols import (
        DEFAULT_PROTOCOL,
        PROTOCOLS,
        Protocol,
        build_refusal,
        detected_tampering,
        protocol_for,
        unusable_reason,
    )
    from harness.engine.server_programs import (
        INPUT_MODES,
        PROGRAMS,
        ServerProgram,
        server_program,
    )
    from harness.engine.staging import (
        PartyStaging,
        party_input_file,
    )

__all__ = [
    "ClientJob",
    "Cluster",
    "Command",
    "CompiledProgram",
    "Completed",
    "DEFAULT_PROTOCOL",
    "ENV_VAR",
    "INPUT_MODES",
    "LocalCluster",
    "MpSpdz",
    "NO_INSTALL_ENV_VAR",
    "OPTIONAL_BINARIES",
    "OUTPUT_MARKER",
    "REJECTED_MARKER",
    "PROGRAMS",
    "PROTOCOL",
    "PROTOCOLS",
    "PartyRun",
    "PartyStaging",
    "Protocol",
    "RELEASE_SHA256",
    "REQUIRED_BINARIES",
    "Route",
    "SHA256_ENV_VAR",
    "SUPPORTED_VERSION",
    "ServerProgram",
    "URL_ENV_VAR",
    "build_refusal",
    "check_call",
    "check_requirements",
    "compile_program",
    "compile_source",
    "render",
    "default_home",
    "detected_tampering",
    "doctor",
    "ensure_mpspdz",
    "find_mpspdz",
    "holdable",
    "install",
    "make_certificates",
    "start_signer",
    "parse_output",
    "parse_rejected",
    "parse_stats",
    "find_free_ports",
    "party_input_file",
    "profile_for",
    "protocol_for",
    "read_and_sum",
    "release_url",
    "run_group",
    "server_program",
    "unusable_reason",
]

lazy_package(__name__)
