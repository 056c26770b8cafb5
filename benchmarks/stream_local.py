"""A streamed ``local`` run, this checkout against another: T_end_to_end, paired.

Runs ``ltm run --program local --clients N --sparsity S --parties 3`` (by default
Table 5's s = 50 cell, n = 500,000) with this checkout's code and with the code of
``--baseline DIR`` (another checkout of the project, e.g. a ``git worktree`` of an
earlier revision), alternating A B B A ..., so that a drifting load on a shared
machine moves both alike. Each run is a fresh ``python -m harness`` process whose
``PYTHONPATH`` is its checkout, verified bit for bit as every run is. It prints
each run's T_end_to_end line as ``ltm run`` printed it, the medians of
T_end_to_end and of the clients' and servers' CPU seconds, and the ratio of the
T_end_to_end medians (this / baseline; below 1 is faster). Without
``--baseline`` this checkout is compared with itself, which shows the spread.

    python -m benchmarks.stream_local --baseline ../main-checkout [--repeat 3] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks._cli import add_workload_arguments, parse_arguments, run_benchmark

ROOT = Path(__file__).resolve().parents[1]
SMOKE = {"clients": 3000, "sparsity": 5, "repeat": 1}


def _run(checkout: Path, args: argparse.Namespace, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    command = [sys.executable, "-m", "harness", "run", "--program", "local",
               "--clients", str(args.clients), "--dim", str(args.dim), "--rows", str(args.rows),
               "--sparsity", str(args.sparsity), "--parties", "3", "--out", str(out)]
    done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"stream_local: {checkout.name}: ltm run exited {done.returncode}: "
                         f"{done.stderr.strip()[-500:]}")
    result = json.loads((out / "result.json").read_text())
    if not result["verification"]["ok"]:  # never timed: a run that is wrong
        raise SystemExit(f"stream_local: {checkout.name}: the run's sums were not verified")
    line = next(s.strip() for s in done.stdout.splitlines() if "T_end_to_end" in s)
    timings = result["timings"]
    return {"t_end_to_end_s": result["t_end_to_end_s"], "line": line,
            "clients_cpu_s": timings.get("stream_clients_cpu_s", 0.0),
            "servers_cpu_s": timings.get("stream_servers_cpu_s", 0.0)}


def _measure(args: argparse.Namespace, scratch: Path) -> dict:
    sides = {"this": ROOT, "baseline": (args.baseline or ROOT).resolve()}
    samples: dict[str, list[dict]] = {name: [] for name in sides}
    for rep in range(args.repeat):
        order = list(sides) if rep % 2 == 0 else list(sides)[::-1]
        for name in order:
            sample = _run(sides[name], args, scratch / f"{name}-{rep}")
            samples[name].append(sample)
            print(f"round {rep + 1}/{args.repeat} {name}: {sample['line']}", flush=True)
    medians = {name: {key: statistics.median(s[key] for s in runs)
                      for key in ("t_end_to_end_s", "clients_cpu_s", "servers_cpu_s")}
               for name, runs in samples.items()}
    ratio = medians["this"]["t_end_to_end_s"] / medians["baseline"]["t_end_to_end_s"]
    return {"workload": {k: getattr(args, k) for k in ("clients", "dim", "rows", "sparsity")},
            "repeat": args.repeat, "baseline_given": args.baseline is not None,
            "samples": samples, "medians": medians, "ratio": ratio}


def _report(result: dict) -> str:
    w = result["workload"]
    lines = [f"n={w['clients']} d={w['dim']} m={w['rows']} s={w['sparsity']} S=3, "
             f"{result['repeat']} runs each, medians (s):",
             f"{'code':10s} {'T_end_to_end':>12s} {'clients CPU':>12s} {'servers CPU':>12s}"]
    for name, med in result["medians"].items():
        lines.append(f"{name:10s} {med['t_end_to_end_s']:12.3f} {med['clients_cpu_s']:12.3f} "
                     f"{med['servers_cpu_s']:12.3f}")
    against = "baseline" if result["baseline_given"] else "this checkout again"
    lines.append(f"T_end_to_end this/{against}: {result['ratio']:.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stream_local",
                                     description=__doc__.split("\n")[0])
    add_workload_arguments(parser, clients=500_000, sparsity=50, repeat=3)
    parser.add_argument("--baseline", type=Path,
                        help="another checkout of the project to compare with (default: "
                             "this one, run again)")
    args = parse_arguments(parser, argv, SMOKE)
    if args.baseline is not None and not (args.baseline / "harness" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline} is not a checkout of the project "
                     "(it has no harness/__init__.py)")
    return run_benchmark("stream_local", args.json, lambda tmp: _measure(args, tmp), _report)


if __name__ == "__main__":
    sys.exit(main())
