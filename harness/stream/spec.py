"""A streamed run as a host takes part in it: its public description, as JSON.

A server host that sums (or writes) its stream, and a client host that makes
its range of clients' shares, each need the run's :class:`StreamPlan`, the
counter-based sketch's seed and shape, and, on the clients' side, the noise's
parameters, the fixed point and where the rows come from. All of it is public;
none of it is a share. It travels as JSON, never pickled: a host reads numbers
and names, checked as it reads them (:meth:`StreamSpec.from_json`), and runs
nothing it is sent.

A client host's rows are synthetic (a function of (seed, client): only the
seed travels) or the rows of its own range, shipped as a ``.npy`` written a
chunk at a time (:func:`write_rows`) and read back through :class:`OffsetRows`,
which takes the run's client indices.
"""

from __future__ import annotations

import dataclasses
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from harness.clients import FixedPoint, NpyRows, Rows, Sketch, SyntheticRows
from harness.privacy import NoiseSpec
from harness.stream.blocks import BlockShape, FileShape
from harness.stream.plan import StreamPlan

__all__ = ["OffsetRows", "StreamSpec", "write_rows"]

_VERSION = 1


@dataclass(frozen=True)
class StreamSpec:
    """What a host must know of a streamed run (servers: no noise, no rows)."""

    plan: StreamPlan
    sketch: Sketch
    as_input: bool = False
    blocks: FileShape | None = None  # the share files' shape, when servers write them
    noise: NoiseSpec | None = None
    frac_bits: int = 16
    # {"kind": "synthetic", "seed": S} or {"kind": "npy", "file": NAME}; with eta.
    rows: dict | None = None

    @property
    def fp(self) -> FixedPoint:
        return FixedPoint(self.frac_bits)

    def to_json(self) -> str:
        if not self.sketch.counter_based or self.sketch.seed is None:
            raise ValueError("a streamed run's sketch is a function of its seed")
        return json.dumps({
            "version": _VERSION, "plan": dataclasses.asdict(self.plan),
            "sketch": {"m": self.sketch.m, "n": self.sketch.n, "s": self.sketch.s,
                       "seed": self.sketch.seed},
            "as_input": self.as_input,
            "blocks": self.blocks.describe() if self.blocks else None,
            "noise": dataclasses.asdict(self.noise) if self.noise else None,
            "frac_bits": self.frac_bits, "rows": self.rows})

    @classmethod
    def from_json(cls, text: str) -> StreamSpec:
        """The spec, every field checked for its type: a malformed one is a ValueError."""
        raw = json.loads(text)
        if not isinstance(raw, dict) or raw.get("version") != _VERSION:
            raise ValueError("not a stream description of this harness version")
        plan = raw["plan"]
        n, d, m, s, parties, workers, chunk = (_int(plan[k]) for k in (
            "n", "d", "m", "s", "parties", "workers", "chunk"))
        drop = plan.get("drop_poisoned", False)
        if not isinstance(drop, bool):
            raise ValueError(f"drop_poisoned is {drop!r}, not true or false")
        poisoned = tuple(sorted(_int(c) for c in plan.get("poisoned", ())))
        if poisoned and not 0 <= poisoned[0] <= poisoned[-1] < n:
            raise ValueError(f"poisoned clients {poisoned} beyond the run's {n}")
        plan = StreamPlan(n, d, m, s, parties, format=str(plan["format"]), workers=workers,
                          chunk=chunk, sharing=str(plan["sharing"]),
                          hosts=tuple(_int(h) for h in plan["hosts"]),
                          poisoned=poisoned,
                          drop_poisoned=drop)
        sk = raw["sketch"]
        sketch = Sketch(_int(sk["m"]), count=_int(sk["n"]), sparsity=_int(sk["s"]),
                        seed=_int(sk["seed"]))
        blocks = _shape(raw["blocks"]) if raw.get("blocks") else None
        noise = raw.get("noise")
        if noise is not None:
            noise = NoiseSpec(**{k: v for k, v in noise.items()
                                 if k in {f.name for f in dataclasses.fields(NoiseSpec)}})
        rows = raw.get("rows")
        if rows is not None and (not isinstance(rows, dict)
                                 or rows.get("kind") not in ("synthetic", "npy")):
            raise ValueError(f"unknown rows {rows!r}")
        return cls(plan, sketch, bool(raw["as_input"]), blocks, noise,
                   _int(raw["frac_bits"]), rows)

    def open_rows(self, directory: Path) -> Rows:
        """The clients' rows on a client host: synthetic, or its range's ``.npy``."""
        if self.rows is None:
            raise ValueError("this stream description is a server's: it has no rows")
        eta = float(self.rows["eta"])
        if self.rows["kind"] == "synthetic":
            return SyntheticRows(self.plan.n, self.plan.d, eta, _int(self.rows["seed"]))
        name = Path(str(self.rows["file"])).name  # a plain name in the host's directory
        return OffsetRows(NpyRows(directory / name, eta), _int(self.rows["first"]),
                          self.plan.n)


class OffsetRows:
    """Rows [first, first + k) of the run, stored as rows [0, k) of ``base``."""

    seed = None

    def __init__(self, base: Rows, first: int, n: int) -> None:
        self.base, self.first, self.n, self.d, self.eta = base, first, n, base.d, base.eta

    def _local(self, start: int, stop: int) -> tuple[int, int]:
        if start < self.first or stop - self.first > self.base.n:
            raise ValueError(f"clients [{start}, {stop}) are not this host's "
                             f"[{self.first}, {self.first + self.base.n})")
        return start - self.first, stop - self.first

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.base.read(*self._local(start, stop))

    def read_into(self, start: int, stop: int, out: np.ndarray) -> np.ndarray:
        return self.base.read_into(*self._local(start, stop), out)


def write_rows(rows: Rows, start: int, stop: int, out: IO[bytes], chunk: int = 1 << 16) -> int:
    """Rows [start, stop) as a float64 ``.npy`` into ``out``, a chunk at a time; bytes."""
    header: dict[str, Any] = {"descr": "<f8", "fortran_order": False,
                              "shape": (stop - start, rows.d)}
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, header)
    out.write(head.getvalue())
    written = len(head.getvalue())
    buffer = np.empty((min(chunk, max(1, stop - start)), rows.d))
    for first in range(start, stop, chunk):
        last = min(stop, first + chunk)
        block = rows.read_into(first, last, buffer)
        data = np.ascontiguousarray(block, dtype="<f8").tobytes()
        out.write(data)
        written += len(data)
    return written


def _shape(raw: dict) -> FileShape:
    """A share file's shape from its public description."""
    from harness.stream.slots import SlotShape

    if raw.get("kind") == "blocked-per-chunk":
        return BlockShape(_int(raw["block_rows"]), _int(raw["chunk_blocks"]))
    if raw.get("kind") == "slots-per-chunk":
        return SlotShape()
    raise ValueError(f"unknown share file shape {raw!r}")


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value
