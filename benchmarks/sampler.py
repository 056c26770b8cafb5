"""A client worker's chunks with the compiled Gaussian sampler against numpy's path.

One process makes the same chunks of a workload (by default Table 5's s = 50
cell: n = 500,000, d = 10, m = 100, S = 3, full sharing into private buffers, no
servers) three times per repetition, drawing its noise through the compiled loop
(``harness/clients/_gaussian.c``) as a run does (four values at a time where the
CPU has AVX2), through the same loop one value at a time, and through numpy's
sampler and a pass per step (what a harness installed without a C compiler does),
the order rotating. All draw the same values from the same kind of generator. It
prints the CPU time per noisy value of each, their medians, and the medians of the
paired ratios (compiled / numpy and compiled / one at a time; below 1 is faster).

    python -m benchmarks.sampler [--clients N] [--sparsity S] [--chunks K]
                                 [--repeat R] [--json FILE] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from benchmarks._cli import add_workload_arguments, parse_arguments, run_benchmark
from harness.clients import (
    ADDITIVE,
    FixedPoint,
    LatticeGaussian,
    NumpyGaussian,
    Sketch,
    SyntheticRows,
    compiled_gaussian,
    vector_gaussian,
)
from harness.privacy import NoiseSpec
from harness.stream import StreamPlan
from harness.stream.noisy import NoisyChunks
from harness.stream.produce import _FullShares

SMOKE = {"clients": 3000, "sparsity": 5, "chunks": 2, "repeat": 1}
_PARTIES = 3


class _Private:
    """A server's channel buffer stand-in: plain memory, one slot."""

    def __init__(self, words: int) -> None:
        self.words = np.zeros(words + 64, dtype=np.uint64)

    def slot(self, slot: int, count: int) -> np.ndarray:
        return self.words[:count]

    def raw(self, slot: int, nbytes: int, offset: int = 0) -> memoryview:
        return memoryview(self.words.view(np.uint8))[offset: offset + nbytes + 32]


def measure(args: argparse.Namespace) -> dict:
    if not compiled_gaussian():
        raise SystemExit("benchmarks.sampler: error: the compiled sampler is not built; "
                         "install the harness with a C compiler (pip install -e .)")
    n, d, m, s = args.clients, args.dim, args.rows, args.sparsity
    plan = StreamPlan(n, d, m, s, _PARTIES, ADDITIVE.name, workers=2)
    sketch = Sketch.sparse(n, m, s, seed=5)
    noise = NoiseSpec("gaussian", n, m, d, s, epsilon=1.0, delta=1e-6)
    rows = SyntheticRows(n, d, 1.0, 7)
    sharer = _FullShares(plan)
    buffers = [_Private(plan.clients_per_chunk * s * d) for _ in range(_PARTIES)]
    four = vector_gaussian()  # what a run uses: four at a time where the CPU has AVX2
    makers = {}
    for name in ("compiled", "one at a time", "numpy"):
        noisy = NoisyChunks(plan, sketch, rows, noise, FixedPoint(16), sharer.group)
        noisy.gaussian = (NumpyGaussian(noise.lattice_sigma, noisy.rng) if name == "numpy"
                          else LatticeGaussian(noise.lattice_sigma, noisy.rng.bit_generator))
        makers[name] = noisy
    chunks = plan.chunks_of(0)[: args.chunks]
    values = sum(plan.span(k)[1] - plan.span(k)[0] for k in chunks) * s * d
    samples: dict[str, list[float]] = {name: [] for name in makers}
    try:
        for rep in range(args.repeat + 1):  # the first round warms the buffers: not kept
            names = list(makers)
            for name in names[rep % 3:] + names[: rep % 3]:
                vector_gaussian(four and name == "compiled")
                started = time.process_time()
                for k in chunks:
                    makers[name].chunk(k, sharer.sink(buffers, 0))  # type: ignore[arg-type]
                if rep:
                    samples[name].append(1e9 * (time.process_time() - started) / values)
    finally:
        vector_gaussian(four)

    def paired(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(samples[a], samples[b], strict=True))

    return {"workload": {"clients": n, "dim": d, "rows": m, "sparsity": s,
                         "chunks": len(chunks), "values": values, "four_at_a_time": four},
            "repeat": args.repeat, "samples": samples,
            "medians": {k: statistics.median(v) for k, v in samples.items()},
            "ratio": paired("compiled", "numpy"),
            "four_over_one": paired("compiled", "one at a time")}


def report(result: dict) -> str:
    w = result["workload"]
    lines = [f"n={w['clients']} d={w['dim']} m={w['rows']} s={w['sparsity']} S={_PARTIES}: "
             f"{w['chunks']} chunks of one worker, {w['values']} noisy values, "
             f"{result['repeat']} rounds; ns of CPU per noisy value"]
    for name, times in result["samples"].items():
        lines.append(f"{name:13s} " + " ".join(f"{t:.1f}" for t in times)
                     + f"   median {result['medians'][name]:.1f}")
    lines.append(f"compiled / numpy, paired: median {result['ratio']:.3f}")
    how = "four at a time (AVX2)" if w["four_at_a_time"] else "one at a time (no AVX2 here)"
    lines.append(f"compiled, {how} / one at a time, paired: median "
                 f"{result['four_over_one']:.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sampler",
                                     description=__doc__.split("\n\n")[0])
    add_workload_arguments(parser, clients=500_000, sparsity=50, repeat=7)
    parser.add_argument("--chunks", type=int, default=40, help="chunks per round")
    args = parse_arguments(parser, argv, SMOKE)
    if args.clients < 1 or args.sparsity < 1 or args.chunks < 1 or args.repeat < 1:
        print("benchmarks.sampler: error: --clients, --sparsity, --chunks and --repeat must "
              "be at least 1", file=sys.stderr)
        return 1
    return run_benchmark("benchmarks.sampler", args.json, lambda _scratch: measure(args),
                         report)


if __name__ == "__main__":
    sys.exit(main())

