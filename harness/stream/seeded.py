"""Seeded sharing, streamed: per chunk, each server gets seeds and full words, never a file.

The scheme is :mod:`harness.clients.seeded`'s, bit for bit: client j sends
component j mod C (its *lead*) in full, value minus the others, and every other
component as a 32-byte seed from ``os.urandom``, whose words are the
AES-256-CTR keystream of :func:`~harness.clients.keystream.expand` (s * d words,
copy i's column t being word i * d + t). Only the transport differs: the
clients of a chunk draw their seeds and expand them in the client worker, and
each server receives, in its channel buffer slot, only what it holds of that
chunk; it expands the seeds there and sums the chunk into its accumulators
(:class:`SeededReader`). Nothing of size n is held on either side.

A server's slot for chunk k (clients ``start`` to ``stop``, their s copies
grouped by accumulator as :func:`slot_order` sorts them; all of it public but
the words) holds, for each component c the server holds, in the order of
:attr:`Components.held`:

1. **seeds**: 32 bytes for each client of the chunk whose lead is not c, in
   client order: its seed of component c;
2. **full words**: component c of the grouped slots whose client leads with c,
   as uint64 ``(d, those slots)``, column by column, in grouped order.

Its size follows from the plan alone (:meth:`StreamPlan.chunk_words`), so a server checks
it before reading a word. Additive sharing (C = S) gives a server one such pair
of sections, replicated sharing (C = 3, server i holds components i and i - 1)
two.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import numpy as np

from harness.clients import SEED_BYTES, Components, components, expand, sketch_loops
from harness.stream.buffer import ChannelBuffer
from harness.stream.noisy import SketchGroups
from harness.stream.plan import StreamPlan

__all__ = ["SeededReader", "SeededShares", "slot_order"]

_SEED_WORDS = SEED_BYTES // 8


def slot_order(acc: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """A chunk's slots grouped by accumulator: each grouped slot's index in slot order
    (copy i of client j is ``i * clients + j``), and the counts per accumulator.

    The same stable sort as :func:`~harness.stream.produce.group_slots`, without
    folding copies onto clients: a seeded component's words depend on the copy.
    """
    return sketch_loops().groups(acc, 2 * m, acc.size)


class _Chunk:
    """The public facts of a chunk that clients and servers both derive."""

    def __init__(self, comps: Components, start: int, stop: int, s: int,
                 order: np.ndarray) -> None:
        clients = stop - start
        self.lead = (start + np.arange(clients)) % comps.count
        client = order % clients
        # Row of each grouped slot among the chunk's copy-ordered words seen as
        # (clients * s, d): client j's copy i is row j * s + i.
        self.rows = client * s + order // clients
        self.slot_lead = self.lead[client]


class SeededShares:
    """The client worker's side: draws, expands and sends a chunk's seeded shares."""

    def __init__(self, plan: StreamPlan) -> None:
        self.plan = plan
        self.comps = components(plan.fmt, plan.parties)
        count, words = self.comps.count, plan.s * plan.d
        most = plan.clients_per_chunk
        self._streams = np.empty((most * (count - 1), words), dtype=np.uint64)
        self._masks = np.empty((most, words), dtype=np.uint64)
        self._order = np.empty(0, dtype=np.int64)
        self.expand_s = 0.0  # time spent expanding the clients' own seeds

    def group(self, acc: np.ndarray, clients: int) -> tuple[np.ndarray, np.ndarray]:
        """The client of each grouped slot and the counts per accumulator."""
        self._order, counts = slot_order(acc, self.plan.m)
        return (self._order % clients if acc.size > clients else self._order), counts

    def sink(self, buffers: Sequence[ChannelBuffer], slot: int) -> None:
        """None: a chunk's seeds and full words are made from the whole chunk (:meth:`share`)."""
        return None

    def share(self, k: int, ring: np.ndarray, buffers: Sequence[ChannelBuffer],
              slot: int) -> list[int]:
        """Chunk k's values (flat uint64, ``(d, slots)`` grouped as :meth:`group` last
        sorted them) into every server's slot; the words each server got."""
        plan, comps = self.plan, self.comps
        start, stop = plan.span(k)
        clients, count, d = stop - start, comps.count, plan.d
        words = plan.s * d
        # seeds[j, q]: client j's q-th seeded component, in component order skipping its lead
        seeds = np.frombuffer(os.urandom(SEED_BYTES * clients * (count - 1)), np.uint8)
        seeds = seeds.reshape(clients, count - 1, SEED_BYTES)
        began = time.perf_counter()
        streams = self._streams[:clients * (count - 1)]
        expand(seeds.reshape(-1, SEED_BYTES), words, out=streams)
        self.expand_s += time.perf_counter() - began
        masks = self._masks[:clients]
        np.sum(streams.reshape(clients, count - 1, words), axis=1, dtype=np.uint64, out=masks)
        chunk = _Chunk(comps, start, stop, plan.s, self._order)
        gathered = np.take(masks.reshape(clients * plan.s, d), chunk.rows, axis=0)
        full = ring.reshape(d, -1) - gathered.T  # the leads' components, mod 2^64 by design
        local = np.arange(clients)
        parts = []
        for c in range(count):
            seeded = local[chunk.lead != c]
            # c's place among client j's seeded components, which skip its lead
            q = np.where(c < chunk.lead[seeded], c, c - 1)
            parts.append((np.ascontiguousarray(seeds[seeded, q]).view(np.uint64).ravel(),
                          np.compress(chunk.slot_lead == c, full, axis=1).ravel()))
        sent = []
        for party, held in enumerate(comps.held):
            total = sum(parts[c][0].size + parts[c][1].size for c in held)
            view = buffers[party].slot(slot, total)
            offset = 0
            for c in held:
                for section in parts[c]:
                    view[offset:offset + section.size] = section
                    offset += section.size
            sent.append(total)
        return sent


class SeededReader:
    """A server's side: a chunk's slot turned back into its shares, ``(d, slots, words)``."""

    def __init__(self, plan: StreamPlan, party: int) -> None:
        self.plan = plan
        self.comps = components(plan.fmt, plan.parties)
        self.held = self.comps.held[party]
        most = plan.clients_per_chunk
        self._streams = np.empty((most, plan.s * plan.d), dtype=np.uint64)
        self._shares = np.empty((plan.d, most * plan.s, len(self.held)), dtype=np.uint64)
        self.expand_s = 0.0  # time spent expanding the seeds received

    def read(self, k: int, counts: np.ndarray, columns: SketchGroups, buffer: ChannelBuffer,
             slot: int, words: int) -> tuple[np.ndarray, np.ndarray]:
        """The counts per accumulator and the chunk's shares, grouped as the clients
        grouped them. Placing each client's expanded seeds needs the whole grouping,
        so it is recomputed here from the public sketch, and its counts are the ones
        summed by (the announced ``counts`` are not needed)."""
        plan = self.plan
        start, stop = plan.span(k)
        clients, d = stop - start, plan.d
        order, counts = slot_order(columns.chunk(k), plan.m)
        chunk = _Chunk(self.comps, start, stop, plan.s, order)
        view = buffer.slot(slot, words)
        shares = self._shares[:, :order.size]
        streams = self._streams[:clients]
        offset = 0
        for w, c in enumerate(self.held):
            seeded = np.flatnonzero(chunk.lead != c)
            seeds = view[offset:offset + _SEED_WORDS * seeded.size].view(np.uint8)
            offset += _SEED_WORDS * seeded.size
            began = time.perf_counter()
            # The leads' rows stay stale here: their words come in full below.
            expand(seeds.reshape(-1, SEED_BYTES), plan.s * d, out=streams, rows=seeded)
            self.expand_s += time.perf_counter() - began
            comp = shares[:, :, w]
            comp[...] = np.take(streams.reshape(clients * plan.s, d), chunk.rows, axis=0).T
            leads = chunk.slot_lead == c
            full = int(np.count_nonzero(leads))
            comp[:, leads] = view[offset:offset + d * full].reshape(d, full)
            offset += d * full
        return counts, shares
