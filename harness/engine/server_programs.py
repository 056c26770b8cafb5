"""The server programs the harness runs: one source of truth for each.

Beside :mod:`.protocols` (how the parties compute), a server program fixes what
they compute on and how: the ``.mpc`` template it compiles and which of the
run's values it takes, its default input mode, whether
the clients' share files are in the blocked layout, whether each server first
sums its own shares into the m x d accumulators (``local``); the public schedule a
program reads is written as the shares stream (:mod:`harness.stream.files`). Everything that
would ask for a program by name asks here instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from harness.errors import InputError

__all__ = ["INPUT_MODES", "PROGRAMS", "ServerProgram", "server_program"]

# shares: the clients secret-share their noisy rows among the servers;
# party: party 0, the data owner, types the noisy rows in.
INPUT_MODES = ("shares", "party")


@dataclass(frozen=True)
class ServerProgram:
    name: str
    template: str  # mpc_programs/<template>.mpc.j2
    params: tuple[str, ...]  # the template's parameters, picked from the run's values
    default_input: str
    blocked: bool  # the clients' share files in the blocked layout (else one row per slot)
    # Each server sums its own shares into m x d accumulators before the MPC.
    aggregates: bool

    def reads_client_shares(self, input_mode: str) -> bool:
        """The MPC reads the clients' share files as they are, in the protocol's format."""
        return input_mode == "shares" and not self.aggregates

    def source(self, input_mode: str, *, as_input: bool) -> str:
        """Where the compiled program takes its data: ``shares`` or ``party`` as the
        clients sent it; for an aggregating program, the servers' sums as share files
        (``shares``) or as each server's private input (``inputs``)."""
        if self.aggregates:
            return "inputs" if as_input else "shares"
        return input_mode

    def template_params(self, values: Mapping[str, object]) -> dict[str, object]:
        """The template's parameters out of everything the run knows."""
        return {key: values[key] for key in self.params}


PROGRAMS: dict[str, ServerProgram] = {p.name: p for p in (
    ServerProgram("fast", "fast", ("m", "d", "source", "block_rows", "chunk_blocks",
                                    "validate", "bound", "edabits"),
                  "shares", blocked=True, aggregates=False),
    # The textbook program: the data owner types its rows in.
    ServerProgram("reference", "reference", ("m", "d", "source", "validate", "bound", "edabits"),
                  "party", blocked=False, aggregates=False),
    ServerProgram("local", "open", ("m", "d", "source", "parties"), "shares",
                  blocked=True, aggregates=True),
)}


def server_program(name: str) -> ServerProgram:
    try:
        return PROGRAMS[name]
    except KeyError:
        raise InputError(f"unknown --program {name!r}; choose {', '.join(PROGRAMS)}") from None
