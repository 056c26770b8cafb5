"""The one interface between a run and wherever its parties live.

A run (``harness.experiments``) holds a :class:`Cluster` and never asks which
kind: local processes (:class:`~harness.engine.cluster.LocalCluster`, optionally
behind an emulated network) and one party per SSH host
(:class:`harness.remote.SshCluster`) both implement it. Modelled on CrypTen's
``Communicator`` and asv's ``Environment``: the caller states *what* happens to
the clients' inputs and *how* they travel (the job's :class:`Route`, resolved once
from the table of run modes, :mod:`harness.experiments.modes`); the cluster only
supplies *where*: the servers' ends of the stream, where the client workers run,
how the parties start.

The phases, in the order a run calls them::

    with cluster.launch(job, program, timeout=..., port=...):  # where it can
        prepared = cluster.prepare(job)      # the stream: clients and servers side by side
        with cluster.session():              # e.g. an emulated network kept up
            cluster.run_server_step(...)     # the mechanism's, if any: on each server
            runs = cluster.run(program, timeout=..., port=...)
    cluster.upload_bytes(prepared)           # what the clients' upload carried, per server
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:

    from harness.clients import FixedPoint, Prepared, Rows, ShareFormat, Sketch
    from harness.engine.process import Completed
    from harness.engine.programs import CompiledProgram
    from harness.privacy import NoiseSpec, ServerStep
    from harness.stream import FileShape, StreamPlan

__all__ = ["Cluster", "ClientJob", "PartyRun", "Route"]

@dataclass(frozen=True)
class Route:
    """How a combination of program, input, sharing and placement runs, as the table
    of run modes declares it (:mod:`harness.experiments.modes`), or its refusal.

    - ``sink``: what the stream makes: ``sum`` (each server sums its stream into its
      m x d aggregate), ``shares`` (each server writes its share file as the chunks
      arrive) or ``owner`` (this machine, the data owner, writes party 0's input text);
    - ``where``: ``servers`` (each server takes its stream where it runs) or ``here``
      (this machine writes the files);
    - ``shape``: the files' layout, ``blocked`` or ``slots`` (``""`` for a sum);
    - ``feeding``: ``fifo`` (each party is started first and its server feeds it the
      stream through its public input, a FIFO, as it comes), ``held`` (the parties
      start first and wait at their inputs until the stream is done) or ``files``
      (they start on the complete files);
    - ``transport``: ``shm`` (rings of shared memory on this machine), ``tls`` (a TLS
      connection to each server, in its namespace or on its host), ``sftp`` (files
      written here, then sent whole) or ``none`` (written here, where they are read).

    A cluster reads it and re-derives none of it.
    """

    sink: str = ""
    where: str = ""
    shape: str = ""
    feeding: str = ""
    transport: str = ""
    refused: str = ""  # the one-line refusal, naming the way out

    @property
    def runs(self) -> bool:
        return not self.refused

    @property
    def here(self) -> bool:
        """This machine writes the files, not a server (the data owner's text)."""
        return self.where == "here"

    @property
    def fed(self) -> bool:
        """The parties read the stream as it comes (their server feeds each one)."""
        return self.feeding == "fifo"

    @property
    def shipped(self) -> bool:
        """Its files are written here and then sent whole to the hosts."""
        return self.transport == "sftp"


@dataclass
class PartyRun:
    """One party's completed process and the statistics parsed from what it printed.

    ``stats`` holds MP-SPDZ's figures (``time_s``, ``data_sent_mb``, ``rounds``,
    ``global_data_sent_mb``; ``busy_s``, the program's own work, where it times it),
    where the party's host measured them ``upload_s``, ``expand_s`` and
    ``aggregate_s``, and for a party fed the stream as it came, ``after_stream_s``:
    its wall time after the stream ended.
    """

    party: int
    completed: Completed
    stats: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ClientJob:
    """What the clients compute on and how they hand it to the servers.

    ``route`` is how the inputs travel (:class:`Route`): the stream's sink, the
    parties' feeding and the transport, as the table of run modes resolved them;
    ``sharing`` is ``"full"`` or ``"seeded"`` (all but one component as PRG seeds).

    Every job streams: the ``local`` program's servers sum the shares as they
    arrive, grouped per chunk (:mod:`harness.stream.produce`), and ``as_input``
    says whether they hand their aggregates to the MPC as input text. A job with
    ``blocks`` is the ``fast`` or ``reference`` program's: its
    servers write the shares into share files of that shape as they arrive (blocked
    per chunk of clients, :mod:`harness.stream.blocks`, or one row per slot,
    :mod:`harness.stream.slots`), and the program's public input beside them. With
    the sink ``owner`` (``--input party``) no server takes a stream: the data owner
    writes its input text in the program's shape (``blocks``) and the public input
    a chunk of clients at a time.
    """

    rows: Rows
    sketch: Sketch
    noise: NoiseSpec
    fp: FixedPoint
    share_format: ShareFormat
    route: Route = Route("sum", "servers", "", "held", "shm")
    sharing: str = "full"
    timeout: float = 900.0
    as_input: bool = False
    blocks: FileShape | None = None
    # --poison's clients, sending the largest words the encoding holds; with --validate
    # the plaintext sums the release is checked against leave them out.
    poisoned: tuple[int, ...] = ()
    drop_poisoned: bool = False

    def stream_plan(self, parties: int, hosts: tuple[int, ...] = ()) -> StreamPlan:
        """The public plan of this job's stream to ``parties`` servers: one client worker
        per core here, or ``hosts[h]`` on each client host h."""
        from harness.stream import StreamPlan, worker_count

        return StreamPlan(self.n, self.d, self.sketch.m, self.sketch.s, parties,
                          self.share_format.name, workers=sum(hosts) or worker_count(),
                          sharing=self.sharing, hosts=hosts, poisoned=self.poisoned,
                          drop_poisoned=self.drop_poisoned)

    @property
    def n(self) -> int:
        return self.rows.n

    @property
    def d(self) -> int:
        return self.rows.d


@runtime_checkable
class Cluster(Protocol):
    """Where the servers of one run are: the servers' ends of the stream, where the
    client workers run, how the parties start. How the clients' inputs travel is the
    job's :class:`Route`, which a cluster follows and never re-derives."""

    parties: int
    workdir: Path

    def party_dir(self, i: int) -> Path:
        """Party ``i``'s local staging directory (``Programs``, ``Player-Data``,
        ``Persistence``), laid out as the server holds it."""
        ...

    def share_file(self, i: int) -> Path:
        """Party ``i``'s share file in its staging directory."""
        ...

    def launch(self, job: ClientJob, program: CompiledProgram, *,
               timeout: float, port: int | None = None) -> AbstractContextManager[bool]:
        """Start the parties on ``program`` now, before :meth:`prepare`, where each can
        be held at its inputs until :meth:`run` (inside this block) releases them: their
        start-up then overlaps the clients'. The parties are stopped if the block ends
        before that. Yields whether they started; else :meth:`run` starts them."""
        ...

    def prepare(self, job: ClientJob) -> Prepared:
        """The stream: the clients make every server's inputs (here, or on a client
        host) while each server takes its own as they come, summing them (``local``) or
        writing its file. Returns the plaintext result every revealed sketch is checked
        against, with what the stream measured (:class:`~harness.clients.Prepared`'s
        ``servers_s`` and ``upload`` where they were timed here)."""
        ...

    def run_server_step(self, step: ServerStep, *, after_aggregate: bool,
                        digest_key: bytes) -> int:
        """After :meth:`prepare` and inside :meth:`session`: each server runs ``step``
        (what the run's mechanism has each server do before the MPC) where it runs,
        writing its own input to the MPC for every cell, appended to its input file
        after its aggregate when it inputs that too (``after_aggregate``). Only the
        step's public parameters (and the run's public ``digest_key``) leave this
        machine; of what a server input only its digest comes back
        (:mod:`harness.clients.digest`). Returns the sum of the servers' digests mod
        2^64, which the release is checked against."""
        ...

    def session(self) -> AbstractContextManager[None]:
        """Whatever must stay up from the upload to the end of the MPC (an emulated
        network); a no-op where nothing must."""
        ...

    def run(self, program: CompiledProgram, *, timeout: float,
            port: int | None = None) -> list[PartyRun]:
        """Start every party on the compiled program; one failing party stops all.

        A streamed job whose servers (``ClientJob.blocks``) or data owner wrote the
        program's public input themselves runs on that file; any other program reads
        none."""
        ...

    def upload_bytes(self, prepared: Prepared) -> list[int]:
        """Bytes of the clients' data each server received (sent over a network, or
        what the clients would send when the files were written in place)."""
        ...

    @property
    def reuses_inputs(self) -> bool:
        """Whether a second :meth:`run` may compute again on the same delivered inputs
        (local parties without a network: the files stay where they are)."""
        ...


def completed_runs(done: Sequence[Completed]) -> list[PartyRun]:
    """Party i's :class:`PartyRun` for the i-th completed process, stats parsed."""
    from harness.engine.parse import parse_stats

    return [PartyRun(i, c, parse_stats(c.name, c.stderr)) for i, c in enumerate(done)]
