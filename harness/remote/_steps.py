"""What a server does with its shares on its own host before the run, and where they lie.

With seeded sharing a server expands its seeds (``Upload/``) into its share
file; with the ``local`` program it sums its shares into its m x d aggregate.
Both run in the server's remote working directory through the host agent
(:mod:`harness.remote.agent`), each timed there; expansion comes first, as the
local program aggregates the expanded share file.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AGGREGATE_PLAN", "EXPAND_PLAN", "HostSteps"]

AGGREGATE_PLAN = "aggregate-plan.npz"
EXPAND_PLAN = "expand-plan.npz"


@dataclass(frozen=True)
class HostSteps:
    """The steps every server runs on its shares: ``expand`` its seeds, ``aggregate`` its
    shares (``as_input``: into its MP-SPDZ input text instead of a share file)."""

    expand: bool = False
    aggregate: bool = False
    as_input: bool = False

    def __bool__(self) -> bool:
        return self.expand or self.aggregate

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

    def names(self) -> list[str]:
        """The steps, in order, as the agent names them in its replies."""
        return (["expand"] if self.expand else []) + (["aggregate"] if self.aggregate else [])

    def describe(self) -> str:
        return " and ".join({"expand": "expanding its seeds",
                             "aggregate": "aggregating its shares"}[n] for n in self.names())

    def why_harness(self, receive: bool) -> str:
        """Why a server needs the harness, for the message when it is missing."""
        if receive:
            return "each server receives its shares from the client host with it"
        if self.expand:
            return "--sharing seeded expands each server's seeds there"
        return "the local program aggregates the shares there"
