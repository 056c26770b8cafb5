"""What every benchmark's command line shares: the workload's options, and the run.

The run refuses to overwrite ``--json`` before measuring anything (a benchmark
takes minutes, and its results are never replaced silently), measures in a
scratch directory, turns the harness's errors into one line, then writes the
JSON and prints the report.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.errors import LtmError

__all__ = ["add_workload_arguments", "parse_arguments", "run_benchmark"]


def add_workload_arguments(parser: argparse.ArgumentParser, *, clients: int, sparsity: int,
                           repeat: int) -> None:
    parser.add_argument("--clients", type=int, default=clients)
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--sparsity", type=int, default=sparsity)
    parser.add_argument("--repeat", type=int, default=repeat)
    parser.add_argument("--json", type=Path, help="also write the results here")


def parse_arguments(parser: argparse.ArgumentParser, argv: list[str] | None,
                    smoke: dict[str, Any]) -> argparse.Namespace:
    """``parser``'s arguments, with ``--smoke``: the benchmark at its smallest size (the
    options in ``smoke`` default to it; options given still win), in seconds, to check
    that it runs (its figures then mean nothing)."""
    parser.add_argument("--smoke", action="store_true",
                        help="run at the smallest size, in seconds, to check the benchmark "
                             "runs: " + " ".join(_option(k, v) for k, v in smoke.items()))
    args = parser.parse_args(argv)
    if args.smoke:
        parser.set_defaults(**smoke)
        args = parser.parse_args(argv)
    return args


def _option(dest: str, value: Any) -> str:
    values = value if isinstance(value, list) else [value]
    return " ".join([f"--{dest.replace('_', '-')}", *map(str, values)])


def run_benchmark(name: str, json_path: Path | None, measure: Callable[[Path], dict],
                  report: Callable[[dict], str]) -> int:
    """``measure(scratch_dir)``, then ``report(result)`` printed; the exit status."""
    if json_path is not None and json_path.exists():
        print(f"{name}: error: {json_path} exists; not overwriting it", file=sys.stderr)
        return 1
    try:
        with tempfile.TemporaryDirectory(prefix="ltm-bench-") as tmp:
            result = measure(Path(tmp))
    except LtmError as exc:  # bad input, no root, no MP-SPDZ: one line
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 1
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2) + "\n")
    print(report(result))
    return 0
