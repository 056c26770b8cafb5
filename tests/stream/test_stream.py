"""Streamed runs: real client worker and server processes, real channels, no MP-SPDZ.

The servers' aggregates are checked against numpy's S enc(A) directly (no noise),
and their faults with real processes: a server killed mid-stream, a stream that
ends early or carries more than announced.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from _buffers import buffers_held, shm_entries

from harness.clients import (
    ADDITIVE,
    REPLICATED,
    FixedPoint,
    Sketch,
    SyntheticRows,
    components,
    read_share_file,
)
from harness.clients.keystream import SEED_BYTES, expand
from harness.privacy import NoiseSpec
from harness.stream import (
    ChannelBuffer,
    SeededReader,
    SketchGroups,
    StreamError,
    StreamPlan,
    stream_inputs,
)
from harness.stream.chunks import Refused as _Refused
from harness.stream.seeded import SeededShares, slot_order
from harness.stream.serve import _serve

ROOT = Path(__file__).resolve().parents[2]

def _plan(n, d, m, s, parties, fmt=ADDITIVE, workers=2, chunk=97, sharing="full"):
    return StreamPlan(n, d, m, s, parties, fmt.name, workers=workers, chunk=chunk,
                      sharing=sharing)


def _reference(sketch: Sketch, data: np.ndarray, fp: FixedPoint) -> np.ndarray:
    """sum_i S_i enc(A) mod 2^64 with numpy, from the materialised sketch."""
    enc = fp.encode(data)
    out = np.zeros((sketch.m, data.shape[1]), dtype=np.uint64)
    for i in range(sketch.s):
        plus = sketch.signs[i] > 0
        np.add.at(out, sketch.rows[i][plus], enc[plus])
        np.subtract.at(out, sketch.rows[i][~plus], enc[~plus])
    return out


def _dests(tmp_path: Path, parties: int) -> list[Path]:
    for i in range(parties):
        (tmp_path / f"P{i}").mkdir(mode=0o700)
    return [tmp_path / f"P{i}" / "aggregate" for i in range(parties)]


@pytest.mark.parametrize(("s", "parties"), [(1, 3), (3, 2)])
def test_servers_aggregates_add_up_to_the_plaintext_sketch(tmp_path, s, parties):
    n, d, m = 2000, 3, 7
    sketch = Sketch.sparse(n, m, s, seed=4)
    rows = SyntheticRows(n, d, 1.0, seed=4)
    fp = FixedPoint(16)
    noise = NoiseSpec("none", n=n, m=m, d=d, s=s)
    dests = _dests(tmp_path, parties)
    done = stream_inputs(_plan(n, d, m, s, parties), sketch, rows, noise, fp, dests,
                         as_input=False, timeout=120)
    reference = _reference(sketch, rows.read(0, n), fp)
    assert np.array_equal(done.prepared.expected, reference)
    shares = [read_share_file(p).reshape(m, d) for p in dests]
    assert np.array_equal(np.sum(shares, axis=0, dtype=np.uint64), reference)
    # Each server's aggregate alone looks uniform, not like the sketch.
    assert not any(np.array_equal(x, reference) for x in shares)
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in dests)
    assert done.stages["stream_workers"] == 2 and len(done.aggregate_s) == parties
    assert done.prepared.upload_bytes == [n * s * d * 8] * parties


def test_replicated_aggregates_are_the_pairs_of_a_sharing(tmp_path):
    n, d, m = 1500, 2, 5
    sketch = Sketch.sparse(n, m, 1, seed=8)
    rows = SyntheticRows(n, d, 1.0, seed=8)
    fp = FixedPoint(12)
    dests = _dests(tmp_path, 3)
    done = stream_inputs(_plan(n, d, m, 1, 3, REPLICATED), sketch, rows,
                         NoiseSpec("none", n=n, m=m, d=d, s=1), fp, dests, as_input=False,
                         timeout=120)
    pairs = [read_share_file(p, REPLICATED).reshape(m, d, 2) for p in dests]
    total = pairs[0][..., 0] + pairs[1][..., 0] + pairs[2][..., 0]
    assert np.array_equal(total, _reference(sketch, rows.read(0, n), fp))
    assert np.array_equal(total, done.prepared.expected)
    for i in range(3):  # party i holds (a_i, a_{i-1}); its neighbour holds a_{i-1} first
        assert np.array_equal(pairs[i][..., 1], pairs[i - 1][..., 0])


def test_aggregates_as_input_text_sum_to_the_sketch_with_noise(tmp_path):
    n, d, m = 3000, 2, 6
    sketch = Sketch.sparse(n, m, 1, seed=3)
    rows = SyntheticRows(n, d, 1.0, seed=3)
    noise = NoiseSpec("gaussian", n=n, m=m, d=d, s=1, epsilon=1.0, delta=1e-6)
    dests = _dests(tmp_path, 2)
    done = stream_inputs(_plan(n, d, m, 1, 2), sketch, rows, noise, FixedPoint(16), dests,
                         as_input=True, timeout=120)
    texts = [np.array(p.read_text().split(), dtype=np.int64).view(np.uint64) for p in dests]
    assert np.array_equal((texts[0] + texts[1]).reshape(m, d), done.prepared.expected)
    # The noise is drawn and recorded: the plaintext is not the noiseless sketch.
    assert not np.array_equal(done.prepared.expected, _reference(sketch, rows.read(0, n),
                                                                 FixedPoint(16)))
    assert done.prepared.stats["noise_var"] == pytest.approx(noise.sigma2, rel=0.2)


@pytest.mark.parametrize(("victim", "sharing"), [("server P1", "full"),
                                                 ("client worker 1", "full"),
                                                 ("server P1", "seeded")])
def test_a_process_killed_mid_stream_stops_everything_and_is_named(tmp_path, victim,
                                                                   sharing):
    n, d, m = 4_000_000, 4, 10
    sketch = Sketch.sparse(n, m, 1, seed=1)
    rows = SyntheticRows(n, d, 1.0, seed=1)
    dests = _dests(tmp_path, 3)
    children: list[int] = []
    killed: list[int] = []

    def kill_victim() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            for child in multiprocessing.active_children():
                if child.name == victim and child.pid:
                    time.sleep(0.5)  # mid-stream: the workers are producing
                    children.extend(c.pid for c in multiprocessing.active_children() if c.pid)
                    os.kill(child.pid, signal.SIGKILL)
                    killed.append(child.pid)
                    return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_victim)
    killer.start()
    with pytest.raises(StreamError, match=rf"{victim} exited with status -9 mid-stream"):
        stream_inputs(_plan(n, d, m, 1, 3, chunk=4096, sharing=sharing), sketch, rows,
                      NoiseSpec("none", n=n, m=m, d=d, s=1), FixedPoint(16), dests,
                      as_input=False, timeout=120)
    killer.join()
    assert killed
    assert not any(p.exists() for p in dests)  # no server wrote an aggregate
    assert not multiprocessing.active_children()  # every process was stopped
    assert not buffers_held([os.getpid(), *children])  # their buffers went with them


class _FakeWorker:
    """One end of a real pipe, speaking for a client worker, and its channel buffer."""

    def __init__(self, tmp_path: Path, plan: StreamPlan) -> None:
        from harness.stream import ChannelBuffer

        self.mine, self.theirs = multiprocessing.Pipe()
        self.buffer = ChannelBuffer(plan.slot_bytes)


def _counts(k: int, n: int = 250, m: int = 4, seed: int = 2) -> np.ndarray:
    """Chunk k's true slot counts per accumulator (97 clients per chunk, s = 1)."""
    start, stop = 97 * k, min(n, 97 * (k + 1))
    return np.bincount(Sketch.sparse(n, m, 1, seed=seed).accumulators(start, stop),
                       minlength=2 * m)


def _moved(counts: np.ndarray) -> np.ndarray:
    """The same total with one slot moved from the first live accumulator to the next."""
    first, second = np.flatnonzero(counts)[:2]
    moved = counts.copy()
    moved[first] -= 1
    moved[second] += 1
    return moved


def test_two_clients_with_equal_values_get_unrelated_seeded_shares():
    # Equal values, no noise: only the clients' own seeds tell their shares apart, and
    # the seeds come from os.urandom, so a second sharing of the same values differs.
    n, d, m, s, k, parties = 300, 4, 5, 1, 1, 3
    plan = StreamPlan(n, d, m, s, parties, ADDITIVE.name, workers=1, chunk=61,
                      sharing="seeded")
    start, stop = plan.span(k)
    acc = SketchGroups(Sketch.sparse(n, m, s, seed=9), plan).chunk(k)
    order, _ = slot_order(acc, m)
    values = np.full(d * order.size, 0x4000, dtype=np.uint64)

    def sections():
        buffers = [ChannelBuffer(plan.slot_bytes) for _ in range(parties)]
        sharer = SeededShares(plan)
        sharer.group(acc, stop - start)
        words = sharer.share(k, values, buffers, slot=1)
        return [_slot_sections(plan, k, i, buffers[i].slot(1, words[i]))
                for i in range(parties)]

    first = sections()
    for i in range(parties):
        (seeded, seeds, full), = first[i].values()
        assert len({seed.tobytes() for seed in seeds}) == seeded.size  # one seed per client
        masks = expand(seeds[:2], s * d)
        assert len(set((masks[0] - masks[1]).tolist())) == s * d  # not a shift of each other
        # the leads' full words: equal values, unrelated words
        assert len(set((full[:, 0] - full[:, 1]).tolist())) == d
    again = sections()
    for i in range(parties):
        (_, seeds, full), = first[i].values()
        (_, seeds_again, full_again), = again[i].values()
        assert not np.array_equal(seeds, seeds_again)
        assert not np.array_equal(full, full_again)


@pytest.mark.parametrize(("messages", "said"), [
    ([("chunk", 0, 0, 97 * 2, _counts(0)), ("end", 1)],
     "got a stream from client worker 0 that ended early: 1 of 3 chunks arrived, 1 announced"),
    ([("chunk", 0, 0, 97 * 2, _counts(0)), ("chunk", 0, 1, 97 * 2, _counts(0))],
     "got chunk 0 from client worker 0, which owes chunk 1"),
    ([("chunk", 0, 0, 50, _counts(0))],
     "got 50 words for chunk 0 from client worker 0, not the 194"),
    ([("chunk", 0, 0, 97 * 2, _counts(0) + np.eye(8, dtype=np.int64)[0])],
     "with slot counts that do not add up to its 97 slots"),
    # Chunk 0 is this server's to check (chunk k goes to server k mod 2): one slot moved
    # from the first live accumulator to the next keeps the total but not the sketch.
    ([("chunk", 0, 0, 97 * 2, _moved(_counts(0)))],
     "got chunk 0 from client worker 0 grouped unlike the public sketch"),
])
def test_a_server_refuses_a_stream_that_is_not_the_announced_one(tmp_path, messages, said):
    n, d, m = 250, 2, 4
    plan = _plan(n, d, m, 1, 2, workers=1)
    sketch = Sketch.sparse(n, m, 1, seed=2)
    fake = _FakeWorker(tmp_path, plan)
    for message in messages:
        fake.mine.send(message)
    with pytest.raises(_Refused, match=said):
        _serve(0, plan, sketch, [fake.theirs], [fake.buffer], tmp_path / "agg", False)
    assert not (tmp_path / "agg").exists()


def test_each_chunk_s_grouping_is_checked_by_one_server_in_turn(tmp_path):
    # A wrong grouping of chunk 1 passes server P0 (P1 checks it) and is refused by P1.
    n, d, m = 250, 2, 4
    plan = _plan(n, d, m, 1, 2, workers=1)
    sketch = Sketch.sparse(n, m, 1, seed=2)
    wrong = _counts(1)[::-1].copy()
    assert not np.array_equal(wrong, _counts(1))
    verdicts = []
    for party in (0, 1):
        (tmp_path / f"P{party}").mkdir()
        fake = _FakeWorker(tmp_path / f"P{party}", plan)
        fake.mine.send(("chunk", 0, 0, 97 * 2, _counts(0)))
        fake.mine.send(("chunk", 1, 1, 97 * 2, wrong))
        fake.mine.send(("end", 2))
        with pytest.raises(_Refused) as refused:
            _serve(party, plan, sketch, [fake.theirs], [fake.buffer], tmp_path / "agg", False)
        verdicts.append(str(refused.value))
    assert "ended early: 2 of 3 chunks arrived" in verdicts[0]
    assert "got chunk 1 from client worker 0 grouped unlike the public sketch" in verdicts[1]


def test_a_server_names_a_client_worker_that_vanished(tmp_path):
    plan = _plan(250, 2, 4, 1, 2, workers=1)
    fake = _FakeWorker(tmp_path, plan)
    fake.mine.send(("chunk", 0, 0, 97 * 2, _counts(0)))
    fake.mine.close()
    with pytest.raises(_Refused, match="lost client worker 0's stream after 1 of 3 chunks"):
        _serve(0, plan, Sketch.sparse(250, 4, 1, seed=2), [fake.theirs], [fake.buffer],
               tmp_path / "agg", False)


def test_a_server_refuses_more_chunks_than_announced(tmp_path):
    n, d, m = 150, 2, 4
    plan = _plan(n, d, m, 1, 2, workers=1)
    sketch = Sketch.sparse(n, m, 1, seed=2)
    fake = _FakeWorker(tmp_path, plan)
    fake.mine.send(("chunk", 0, 0, 97 * 2, _counts(0, n=150)))
    fake.mine.send(("chunk", 1, 1, 53 * 2, _counts(1, n=150)))
    fake.mine.send(("chunk", 2, 0, 97 * 2, _counts(0, n=150)))
    with pytest.raises(_Refused, match="got chunk 2 from client worker 0, which owes nothing "
                                       r"more \(more than announced"):
        _serve(0, plan, sketch, [fake.theirs], [fake.buffer], tmp_path / "agg", False)


# --- seeded sharing, streamed ---------------------------------------------------------------

@pytest.mark.parametrize(("fmt", "parties", "s"), [(ADDITIVE, 3, 1), (ADDITIVE, 2, 3),
                                                   (REPLICATED, 3, 2)])
def test_seeded_streams_add_up_to_the_sketch_bit_for_bit(tmp_path, fmt, parties, s):
    n, d, m = 2000, 3, 7
    sketch = Sketch.sparse(n, m, s, seed=6)
    rows = SyntheticRows(n, d, 1.0, seed=6)
    fp = FixedPoint(16)
    dests = _dests(tmp_path, parties)
    plan = StreamPlan(n, d, m, s, parties, fmt.name, workers=2, chunk=97, sharing="seeded")
    done = stream_inputs(plan, sketch, rows, NoiseSpec("none", n=n, m=m, d=d, s=s), fp, dests,
                         as_input=False, timeout=120)
    reference = _reference(sketch, rows.read(0, n), fp)
    assert np.array_equal(done.prepared.expected, reference)
    if fmt.words == 1:
        shares = [read_share_file(p).reshape(m, d) for p in dests]
    else:
        pairs = [read_share_file(p, REPLICATED).reshape(m, d, 2) for p in dests]
        for i in range(3):  # party i holds (a_i, a_{i-1}), as with full sharing
            assert np.array_equal(pairs[i][..., 1], pairs[i - 1][..., 0])
        shares = [p[..., 0] for p in pairs]
    assert np.array_equal(np.sum(shares, axis=0, dtype=np.uint64), reference)
    assert not any(np.array_equal(x, reference) for x in shares)
    # Each server got seeds for the components it holds but does not lead: what the
    # file-based seeded path would have uploaded.
    comps = components(fmt, parties)
    assert done.prepared.upload_bytes == [comps.upload_bytes(i, n, s * d)
                                          for i in range(parties)]
    assert done.stages["stream_expand_s"] > 0 and done.stages["stream_clients_expand_s"] > 0


def _slot_sections(plan: StreamPlan, k: int, party: int, view: np.ndarray):
    """The layout the module docstring defines, read independently of SeededReader."""
    comps = components(plan.fmt, plan.parties)
    start, stop = plan.span(k)
    lead = np.arange(start, stop) % comps.count
    offset, out = 0, {}
    for c in comps.held[party]:
        seeded = np.flatnonzero(lead != c)
        seeds = view[offset:offset + 4 * seeded.size].view(np.uint8).reshape(-1, SEED_BYTES)
        offset += 4 * seeded.size
        full = plan.s * int(np.count_nonzero(lead == c))
        out[c] = (seeded, seeds.copy(), view[offset:offset + plan.d * full].reshape(plan.d, full))
        offset += plan.d * full
    assert offset == view.size
    return out


@pytest.mark.parametrize(("fmt", "parties", "s"), [(ADDITIVE, 3, 2), (REPLICATED, 3, 3)])
def test_a_seeded_slot_is_the_file_schemes_components(tmp_path, fmt, parties, s):
    """Client j's components: its seeds' AES-256-CTR keystreams (copy i, column t is word
    i * d + t, as in the file path) and its lead's full words, summing to its values."""
    n, d, m, k = 300, 4, 5, 1
    plan = StreamPlan(n, d, m, s, parties, fmt.name, workers=1, chunk=61, sharing="seeded")
    sketch = Sketch.sparse(n, m, s, seed=9)
    start, stop = plan.span(k)
    clients = stop - start
    buffers = [ChannelBuffer(plan.slot_bytes)
               for i in range(parties)]
    sharer = SeededShares(plan)
    acc = SketchGroups(sketch, plan).chunk(k)
    owner, _ = sharer.group(acc, clients)
    order, _ = slot_order(acc, m)
    values = np.random.default_rng(1).integers(0, 2**64, size=d * order.size, dtype=np.uint64)
    words = sharer.share(k, values, buffers, slot=1)
    assert words == [plan.chunk_words(k, i) for i in range(parties)]
    comps = components(fmt, parties)
    total = np.zeros((d, order.size), dtype=np.uint64)
    seen = set()
    for i in range(parties):
        view = buffers[i].slot(1, words[i])
        for c, (seeded, seeds, full) in _slot_sections(plan, k, i, view).items():
            stream = np.zeros((clients, s, d), dtype=np.uint64)
            stream[seeded] = expand(seeds, s * d).reshape(-1, s, d)
            comp = stream[owner, order // clients].T  # (d, grouped slots)
            comp[:, (start + owner) % comps.count == c] = full
            got = SeededReader(plan, i).read(k, np.bincount(acc, minlength=2 * m),
                                             SketchGroups(sketch, plan), buffers[i], 1,
                                             words[i])[1]
            assert np.array_equal(got[:, :, comps.held[i].index(c)], comp)
            if c not in seen:
                seen.add(c)
                total += comp
    assert seen == set(range(comps.count))
    assert np.array_equal(total.ravel(), values)


@pytest.mark.parametrize(("messages", "said"), [
    ([("chunk", 0, 0, 4 * 65 + 2 * 32, _counts(0)), ("end", 1)],
     "got a stream from client worker 0 that ended early: 1 of 3 chunks arrived, 1 announced"),
    # What full sharing would send: the server knows it holds seeds for 65 of 97 clients.
    ([("chunk", 0, 0, 97 * 2, _counts(0))],
     "got 194 words for chunk 0 from client worker 0, not the 324"),
])
def test_a_server_refuses_a_seeded_stream_that_is_not_the_announced_one(tmp_path, messages,
                                                                         said):
    n, d, m = 250, 2, 4
    plan = StreamPlan(n, d, m, 1, 3, ADDITIVE.name, workers=1, chunk=97, sharing="seeded")
    # Server 1 holds component 1: clients 1, 4, ..., 94 of chunk 0 (32) lead with it.
    assert plan.chunk_words(0, 1) == 4 * 65 + 2 * 32
    fake = _FakeWorker(tmp_path, plan)
    for message in messages:
        fake.mine.send(message)
    with pytest.raises(_Refused, match=said):
        _serve(1, plan, Sketch.sparse(n, m, 1, seed=2), [fake.theirs], [fake.buffer],
               tmp_path / "agg", False, SeededReader(plan, 1))
    assert not (tmp_path / "agg").exists()


def test_seeded_channel_buffers_are_private_while_they_stream(tmp_path):
    n, d, m = 2_000_000, 4, 10
    sketch = Sketch.sparse(n, m, 1, seed=1)
    rows = SyntheticRows(n, d, 1.0, seed=1)
    plan = StreamPlan(n, d, m, 1, 3, ADDITIVE.name, workers=2, chunk=4096, sharing="seeded")
    seen: list[dict[str, tuple[set[str], set[int]]]] = []
    pids: list[int] = []
    last: list[dict[str, tuple[set[str], set[int]]]] = []
    shm_before = shm_entries()

    def look() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not seen:
            names = {c.pid: c.name for c in multiprocessing.active_children() if c.pid}
            server = multiprocessing.forkserver._forkserver._forkserver_pid  # type: ignore
            held: dict[str, tuple[set[str], set[int]]] = {}
            for pid, name, mode in buffers_held([os.getpid(), server, *names]):
                holders, modes = held.setdefault(name, (set(), set()))
                holders.add(names.get(pid, "the parent or the fork server"))
                modes.add(mode)
            # The fork server holds a worker's buffers for a moment while it forks the
            # worker: wait for the steady state, in which each is held by two
            # processes, neither of them the parent or the fork server.
            last[:] = [held]
            if len(held) == 3 * 2 and all(len(h) == 2 and "the parent or the fork server"
                                          not in h for h, _ in held.values()):
                seen.append(held)
                pids.extend(names)
                return
            time.sleep(0.01)

    watcher = threading.Thread(target=look)
    watcher.start()
    stream_inputs(plan, sketch, rows, NoiseSpec("none", n=n, m=m, d=d, s=1), FixedPoint(16),
                  _dests(tmp_path, 3), as_input=False, timeout=300)
    watcher.join()
    assert seen, f"never held by their worker and server alone; last seen: {last}"
    # Each buffer is mapped by its worker and its server alone (not even the parent
    # keeps it), 0600, and has no name in any file system.
    assert seen == [{f"ltm-channel-w{w}-P{i}": ({f"client worker {w}", f"server P{i}"},
                                                 {0o600})
                     for w in range(2) for i in range(3)}]
    assert shm_entries() <= shm_before
    assert not buffers_held([os.getpid(), *pids])


def _in_a_small_full_dev_shm(script: str, *args: str) -> subprocess.CompletedProcess:
    """``python -c script args`` in a mount namespace of its own whose /dev/shm is a
    256 KiB tmpfs, full (as in a container whose /dev/shm others have filled)."""
    shell = ("mount -t tmpfs -o size=256k ltm-test-shm /dev/shm || exit 97; "
             "head -c 1048576 /dev/zero > /dev/shm/filler 2>/dev/null; "
             'exec "$@"')
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", shell,
                           "sh", sys.executable, "-c", script, *args],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


_STREAM_HERE = """
import os, sys
from pathlib import Path
import numpy as np
from harness.clients import ADDITIVE, FixedPoint, Sketch, SyntheticRows
from harness.privacy import NoiseSpec
from harness.stream import StreamPlan
from harness.clients import read_share_file
from harness.stream import stream_inputs

if __name__ == "__main__":
    n, d, m, parties = 100_000, 4, 10, 3
    work = Path(sys.argv[1])
    dests = [work / f"P{i}" for i in range(parties)]
    plan = StreamPlan(n, d, m, 1, parties, ADDITIVE.name, workers=2, chunk=8192)
    done = stream_inputs(plan, Sketch.sparse(n, m, 1, seed=3), SyntheticRows(n, d, 1.0, seed=3),
                         NoiseSpec("none", n=n, m=m, d=d, s=1), FixedPoint(16), dests,
                         as_input=False, timeout=120)
    total = np.sum([read_share_file(p).reshape(m, d) for p in dests], axis=0, dtype=np.uint64)
    assert np.array_equal(total, done.prepared.expected)
    print("streamed", plan.slot_bytes, sorted(os.listdir("/dev/shm")))
"""


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="mounts a tmpfs on /dev/shm in a mount namespace (root)")
def test_a_full_dev_shm_neither_kills_nor_stops_a_streamed_run(tmp_path):
    """The channel buffers are not in /dev/shm (each is more than the whole of it
    here): no worker dies of SIGBUS writing into a full tmpfs, nothing is left there."""
    done = _in_a_small_full_dev_shm(_STREAM_HERE, str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    words = done.stdout.split()
    assert words[0] == "streamed" and int(words[1]) >= 256 * 1024, done.stdout  # a slot
    assert done.stdout.strip().endswith("['filler']")


def test_memory_a_stream_cannot_reserve_is_refused_in_one_line(tmp_path):
    """The buffers' memory is reserved before any process starts: when the kernel
    refuses it (here a file size limit stands for memory that cannot be had), the run
    stops with one line, not a SIGBUS mid-stream, and nothing is written."""
    limit = 64 * 1024
    script = ("import resource, runpy, sys; "
              f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); "
              "sys.argv = ['x', sys.argv[1]]; "
              "from harness.errors import LtmError\n"
              "try:\n"
              f"    exec(compile({_STREAM_HERE!r}, 'stream', 'exec'), {{'__name__': '__main__'}})\n"
              "except LtmError as exc:\n"
              "    print(f'ltm: error: {exc}', file=sys.stderr); sys.exit(1)\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1, (done.stdout, done.stderr[-3000:])
    assert done.stderr.count("\n") == 1, done.stderr
    assert re.fullmatch(r"ltm: error: cannot reserve \d+\.\d MiB of shared memory for a "
                        r"streamed run's channel buffer \(.+\); free some memory on this "
                        r"machine and run again\n", done.stderr), done.stderr
    assert not list(tmp_path.iterdir())


def test_a_run_sweeps_what_killed_runs_left_in_dev_shm_and_spares_live_ones(tmp_path):
    """Earlier releases kept the buffers in ``/dev/shm/ltm-stream-PID-*``, which a run
    killed outright left there, shares and all: the next run removes those whose
    process is gone, never one whose process still runs (another run's)."""
    shm = Path("/dev/shm")
    dead = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True,
                          check=True)
    alive = subprocess.Popen(["sleep", "60"])
    token = os.urandom(4).hex()
    stale = shm / f"ltm-stream-{int(dead.stdout)}-{token}"
    live = shm / f"ltm-stream-{alive.pid}-{token}"
    try:
        for root in (stale, live):
            root.mkdir(mode=0o700)
            (root / "w0-P1").write_bytes(b"a server's shares")
        n, d, m = 500, 2, 4
        stream_inputs(_plan(n, d, m, 1, 2), Sketch.sparse(n, m, 1, seed=1),
                      SyntheticRows(n, d, 1.0, seed=1), NoiseSpec("none", n=n, m=m, d=d, s=1),
                      FixedPoint(16), _dests(tmp_path, 2), as_input=False, timeout=120)
        assert not stale.exists()
        assert (live / "w0-P1").read_bytes() == b"a server's shares"
    finally:
        alive.kill()
        alive.wait()
        for root in (stale, live):
            shutil.rmtree(root, ignore_errors=True)
