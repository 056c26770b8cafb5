"""A streamed run's chunks of noisy values, made a cache-sized block at a time.

A chunk's slots are grouped by accumulator (bucket, plus m for sign -1; a counting
sort, :func:`group_slots`), so a server sums a chunk with one ``reduceat`` over
contiguous runs. The grouping is public: it depends on the sketch alone. A
chunk's values are laid out column by column, ``(d, slots)``: each column's
accumulator runs are then contiguous.

:class:`NoisyChunks` makes them. Each client's row is encoded once (not once
per copy), transposed to ``(d, clients)``; the noise, independent and identically
distributed, is drawn straight into the grouped layout, a block of a few
thousand values at a time, and every step of a value (its draw, rounding to the
lattice, the client's encoded entry added, the cast to the ring, the plaintext
sum, the servers' shares) runs over the block while it is in the core's cache,
instead of one pass over the whole chunk's megabytes per step. Blocks end where
an accumulator's run ends, so each block's runs are summed whole.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from harness.clients import FixedPoint, Rows, Sketch, gaussian_noise, sketch_loops
from harness.errors import InputError
from harness.privacy import NoiseSpec, noise_rng
from harness.stream.plan import StreamPlan

__all__ = ["BLOCK_VALUES", "BlockSink", "NoisyChunks", "SketchGroups", "chunk_groups",
           "group_slots", "run_starts"]

# Values per block: a few float64 and int64 arrays of this many values, and the
# channel buffers' words they become, stay near the core (L2 holds 512 KiB here).
BLOCK_VALUES = 1 << 16

# What a poisoned client (--poison) sends in every entry, with a random sign: the
# largest word the encoding holds.
POISON_WORD = 2**63 - 1

# Where a block's ring values go as soon as they are made: (first word in the chunk's
# flat (d, slots) layout, the block's values as uint64).
BlockSink = Callable[[int, np.ndarray], None]


def chunk_groups(sketch: Sketch, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """The chunk's slots grouped by accumulator: the client of each grouped slot, and
    the slot counts per accumulator."""
    return group_slots(sketch.accumulators(start, stop), sketch.m, stop - start)


def group_slots(acc: np.ndarray, m: int, clients: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`chunk_groups` of a chunk's accumulators (slot order, ``clients`` clients):
    a stable counting sort, compiled where the install built it."""
    return sketch_loops().groups(acc, 2 * m, clients)


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


def _blocks(offsets: np.ndarray, slots: int, size: int) -> list[tuple[int, int, int, int]]:
    """A column's blocks of about ``size`` slots, each ending where a run ends: (first
    run, end run, first slot, end slot)."""
    # The last run to start at or before each multiple of size: no block is longer than
    # size unless one run is. (Not np.unique: its first call in a worker imports
    # numpy.ma, a tenth of a second.)
    cuts = np.searchsorted(offsets, np.arange(size, slots, size), side="right") - 1
    runs = [0, *sorted({int(c) for c in cuts if c > 0}), offsets.size]
    edges = [int(offsets[r]) if r < offsets.size else slots for r in runs]
    return [(runs[i], runs[i + 1], edges[i], edges[i + 1]) for i in range(len(runs) - 1)]


class NoisyChunks:
    """A worker's chunks of noisy, encoded values, and its share of the plaintext sums.

    :meth:`chunk` groups chunk k's slots by accumulator and gives their values
    encoded in the ring, column by column, ``(d, slots)``; the buffers are reused,
    so a result is valid until the next call. The noise comes from a fresh CSPRNG
    per instance. Shared by the clients that split the values among the servers
    (:func:`~harness.stream.produce.produce`) and the data owner who types them in.
    """

    def __init__(self, plan: StreamPlan, sketch: Sketch, rows: Rows, noise: NoiseSpec,
                 fp: FixedPoint,
                 group: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]],
                 block: int = BLOCK_VALUES) -> None:
        self.plan, self.rows, self.noise, self.fp, self._group = plan, rows, noise, fp, group
        self.rng = noise_rng()
        d, m, clients = plan.d, plan.m, plan.clients_per_chunk
        self.block = block
        self.chunk_rows = np.empty((clients, d))
        self.data = np.zeros((d, clients))  # the chunk's clients' encoded rows, transposed
        self.gathered = np.empty(block)  # a block's entries (the runs may pass `block`)
        self.encoded = np.empty(clients * plan.s * d, dtype=np.int64)
        self.expected = np.zeros((2 * m, d), dtype=np.uint64)
        self.abs_sums = np.zeros((2 * m, d))
        self.noise_sum = self.noise_sq = 0.0
        # Gaussian noise is rounded to the lattice on its own (data-independent, as the
        # accountant certifies it) and added as integers, a block in one compiled pass
        # where the install built it (:func:`~harness.clients.gaussian_noise`); the other
        # kinds' lattice noise through numpy.
        self.gaussian = (gaussian_noise(noise.lattice_sigma, self.rng)
                         if noise.kind == "gaussian" and not noise.zero_output else None)
        self.lattice = noise.kind in ("laplace", "skellam") and not noise.zero_output
        # Every entry is checked against eta as it is read: no pass over a chunk's data
        # is needed to bound it.
        self._entry_bound = rows.eta * fp.scale + 1.0
        self.columns = SketchGroups(sketch, plan)
        self.poisoned = np.array(sorted(plan.poisoned), dtype=np.int64)

    @property
    def sampler(self) -> str:
        """How this worker draws its noise, for the run's record: the Gaussian's path
        (:attr:`~harness.clients.GaussianNoise.path`), ``numpy`` for the lattice's other
        kinds, ``none`` where no noise is drawn."""
        if self.gaussian is not None:
            return self.gaussian.path
        return "numpy" if self.lattice else "none"

    def chunk(self, k: int, sink: BlockSink | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Chunk k's slot counts per accumulator and its grouped values, (d, slots) uint64.

        ``sink``, when given, takes each block of values as soon as it is made (the
        servers' shares are written from it while it is in cache)."""
        plan, d = self.plan, self.plan.d
        start, stop = plan.span(k)
        clients, counts = self._group(self.columns.chunk(k), stop - start)
        slots = clients.size
        live, offsets = run_starts(counts)
        data = self.data[:, : stop - start]
        if not self.noise.zero_output:  # R_D outputs zeros: neither data nor noise leaves
            rows = self.rows.read_into(start, stop, self.chunk_rows)
            np.multiply(rows.T, self.fp.scale, out=data)
            np.rint(data, out=data)
        enc = self.encoded[: slots * d].reshape(d, slots)
        sums = np.empty((live.size, d), dtype=np.uint64)
        worst = worst_noise = 0.0
        blocks = _blocks(offsets, slots, self.block)  # the same runs in every column
        liars = self._liars(start, stop)
        for c in range(d):
            for r0, r1, a, b in blocks:
                values = enc[c, a:b]
                noise, top = self._block(data[c], clients[a:b], values)
                worst_noise = max(worst_noise, noise)
                worst = max(worst, top)
                ring = values.view(np.uint64)
                counted = ring
                if liars is not None:
                    counted = self._poison(liars[clients[a:b]], values)
                sums[r0:r1, c] = np.add.reduceat(counted, offsets[r0:r1] - a)
                if sink is not None:
                    sink(c * slots + a, ring)
        # Integer sums may have wrapped: then the bound of the entries and the noise, apart.
        if self.lattice:
            worst = float(np.abs(data).max()) + worst_noise if data.size else worst_noise
        elif self._entry_bound + worst_noise >= 2.0**63:
            worst = self._entry_bound + worst_noise
        bound = counts[live, None] * worst
        if bound.size and float(bound.max()) >= 2.0**63:
            raise InputError(
                f"fixed-point overflow: a bucket of chunk {k} sums values past the ring's "
                f"bound 2^63; raise --epsilon, or lower --frac-bits (now {self.fp.frac_bits}) "
                "as far as `ltm run` still certifies the noise")
        self.abs_sums[live] += bound
        self.expected[live] += sums
        return counts, enc.view(np.uint64)

    def _liars(self, start: int, stop: int) -> np.ndarray | None:
        """Which of the chunk's clients are poisoned (None: none of them)."""
        first, last = np.searchsorted(self.poisoned, (start, stop))
        if first == last:
            return None
        liars = np.zeros(stop - start, dtype=bool)
        liars[self.poisoned[first:last] - start] = True
        return liars

    def _poison(self, lying: np.ndarray, values: np.ndarray) -> np.ndarray:
        """The poisoned slots' values (int64, in place) replaced by the largest word
        with a random sign; the values the plaintext sums count, as uint64."""
        count = int(lying.sum())
        if count:
            signs = self.rng.integers(0, 2, size=count) * 2 - 1
            values[lying] = signs * POISON_WORD
        ring = values.view(np.uint64)
        if not self.plan.drop_poisoned or not count:
            return ring
        return np.where(lying, np.uint64(0), ring)

    def _block(self, data: np.ndarray, clients: np.ndarray,
               out: np.ndarray) -> tuple[float, float]:
        """One block's values into ``out`` (int64): each slot's client's encoded entry
        plus its noise. Returns the noise's largest |step| and the largest |value|."""
        scale = self.fp.scale
        if self.gaussian is not None:
            drawn = self.gaussian.add(data, clients, out)
            self.noise_sum += drawn.sum / scale
            self.noise_sq += drawn.sum_sq / scale**2
            return drawn.max_step, drawn.max_value
        size = clients.size
        if size > self.gathered.size:  # one accumulator's run longer than a block
            self.gathered = np.empty(size)
        values = self.gathered[:size]
        # mode="clip": with "raise" numpy copies through a buffer to be safe from a bad
        # index; these are a permutation's.
        np.take(data, clients, out=values, mode="clip")
        np.copyto(out, values, casting="unsafe")
        step = 0.0
        if self.lattice and size:
            lattice = self.noise.sample_lattice(self.rng, (size,))
            flat = lattice.astype(np.float64)
            self.noise_sum += float(flat.sum()) / scale
            # No BLAS threads: the cores are busy.
            self.noise_sq += float(np.einsum("i,i->", flat, flat)) / scale**2
            out += lattice
            step = float(np.abs(lattice).max())
        return step, (max(float(out.max()), -float(out.min())) if size else 0.0)
