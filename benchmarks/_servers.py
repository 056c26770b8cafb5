"""What the server benchmarks share: streamed runs' server inputs, and their rounds.

Every run these benchmarks measure streams (as ``ltm run`` does): a ``fast`` run's
servers write their share files as the chunks arrive, laid out per chunk of clients
(its workload's ``blocks``), with the public schedule beside them, so the programs
are run with no public input of the caller's; a ``local`` run's servers sum the
shares as they arrive and write no share file, so each of its rounds streams anew.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from harness.engine import CompiledProgram, LocalCluster, MpSpdz, compile_program, parse_output
from harness.errors import VerificationError
from harness.experiments import RunConfig, Workload, client_job
from harness.stream import BlockShape

__all__ = ["engine_read_program", "local_round", "timed_run"]

_TIMEOUT = 600.0


def _verify(runs, expected: np.ndarray, label: str) -> None:
    for r in runs:
        got = parse_output(f"P{r.party}", r.completed.stdout, expected.size)
        if not np.array_equal(got.reshape(expected.shape), expected):
            raise VerificationError(f"{label}: P{r.party} revealed a wrong sketch")


def timed_run(cluster: LocalCluster, program: CompiledProgram, expected: np.ndarray | None,
              label: str) -> list[float]:
    """Each party's time running ``program`` on the inputs ``cluster`` holds (verified
    against ``expected`` unless None)."""
    runs = cluster.run(program, timeout=_TIMEOUT)
    if expected is not None:
        _verify(runs, expected, label)
    return [r.stats["time_s"] for r in runs]


def engine_read_program(mp: MpSpdz, cfg: RunConfig, blocks: BlockShape | None
                        ) -> CompiledProgram:
    """MP-SPDZ reading a streamed ``fast`` run's share files as ``fast`` does, nothing more."""
    if blocks is None:
        raise ValueError("a streamed fast run's workload has its blocks")
    return compile_program(mp, "engine_read", {"m": cfg.rows, "d": cfg.dim,
                                               "block_rows": blocks.block_rows,
                                               "chunk_blocks": blocks.chunk_blocks})


def local_round(cluster: LocalCluster, cfg: RunConfig, work: Workload,
                program: CompiledProgram, label: str) -> Callable[[], list[float]]:
    """One ``local`` round: the clients stream (fresh noise and masks; their time is not
    counted), each server's busy time summing its shares as they arrive, plus its time
    opening the sums, verified."""
    job = client_job(cfg, work)

    def run() -> list[float]:
        prepared = cluster.prepare(job)
        expected, busy = prepared.expected, prepared.servers_s or []
        opened = timed_run(cluster, program, expected, label)
        return [a + t for a, t in zip(busy, opened, strict=True)]

    return run
