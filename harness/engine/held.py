"""Parties started before their inputs exist, held at them until released.

An MP-SPDZ party starts (loads its program, connects to the others over TLS) and
only then, when it makes its processor, opens its public input file
(``Programs/Public-Input/<program>``) and its private input. That file, made a
FIFO, holds the party there: opening a FIFO to read waits for a writer. So the
parties can start while the clients stream, and their start-up (a few tenths of a
second, more than the MPC that opens a ``local`` run's sums) no longer follows the
stream. :meth:`HeldParties.release` then closes each FIFO (the public input a
held program reads is empty), once every input is in place; from there on the parties run as
:func:`harness.engine.process.run_group` runs them, one failing stopping all.

A ``fast`` run's parties are *fed* instead: each one's server writes the program's
public input into its FIFO as the chunks arrive (:func:`harness.stream.files.fed`),
so the party sums the stream while it comes, and :meth:`HeldParties.release` only
waits for them.

Only a program of one thread can be held so (each thread opens the file once).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from harness.engine.process import Command, Completed, Group
from harness.errors import PartyError
from harness.fileio import open_fifo_writer

__all__ = ["HeldParties", "holdable"]

_POLL_SECONDS = 0.005


def holdable(threads: int) -> bool:
    """Whether parties of a program with ``threads`` threads can be held at their inputs."""
    return threads == 1


class HeldParties:
    """The parties' processes, each to wait at the FIFO ``gates[i]`` (created here,
    0600, where its public input file belongs) until :meth:`release`."""

    def __init__(self, commands: Sequence[Command], gates: Sequence[Path]) -> None:
        self.gates = list(gates)
        for gate in self.gates:
            gate.unlink(missing_ok=True)
            os.mkfifo(gate, 0o600)
        self.group: Group | None = Group(commands)

    def release(self, timeout: float, *, fed: bool = False) -> list[Completed]:
        """Give every party its (empty) public input, or, ``fed`` (its server wrote it
        and closed it), none; then wait for all as ``run_group`` does (each party's wall
        time from its release). A party that fails first, or one that never reaches its
        inputs within ``timeout``, stops all: PartyError."""
        group = self.group
        assert group is not None, "released twice"
        self.group = None
        try:
            if fed:
                group.check()
                released = [time.monotonic()] * len(self.gates)
                for gate in self.gates:  # read and closed by its server
                    _leave_plain(gate)
            else:
                released = self._open_gates(group, timeout)
            group.restart_clocks(released)
            return group.wait(timeout)
        finally:
            group.stop()

    @property
    def pids(self) -> list[int]:
        """Each party's process id, in order (for a server to see its party gone)."""
        assert self.group is not None, "released"
        return self.group.pids

    def check(self) -> None:
        """PartyError naming a party that has failed while held (else nothing)."""
        if self.group is not None:
            self.group.check()

    def stop(self) -> None:
        """Stop the parties unless they were released (the run ended before them)."""
        if self.group is not None:
            group, self.group = self.group, None
            group.stop()

    def _open_gates(self, group: Group, timeout: float) -> list[float]:
        released: list[float | None] = [None] * len(self.gates)
        deadline = time.monotonic() + timeout
        while True:
            group.check()  # a party that died before its inputs is named, not waited on
            for i, gate in enumerate(self.gates):
                if released[i] is None and _give(gate):
                    released[i] = time.monotonic()
            if all(t is not None for t in released):
                return [t for t in released if t is not None]
            if time.monotonic() > deadline:
                waiting = [f"P{i}" for i, t in enumerate(released) if t is None]
                group.stop()
                raise PartyError(f"timed out after {timeout:g} s waiting for "
                                 f"{', '.join(waiting)} to reach its inputs; stopped all "
                                 "parties", party=waiting[0])
            time.sleep(_POLL_SECONDS)


def _give(gate: Path) -> bool:
    """Close the FIFO, empty, if its party waits there (else False); the FIFO then
    becomes an empty plain file, as an unheld party's is."""
    fd = open_fifo_writer(gate)
    if fd is None:  # no reader yet: the party is still starting
        return False
    os.close(fd)
    _leave_plain(gate)
    return True


def _leave_plain(gate: Path) -> None:
    """An empty plain file in the FIFO's place, as an unheld party's public input is
    (the party holds the FIFO itself open while it needs it)."""
    gate.unlink(missing_ok=True)
    gate.write_bytes(b"")
