"""What a server does with its shares on its own host before the run, and where they lie.

With seeded sharing a server expands its seeds (``Upload/``) into its share
file; with the ``local`` program it sums its shares into its m x d aggregate.
Both run in the server's remote working directory through the host agent
(:mod:`harness.remote.agent`), each timed there; expansion comes first, as the
local program aggregates the expanded share file.

With several client hosts each host's files arrive apart (its full shares as
``Persistence/Part-<k>.data``, or its seeds under ``Client-<k>/``, expanded
there with its own plan into that part), and the server joins the parts end to
end, in host order, into the one share file the run reads
(:mod:`harness.clients.ranges`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["AGGREGATE_PLAN", "CERT_NAME", "EXPAND_PLAN", "HostSteps"]

# The parties' certificates and their hash links in Player-Data: public, every party's.
CERT_NAME = re.compile(r"P\d+\.pem|[0-9a-f]{8}\.\d+")

AGGREGATE_PLAN = "aggregate-plan.npz"
EXPAND_PLAN = "expand-plan.npz"


@dataclass(frozen=True)
class HostSteps:
    """The steps every server runs on its shares: ``expand`` its seeds, ``aggregate`` its
    shares (``as_input``: into its MP-SPDZ input text instead of a share file)."""

    expand: bool = False
    aggregate: bool = False
    as_input: bool = False
    hosts: int = 1  # client hosts whose files each server joins
    fmt: str = "additive"  # the share files' format, for joining them

    def __bool__(self) -> bool:
        return self.expand or self.aggregate or self.joins

    @staticmethod
    def share_file(party: int) -> str:
        return f"Persistence/Transactions-P{party}.data"

    @staticmethod
    def received_file(party: int) -> str:
        return f"Persistence/Received-P{party}.data"

    def arriving_file(self, party: int) -> str:
        """Where a server's whole share file goes on arrival: aggregated later, or read by
        MP-SPDZ as it is."""
        return self.received_file(party) if self.aggregate else self.share_file(party)

    def expand_args(self, party: int) -> list[str]:
        """The agent's ``expand`` arguments: PARTY PLAN OUT."""
        return [str(party), EXPAND_PLAN, self.arriving_file(party)]

    def aggregate_args(self, party: int) -> list[str]:
        """The agent's ``aggregate`` arguments: SOURCE PLAN DEST."""
        dest = (f"Player-Data/Input-P{party}-0" if self.as_input
                else self.share_file(party))
        return [self.received_file(party), AGGREGATE_PLAN, dest]

    @property
    def joins(self) -> bool:
        return self.hosts > 1

    @staticmethod
    def part_file(k: int) -> str:
        """Client host k's share file for this server, before joining."""
        return f"Persistence/Part-{k}.data"

    @staticmethod
    def part_dir(k: int) -> str:
        """Where client host k's seeds arrive, with several client hosts."""
        return f"Client-{k}"

    @staticmethod
    def expand_plan(k: int) -> str:
        return f"expand-plan-{k}.npz"

    def received_name(self, party: int, k: int, name: str) -> str:
        """Where a server keeps the file ``name`` client host ``k`` sends it."""
        if self.expand:
            return (f"{self.part_dir(k)}/Upload/{name}" if self.joins
                    else f"Upload/{name}")
        return self.part_file(k) if self.joins else self.arriving_file(party)

    def receive_args(self, party: int) -> list[str]:
        """The agent's options for what a receiving server does once its files are in."""
        args: list[str] = []
        if self.joins:
            if self.expand:
                for k in range(self.hosts):
                    args += ["--expand-part", str(party), self.expand_plan(k),
                             self.part_file(k), self.part_dir(k)]
            args += ["--join", self.fmt, self.arriving_file(party),
                     *(self.part_file(k) for k in range(self.hosts))]
        elif self.expand:
            args += ["--expand", *self.expand_args(party)]
        if self.aggregate:
            args += ["--aggregate", *self.aggregate_args(party)]
        return args

    def names(self) -> list[str]:
        """The steps, in order, as the agent names them in its replies."""
        return ((["expand"] if self.expand else []) + (["join"] if self.joins else [])
                + (["aggregate"] if self.aggregate else []))

    def describe(self) -> str:
        return " and ".join({"expand": "expanding its seeds",
                             "join": "joining the client hosts' share files",
                             "aggregate": "aggregating its shares"}[n] for n in self.names())

    def why_harness(self, receive: bool) -> str:
        """Why a server needs the harness, for the message when it is missing."""
        if receive:
            return "each server receives its shares from the client host with it"
        if self.expand:
            return "--sharing seeded expands each server's seeds there"
        return "the local program aggregates the shares there"
