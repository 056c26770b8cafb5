"""A streamed run's chunks, made a block at a time: the same values and sums as the
whole chunk at once, and additive shares written block by block that add up to them."""

from __future__ import annotations

import numpy as np
import pytest

from harness.clients import ADDITIVE, REPLICATED, ArrayRows, FixedPoint, Sketch
from harness.privacy import NoiseSpec
from harness.stream import ChannelBuffer, StreamPlan
from harness.stream.noisy import NoisyChunks, group_slots, run_starts
from harness.stream.produce import _FullShares

N, D, M, S = 700, 3, 7, 4


def _chunks(plan: StreamPlan, noise: NoiseSpec, block: int, data: np.ndarray):
    sketch = Sketch.sparse(plan.n, plan.m, plan.s, seed=5)
    return NoisyChunks(plan, sketch, ArrayRows(data, 1.0), noise, FixedPoint(16),
                       lambda acc, clients: group_slots(acc, plan.m, clients), block=block)


def _data(n: int = N) -> np.ndarray:
    return np.random.default_rng(3).uniform(-1, 1, (n, D))


def _gaussian(n: int) -> NoiseSpec:
    noise = NoiseSpec("gaussian", n, M, D, S, epsilon=1.0, delta=1e-6)
    assert not noise.zero_output  # R_D's clients send noise, not zeros
    return noise


@pytest.mark.parametrize("block", [1, 5, 64, 1 << 20])
def test_blocks_give_each_slot_its_clients_entry_and_the_runs_sums(block):
    # No noise: every value is known. Blocks of 1 and 5 slots cut every column into many,
    # each ending where an accumulator's run ends (a run longer than a block is one).
    plan = StreamPlan(N, D, M, S, 3, ADDITIVE.name, workers=1, chunk=97)
    data = _data()
    noisy = _chunks(plan, NoiseSpec("none", N, M, D, S), block, data)
    enc = FixedPoint(16).encode(data)
    sketch = Sketch.sparse(N, M, S, seed=5)
    total = np.zeros((2 * M, D), dtype=np.uint64)
    for k in range(plan.chunks):
        start, stop = plan.span(k)
        counts, ring = noisy.chunk(k)
        clients, want_counts = group_slots(sketch.accumulators(start, stop), M, stop - start)
        assert np.array_equal(counts, want_counts)
        assert ring.shape == (D, clients.size)
        assert np.array_equal(ring, enc[start + clients].T)
        live, offsets = run_starts(counts)
        total[live] += np.add.reduceat(ring, offsets, axis=1).T
    assert np.array_equal(noisy.expected, total)


def test_gaussian_blocks_sum_to_the_plaintext_sums_bit_for_bit():
    n = 2000
    plan = StreamPlan(n, D, M, S, 3, ADDITIVE.name, workers=1, chunk=97)
    noisy = _chunks(plan, _gaussian(n), 16, _data(n))
    total = np.zeros((2 * M, D), dtype=np.uint64)
    for k in range(plan.chunks):
        counts, ring = noisy.chunk(k)
        live, offsets = run_starts(counts)
        total[live] += np.add.reduceat(ring, offsets, axis=1).T
        assert np.unique(ring).size > ring.size // 2  # noisy: the copies differ
    assert np.array_equal(noisy.expected, total)
    assert noisy.noise_sq > 0


@pytest.mark.parametrize("parties", [2, 3])
def test_block_sink_writes_additive_shares_that_add_up_to_the_chunk(parties):
    n = 2000
    plan = StreamPlan(n, D, M, S, parties, ADDITIVE.name, workers=1, chunk=97)
    noisy = _chunks(plan, _gaussian(n), 8, _data(n))
    sharer = _FullShares(plan)
    buffers = [ChannelBuffer(plan.slot_bytes) for _ in range(parties)]
    for k in range(3):
        sink = sharer.sink(buffers, k % 2)
        assert sink is not None
        counts, ring = noisy.chunk(k, sink)
        words = ring.size
        shares = [buffers[i].slot(k % 2, words) for i in range(parties)]
        assert np.array_equal(np.sum(shares, axis=0, dtype=np.uint64), ring.ravel())
        for i in range(parties - 1):  # the masks are one stream: no block repeats another's
            assert np.unique(shares[i]).size == words


def test_replicated_pairs_take_the_whole_chunk():
    plan = StreamPlan(N, D, M, S, 3, REPLICATED.name, workers=1, chunk=97)
    assert _FullShares(plan).sink([ChannelBuffer(plan.slot_bytes)] * 3, 0) is None


def test_a_chunk_loads_no_module_the_fork_server_did_not() -> None:
    # A worker is forked from the fork server; a module its chunks import on first use
    # is loaded again in every worker, at every run (numpy.ma, through np.unique, took a
    # tenth of a second of each worker's CPU).
    import subprocess
    import sys

    code = """
import sys
from harness.stream.forkserver import PRELOAD
for name in PRELOAD:
    __import__(name)
import numpy as np
from harness.clients import ADDITIVE, ArrayRows, FixedPoint, Sketch
from harness.privacy import NoiseSpec
from harness.stream import StreamPlan
from harness.stream.noisy import NoisyChunks, group_slots
plan = StreamPlan(5000, 3, 7, 4, 3, ADDITIVE.name, workers=1, chunk=900)
sketch = Sketch.sparse(5000, 7, 4, seed=5)
noise = NoiseSpec("gaussian", 5000, 7, 3, 4, epsilon=1.0, delta=1e-6)
before = set(sys.modules)
noisy = NoisyChunks(plan, sketch, ArrayRows(np.zeros((5000, 3)), 1.0), noise, FixedPoint(16),
                    lambda acc, clients: group_slots(acc, 7, clients), block=256)
for k in range(plan.chunks):
    noisy.chunk(k)
print(" ".join(sorted(set(sys.modules) - before)))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == []
