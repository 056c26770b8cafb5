"""A streamed ``fast`` run's share files: laid out per chunk of clients, written by the servers.

Real client worker and server processes, no MP-SPDZ: the files the servers write
are reconstructed here and summed block by block as the program does.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from harness.clients import (
    ADDITIVE,
    REPLICATED,
    FixedPoint,
    Sketch,
    SyntheticRows,
    read_share_file,
)
from harness.errors import DiskFullError
from harness.privacy import NoiseSpec
from harness.stream import (
    BlockedFile,
    BlockShape,
    SketchGroups,
    StreamError,
    StreamPlan,
    parse_schedule,
    stream_inputs,
)
from harness.stream.noisy import group_slots
from harness.stream.placing import CompiledPlacer, NumpyPlacer, compiled_placer, placer


def _schedule(path: Path, shape: BlockShape) -> tuple[int, np.ndarray]:
    """Engine chunks and each block's accumulator, as the program reads them."""
    ring, block_acc = parse_schedule(path.read_bytes(), shape.chunk_blocks)
    assert ring == 0  # a whole file
    return block_acc.size // shape.chunk_blocks, block_acc


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
    blocked = BlockedFile(out, text, shape, plan)
    for k in range(plan.chunks):
        start, stop = plan.span(k)
        acc = columns.chunk(k)
        clients, counts = group_slots(acc, m, stop - start)
        # Each slot's value is its global id + 1 (slot i*n + j), so padding (0) shows.
        component = np.argsort(acc.astype(np.int16), kind="stable") // (stop - start)
        ids = component * n + start + clients + 1
        blocked.add(counts, ids.astype(np.uint64)[None, :, None])
    chunks = blocked.finish()["engine_chunks"]
    ring, block_acc = parse_schedule(text.getvalue(), shape.chunk_blocks)  # as the program
    assert ring == 0 and block_acc.size == chunks * shape.chunk_blocks
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


def _blocked_by_rows(chunks: list[tuple[np.ndarray, np.ndarray]], shape: BlockShape,
                     m: int) -> tuple[bytes, list[int]]:
    """The blocked file and its blocks' accumulators, built one row at a time as the
    layout is defined: each accumulator's rows in arrival order, R to a block, blocks
    in the order they fill, the short ones padded at the end, K blocks per engine
    chunk stored as (R, K, row)."""
    R, K = shape.block_rows, shape.chunk_blocks
    pending: list[list[np.ndarray]] = [[] for _ in range(2 * m)]
    blocks: list[np.ndarray] = []
    owners: list[int] = []
    for counts, shares in chunks:
        rows = shares.transpose(1, 0, 2)  # (slots, d, words): a file row per slot
        first = 0
        for a, c in enumerate(counts.tolist()):
            for row in rows[first:first + c]:
                pending[a].append(row)
                if len(pending[a]) == R:
                    blocks.append(np.array(pending[a]))
                    owners.append(a)
                    pending[a] = []
            first += c
    zero = np.zeros(chunks[0][1].shape[::2], dtype=np.uint64)  # one row: (d, words)
    for a, held in enumerate(pending):
        if held:
            blocks.append(np.array(held + [zero] * (R - len(held))))
            owners.append(a)
    while not blocks or len(blocks) % K:
        blocks.append(np.zeros((R, *zero.shape), dtype=np.uint64))
        owners.append(2 * m)
    stored = np.array(blocks).reshape(-1, K, R, zero.size).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(stored).tobytes(), owners


def test_the_servers_copy_shares_into_blocks_compiled():
    # The install builds it (a server on this machine copies 2 GB a cell through it);
    # without it the copy goes through numpy, five times the servers' time.
    assert compiled_placer() and isinstance(placer(), CompiledPlacer), (
        "harness/stream/_blocks.c is not built: reinstall with a C compiler")


@pytest.mark.parametrize("placing", [NumpyPlacer(), None], ids=["numpy", "compiled"])
def test_a_chunk_whose_counts_do_not_add_up_to_its_shares_is_refused(placing):
    # The compiled copy trusts its pointers: a chunk claiming more rows than it has
    # would read past its buffer, so the shapes are checked before it runs.
    placing = placing or placer()
    share = np.dtype((np.void, 16))
    src = np.zeros((3, 10), dtype=share)
    carry = np.zeros((4, 8, 3), dtype=share)
    building = np.zeros((8, 2, 3), dtype=share)
    state, held, block_acc = (np.zeros(k, dtype=np.int64) for k in (3, 4, 2))
    with pytest.raises(ValueError, match="do not agree"):
        placing.place(src, np.array([5, 5, 5, 0]), state, held, carry, building, 0,
                      block_acc)
    with pytest.raises(ValueError, match="do not agree"):
        placing.place(src, np.array([5, 5, 0, 0]), state, held, carry[:3], building, 0,
                      block_acc)
    with pytest.raises(ValueError, match="do not agree"):  # they add up, one below 0
        placing.place(src, np.array([15, -5, 0, 0]), state, held, carry, building, 0,
                      block_acc)
    assert placing.place(src, np.array([5, 5, 0, 0]), state, held, carry, building, 0,
                         block_acc) == 0 and held.tolist() == [5, 5, 0, 0]


# Runs of many blocks (several side by side in an engine chunk, some crossing into the
# next), runs shorter than a block, empty accumulators, chunks that complete nothing.
@pytest.mark.parametrize("placing", [NumpyPlacer(), None], ids=["numpy", "compiled"])
@pytest.mark.parametrize("fmt", [ADDITIVE, REPLICATED])
@pytest.mark.parametrize("shape", [BlockShape(4, 3), BlockShape(2, 5), BlockShape(8, 1),
                                   BlockShape(16, 4), BlockShape(1, 2)])
def test_the_blocked_file_is_the_layout_built_row_by_row(fmt, shape, placing):
    m, d = 3, 3
    rng = np.random.default_rng(shape.block_rows * 10 + shape.chunk_blocks)
    sizes = [0, 1, 5, 40, 3, 90, 17]
    chunks = []
    for size in sizes:
        counts = np.bincount(rng.integers(0, 2 * m, size), minlength=2 * m)
        counts[rng.integers(0, 2 * m)] = 0  # an accumulator with no rows in this chunk
        shares = rng.integers(1, 2**64, (d, int(counts.sum()), fmt.words), dtype=np.uint64,
                              endpoint=False)
        chunks.append((counts, shares))
    slots = sum(int(c.sum()) for c, _ in chunks)
    plan = StreamPlan(slots, d, m, 1, 3, fmt.name, workers=1, chunk=max(sizes))
    out, text = io.BytesIO(), io.BytesIO()
    blocked = BlockedFile(out, text, shape, plan, placing=placing or placer())
    for counts, shares in chunks:
        blocked.add(counts, shares)
    shaped = blocked.finish()
    stored, owners = _blocked_by_rows(chunks, shape, m)
    assert out.getvalue() == stored
    K = shape.chunk_blocks
    lines = [[1, *owners[i:i + K]] for i in range(0, len(owners), K)]
    assert [int(x) for x in text.getvalue().split()] == [0, *sum(lines, []), 0]
    assert shaped["file_rows"] == len(stored) // (8 * d * fmt.words)
    assert shaped["padding_rows"] == shaped["file_rows"] - slots
    if fmt.words == 1:  # the data owner's text: the same layout, as signed decimals
        words = io.BytesIO()
        as_text = BlockedFile(words, None, shape, plan, text=True, placing=placing or placer())
        for counts, shares in chunks:
            as_text.add(counts, shares)
        as_text.finish()
        values = np.array(words.getvalue().split(), dtype=np.int64)
        assert np.array_equal(values, np.frombuffer(stored, dtype=np.int64))


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
# Two client hosts' plan: each host sends its own run of chunks, dealt among its two
# workers (0 1 0 1 ... then 2 3 2 3 ...), which each server takes in the plan's order.
@pytest.mark.parametrize(("fmt", "parties", "s", "shape", "hosts"), [
    (ADDITIVE, 3, 1, BlockShape(4, 5), ()), (ADDITIVE, 2, 3, BlockShape(4, 5), ()),
    (REPLICATED, 3, 2, BlockShape(4, 5), ()), (ADDITIVE, 3, 1, BlockShape(64, 2), ()),
    (REPLICATED, 3, 1, BlockShape(64, 3), ()), (ADDITIVE, 2, 1, BlockShape(4, 5), (2, 2)),
    (REPLICATED, 3, 1, BlockShape(4, 5), (1, 2))])
def test_servers_files_sum_block_by_block_to_the_plaintext(tmp_path, fmt, parties, s, shape,
                                                           hosts):
    n, d, m = 3000, 3, 8
    sketch = Sketch.sparse(n, m, s, seed=7)
    rows = SyntheticRows(n, d, 1.0, seed=7)
    plan = StreamPlan(n, d, m, s, parties, fmt.name, workers=sum(hosts) or 2, chunk=97,
                      hosts=hosts)
    dests = _dests(tmp_path, parties)
    schedule = tmp_path / "public-input"
    done = stream_inputs(plan, sketch, rows, NoiseSpec("gaussian", n=n, m=m, d=d, s=s),
                         FixedPoint(16), dests, as_input=False, timeout=120, blocks=shape,
                         schedule=schedule)
    chunks, block_acc = _schedule(schedule, shape)
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


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs (root)")
def test_a_ring_the_disk_cannot_hold_is_refused_before_it_is_mapped(tmp_path):
    """A fed server's ring is reserved, not a sparse file whose first page the full disk
    cannot hold (SIGBUS in the server): one line naming where and how much."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(disk)],
                   check=True)
    try:
        plan = StreamPlan(100_000, 10, 10, 1, 2, ADDITIVE.name, workers=1)
        shape = BlockShape(256, 25)  # 0.49 MiB an engine chunk, 17 of them in the run
        with open(disk / "Transactions-P1.data", "w+b") as fh:
            fh.write(plan.fmt.header)
            with pytest.raises(DiskFullError) as caught:
                BlockedFile(fh, None, shape, plan, ring=64)
        assert str(caught.value).startswith(
            f"the disk is full at {disk}: the ring of shares its MPC party reads needs 8.3 "
            "MiB, only ")
        assert str(caught.value).endswith(" MiB are free there; free some space, or "
                                          "choose an --out on another file system")
    finally:
        subprocess.run(["umount", str(disk)], check=True)
