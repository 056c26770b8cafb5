"""The parties' local directories, laid out as each server would hold them.

``P<i>/Programs`` (the compiled program), ``P<i>/Player-Data`` (its own key,
everyone's certificates, and party 0's input file) and ``P<i>/Persistence``
(its own share file and nothing else). Local parties run in these directories;
the SSH runner uploads each one to its host. Certificates are fresh per run.
"""

from __future__ import annotations

from pathlib import Path

from harness.engine.certs import install_certificates, make_certificates
from harness.fileio import private_dir

__all__ = ["PartyStaging"]


class PartyStaging:
    """Where the clients' inputs for each party are written before a run."""

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

    def share_file(self, i: int) -> Path:
        return self.party_dir(i) / "Persistence" / f"Transactions-P{i}.data"

    def outbox(self, i: int) -> Path:
        """Where the clients write party i's files, laid out as :meth:`party_dir`: here
        the party's directory itself (a cluster that carries them across overrides it)."""
        return self.party_dir(i)

    def outbox_share_file(self, i: int) -> Path:
        return self.outbox(i) / self.share_file(i).relative_to(self.party_dir(i))

    def input_file(self) -> Path:
        return self.party_dir(0) / "Player-Data" / "Input-P0-0"
