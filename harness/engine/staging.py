"""The parties' local directories, laid out as each server would hold them.

``P<i>/Programs`` (the compiled program), ``P<i>/Player-Data`` (its own key,
everyone's certificates, and party 0's input file) and ``P<i>/Persistence``
(its own share file and nothing else). Local parties run in these directories;
the SSH runner sends each one's files to its host. Certificates are fresh per run.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from harness.engine.certs import install_certificates, make_certificates
from harness.fileio import private_dir

if TYPE_CHECKING:
    from harness.engine.interface import ClientJob
    from harness.engine.programs import CompiledProgram
    from harness.privacy import ServerStep

__all__ = ["PartyStaging", "party_input_file"]


def party_input_file(party_dir: Path, party: int) -> Path:
    """Party ``party``'s private input to the MPC (MP-SPDZ's ``Input-P<i>-0``)."""
    return party_dir / "Player-Data" / f"Input-P{party}-0"


class PartyStaging:
    """Each party's directory, certificates installed, where its inputs arrive."""

    def __init__(self, parties: int, workdir: Path) -> None:
        self.parties = parties
        self.workdir = private_dir(workdir)
        certs = make_certificates(parties, workdir / "certs")
        for i in range(parties):
            install_certificates(certs, i, self.party_dir(i) / "Player-Data")
            private_dir(self.party_dir(i))
            private_dir(self.party_dir(i) / "Persistence")

    def party_dir(self, i: int) -> Path:
        return self.workdir / f"P{i}"

    def launch(self, job: ClientJob, program: CompiledProgram, *,
               timeout: float, port: int | None = None) -> AbstractContextManager[bool]:
        """Start the parties before the clients' inputs exist, where they can wait for
        them: here they cannot (:meth:`run` starts them)."""
        return nullcontext(False)

    def run_server_step(self, step: ServerStep, *, after_aggregate: bool,
                        digest_key: bytes) -> int:
        """Each server runs ``step`` into its input file (after its aggregate, when it
        inputs that too). Every party runs on this machine, each in its own directory,
        so each runs it here; the sum of their digests comes back."""
        from harness.privacy import run_server_step

        total = 0
        for i in range(self.parties):
            _, digest = run_server_step(step, party_input_file(self.party_dir(i), i),
                                        append=after_aggregate, digest_key=digest_key)
            total += digest
        return total % 2**64

    def share_file(self, i: int) -> Path:
        return self.party_dir(i) / "Persistence" / f"Transactions-P{i}.data"

    def input_file(self) -> Path:
        return self.party_dir(0) / "Player-Data" / "Input-P0-0"
