"""A streamed ``reference`` run's inputs: one row per slot, written as the chunks come.

Real client worker and server processes, no MP-SPDZ: the files the servers (or
the data owner) write are read back here and summed row by row with the public
schedule, as the program does.
"""

from __future__ import annotations

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
    Sketch,
    SyntheticRows,
    open_rows,
    read_share_file,
)
from harness.errors import InputError
from harness.privacy import NoiseSpec
from harness.stream import SlotShape, StreamError, StreamPlan, stream_inputs
from harness.stream.files import write_owner


def _summed(values: np.ndarray, schedule: Path, m: int) -> np.ndarray:
    """(m, d) sums of the rows by the schedule's (bucket, sign), as the program reads them."""
    numbers = np.array(schedule.read_text().split(), dtype=np.int64)
    rows, pairs = int(numbers[0]), numbers[1:].reshape(-1, 2)
    assert rows == values.shape[0] == pairs.shape[0]
    assert set(np.unique(pairs[:, 1]).tolist()) <= {-1, 1}
    acc = np.zeros((m, values.shape[1]), dtype=np.uint64)
    signed = np.where(pairs[:, 1:] < 0, 0 - values, values)  # ring arithmetic, mod 2^64
    np.add.at(acc, pairs[:, 0], signed)
    return acc


def _dests(tmp_path: Path, parties: int) -> list[Path]:
    for i in range(parties):
        (tmp_path / f"P{i}").mkdir(mode=0o700)
    return [tmp_path / f"P{i}" / "Transactions.data" for i in range(parties)]


@pytest.mark.parametrize(("fmt", "parties", "s", "sharing"), [
    (ADDITIVE, 3, 1, "full"), (ADDITIVE, 2, 3, "full"), (REPLICATED, 3, 2, "full"),
    (ADDITIVE, 3, 2, "seeded"), (REPLICATED, 3, 1, "seeded")])
def test_servers_rows_sum_by_the_schedule_to_the_plaintext(tmp_path, fmt, parties, s,
                                                           sharing):
    n, d, m = 3000, 3, 8
    sketch = Sketch.sparse(n, m, s, seed=7)
    plan = StreamPlan(n, d, m, s, parties, fmt.name, workers=2, chunk=97, sharing=sharing)
    dests = _dests(tmp_path, parties)
    schedule = tmp_path / "public-input"
    done = stream_inputs(plan, sketch, SyntheticRows(n, d, 1.0, seed=7),
                         NoiseSpec("gaussian", n=n, m=m, d=d, s=s), FixedPoint(16), dests,
                         as_input=False, timeout=120, blocks=SlotShape(),
                         schedule=schedule)
    words = [read_share_file(p, fmt).reshape(-1, d, fmt.words) for p in dests]
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in [*dests, schedule])
    plain = sum(w[:, :, 0] for w in words)  # replicated: the first words of all three
    if fmt.words == 2:  # party i holds (a_i, a_{i-1})
        for i in range(3):
            assert np.array_equal(words[i][:, :, 1], words[i - 1][:, :, 0])
    assert np.array_equal(_summed(plain, schedule, m), done.prepared.expected)
    assert done.layout == {"kind": "slots-per-chunk", "clients_per_chunk": 97,
                           "file_rows": n * s, "padding_rows": 0}
    assert not list(tmp_path.rglob("*.part"))


@pytest.mark.parametrize("d", [4, 1])
def test_the_data_owners_text_sums_by_the_schedule_to_the_plaintext(tmp_path, d):
    n, m, s = 2500, 6, 2
    sketch = Sketch.sparse(n, m, s, seed=4)
    rows = SyntheticRows(n, d, 1.0, seed=4)
    plan = StreamPlan(n, d, m, s, 2, ADDITIVE.name, workers=1, chunk=300)
    dest, schedule = tmp_path / "Input-P0-0", tmp_path / "public-input"
    noise = NoiseSpec("gaussian", n=n, m=m, d=d, s=s)
    prepared = write_owner(plan, sketch, rows, noise, FixedPoint(16), dest, schedule)
    values = np.array(dest.read_text().split(), dtype=np.int64).reshape(-1, d)
    assert np.array_equal(_summed(values.view(np.uint64), schedule, m), prepared.expected)
    # Without noise the same text sums to the clients' encoded rows, bucket by bucket.
    encoded = np.rint(rows.read(0, n) * 2**16).astype(np.int64)
    clean = np.zeros((m, d), dtype=np.int64)
    for i in range(s):
        np.add.at(clean, sketch.rows[i], encoded * sketch.signs[i][:, None])
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    none = write_owner(plan, sketch, rows, NoiseSpec("none", n=n, m=m, d=d, s=s),
                       FixedPoint(16), quiet / "Input-P0-0", quiet / "public-input")
    assert np.array_equal(none.expected, clean.view(np.uint64))
    assert not np.array_equal(prepared.expected, none.expected)  # the noise went in
    assert prepared.stats["noise_var"] > 0
    assert prepared.upload_bytes == [8 * n * s * d, 0]
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in (dest, schedule))
    assert sorted(p.name for p in quiet.iterdir()) == ["Input-P0-0", "public-input"]


def test_a_bad_row_mid_text_leaves_neither_the_text_nor_the_schedule(tmp_path):
    n, d, m = 5000, 2, 4
    matrix = np.random.default_rng(2).uniform(-1, 1, size=(n, d))
    matrix[4321, 0] = np.inf  # in the last of five chunks: four were written already
    np.save(tmp_path / "a.npy", matrix)
    out = tmp_path / "out"
    out.mkdir()
    plan = StreamPlan(n, d, m, 1, 2, ADDITIVE.name, workers=1, chunk=1000)
    with pytest.raises(InputError, match="non-finite value at row 4321, column 0"):
        write_owner(plan, Sketch.sparse(n, m, 1, seed=2), open_rows(tmp_path / "a.npy", 1.0),
                    NoiseSpec("none", n=n, m=m, d=d, s=1), FixedPoint(16),
                    out / "Input-P0-0", out / "public-input")
    assert not list(out.iterdir())  # not even a part


def test_a_server_killed_mid_stream_leaves_no_row_file(tmp_path):
    n, d, m = 3_000_000, 4, 10
    plan = StreamPlan(n, d, m, 1, 3, ADDITIVE.name, workers=2, chunk=4096)
    dests = _dests(tmp_path, 3)
    killed: list[int] = []

    part = dests[1].with_name(dests[1].name + ".part")

    def kill_server() -> None:  # once its file is part written
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            written = part.stat().st_size if part.exists() else 0
            for child in multiprocessing.active_children():
                if child.name == "server P1" and child.pid and written > 1 << 20:
                    os.kill(child.pid, signal.SIGKILL)
                    killed.append(child.pid)
                    return
            time.sleep(0.005)

    killer = threading.Thread(target=kill_server)
    killer.start()
    with pytest.raises(StreamError, match="server P1 exited with status -9 mid-stream"):
        stream_inputs(plan, Sketch.sparse(n, m, 1, seed=1), SyntheticRows(n, d, 1.0, seed=1),
                      NoiseSpec("none", n=n, m=m, d=d, s=1), FixedPoint(16), dests,
                      as_input=False, timeout=120, blocks=SlotShape(),
                      schedule=tmp_path / "public-input")
    killer.join()
    assert killed
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # no file, whole or partial
    assert not multiprocessing.active_children()
