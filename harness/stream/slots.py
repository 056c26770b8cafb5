"""One row per slot, per chunk of clients: the ``reference`` program's streamed inputs.

The ``reference`` program reads row after row, each with its (bucket, sign)
from the public input, so it cares about no order but that the rows and the
schedule agree. A streamed run therefore keeps the order in which the chunks
arrive, grouped by accumulator within each chunk (public: it depends on the
sketch alone), and the schedule is written in that order as the chunks come:
its first number, the n * s rows, is known before the first chunk. No padding,
no carry: memory is one chunk's rows whatever n is.

A server writes its shares this way (:class:`SlotShape`, :class:`SlotFile`); the
data owner of ``--input party`` its noisy rows as MP-SPDZ input text
(:func:`write_owner_text`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from harness.clients import FixedPoint, Prepared, Rows, Sketch, format_integers
from harness.privacy import NoiseSpec
from harness.stream.blocks import ChunkFile, FileShape
from harness.stream.noisy import NoisyChunks, group_slots
from harness.stream.plan import StreamPlan

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = ["SlotFile", "SlotSchedule", "SlotShape", "write_owner_text"]


class SlotSchedule:
    """The reference program's public input as a stream: the rows, then (bucket, sign)
    of each row, a chunk at a time."""

    def __init__(self, fh: BinaryIO, rows: int, m: int) -> None:
        self.fh, self.rows, self.m = fh, rows, m
        self.written = 0
        fh.write(f"{rows}\n".encode())
        self._accumulators = np.arange(2 * m, dtype=np.int64)

    def add(self, counts: np.ndarray) -> None:
        """A chunk's rows, grouped by accumulator with ``counts`` rows each."""
        acc = np.repeat(self._accumulators, counts)
        pairs = np.empty((acc.size, 2), dtype=np.int64)
        np.remainder(acc, self.m, out=pairs[:, 0])
        pairs[:, 1] = np.where(acc < self.m, 1, -1)  # accumulator a + m: bucket a, sign -1
        if acc.size:
            self.fh.write(format_integers(pairs.ravel()))
        self.written += acc.size

    def finish(self) -> None:
        if self.written != self.rows:
            raise RuntimeError(f"layout bug: the schedule announced {self.rows} rows and "
                               f"holds {self.written}")


@dataclass(frozen=True)
class SlotShape:
    """A share file of one row per slot, in the order the chunks arrive."""

    # The textbook program reads its schedule's row count first: the whole file first.
    feedable = False

    def open(self, fh: BinaryIO, schedule: BinaryIO | None, plan: StreamPlan, *,
             text: bool = False, ring: int = 0) -> ChunkFile:
        if ring:
            raise ValueError("a file of a row per slot is never read while it is written")
        return SlotFile(fh, schedule, plan, text)

    def describe(self) -> dict:
        return {"kind": "slots-per-chunk"}


class SlotFile:
    """A server's share file: each chunk's slots as rows of d shares, as they come (with
    ``text``, the data owner's rows of d values as MP-SPDZ input text)."""

    def __init__(self, fh: BinaryIO, schedule: BinaryIO | None, plan: StreamPlan,
                 text: bool = False) -> None:
        self.fh, self.rows, self.text = fh, plan.n * plan.s, text
        self.schedule = SlotSchedule(schedule, self.rows, plan.m) if schedule else None
        self._out = np.empty((plan.clients_per_chunk * plan.s, plan.d,
                              1 if text else plan.fmt.words), dtype=np.uint64)
        self.written = 0

    def add(self, counts: np.ndarray, shares: np.ndarray) -> None:
        slots = shares.shape[1]
        out = self._out[:slots]
        np.copyto(out, shares.transpose(1, 0, 2))  # (d, slots, words) to rows of slots
        self.fh.write(format_integers(out.view(np.int64).ravel()) if self.text
                      else out.data.cast("B"))
        if self.schedule is not None:
            self.schedule.add(counts)
        self.written += slots

    def finish(self) -> dict:
        if self.written != self.rows:
            raise RuntimeError(f"layout bug: {self.written} rows written of {self.rows}")
        if self.schedule is not None:
            self.schedule.finish()
        return {"file_rows": self.rows, "padding_rows": 0}


def write_owner_text(plan: StreamPlan, sketch: Sketch, rows: Rows, noise: NoiseSpec,
                     fp: FixedPoint, fh: BinaryIO, schedule: BinaryIO,
                     shape: FileShape | None = None) -> Prepared:
    """The data owner's noisy rows as MP-SPDZ input text, a chunk of clients at a time.

    Each chunk is read from ``rows``, made noisy from a CSPRNG and encoded as the
    clients of a shared run do (:class:`NoisyChunks`), then formatted and written
    with its schedule in the program's ``shape`` (one row per slot, ``reference``'s,
    by default; blocked per chunk of clients for ``fast``); the plaintext sums are
    accumulated as it goes.
    """
    started = time.perf_counter()
    cpu = time.process_time()
    m = plan.m

    def group(acc: np.ndarray, clients: int) -> tuple[np.ndarray, np.ndarray]:
        return group_slots(acc, m, clients)

    # Only the data owner's writer uses a thread pool (and its logging): not loaded
    # by every run that imports this module.
    from concurrent.futures import ThreadPoolExecutor

    noisy = NoisyChunks(plan, sketch, rows, noise, fp, group)
    out = (shape or SlotShape()).open(fh, schedule, plan, text=True)
    # Chunk k is formatted and written on a second thread while k + 1 is made (numpy
    # releases the GIL): the two halves of the work take both cores.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="owner-text") as pool:
        pending: Future | None = None
        for k in range(plan.chunks):
            counts, ring = noisy.chunk(k)
            # The (d, slots) values as one word each, in a copy that the next chunk's
            # values do not overwrite.
            values = ring[..., None].copy()
            if pending is not None:
                pending.result()
            pending = pool.submit(out.add, counts, values)
        if pending is not None:
            pending.result()
    shaped = out.finish()
    wall = time.perf_counter() - started
    count = plan.n * plan.s * plan.d
    mean = noisy.noise_sum / count
    expected, abs_sums = noisy.expected, noisy.abs_sums
    prepared = Prepared(expected[:m] - expected[m:], abs_sums[:m] + abs_sums[m:],
                        [8 * count] + [0] * (plan.parties - 1), wall,
                        {"noise_mean": mean, "noise_var": noisy.noise_sq / count - mean**2,
                         "sampler": noisy.sampler})
    prepared.stages = {"stream_wall_s": wall, "stream_clients_s": wall,
                       "stream_workers": 1.0,
                       "stream_clients_cpu_s": time.process_time() - cpu}
    prepared.layout = {**(shape or SlotShape()).describe(), **shaped,
                       "kind": "party-text-per-chunk",
                       "clients_per_chunk": plan.clients_per_chunk}
    return prepared
