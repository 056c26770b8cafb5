"""The clients' noise generator against numpy's default: normal draws per second.

``harness.privacy.noise_rng`` is a numpy Generator over randomgen's AESCounter
(AES-128-CTR, AES-NI where the CPU has it), keyed from ``os.urandom``: PCG64,
numpy's default, is not cryptographic, and its state can be recovered from its
outputs. Both generators draw the same ``standard_normal`` blocks (the Gaussian
noise of preparation) and Poisson blocks (Skellam noise), interleaved in one
run so that both see the same machine load; each figure is the minimum and the
median over ``--repeat`` repetitions. Each repetition times both generators
back to back (alternating which goes first), and the headline ratio is the
median of those paired ratios: on a loaded machine the minima and medians of
each side also measure the neighbours. The target is a ratio of at most
1.15 for normal draws.

    python -m benchmarks.noise_rng [--draws N] [--repeat K] [--json FILE] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks._cli import parse_arguments
from harness.privacy import NOISE_GENERATOR, noise_rng

TARGET = 1.15
# The smallest size (--smoke): in seconds.
SMOKE = {"draws": 100_000, "repeat": 3}
# A Poisson mean in the range Skellam noise uses (numpy samples it by PTRS).
_POISSON_MEAN = 1e8


def _time(draw, generator: np.random.Generator, size: int) -> float:
    started = time.perf_counter()
    draw(generator, size)
    return time.perf_counter() - started


def measure(draws: int, repeat: int) -> dict:
    generators = {"csprng": noise_rng(), "pcg64": np.random.Generator(np.random.PCG64())}
    kinds = {
        "normal": lambda g, k: g.standard_normal(k),
        "poisson": lambda g, k: g.poisson(_POISSON_MEAN, k),
    }
    times: dict[str, dict[str, list[float]]] = {k: {g: [] for g in generators} for k in kinds}
    for kind, draw in kinds.items():
        for gen in generators.values():  # warm-up: page in the output buffers
            _time(draw, gen, draws // 10)
        order = list(generators.items())
        for k in range(repeat):
            # ABBA: alternate which goes first, so a drifting load favours neither
            for name, gen in order if k % 2 == 0 else order[::-1]:
                times[kind][name].append(_time(draw, gen, draws))
    result: dict = {"generator": NOISE_GENERATOR, "draws": draws, "repeat": repeat}
    for kind, per in times.items():
        row: dict[str, object] = {name: {"min_ns": 1e9 * min(t) / draws,
                                         "median_ns": 1e9 * statistics.median(t) / draws}
                                  for name, t in per.items()}
        mine, pcg = min(per["csprng"]), min(per["pcg64"])
        row["ratio_min"] = mine / pcg
        row["ratio_median"] = statistics.median(per["csprng"]) / statistics.median(per["pcg64"])
        # Each repetition times both back to back, under nearly the same load.
        row["ratio_paired"] = statistics.median(
            a / b for a, b in zip(per["csprng"], per["pcg64"], strict=True))
        result[kind] = row
    return result


def report(result: dict) -> str:
    lines = [f"generator: {result['generator']}",
             f"{result['draws']} draws, {result['repeat']} repetitions, ns per draw (min / median)"]
    for kind in ("normal", "poisson"):
        row = result[kind]
        lines.append(f"{kind:8s} csprng {row['csprng']['min_ns']:.2f} / "
                     f"{row['csprng']['median_ns']:.2f}   pcg64 {row['pcg64']['min_ns']:.2f} / "
                     f"{row['pcg64']['median_ns']:.2f}   ratio {row['ratio_min']:.3f} / "
                     f"{row['ratio_median']:.3f}, paired {row['ratio_paired']:.3f}")
    ratio = result["normal"]["ratio_paired"]
    verdict = "within" if ratio <= TARGET else "above"
    lines.append(f"csprng / pcg64 normal draws: {ratio:.3f} (median of {result['repeat']} "
                 f"paired repetitions; {verdict} {TARGET}, the most the CSPRNG should cost)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.noise_rng",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parse_arguments(parser, argv, SMOKE)
    if not (1000 <= args.draws <= 10**9 and 1 <= args.repeat <= 1000):
        print("benchmarks.noise_rng: error: --draws must lie in [1000, 1e9] and --repeat in "
              "[1, 1000]", file=sys.stderr)
        return 1
    if args.json is not None and args.json.exists():
        print(f"benchmarks.noise_rng: error: {args.json} exists; not overwriting it",
              file=sys.stderr)
        return 1
    result = measure(args.draws, args.repeat)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
