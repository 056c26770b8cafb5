"""The parties' local directories, laid out as each server would hold them.

``P<i>/Programs`` (the compiled program), ``P<i>/Player-Data`` (its own key,
everyone's certificates, and party 0's input file) and ``P<i>/Persistence``
(its own share file and nothing else). Local parties run in these directories;
the SSH runner uploads each one to its host. Certificates are fresh per run.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from harness.clients import (
    Prepared,
    SeededSink,
    ShareSink,
    TextSink,
    noise_rng,
    prepare_inputs,
)
from harness.engine.certs import install_certificates, make_certificates
from harness.fileio import private_dir

if TYPE_CHECKING:
    from harness.engine.interface import ClientJob
    from harness.engine.programs import CompiledProgram

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

    def launch(self, job: ClientJob, program: CompiledProgram, public_input: str, *,
               timeout: float, port: int | None = None) -> AbstractContextManager[bool]:
        """Start the parties before the clients' inputs exist, where they can wait for
        them: here they cannot (:meth:`run` starts them)."""
        return nullcontext(False)

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

    def prepare_here(self, job: ClientJob) -> Prepared:
        """The clients, on this machine, write every party's inputs into its outbox.

        Full sharing writes each server its share file; seeded sharing its seeds and
        the full words it holds; ``input_mode == "party"`` party 0's text input. The
        bucket bound is checked before any party starts: a wrapped sum would reveal
        garbage, not an error.
        """
        sink: TextSink | SeededSink | ShareSink
        data = job.data  # read (and checked) before any file is opened
        if job.input_mode == "party":
            sink = TextSink(self.input_file(), self.parties)
        elif job.sharing == "seeded":
            sink = SeededSink([self.outbox(i) for i in range(self.parties)], job.file_layout,
                              job.share_format, job.n, job.sketch.s, job.d)
        else:
            sink = ShareSink([self.outbox_share_file(i) for i in range(self.parties)],
                             job.share_format)
        prepared = prepare_inputs(data, job.sketch, job.file_layout, job.noise, job.fp, sink,
                                  noise_rng())
        job.fp.check_bucket_bound(prepared.abs_sums)
        return prepared
