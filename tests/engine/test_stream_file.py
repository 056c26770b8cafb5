"""A streamed ``fast`` run's share files: laid out per chunk of clients, written by the servers.

Real client worker and server processes, no MP-SPDZ: the files the servers write
are reconstructed here and summed block by block as the program does.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from harness.clients import (
    ADDITIVE,
    REPLICATED,
    FixedPoint,
    NoiseSpec,
    Sketch,
    SyntheticRows,
    read_share_file,
)
from harness.stream import (
    BlockShape,
    BlockWriter,
    RunBlocks,
    ScheduleWriter,
    SketchGroups,
    StreamError,
    StreamPlan,
    stream_inputs,
)
from harness.stream.produce import group_slots


def _schedule(path: Path) -> tuple[int, np.ndarray]:
    numbers = np.array(path.read_text().split(), dtype=np.int64)
    return int(numbers[0]), numbers[1:]


def _block_sums(rows: np.ndarray, shape: BlockShape, chunks: int) -> np.ndarray:
    """(blocks, width) sums of a file's rows (chunks of (R, K, width)), as the program."""
    R, K = shape.block_rows, shape.chunk_blocks
    return rows.reshape(chunks, R, K, -1).sum(axis=1, dtype=np.uint64).reshape(chunks * K, -1)


@pytest.mark.parametrize(("s", "chunk", "shape"), [(1, 97, BlockShape(4, 7)),
                                                   (3, 50, BlockShape(2, 5)),
                                                   (2, 400, BlockShape(8, 64)),
                                                   (1, 30, BlockShape(16, 3))])
def test_every_slot_is_stored_once_in_a_block_of_its_accumulator(s, chunk, shape):
    n, m = 1000, 6
    sketch = Sketch.sparse(n, m, s, seed=3)
    plan = StreamPlan(n, 1, m, s, 2, ADDITIVE.name, workers=1, chunk=chunk)
    columns = SketchGroups(sketch, plan)
    out, text = io.BytesIO(), io.BytesIO()
    blocks, schedule = BlockWriter(out, shape, 1), ScheduleWriter(text, shape, m)
    runs = RunBlocks(2 * m, shape.block_rows, (1,))
    for k in range(plan.chunks):
        start, stop = plan.span(k)
        acc = columns.chunk(k)
        clients, counts = group_slots(acc, m, stop - start)
        # Each slot's value is its global id + 1 (slot i*n + j), so padding (0) shows.
        component = np.argsort(acc.astype(np.int16), kind="stable") // (stop - start)
        ids = component * n + start + clients + 1
        block_acc, made = runs.add(counts, ids.astype(np.uint64)[:, None])
        blocks.add(made)
        schedule.add(block_acc)
    block_acc, made = runs.finish()
    blocks.add(made)
    schedule.add(block_acc)
    chunks = blocks.finish()
    assert schedule.finish() == chunks
    numbers = np.array(text.getvalue().split(), dtype=np.int64)  # as the program reads it
    assert numbers[0] == chunks
    block_acc = numbers[1:]
    R, K = shape.block_rows, shape.chunk_blocks
    stored = np.frombuffer(out.getvalue(), dtype=np.uint64)
    assert stored.size == chunks * R * K and block_acc.size == chunks * K
    # Row r of block b sits at chunk b // K, slab r, column b % K.
    by_block = stored.reshape(chunks, R, K).transpose(0, 2, 1).reshape(chunks * K, R)
    real = by_block > 0
    ids = by_block[real].astype(np.int64) - 1
    assert np.array_equal(np.sort(ids), np.arange(s * n))  # every slot exactly once
    expected_acc = sketch.accumulators(0, n)  # slot i*n + j's accumulator
    owner = np.repeat(block_acc, R).reshape(-1, R)[real]
    assert np.array_equal(owner, expected_acc[ids])
    # Padding is zero and only at the end: at most one block per accumulator is not
    # full, plus the last engine chunk's padding blocks (accumulator 2m, all zero).
    assert np.all(by_block[block_acc == 2 * m] == 0)
    live = block_acc < 2 * m
    assert np.count_nonzero(~real[live]) <= 2 * m * (R - 1)
    assert np.count_nonzero(~live) < K
    assert np.all(real[live][:, 0])  # a block's first row is always a real one


def test_the_block_shape_is_the_global_rule_and_its_carry_stays_small():
    shape = BlockShape.choose(10**6, 100, 1, 10, 1)
    assert shape == BlockShape.choose(10**6, 100, 1, 10, 1)
    assert shape.block_rows == 256  # what the layout over all slots picks
    assert shape.block_rows * shape.chunk_blocks * 10 <= 1 << 16
    # Many accumulators: R shrinks until 2m blocks' carry fits in 32 MB.
    wide = BlockShape.choose(10**9, 100_000, 1, 10, 2)
    assert 2 * 100_000 * wide.block_rows * 10 * 2 * 8 <= 1 << 25
    tiny = BlockShape.choose(300, 100, 1, 10, 1)
    assert tiny.chunk_blocks <= 300 + 200


def _dests(tmp_path: Path, parties: int) -> list[Path]:
    for i in range(parties):
        (tmp_path / f"P{i}").mkdir(mode=0o700)
    return [tmp_path / f"P{i}" / "Transactions.data" for i in range(parties)]


# Blocks of 4 rows fill within a chunk; blocks of 64 mostly span several chunks, and
# many chunks complete none.
@pytest.mark.parametrize(("fmt", "parties", "s", "shape"), [
    (ADDITIVE, 3, 1, BlockShape(4, 5)), (ADDITIVE, 2, 3, BlockShape(4, 5)),
    (REPLICATED, 3, 2, BlockShape(4, 5)), (ADDITIVE, 3, 1, BlockShape(64, 2)),
    (REPLICATED, 3, 1, BlockShape(64, 3))])
def test_servers_files_sum_block_by_block_to_the_plaintext(tmp_path, fmt, parties, s, shape):
    n, d, m = 3000, 3, 8
    sketch = Sketch.sparse(n, m, s, seed=7)
    rows = SyntheticRows(n, d, 1.0, seed=7)
    plan = StreamPlan(n, d, m, s, parties, fmt.name, workers=2, chunk=97)
    dests = _dests(tmp_path, parties)
    schedule = tmp_path / "public-input"
    done = stream_inputs(plan, sketch, rows, NoiseSpec("gaussian", n=n, m=m, d=d, s=s),
                         FixedPoint(16), dests, as_input=False, timeout=120, blocks=shape,
                         schedule=schedule)
    chunks, block_acc = _schedule(schedule)
    words = [read_share_file(p, fmt).reshape(-1, d, fmt.words) for p in dests]
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in [*dests, schedule])
    if fmt.words == 1:
        plain = sum(w[:, :, 0] for w in words)
    else:  # party i holds (a_i, a_{i-1}): the first words of all three sum to the value
        plain = sum(w[:, :, 0] for w in words)
        for i in range(3):
            assert np.array_equal(words[i][:, :, 1], words[i - 1][:, :, 0])
    sums = _block_sums(plain, shape, chunks)
    acc = np.zeros((2 * m + 1, d), dtype=np.uint64)
    np.add.at(acc, block_acc, sums)
    assert np.array_equal(acc[:m] - acc[m:2 * m], done.prepared.expected)
    assert not acc[2 * m].any()  # padding blocks hold shares of zero
    layout = done.layout
    assert layout["file_rows"] == plain.shape[0] == chunks * shape.block_rows * shape.chunk_blocks
    assert layout["padding_rows"] == plain.shape[0] - n * s
    assert np.count_nonzero(np.all(plain == 0, axis=1)) >= layout["padding_rows"]
    assert not list(tmp_path.rglob("*.part"))


def test_a_server_killed_mid_stream_leaves_no_share_file(tmp_path):
    n, d, m = 3_000_000, 4, 10
    sketch = Sketch.sparse(n, m, 1, seed=1)
    plan = StreamPlan(n, d, m, 1, 3, ADDITIVE.name, workers=2, chunk=4096)
    dests = _dests(tmp_path, 3)
    killed: list[int] = []

    def kill_server() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            for child in multiprocessing.active_children():
                if child.name == "server P2" and child.pid:
                    time.sleep(0.5)
                    os.kill(child.pid, signal.SIGKILL)
                    killed.append(child.pid)
                    return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_server)
    killer.start()
    with pytest.raises(StreamError, match="server P2 exited with status -9 mid-stream"):
        stream_inputs(plan, sketch, SyntheticRows(n, d, 1.0, seed=1),
                      NoiseSpec("none", n=n, m=m, d=d, s=1), FixedPoint(16), dests,
                      as_input=False, timeout=120,
                      blocks=BlockShape(4, 64), schedule=tmp_path / "public-input")
    killer.join()
    assert killed
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # no file, whole or partial
    assert not multiprocessing.active_children()


def _counts(k: int) -> np.ndarray:
    """Chunk k's true slot counts per accumulator (250 clients, 97 per chunk, m = 4)."""
    return np.bincount(Sketch.sparse(250, 4, 1, seed=2).accumulators(97 * k, 97 * (k + 1)),
                       minlength=8)


@pytest.mark.parametrize(("messages", "said"), [
    ([("chunk", 1, 0, 97 * 2, _counts(1))],
     "got chunk 1 from client worker 0, which owes chunk 0"),
    ([("chunk", 0, 0, 97 * 2, _counts(0)), ("end", 1)],
     "got end 1 from client worker 0, which owes chunk 1 \\(an early end"),
    ([("chunk", 0, 0, 50, _counts(0))],
     "got 50 words for chunk 0 from client worker 0, not the 194"),
    ([("chunk", 0, 0, 97 * 2, _counts(0)[::-1].copy())],
     "got chunk 0 from client worker 0 grouped unlike the public sketch"),
])
def test_a_file_server_refuses_a_stream_that_is_not_the_announced_one(tmp_path, messages,
                                                                      said):
    from harness.stream import ChannelBuffer
    from harness.stream.chunks import FullReader, Refused
    from harness.stream.files import serve_file

    plan = StreamPlan(250, 2, 4, 1, 2, ADDITIVE.name, workers=1, chunk=97)
    mine, theirs = multiprocessing.Pipe()
    buffer = ChannelBuffer(plan.slot_bytes)
    for message in messages:
        mine.send(message)
    dest = tmp_path / "Transactions-P0.data"
    with pytest.raises(Refused, match=said):
        serve_file(0, plan, Sketch.sparse(250, 4, 1, seed=2), [theirs], [buffer], dest,
                   BlockShape(2, 3), tmp_path / "public-input", FullReader(plan))
    buffer.close()
    assert not [p.name for p in tmp_path.iterdir() if p.name != "w0-P0"]  # not even a part
