"""Client side: noisy copies, fixed-point encoding, sharing, server inputs.

Inputs are produced in file order, one chunk of file rows at a time, so memory
stays bounded by the chunk whatever n and s are. Noise is i.i.d. per noisy
entry, so drawing it in file order instead of client order changes nothing.

While streaming, the plaintext result sum_i S_i enc(X_i) mod 2^64 is
accumulated, which is what the revealed sketch is checked against. Every noise
is drawn on the lattice (:meth:`NoiseSpec.sample_lattice`, integer steps) and
added to the encoded values in the ring, after encoding: the noise released does
not depend on the data, which is what the accountant certifies, and it is part
of that plaintext sum to the bit. For the
blocked layout it is summed a block at a time, so the layout is first checked
against the sketch itself (every slot stored once, every row in a block of its
own accumulator): a wrong layout cannot make a wrong program look right.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

import numpy as np

from harness.clients.encoding import FixedPoint
from harness.clients.layout import Layout, accumulator_index
from harness.clients.noise import NoiseSpec
from harness.clients.sharing import ADDITIVE, ShareFormat, random_ring
from harness.clients.sketch import Sketch
from harness.errors import InputError
from harness.fileio import open_private, private_dir

__all__ = ["SHARE_HEADER", "Prepared", "ShareSink", "Sink", "TextSink", "prepare_inputs",
           "read_share_file", "tamper_share_file", "tamper_text_file", "write_share_file"]

# Persistence/Transactions-P<i>.data of semi2k: header length, descriptor, then 8-byte shares.
SHARE_HEADER = ADDITIVE.header
_STREAM_ROWS = 1 << 18
# What --tamper adds: any nonzero change of one word breaks the sum; 5 is one.
TAMPER_DELTA = 5


def write_share_file(path: Path, shares: np.ndarray, fmt: ShareFormat = ADDITIVE) -> None:
    with open_private(path) as fh:
        fh.write(fmt.header)
        fh.write(np.ascontiguousarray(shares, dtype="<u8").tobytes())


def read_share_file(path: Path, fmt: ShareFormat = ADDITIVE) -> np.ndarray:
    """The file's words (``fmt.words`` per share, in file order) as uint64."""
    with open(path, "rb") as fh:
        if fh.read(len(fmt.header)) != fmt.header:
            raise ValueError(f"{path} is not a {fmt.descriptor.decode()} share file")
        return np.fromfile(fh, dtype="<u8")


def tamper_share_file(path: Path, fmt: ShareFormat, word: int) -> None:
    """Add :data:`TAMPER_DELTA` to the ``word``-th word after the header (a test aid)."""
    with open(path, "r+b") as fh:
        fh.seek(len(fmt.header) + 8 * word)
        raw = fh.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path} has no word {word} to tamper with")
        value = (int.from_bytes(raw, "little") + TAMPER_DELTA) % 2**64
        fh.seek(len(fmt.header) + 8 * word)
        fh.write(value.to_bytes(8, "little"))


def tamper_text_file(path: Path) -> None:
    """Add :data:`TAMPER_DELTA` to the first number of an MP-SPDZ input text file."""
    tokens = path.read_bytes().split(b" ", 1)
    first = int(tokens[0]) + TAMPER_DELTA
    path.write_bytes(b" ".join([str(first).encode(), *tokens[1:]]))


class Sink(Protocol):
    """Where :func:`prepare_inputs` sends the encoded rows, in file order, chunk by chunk.

    ``start`` comes first (work that can run beside the noise starts there),
    then ``write`` per chunk from a worker thread (``real`` marks the rows that
    are not public zero padding), then ``close`` always, also after a failure.
    ``upload_bytes[i]`` is what server i receives, counted while writing.
    """

    upload_bytes: list[int]

    def start(self) -> None: ...

    def write(self, encoded: np.ndarray, real: np.ndarray) -> None: ...

    def close(self) -> None: ...


class ShareSink:
    """One share file per server; each server's file holds only its own shares.

    ``fmt`` is the protocol's sharing: additive words, or replicated pairs of
    which each server receives only its own (a_i, a_{i-1}).

    The masks for the next chunk are drawn (AES-CTR, see :mod:`.sharing`) in a
    thread while this one is computed: the same cryptographic source, only sooner.
    """

    def __init__(self, paths: list[Path], fmt: ShareFormat = ADDITIVE) -> None:
        if fmt.parties is not None and len(paths) != fmt.parties:
            raise ValueError(f"{fmt.name} shares are for {fmt.parties} parties, "
                             f"not {len(paths)}")
        self.paths = paths
        self.fmt = fmt
        self.files: list[BinaryIO] = []
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="masks")
        self._ahead: tuple[tuple[int, ...], Future] | None = None
        try:
            for p in paths:
                private_dir(p.parent)
                fh = open_private(p)
                fh.write(fmt.header)
                self.files.append(fh)
        except BaseException:
            self.close()
            raise
        self.upload_bytes = [0] * len(paths)

    def _masks(self, rows: int, d: int) -> np.ndarray:
        # Chunks have one size except the last, so the next one's masks are
        # drawn at the current one's size and cut to the real rows.
        shape = (len(self.files) - 1, rows, d)
        ahead, self._ahead = self._ahead, None
        masks = ahead[1].result() if ahead and ahead[0] == shape else random_ring(shape)
        self._ahead = (shape, self._pool.submit(random_ring, shape))
        return masks

    def write(self, encoded: np.ndarray, real: np.ndarray) -> None:
        # Whole chunks, padding rows included, so no row is gathered or scattered:
        # a padding row's masks are zeroed, which makes its share zero in every file.
        rows, d = encoded.shape
        masks = self._masks(rows, d)[:, :rows]
        padding = np.flatnonzero(~real)
        if padding.size:
            masks[:, padding] = 0
        shares = self.fmt.split(encoded, len(self.files), masks)
        real_words = (rows - padding.size) * d * self.fmt.words
        for k, fh in enumerate(self.files):
            fh.write(shares[k].data.cast("B"))
            self.upload_bytes[k] += 8 * real_words

    def start(self) -> None:
        """Nothing to start: the masks are drawn a chunk ahead from the first write on."""

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        for fh in self.files:
            fh.close()


def format_integers(values: np.ndarray) -> bytes:
    """``values`` as whitespace-separated decimal text, formatted with numpy.

    Every number gets a sign and the same number of digits (``+000123``, which
    C++ streams read as 123): fixed width turns formatting into a few vector
    operations, about ten times faster than ``str()`` per number.
    """
    values = np.asarray(values, dtype=np.int64)
    if values.size == 0:
        return b"\n"
    # |int64 min| does not fit in int64; the uint64 view of the negation does.
    magnitude = np.where(values < 0, -values.view(np.uint64), values.view(np.uint64))
    width = len(str(int(magnitude.max())))
    text = np.empty((values.size, width + 2), dtype=np.uint8)
    text[:, 0] = np.where(values < 0, ord("-"), ord("+"))
    # Up to 9 digits fit in uint32, whose divisions cost half; one divmod per digit.
    rest = magnitude.astype(np.uint32) if width <= 9 else magnitude
    digit = np.empty_like(rest)
    for k in range(width, 0, -1):
        np.divmod(rest, 10, out=(rest, digit))
        np.add(digit, ord("0"), out=text[:, k], casting="unsafe")
    text[:, -1] = ord(" ")
    text[-1, -1] = ord("\n")
    return text.tobytes()


class TextSink:
    """Party 0's MP-SPDZ input file: the data owner holds every noisy row."""

    def __init__(self, path: Path, parties: int) -> None:
        private_dir(path.parent)
        self.fh = open_private(path)
        self.upload_bytes = [0] * parties

    def start(self) -> None:
        """Nothing to start: the data owner's rows need no masks."""

    def write(self, encoded: np.ndarray, real: np.ndarray) -> None:
        self.fh.write(format_integers(encoded.view(np.int64).ravel()))
        self.upload_bytes[0] += int(np.count_nonzero(real)) * encoded.shape[1] * 8

    def close(self) -> None:
        self.fh.close()


def _add_blocks(acc: np.ndarray, abs_acc: np.ndarray, layout: Layout, start: int,
                encoded: np.ndarray, magnitude: np.ndarray) -> None:
    """Add whole chunks' rows to their accumulators, a block at a time.

    Chunks are stored (R, K, d), so summing over R gives the K block sums, as the
    program does; padding rows are zero and add nothing. One scatter per block
    instead of per row, which matters at s = 50.
    """
    assert layout.block_acc is not None  # a blocked layout's
    R, K, d = layout.block_rows, layout.chunk_blocks, encoded.shape[1]
    chunks = encoded.reshape(-1, R, K, d)
    first = start // (R * K) * K
    block_acc = layout.block_acc[first: first + chunks.shape[0] * K]
    np.add.at(acc, block_acc, chunks.sum(axis=1, dtype=np.uint64).reshape(-1, d))
    sums = magnitude.reshape(-1, R, K, d).sum(axis=1)
    np.add.at(abs_acc, block_acc, sums.reshape(-1, d))


def _add_lattice_noise(encoded: np.ndarray, magnitude: np.ndarray, noise: np.ndarray,
                       fp: FixedPoint) -> None:
    """Add int64 lattice noise to encoded ring elements, in place, mod 2^64.

    Two's complement makes the uint64 sum the ring sum; ``magnitude`` keeps
    bounding |value| so the bucket bound stays sound.
    """
    magnitude += np.abs(noise)
    worst = float(magnitude.max()) if magnitude.size else 0.0
    if worst >= 2.0**63:
        raise InputError(
            f"fixed-point overflow: a noisy value encodes to 2^{math.log2(worst):.1f}, beyond "
            f"the ring's bound 2^63; raise --epsilon, or lower --frac-bits (now {fp.frac_bits}) "
            "as far as `ltm run` still certifies the noise")
    encoded += noise.view(np.uint64)


@dataclass
class Prepared:
    expected: np.ndarray  # (m, d) uint64
    abs_sums: np.ndarray  # (m, d) float64 bound on |T| in encoded units
    upload_bytes: list[int]
    seconds: float
    stats: dict = field(default_factory=dict)
    # A streamed run's stages (clients, servers, overlap), reported beside the timings.
    stages: dict = field(default_factory=dict)
    # A streamed run's share-file shape, when its servers wrote blocked files.
    layout: dict = field(default_factory=dict)


def prepare_inputs(data: np.ndarray, sketch: Sketch, layout: Layout, noise: NoiseSpec,
                   fp: FixedPoint, sink: Sink, rng: np.random.Generator) -> Prepared:
    """Stream every party's input file and the plaintext result to check against.

    Three stages overlap, each on its own thread: the next chunk's noise is
    drawn, this chunk is encoded and summed, and the previous chunk is shared
    and written (numpy, the cipher and file writes release the GIL). The noise
    stage runs one chunk at a time, so the draws come in the same order as
    without threads.
    """
    started = time.perf_counter()
    # A seeded sink draws its seeds and masks beside the noise, on this clock.
    sink.start()
    n, d = data.shape
    m = sketch.m
    acc_of_slot = accumulator_index(sketch).ravel()
    if layout.kind == "blocked":
        layout.check(acc_of_slot)
    acc = np.zeros((2 * m + 1, d), dtype=np.uint64)
    abs_acc = np.zeros((2 * m + 1, d), dtype=np.float64)
    step = layout.chunk_rows * max(1, _STREAM_ROWS // layout.chunk_rows) \
        if layout.kind == "blocked" else _STREAM_ROWS
    starts = range(0, layout.total_rows, step)
    noise_sum = 0.0
    noise_sq = 0.0

    def draw(start: int) -> tuple[np.ndarray, float, float] | None:
        if noise.zero_output:
            return None
        # One draw per file row: a padding row's draws are discarded, so every
        # real entry still gets an independent one.
        drawn = noise.sample_lattice(rng, (min(step, layout.total_rows - start), d))
        drawn[layout.file_slot[start:start + step] < 0] = 0
        # Statistics of the noise released, in reals: int64 squares would overflow.
        flat = drawn.ravel().astype(np.float64)
        flat /= fp.scale
        return drawn, float(flat.sum()), float(np.dot(flat, flat))

    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="prepare")
    writing: Future | None = None
    try:
        drawing: Future | None = None
        for k, start in enumerate(starts):
            drawn = (drawing or pool.submit(draw, start)).result()
            drawing = pool.submit(draw, starts[k + 1]) if k + 1 < len(starts) else None
            slots = layout.file_slot[start:start + step]
            real = slots >= 0
            lattice_noise = None
            if drawn is None:  # R_D outputs zeros: neither data nor noise leaves the client
                values = np.zeros((slots.size, d), dtype=np.float64)
            else:
                noise_draw, total, squares = drawn
                noise_sum += total
                noise_sq += squares
                # A padding slot (-1) reads client n - 1's row; zeroed right after.
                lattice_noise = noise_draw
                values = np.take(data, slots % n, axis=0).astype(np.float64)
                values[~real] = 0
            encoded, magnitude = fp.encode_in_place(values)
            if lattice_noise is not None:
                _add_lattice_noise(encoded, magnitude, lattice_noise, fp)
            if layout.kind == "blocked":
                _add_blocks(acc, abs_acc, layout, start, encoded, magnitude)
            else:
                live = acc_of_slot[slots[real]]
                np.add.at(acc, live, encoded[real])
                np.add.at(abs_acc, live, magnitude[real])
            if writing is not None:
                writing.result()
            writing = pool.submit(sink.write, encoded, real)
        if writing is not None:
            writing.result()
    finally:
        # No thread may touch the sink once it is closed.
        pool.shutdown(wait=True, cancel_futures=True)
        sink.close()
    expected = acc[:m] - acc[m:2 * m]
    abs_sums = abs_acc[:m] + abs_acc[m:2 * m]
    count = sketch.s * n * d
    mean = noise_sum / count
    stats = {"noise_mean": mean, "noise_var": noise_sq / count - mean**2}
    return Prepared(expected, abs_sums, list(sink.upload_bytes),
                    time.perf_counter() - started, stats)
