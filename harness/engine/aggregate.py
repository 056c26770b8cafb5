"""The disk's limit for the servers' programs: a share file read through numpy and summed.

The servers sum their shares while the stream arrives (:mod:`.stream`); what a
program reading a whole share file can at best do is bounded by reading it,
which :func:`read_and_sum` measures with nothing else done.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from harness.clients import ADDITIVE, ShareFormat

__all__ = ["read_and_sum"]

_BUFFER_SHARES = 1 << 21


def read_and_sum(source: Path, fmt: ShareFormat = ADDITIVE) -> tuple[float, np.uint64]:
    """The I/O limit: stream a share file through numpy and sum it, nothing else.

    Reads its body in buffers of 2^21 shares; returns the seconds it took and the
    sum (mod 2^64) of every word after the header.
    """
    started = time.perf_counter()
    buffer = np.empty(_BUFFER_SHARES, dtype=np.uint64)
    total = np.uint64(0)
    with open(source, "rb", buffering=0) as fh:
        fh.seek(len(fmt.header))
        raw = buffer.data.cast("B")
        while True:
            got = fh.readinto(raw)
            if not got:
                break
            total += buffer[: got // 8].sum(dtype=np.uint64)
    return time.perf_counter() - started, total
