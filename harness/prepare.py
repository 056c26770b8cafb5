"""Client side: noisy copies, fixed-point encoding, sharing, server inputs.

Inputs are produced in file order, one chunk of file rows at a time, so memory
stays bounded by the chunk whatever n and s are. Noise is i.i.d. per noisy
entry, so drawing it in file order instead of client order changes nothing.

While streaming, the plaintext result sum_i S_i enc(X_i) mod 2^64 is
accumulated from the sketch itself (not from the layout), which is what the
revealed sketch is checked against.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.encoding import FixedPoint
from harness.layout import Layout, accumulator_index
from harness.noise import NoiseSpec
from harness.sharing import share
from harness.sketch import Sketch

__all__ = ["SHARE_HEADER", "Prepared", "ShareSink", "TextSink", "prepare_inputs",
           "read_share_file", "write_share_file"]

_DESCRIPTOR = b"Z2^64" + struct.pack("<I", 64)
# Persistence/Transactions-P<i>.data: header length, descriptor, then 8-byte shares.
SHARE_HEADER = struct.pack("<Q", len(_DESCRIPTOR)) + _DESCRIPTOR
_STREAM_ROWS = 1 << 18


def write_share_file(path: Path, shares: np.ndarray) -> None:
    with open(path, "wb") as fh:
        fh.write(SHARE_HEADER)
        fh.write(np.ascontiguousarray(shares, dtype="<u8").tobytes())


def read_share_file(path: Path) -> np.ndarray:
    with open(path, "rb") as fh:
        if fh.read(len(SHARE_HEADER)) != SHARE_HEADER:
            raise ValueError(f"{path} is not a semi2k Z2^64 share file")
        return np.fromfile(fh, dtype="<u8")


class ShareSink:
    """One share file per server; each server's file holds only its own shares."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self.files = []
        for p in paths:
            p.parent.mkdir(parents=True, exist_ok=True)
            fh = open(p, "wb")  # noqa: SIM115 - closed in close()
            fh.write(SHARE_HEADER)
            self.files.append(fh)
        self.upload_bytes = [0] * len(paths)

    def write(self, encoded: np.ndarray, real: np.ndarray) -> None:
        shares = share(encoded[real], len(self.files))
        for k, fh in enumerate(self.files):
            # Padding rows are zero in every file: public positions, nothing to hide.
            block = np.zeros_like(encoded)
            block[real] = shares[k]
            fh.write(block.tobytes())
            self.upload_bytes[k] += shares[k].nbytes

    def close(self) -> None:
        for fh in self.files:
            fh.close()


class TextSink:
    """Party 0's MP-SPDZ input file: the data owner holds every noisy row."""

    def __init__(self, path: Path, parties: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(path, "w")  # noqa: SIM115 - closed in close()
        self.upload_bytes = [0] * parties

    def write(self, encoded: np.ndarray, real: np.ndarray) -> None:
        signed = encoded.view(np.int64).ravel().tolist()
        self.fh.write(" ".join(map(str, signed)))
        self.fh.write("\n")
        self.upload_bytes[0] += int(np.count_nonzero(real)) * encoded.shape[1] * 8

    def close(self) -> None:
        self.fh.close()


@dataclass
class Prepared:
    expected: np.ndarray  # (m, d) uint64
    abs_sums: np.ndarray  # (m, d) float64 bound on |T| in encoded units
    upload_bytes: list[int]
    seconds: float
    stats: dict = field(default_factory=dict)


def prepare_inputs(data: np.ndarray, sketch: Sketch, layout: Layout, noise: NoiseSpec,
                   fp: FixedPoint, sink: ShareSink | TextSink,
                   rng: np.random.Generator) -> Prepared:
    started = time.perf_counter()
    n, d = data.shape
    m = sketch.m
    acc_of_slot = accumulator_index(sketch).ravel()
    bucket_of_slot = sketch.rows.ravel()
    acc = np.zeros((2 * m + 1, d), dtype=np.uint64)
    abs_sums = np.zeros((m, d), dtype=np.float64)
    step = layout.chunk_rows * max(1, _STREAM_ROWS // layout.chunk_rows) \
        if layout.kind == "blocked" else _STREAM_ROWS
    noise_sum = 0.0
    noise_sq = 0.0
    try:
        for start in range(0, layout.total_rows, step):
            slots = layout.file_slot[start:start + step]
            real = slots >= 0
            live = slots[real]
            values = np.zeros((slots.size, d), dtype=np.float64)
            if not noise.zero_output:
                drawn = noise.sample(rng, (live.size, d))
                noise_sum += float(drawn.sum())
                noise_sq += float(np.square(drawn).sum())
                values[real] = data[live % n] + drawn
            encoded = fp.encode(values)
            signed = encoded[real].view(np.int64)
            np.add.at(acc, acc_of_slot[live], encoded[real])
            np.add.at(abs_sums, bucket_of_slot[live], np.abs(signed.astype(np.float64)))
            sink.write(encoded, real)
    finally:
        sink.close()
    expected = acc[:m] - acc[m:2 * m]
    count = sketch.s * n * d
    mean = noise_sum / count
    stats = {"noise_mean": mean, "noise_var": noise_sq / count - mean**2}
    return Prepared(expected, abs_sums, list(sink.upload_bytes),
                    time.perf_counter() - started, stats)
