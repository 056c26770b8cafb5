"""The clients' side of a streamed run: chunks of clients, shares straight to the servers.

Nothing proportional to n is held. Clients are taken a chunk at a time; the
chunk's sketch columns come from the seed (:meth:`Sketch.columns`), its rows
from the data source (:class:`~harness.clients.matrices.Rows`), its noise from
a fresh CSPRNG. Within a chunk the slots are grouped by accumulator (bucket,
plus m for sign -1; a radix sort), so a server sums a chunk with one
``reduceat`` over contiguous runs. The grouping is public: it depends on the
sketch alone. Each chunk arrives with its slot count per accumulator, and one
server per group of chunks, in turn, recomputes those counts from the seed and
refuses the stream if they differ, so every chunk is checked against the public
sketch at the cost of one sketch draw in all, not one per server.

A chunk's values are laid out column by column, (d, slots): each column's
accumulator runs are then contiguous. Each server's shares of a chunk are
written straight into that server's own
channel buffer (:class:`ChannelBuffer`: two slots of shared memory that no file
system names, mapped by the client worker and that one server only), and
the server is told which slot holds which chunk. Masks come from AES-256-CTR
keyed from ``os.urandom`` per worker; the last share is the value minus them.
With seeded sharing the slot holds the chunk's seeds and full words instead
(:mod:`harness.stream.seeded`); both fill :class:`ChunkSharer`.

The plaintext sum every revealed sketch is checked against is accumulated here
per chunk, from the same encoded values the shares split.
"""

from __future__ import annotations

import mmap
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from harness.clients import FixedPoint, NoiseSpec, Rows, ShareFormat, Sketch, noise_rng
from harness.errors import InputError
from harness.fileio import private_memory
from harness.stream.plan import SLACK as _SLACK
from harness.stream.plan import StreamPlan
from harness.stream.seeded import SeededShares

__all__ = ["ChannelBuffer", "NoisyChunks", "ProducerTotals", "SketchGroups", "StreamBroken",
           "chunk_groups", "group_slots", "produce", "run_starts"]

def chunk_groups(sketch: Sketch, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """The chunk's slots grouped by accumulator: the client of each grouped slot, and
    the slot counts per accumulator."""
    return group_slots(sketch.accumulators(start, stop), sketch.m, stop - start)


def group_slots(acc: np.ndarray, m: int, clients: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`chunk_groups` of a chunk's accumulators (slot order, ``clients`` clients)."""
    # numpy's stable sort of a 16-bit type is a radix sort: O(slots), not O(slots log slots).
    small = acc.astype(np.int16) if 2 * m < 2**15 else acc
    order = np.argsort(small, kind="stable")
    if acc.size > clients:  # s > 1: slot i * k + j is client j's i-th
        order %= clients
    return order, np.bincount(small, minlength=2 * m)


class SketchGroups:
    """The accumulators of each chunk, drawn a group of chunks at a time.

    For s = 1 a chunk's own; for s > 1 the columns of :attr:`StreamPlan.group`
    consecutive chunks are drawn in one call and sliced per chunk, so the s steps
    of the distinct-bucket draw each run over thousands of clients.
    """

    def __init__(self, sketch: Sketch, plan: StreamPlan) -> None:
        self.sketch, self.plan = sketch, plan
        self._group = -1
        self._acc = np.empty((0, 0), dtype=np.int64)
        self._first = 0

    def chunk(self, k: int) -> np.ndarray:
        """Chunk k's accumulators in slot order (component i, then client j), int64."""
        plan = self.plan
        start, stop = plan.span(k)
        if plan.group == 1:
            return self.sketch.accumulators(start, stop)
        g = k // plan.group
        if g != self._group:
            first = plan.span(g * plan.group)[0]
            last = plan.span(min(plan.chunks, (g + 1) * plan.group) - 1)[1]
            self._acc = self.sketch.accumulators(first, last).reshape(plan.s, last - first)
            self._group, self._first = g, first
        return self._acc[:, start - self._first: stop - self._first].ravel()


def run_starts(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The non-empty accumulators and where their runs start (``reduceat``'s offsets)."""
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    live = np.flatnonzero(counts)
    return live, starts[live]


class ChannelBuffer:
    """Two slots of one server's shares, in 0600 shared memory that no file system names.

    Made with no descriptor, it reserves its memory (:func:`harness.fileio.private_memory`)
    for this process alone; made from one (a buffer another process reserved and passed
    on at this one's start), it maps that and closes the descriptor. Either way only the
    one client worker and the one server it is for map it, and the kernel frees it when
    both have ended, however they end. It is memory, not disk, bounded by two chunks.
    """

    def __init__(self, slot_bytes: int, fd: int | None = None, name: str = "ltm-channel") -> None:
        self.slot_bytes = slot_bytes
        size = self.size(slot_bytes)
        if fd is None:
            fd = private_memory(size, name, "a streamed run's channel buffer")
        try:
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)

    @staticmethod
    def size(slot_bytes: int) -> int:
        """The bytes of a buffer of two slots of ``slot_bytes`` (the cipher's slack included)."""
        return 2 * (slot_bytes + _SLACK)

    def slot(self, b: int, words: int) -> np.ndarray:
        """Slot b's first ``words`` words as uint64 (with the cipher's slack after them)."""
        offset = b * (self.slot_bytes + _SLACK)
        return np.frombuffer(self.map, dtype=np.uint64, count=words, offset=offset)

    def raw(self, b: int, nbytes: int) -> memoryview:
        offset = b * (self.slot_bytes + _SLACK)
        return memoryview(self.map)[offset: offset + nbytes + _SLACK]

    def close(self) -> None:
        try:
            self.map.close()
        except BufferError:
            pass  # a view still lives, in a traceback being reported: freed with the process


class _Masks:
    """AES-256-CTR under a key from ``os.urandom``: one stream per worker, never reused."""

    def __init__(self) -> None:
        self.cipher = Cipher(algorithms.AES(os.urandom(32)), modes.CTR(bytes(16))).encryptor()
        self.zeros = bytes(0)

    def fill(self, out: memoryview, nbytes: int) -> None:
        if len(self.zeros) < nbytes:
            self.zeros = bytes(nbytes)
        self.cipher.update_into(memoryview(self.zeros)[:nbytes], out)


@dataclass
class ProducerTotals:
    """What one worker sends back: its share of the plaintext sums and its clocks."""

    expected: np.ndarray  # (2m, d) uint64, mod 2^64
    abs_sums: np.ndarray  # (2m, d) float64
    noise_sum: float
    noise_sq: float
    busy_s: float
    wait_s: float
    cpu_s: float  # this process's CPU time: what its work cost, however the cores were shared
    expand_s: float = 0.0  # seeded: time spent expanding the clients' own seeds


class ChunkSharer(Protocol):
    """How a worker groups a chunk's slots and splits its values among the servers."""

    expand_s: float

    def group(self, acc: np.ndarray, clients: int) -> tuple[np.ndarray, np.ndarray]:
        """The client of each grouped slot and the counts per accumulator."""

    def share(self, k: int, ring: np.ndarray, buffers: list[ChannelBuffer],
              slot: int) -> list[int]:
        """Chunk k's grouped values (flat uint64) into every server's slot ``slot``;
        the words each server got."""


class _FullShares:
    """Full sharing: every server gets a fresh uniform share of every word."""

    expand_s = 0.0

    def __init__(self, plan: StreamPlan) -> None:
        self.plan = plan
        self.masks = _Masks()
        most = plan.clients_per_chunk * plan.s * plan.d
        self.scratch = (np.empty(8 * most * plan.fmt.words + _SLACK, dtype=np.uint8)
                        if plan.fmt.words > 1 else None)

    def group(self, acc: np.ndarray, clients: int) -> tuple[np.ndarray, np.ndarray]:
        return group_slots(acc, self.plan.m, clients)

    def share(self, k: int, ring: np.ndarray, buffers: list[ChannelBuffer],
              slot: int) -> list[int]:
        plan = self.plan
        words = ring.size * plan.fmt.words
        _share(ring, plan.fmt, plan.parties, buffers, slot, words, self.masks, self.scratch)
        return [words] * plan.parties


class NoisyChunks:
    """A worker's chunks of noisy, encoded values, and its share of the plaintext sums.

    :meth:`chunk` groups chunk k's slots by accumulator and gives their values
    encoded in the ring, column by column, ``(d, slots)``; the buffers are reused,
    so a result is valid until the next call. The noise comes from a fresh CSPRNG
    per instance. Shared by the clients that split the values among the servers
    (:func:`produce`) and the data owner who types them in
    (:func:`~harness.stream.files.write_owner`).
    """

    def __init__(self, plan: StreamPlan, sketch: Sketch, rows: Rows, noise: NoiseSpec,
                 fp: FixedPoint,
                 group: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]) -> None:
        self.plan, self.rows, self.noise, self.fp, self._group = plan, rows, noise, fp, group
        self.rng = noise_rng()
        d, m = plan.d, plan.m
        most = plan.clients_per_chunk * plan.s
        self.values = np.empty((most, d))
        self.chunk_rows = np.empty((plan.clients_per_chunk, d))
        self.drawn = np.empty((most, d))
        # Column-major per chunk, (d, slots): a server sums each column's accumulator runs
        # as contiguous 1-D reductions, four times faster than (slots, d) rows of d words.
        self.encoded = np.empty(most * d, dtype=np.int64)
        self.expected = np.zeros((2 * m, d), dtype=np.uint64)
        self.abs_sums = np.zeros((2 * m, d))
        self.noise_sum = self.noise_sq = 0.0
        gaussian = noise.kind == "gaussian" and not noise.zero_output
        # Gaussian noise is rounded to the lattice on its own (data-independent, as the
        # accountant certifies it) and added in float64, exact while every sum stays
        # below 2^53 (the sampler never goes 40 deviations out); past that, in int64.
        self.sigma = noise.lattice_sigma if gaussian else 0.0
        self.float_add = (noise.eta * fp.scale + 40 * self.sigma) < 2.0**53
        self.columns = SketchGroups(sketch, plan)

    def chunk(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Chunk k's slot counts per accumulator and its grouped values, (d, slots) uint64."""
        plan, noise, fp, d = self.plan, self.noise, self.fp, self.plan.d
        start, stop = plan.span(k)
        clients, counts = self._group(self.columns.chunk(k), stop - start)
        slots = clients.size
        live, offsets = run_starts(counts)
        vals = self.values[:slots]
        if noise.zero_output:  # R_D outputs zeros: neither data nor noise leaves a client
            vals[:] = 0.0
        else:
            # mode="clip": with "raise" numpy copies through a buffer to be safe from a
            # bad index; these are a permutation's.
            np.take(self.rows.read_into(start, stop, self.chunk_rows), clients, axis=0,
                    out=vals, mode="clip")
        lattice = None
        steps = None  # the Gaussian's lattice noise, integers in float64
        if self.sigma:
            steps = self.drawn[:slots]
            self.rng.standard_normal(out=steps)
            steps *= self.sigma
            np.rint(steps, out=steps)
            flat = steps.ravel()
            if not self.float_add:
                lattice, steps = steps.astype(np.int64), None
        elif noise.kind != "none" and not noise.zero_output:
            lattice = noise.sample_lattice(self.rng, (slots, d))
            flat = lattice.ravel().astype(np.float64)
        else:
            flat = self.drawn[:0].ravel()
        # The noise released, in lattice steps (reported in reals). No BLAS threads:
        # the cores are busy.
        self.noise_sum += float(flat.sum()) / fp.scale
        self.noise_sq += float(np.einsum("i,i->", flat, flat)) / fp.scale**2
        vals *= fp.scale
        np.rint(vals, out=vals)
        if steps is not None:
            vals += steps
        enc = self.encoded[: slots * d].reshape(d, slots)
        np.copyto(enc, vals.T, casting="unsafe")  # transposed in the same pass as the cast
        # The bucket bound from the chunk's largest |value| (two reads, no temporary):
        # sum |x| <= count * max |x|, sound and cheap; the ring's 2^63 is checked on it.
        worst = max(float(vals.max()), -float(vals.min())) if slots else 0.0
        if lattice is not None:
            enc += lattice.T
            worst += float(np.abs(lattice).max())
        bound = counts[live, None] * worst
        if float(bound.max()) >= 2.0**63:
            raise InputError(
                f"fixed-point overflow: a bucket of chunk {k} sums values past the ring's "
                f"bound 2^63; raise --epsilon, or lower --frac-bits (now {fp.frac_bits}) as "
                "far as `ltm run` still certifies the noise")
        self.abs_sums[live] += bound
        ring = enc.view(np.uint64)
        self.expected[live] += np.add.reduceat(ring, offsets, axis=1).T
        return counts, ring


def produce(worker: int, plan: StreamPlan, sketch: Sketch, rows: Rows, noise: NoiseSpec,
            fp: FixedPoint, buffers: list[ChannelBuffer], conns: list[Any]) -> ProducerTotals:
    """Worker ``worker``'s chunks: noisy rows, encoded, shared into each server's buffer.

    ``conns[i]`` carries ("chunk", k, slot, words, counts) to server i and its
    ("free", slot) back; a server that is gone shows as EOF here and is named.
    """
    sharer: ChunkSharer = SeededShares(plan) if plan.seeded else _FullShares(plan)
    S = plan.parties
    busy_by = [0] * S  # which slots each server still holds
    wait_s = 0.0
    started = time.perf_counter()
    cpu = time.process_time()
    noisy = NoisyChunks(plan, sketch, rows, noise, fp, sharer.group)
    mine = plan.chunks_of(worker)
    for sent, k in enumerate(mine):
        counts, ring = noisy.chunk(k)
        for i in range(S):  # a slot is reused only once its server has summed it
            if busy_by[i] == 2:
                waited = time.perf_counter()
                _await_free(conns[i], i)
                wait_s += time.perf_counter() - waited
                busy_by[i] -= 1
        slot = sent % 2  # the two slots in turn
        words = sharer.share(k, ring.ravel(), buffers, slot)
        for i in range(S):
            _tell(conns[i], i, ("chunk", k, slot, words[i], counts))
            busy_by[i] += 1
    for i in range(S):
        while busy_by[i]:
            _await_free(conns[i], i)
            busy_by[i] -= 1
        _tell(conns[i], i, ("end", len(mine)))
    busy = time.perf_counter() - started - wait_s
    return ProducerTotals(noisy.expected, noisy.abs_sums, noisy.noise_sum, noisy.noise_sq,
                          busy, wait_s, time.process_time() - cpu, sharer.expand_s)


def _tell(conn: Any, server: int, message: tuple) -> None:
    try:
        conn.send(message)
    except OSError:
        raise StreamBroken(server) from None


def _await_free(conn: Any, server: int) -> None:
    try:
        message = conn.recv()
    except (EOFError, OSError):
        raise StreamBroken(server) from None
    if message[0] != "free":
        raise StreamBroken(server, f"sent {message[0]!r} instead of acknowledging a chunk")


class StreamBroken(Exception):
    """Server ``server`` stopped taking its stream (its process ended or misbehaved)."""

    def __init__(self, server: int, why: str = "closed its stream") -> None:
        super().__init__(f"server P{server} {why}")
        self.server = server


def _share(ring: np.ndarray, fmt: ShareFormat, parties: int, buffers: list[ChannelBuffer],
           slot: int, words: int, masks: _Masks, scratch: np.ndarray | None) -> None:
    """Every server's shares of ``ring`` (uint64, flat), straight into its slot."""
    count = ring.size
    if fmt.words == 1:
        last = buffers[-1].slot(slot, count)
        for i in range(parties - 1):
            masks.fill(buffers[i].raw(slot, 8 * count), 8 * count)
            mask = buffers[i].slot(slot, count)
            np.subtract(ring if i == 0 else last, mask, out=last)
        return
    # Replicated, three parties: x = a0 + a1 + a2 and party i holds (a_i, a_{i-1}).
    assert scratch is not None
    masks.fill(scratch.data[: 16 * count + _SLACK], 16 * count)
    a = scratch[: 16 * count].view(np.uint64).reshape(count, 2)
    a0, a1 = a[:, 0], a[:, 1]
    a2 = ring - a0 - a1
    shares = (a0, a1, a2)
    for i in range(3):
        pairs = buffers[i].slot(slot, words).reshape(count, 2)
        pairs[:, 0] = shares[i]
        pairs[:, 1] = shares[i - 1]
