"""The public shape of a streamed run: chunks of clients, workers, client hosts.

Clients and servers both follow one :class:`StreamPlan`: which clients form
chunk k, which client worker makes it (and on which client host), and how many
words each server receives for it. Everything in it is public.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from harness.clients import FORMATS, SEED_BYTES, Components, ShareFormat, components

__all__ = ["CHUNK_VALUES", "SKETCH_GROUP_CLIENTS", "SLACK", "StreamPlan"]

# Noisy values per chunk: 4 MB float64 buffers, in cache-friendly reach, and few
# enough chunks (20,000 at n = 1e9, d = 10) that a chunk's fixed cost vanishes.
CHUNK_VALUES = 1 << 19
# Clients whose sketch columns are drawn at once when s > 1: the s-step draw of
# distinct buckets costs per step, so a few thousand clients per step amortise it.
SKETCH_GROUP_CLIENTS = 1 << 14
SLACK = 16  # AES-CTR's update_into wants room for one block past the data
_SEED_WORDS = SEED_BYTES // 8


def _leaders(comps: Components, start: int, clients: int, comp: int) -> int:
    """How many of the clients ``start`` to ``start + clients`` lead with ``comp``."""
    return len(range((comp - start) % comps.count, clients, comps.count))


def chunk_words(comps: Components, party: int, start: int, stop: int, s: int, d: int) -> int:
    """8-byte words server ``party`` receives for the clients ``start`` to ``stop``."""
    clients = stop - start
    total = 0
    for c in comps.held[party]:
        full = _leaders(comps, start, clients, c)
        total += _SEED_WORDS * (clients - full) + d * s * full
    return total


def slot_words(comps: Components, clients: int, s: int, d: int) -> int:
    """A bound on :func:`chunk_words` for any chunk of ``clients`` clients and any server."""
    most = -(-clients // comps.count)
    return max(len(h) for h in comps.held) * (_SEED_WORDS * clients + d * s * most)



@dataclass(frozen=True)
class StreamPlan:
    """The public shape of a streamed run, which clients and servers both follow."""

    n: int
    d: int
    m: int
    s: int
    parties: int
    format: str  # a key of sharing.FORMATS
    workers: int  # client worker processes, on all client hosts together
    chunk: int = 0  # clients per chunk (0: from CHUNK_VALUES)
    sharing: str = "full"  # or "seeded" (:mod:`harness.stream.seeded`)
    # Workers on each client host, in host order (empty: one host runs them all). Host
    # h runs the next hosts[h] workers and the clients of one contiguous run of chunks.
    hosts: tuple[int, ...] = ()
    # --poison: the clients that send out-of-range rows (a test and study aid), and
    # whether the plaintext sums leave them out (--validate: the MPC rejects them).
    poisoned: tuple[int, ...] = ()
    drop_poisoned: bool = False

    def __post_init__(self) -> None:
        if self.hosts and (sum(self.hosts) != self.workers or min(self.hosts) < 1):
            raise ValueError(f"client hosts' workers {self.hosts} do not make {self.workers}")

    @property
    def fmt(self) -> ShareFormat:
        return FORMATS[self.format]

    @property
    def clients_per_chunk(self) -> int:
        words = self.s * self.d
        if self.seeded:  # a client's seeds take room too: 4 words each, at most one a server
            words = max(words, 4 * self.parties)
        return self.chunk or max(1, CHUNK_VALUES // words)

    @property
    def chunks(self) -> int:
        return -(-self.n // self.clients_per_chunk)

    def span(self, k: int) -> tuple[int, int]:
        start = k * self.clients_per_chunk
        return start, min(self.n, start + self.clients_per_chunk)

    @property
    def seeded(self) -> bool:
        return self.sharing == "seeded"

    def chunk_words(self, k: int, party: int = 0) -> int:
        """8-byte words server ``party`` receives for chunk k."""
        start, stop = self.span(k)
        if self.seeded:
            return chunk_words(components(self.fmt, self.parties), party, start, stop,
                               self.s, self.d)
        return (stop - start) * self.s * self.d * self.fmt.words

    @property
    def slot_bytes(self) -> int:
        if self.seeded:
            return 8 * slot_words(components(self.fmt, self.parties), self.clients_per_chunk,
                                  self.s, self.d)
        return self.clients_per_chunk * self.s * self.d * self.fmt.words * 8

    @property
    def group(self) -> int:
        """Consecutive chunks whose sketch columns are drawn together (1 for s = 1)."""
        if self.s == 1:
            return 1
        return max(1, SKETCH_GROUP_CLIENTS // self.clients_per_chunk)

    @cached_property
    def senders(self) -> tuple[int, ...]:
        """The client worker that sends chunk k, for every k: the one decision of who
        sends what, which every worker and every server's sink reads. Client host h
        makes one contiguous run of whole groups of chunks (:meth:`host_span`), and
        deals those groups round robin among its own workers."""
        g, out = self.group, np.empty(self.chunks, dtype=np.int64)
        for host in range(self.host_count):
            first, stop = self._host_groups(host)
            w0, count = self._host_workers(host)
            ks = np.arange(first * g, min(self.chunks, stop * g))
            out[ks] = w0 + (ks // g - first) % count
        return tuple(out.tolist())

    def chunks_of(self, worker: int) -> list[int]:
        """Worker ``worker``'s chunks, in the order it sends them (:attr:`senders`)."""
        self.host_of(worker)  # refuses a worker the plan does not have
        return [k for k, w in enumerate(self.senders) if w == worker]

    @property
    def host_count(self) -> int:
        return len(self.hosts) or 1

    def host_of(self, worker: int) -> int:
        if not 0 <= worker < self.workers:
            raise ValueError(f"no client worker {worker} in a plan of {self.workers}")
        bounds = np.cumsum(self.hosts or (self.workers,))
        return int(np.searchsorted(bounds, worker, side="right"))

    def host_workers(self, host: int) -> range:
        """The workers client host ``host`` runs."""
        first, count = self._host_workers(host)
        return range(first, first + count)

    def host_span(self, host: int) -> tuple[int, int]:
        """The clients [start, stop) of client host ``host``: contiguous, whole groups of
        chunks, in host order (empty when there are more hosts than groups)."""
        first, stop = self._host_groups(host)
        return (min(self.n, first * self.group * self.clients_per_chunk),
                min(self.n, stop * self.group * self.clients_per_chunk))

    def _host_workers(self, host: int) -> tuple[int, int]:
        per = self.hosts or (self.workers,)
        return sum(per[:host]), per[host]

    def _host_groups(self, host: int) -> tuple[int, int]:
        groups = -(-self.chunks // self.group)
        count = self.host_count
        return groups * host // count, groups * (host + 1) // count
