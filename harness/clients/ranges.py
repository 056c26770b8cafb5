"""Clients split between several client hosts: contiguous ranges, one layout each.

Each client host prepares the clients of one contiguous range [start, stop)
(public, recorded with the run), from that range's columns of the public
sketch and its rows of data. Its share file for a server is a complete blocked
layout of its own range (:meth:`Layout.blocked` of the range's sketch), with
the same block rows R and chunk blocks K on every host, so a server joins the
hosts' files end to end in host order and reads them as one: the
:attr:`ClientSplit.joined` layout, whose public block list is the hosts' lists
one after the other, is what the ``fast`` program's schedule and the ``local``
program's aggregation plan read. Nothing in a host's file depends on another
host's clients.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.clients.layout import Layout, choose_block_rows
from harness.clients.sketch import Sketch
from harness.errors import InputError

__all__ = ["ClientSplit", "client_ranges", "range_sketch", "split_clients"]


def client_ranges(n: int, hosts: int) -> tuple[tuple[int, int], ...]:
    """``hosts`` contiguous ranges covering clients [0, n), sizes differing by at most one."""
    if hosts < 1:
        raise ValueError(f"need at least one client host, got {hosts}")
    if n < hosts:
        raise InputError(f"{n} client(s) cannot be split between {hosts} client hosts; add "
                         "clients (--clients) or list fewer [[client]] hosts")
    bounds = [k * n // hosts for k in range(hosts + 1)]
    return tuple(zip(bounds[:-1], bounds[1:], strict=True))


def range_sketch(sketch: Sketch, start: int, stop: int) -> Sketch:
    """The sketch of clients [start, stop) alone, as explicit arrays (client ``start`` is
    its client 0): what one client host is given."""
    rows, signs = sketch.columns(start, stop)
    return Sketch(sketch.m, np.ascontiguousarray(rows), np.ascontiguousarray(signs))


@dataclass(frozen=True)
class ClientSplit:
    """The clients' ranges, each range's own blocked layout, and the layout of the
    parts joined end to end (global slot numbers: component i, client j is i*n + j)."""

    ranges: tuple[tuple[int, int], ...]
    parts: tuple[Layout, ...]
    joined: Layout

    @property
    def hosts(self) -> int:
        return len(self.ranges)


def split_clients(sketch: Sketch, d: int, hosts: int, share_words: int = 1) -> ClientSplit:
    """Split ``sketch``'s clients into ``hosts`` ranges and lay each out, blocked."""
    ranges = client_ranges(sketch.n, hosts)
    n, s = sketch.n, sketch.s
    R = choose_block_rows(n, sketch.m, s)  # as one host would choose for all n
    parts: list[Layout] = []
    for start, stop in ranges:
        K = parts[0].chunk_blocks if parts else None  # every part chunked alike
        parts.append(Layout.blocked(range_sketch(sketch, start, stop), d, R, K, share_words))
    slots = []
    for (start, stop), part in zip(ranges, parts, strict=True):
        local = part.file_slot
        width = stop - start
        # A part's slot i*width + j is client start + j of component i.
        slots.append(np.where(local >= 0, local // width * n + start + local % width, -1))
    block_acc = np.concatenate([p.block_acc for p in parts if p.block_acc is not None])
    joined = Layout("blocked", sketch.m, d, np.concatenate(slots), R, parts[0].chunk_blocks,
                    block_acc)
    return ClientSplit(ranges, tuple(parts), joined)
