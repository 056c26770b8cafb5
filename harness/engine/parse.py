"""What a party prints: timing, traffic and the revealed sketch."""

from __future__ import annotations

import re

import numpy as np

from harness.errors import PartyError

__all__ = ["OUTPUT_MARKER", "REJECTED_MARKER", "PartyStats", "parse_output", "parse_rejected",
           "parse_stats"]

OUTPUT_MARKER = "LTM-OUTPUT"
# A validated run's count of rejected rows (--validate), on a line of its own.
REJECTED_MARKER = "LTM-REJECTED"
_NUM = r"([0-9.]+(?:e[+-]?[0-9]+)?)"
_TIME = re.compile(rf"^Time = {_NUM} seconds", re.M)
_BUSY = re.compile(rf"^Time1 = {_NUM} seconds", re.M)  # a program's timer 1: its own work
_SENT = re.compile(rf"^Data sent = {_NUM} MB in ~([0-9]+) rounds", re.M)
_GLOBAL = re.compile(rf"^Global data sent = {_NUM} MB", re.M)


class PartyStats(dict):
    """time_s, data_sent_mb, rounds, global_data_sent_mb; busy_s where the program
    times its own work (timer 1)."""


def parse_stats(name: str, stderr: str) -> PartyStats:
    time, sent, total = (rx.search(stderr) for rx in (_TIME, _SENT, _GLOBAL))
    if time is None or sent is None or total is None:
        missing = [k for k, v in (("time", time), ("sent", sent), ("global", total)) if v is None]
        raise PartyError(f"{name} finished without reporting its {' and '.join(missing)} "
                         "statistics; is this MP-SPDZ v0.4.2?", party=name, stderr=stderr)
    stats = PartyStats(
        time_s=float(time.group(1)),
        data_sent_mb=float(sent.group(1)),
        rounds=int(sent.group(2)),
        global_data_sent_mb=float(total.group(1)))
    busy = _BUSY.search(stderr)
    if busy is not None:
        stats["busy_s"] = float(busy.group(1))
    return stats


def parse_output(name: str, stdout: str, count: int) -> np.ndarray:
    """The revealed ring elements printed after OUTPUT_MARKER, as uint64."""
    values: list[int] = []
    for line in stdout.splitlines():
        if line.startswith(OUTPUT_MARKER):
            body = line[len(OUTPUT_MARKER):].strip().strip("[]")
            values.extend(int(tok) for tok in body.replace(",", " ").split())
    if len(values) != count:
        raise PartyError(f"{name} revealed {len(values)} values, expected {count}",
                         party=name, stdout=stdout)
    return np.array([v % 2**64 for v in values], dtype=np.uint64)


def parse_rejected(name: str, stdout: str) -> int:
    """The number of rejected rows a validated program revealed."""
    for line in stdout.splitlines():
        if line.startswith(REJECTED_MARKER):
            return int(line[len(REJECTED_MARKER):].strip()) % 2**64
    raise PartyError(f"{name} revealed no count of rejected rows", party=name, stdout=stdout)
