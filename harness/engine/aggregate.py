"""The ``local`` strategy's first step: a server sums its own shares.

T is linear, so each server can apply it to its additive shares alone: the
m x d results are additive shares of T, and nothing is revealed until they are
opened together. Done here with numpy, streaming the blocked share file in
chunks into one reused buffer.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from harness.clients.layout import Layout
from harness.clients.prepare import SHARE_HEADER, write_share_file

__all__ = ["aggregate_file", "aggregate_share_file", "load_plan", "main", "read_and_sum",
           "save_plan"]

_BUFFER_SHARES = 1 << 21


def aggregate_share_file(source: Path, layout: Layout, dest: Path) -> float:
    """Write the server's m x d aggregate shares of T to ``dest``; return seconds."""
    if layout.kind != "blocked":
        raise ValueError("local aggregation reads the blocked layout")
    return _aggregate(source, dest, _plan(layout))


def _plan(layout: Layout) -> dict:
    """What aggregation needs of the (public) layout; small, unlike ``file_slot``."""
    assert layout.block_acc is not None
    return {"block_rows": layout.block_rows, "chunk_blocks": layout.chunk_blocks,
            "d": layout.d, "m": layout.m, "n_chunks": layout.n_chunks,
            "block_acc": layout.block_acc}


def save_plan(layout: Layout, path: Path) -> None:
    """The layout's aggregation plan as an .npz, for a server that aggregates on its host."""
    plan = _plan(layout)
    with open(path, "wb") as fh:
        np.savez(fh, **{k: np.asarray(v) for k, v in plan.items()})


def load_plan(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as data:
        return {k: (data[k] if k == "block_acc" else int(data[k])) for k in data.files}


def _aggregate(source: Path, dest: Path, plan: dict) -> float:
    started = time.perf_counter()
    R, K, d, m = plan["block_rows"], plan["chunk_blocks"], plan["d"], plan["m"]
    n_chunks, block_acc = plan["n_chunks"], plan["block_acc"]
    chunk_shares = R * K * d
    per_read = max(1, _BUFFER_SHARES // chunk_shares)
    buffer = np.empty(per_read * chunk_shares, dtype=np.uint64)
    acc = np.zeros((2 * m + 1, d), dtype=np.uint64)
    block = 0
    with open(source, "rb", buffering=0) as fh:
        if fh.read(len(SHARE_HEADER)) != SHARE_HEADER:
            raise ValueError(f"{source} is not a semi2k share file")
        for first in range(0, n_chunks, per_read):
            chunks = min(per_read, n_chunks - first)
            view = buffer[: chunks * chunk_shares]
            _read_exactly(fh, view)
            sums = view.reshape(chunks, R, K * d).sum(axis=1, dtype=np.uint64)
            blocks = sums.reshape(chunks * K, d)
            np.add.at(acc, block_acc[block:block + chunks * K], blocks)
            block += chunks * K
    write_share_file(dest, acc[:m] - acc[m:2 * m])
    return time.perf_counter() - started


def aggregate_file(source: Path, plan: Path, dest: Path) -> float:
    """:func:`aggregate_share_file` with the plan :func:`save_plan` wrote; seconds."""
    return _aggregate(source, dest, load_plan(plan))


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.engine.aggregate SOURCE PLAN DEST``: what a server runs on its
    host for the ``local`` program; prints the seconds it took."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print("usage: python -m harness.engine.aggregate SOURCE PLAN.npz DEST", file=sys.stderr)
        return 2
    source, plan, dest = (Path(a) for a in args)
    print(f"aggregate_s {aggregate_file(source, plan, dest):.6f}")
    return 0


def read_and_sum(source: Path) -> tuple[float, np.uint64]:
    """The I/O limit: stream a share file through numpy and sum it, nothing else.

    Same buffer and reads as :func:`aggregate_share_file`, so the difference
    between the two is the aggregation's own work.
    """
    started = time.perf_counter()
    buffer = np.empty(_BUFFER_SHARES, dtype=np.uint64)
    total = np.uint64(0)
    with open(source, "rb", buffering=0) as fh:
        fh.seek(len(SHARE_HEADER))
        raw = memoryview(buffer).cast("B")
        while True:
            got = fh.readinto(raw)
            if not got:
                break
            total += buffer[: got // 8].sum(dtype=np.uint64)
    return time.perf_counter() - started, total


def _read_exactly(fh, view: np.ndarray) -> None:
    raw = memoryview(view).cast("B")
    got = 0
    while got < len(raw):
        n = fh.readinto(raw[got:])
        if not n:
            raise ValueError("share file ended early")
        got += n


if __name__ == "__main__":
    sys.exit(main())
