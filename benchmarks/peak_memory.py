"""Wall time and peak memory of a whole command, its children included.

    python -m benchmarks.peak_memory [--interval S] [--json FILE] -- COMMAND...
    python -m benchmarks.peak_memory --smoke        # a small Python, to check it runs

Samples, every ``--interval`` seconds, the proportional set size (PSS, from
``/proc/PID/smaps_rollup``) of the command and every process below it, and
reports the largest sum. PSS splits shared pages between the processes that
map them, so MP-SPDZ's three parties loading the same library are not counted
three times, as summed RSS would; the page cache (share files written and read
back) is the kernel's and not counted. A peak shorter than the interval can be
missed, so the figure is a lower bound within one interval's growth. The sampler
is :class:`harness.experiments.PeakMemory`'s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._cli import parse_arguments
from harness.experiments import PeakMemory, tree_pss_bytes

__all__ = ["main", "tree_pss_bytes"]

# The smallest size (--smoke, without a command): a second's sampling of a small Python.
SMOKE = {"interval": 0.05}
SMOKE_COMMAND = [sys.executable, "-c", "import numpy, time; a = numpy.ones(1 << 22); "
                 "time.sleep(0.5)"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peak_memory",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=0.25)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parse_arguments(parser, argv, SMOKE)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command and args.smoke:
        command = SMOKE_COMMAND
    if not command:
        parser.error("give the command to measure after --")
    if not args.interval > 0:
        parser.error(f"--interval must be positive, got {args.interval}")
    started = time.perf_counter()
    proc = subprocess.Popen(command)
    with PeakMemory(proc.pid, interval=args.interval) as sampler:
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            code = proc.wait()
    peak = sampler.bytes
    wall = time.perf_counter() - started
    print(f"peak_memory: exit {code}, wall {wall:.1f} s ({wall / 60:.2f} min), "
          f"peak PSS {peak / 2**30:.2f} GiB over the process tree", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({"command": command, "exit": code, "wall_s": wall,
                                         "peak_pss_bytes": peak}, indent=2) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
