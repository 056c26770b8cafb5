"""The clients' side of a streamed run: chunks of clients, shares straight to the servers.

Nothing proportional to n is held. Clients are taken a chunk at a time; the
chunk's sketch columns come from the seed (:meth:`Sketch.columns`), its rows
from the data source (:class:`~harness.clients.matrices.Rows`), its noise from
a fresh CSPRNG. Within a chunk the slots are grouped by accumulator (bucket,
plus m for sign -1; a counting sort), so a server sums a chunk with one
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

The chunks themselves, and the plaintext sum every revealed sketch is checked
against, come from :class:`~harness.stream.noisy.NoisyChunks`, a block
at a time; with full sharing each block is split into the servers' slots as soon
as it is made, while it is in cache.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from harness.clients import FixedPoint, Rows, ShareFormat, Sketch
from harness.privacy import NoiseSpec
from harness.stream.buffer import ChannelBuffer
from harness.stream.noisy import (
    BlockSink,
    NoisyChunks,
    group_slots,
)
from harness.stream.plan import SLACK as _SLACK
from harness.stream.plan import StreamPlan
from harness.stream.seeded import SeededShares

__all__ = ["ChunkSharer", "ProducerTotals", "StreamBroken", "produce"]


class _Masks:
    """AES-256-CTR under a key from ``os.urandom``: one stream per worker, never reused."""

    def __init__(self) -> None:
        # Loaded here, in the worker (its fork server preloads it): not by ``ltm run``.
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

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
    sampler: str = "unknown"  # how it drew its noise (NoisyChunks.sampler)


class ChunkSharer(Protocol):
    """How a worker groups a chunk's slots and splits its values among the servers."""

    expand_s: float

    def group(self, acc: np.ndarray, clients: int) -> tuple[np.ndarray, np.ndarray]:
        """The client of each grouped slot and the counts per accumulator."""

    def sink(self, buffers: list[ChannelBuffer], slot: int) -> BlockSink | None:
        """Where a chunk's values go block by block as they are made, into every
        server's slot ``slot``; None if :meth:`share` takes the whole chunk instead."""

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

    def sink(self, buffers: list[ChannelBuffer], slot: int) -> BlockSink | None:
        """Additive shares of each block as it comes (one word a value); replicated
        pairs take the whole chunk (:meth:`share`)."""
        if self.plan.fmt.words != 1:
            return None
        masks, parties = self.masks, self.plan.parties
        last = buffers[-1]

        def split(first: int, ring: np.ndarray) -> None:
            count = ring.size
            share = last.slot(slot, first + count)[first:]
            for i in range(parties - 1):
                masks.fill(buffers[i].raw(slot, 8 * count, 8 * first), 8 * count)
                mask = buffers[i].slot(slot, first + count)[first:]
                np.subtract(ring if i == 0 else share, mask, out=share)

        return split

    def share(self, k: int, ring: np.ndarray, buffers: list[ChannelBuffer],
              slot: int) -> list[int]:
        plan = self.plan
        words = ring.size * plan.fmt.words
        _share(ring, plan.fmt, plan.parties, buffers, slot, words, self.masks, self.scratch)
        return [words] * plan.parties


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
        for i in range(S):  # a slot is reused only once its server has summed it
            if busy_by[i] == 2:
                waited = time.perf_counter()
                _await_free(conns[i], i)
                wait_s += time.perf_counter() - waited
                busy_by[i] -= 1
        slot = sent % 2  # the two slots in turn
        sink = sharer.sink(buffers, slot)
        counts, ring = noisy.chunk(k, sink)
        words = (sharer.share(k, ring.ravel(), buffers, slot) if sink is None
                 else [ring.size] * S)
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
                          busy, wait_s, time.process_time() - cpu, sharer.expand_s,
                          noisy.sampler)


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
