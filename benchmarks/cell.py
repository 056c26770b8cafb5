"""One cell's T_end_to_end, paired: code trees and programs alternated, as ``ltm run`` runs.

For one workload (default Table 5's s = 50 cell: n = 500,000, d = 10, m = 100,
S = 3) this runs ``python -m harness run --program P ...`` in a real subprocess
for every code tree given (``--tree LABEL=DIR``: the harness imported from DIR,
e.g. a checkout of the main branch against this one) and every program, round
after round, the order rotated each round so that machine noise and order
effects fall on all alike. Every run is verified bit for bit by ``ltm run``
itself; a run that fails stops the benchmark. It reports the median
T_end_to_end of each (tree, program), the ratio of each tree's median to the
first tree's for each program, and each tree's ratio of each program to the
last one (``fast/local`` with the defaults).

    python -m benchmarks.cell [--tree LABEL=DIR ...] [--programs fast local]
        [--clients N] [--sparsity S] [--parties P] [--repeat K] [--json FILE] [--smoke]
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
from harness.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
# The smallest size (--smoke): every program once, in seconds.
SMOKE = {"clients": 2000, "sparsity": 2, "repeat": 1}


def _tree(text: str) -> tuple[str, Path]:
    label, sep, path = text.partition("=")
    if not sep or not label or not path:
        raise argparse.ArgumentTypeError(f"--tree {text!r}: give LABEL=DIR")
    return label, Path(path)


def one_run(tree: Path, program: str, args: argparse.Namespace, out: Path) -> dict:
    """One ``ltm run`` of the cell with the harness of ``tree``: its summary line and
    timings."""
    argv = [sys.executable, "-m", "harness", "run", "--program", program,
            "--clients", str(args.clients), "--dim", str(args.dim), "--rows", str(args.rows),
            "--sparsity", str(args.sparsity), "--parties", str(args.parties),
            "--out", str(out), "--force"]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=out.parent,
                          stdin=subprocess.DEVNULL, timeout=3600)
    if done.returncode != 0:
        raise InputError(f"ltm run --program {program} with {tree.name} failed: "
                         f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    line = next((x.strip() for x in done.stdout.splitlines()
                 if x.strip().startswith("T_end_to_end")), "")
    result = json.loads((out / "result.json").read_text())
    return {"t_end_to_end_s": result["t_end_to_end_s"], "t_mpc_s": result["t_mpc_s"],
            "line": line}


def measure(args: argparse.Namespace, scratch: Path, echo=print) -> dict:
    trees = dict(args.tree or [("this", ROOT)])
    for label, path in trees.items():
        if not (path / "harness" / "__init__.py").is_file():
            raise InputError(f"--tree {label}={path}: no harness package there; give the "
                             "root of a checkout")
    pairs = [(label, program) for label in trees for program in args.programs]
    runs: dict[str, dict[str, list[dict]]] = {
        label: {p: [] for p in args.programs} for label in trees}
    for rep in range(args.repeat):
        shift = rep % len(pairs)
        for label, program in pairs[shift:] + pairs[:shift]:
            done = one_run(trees[label], program, args, scratch / f"{label}-{program}")
            runs[label][program].append(done)
            echo(f"  round {rep + 1}: {label} {program}: {done['line']}")
    medians = {label: {p: statistics.median(r["t_end_to_end_s"] for r in runs[label][p])
                       for p in args.programs} for label in trees}
    first = next(iter(trees))
    last = args.programs[-1]
    return {
        "parameters": {"clients": args.clients, "dim": args.dim, "rows": args.rows,
                       "sparsity": args.sparsity, "parties": args.parties,
                       "repeat": args.repeat, "trees": list(trees),
                       "programs": list(args.programs)},
        "runs": runs,
        "medians": medians,
        # Each tree's median over the first tree's, per program.
        "tree_ratios": {label: {p: medians[label][p] / medians[first][p]
                                for p in args.programs} for label in trees},
        # Each program's median over the last program's, per tree.
        "program_ratios": {label: {p: medians[label][p] / medians[label][last]
                                   for p in args.programs} for label in trees},
    }


def report(result: dict) -> str:
    p = result["parameters"]
    lines = [f"n={p['clients']} d={p['dim']} m={p['rows']} s={p['sparsity']} "
             f"S={p['parties']}, {p['repeat']} rounds; median T_end_to_end, seconds"]
    for label, by_program in result["medians"].items():
        lines.append(f"{label:<10} " + "  ".join(f"{prog} {t:.3f}"
                                                  for prog, t in by_program.items()))
    first = p["trees"][0]
    for label in p["trees"][1:]:
        lines.append(f"{label}/{first}: " + "  ".join(
            f"{prog} {r:.2f}" for prog, r in result["tree_ratios"][label].items()))
    last = p["programs"][-1]
    for label in p["trees"]:
        lines.append(f"{label}: " + "  ".join(
            f"{prog}/{last} {r:.2f}" for prog, r in result["program_ratios"][label].items()
            if prog != last))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cell",
                                     description=__doc__.split("\n\n")[0])
    add_workload_arguments(parser, clients=500_000, sparsity=50, repeat=3)
    parser.add_argument("--parties", type=int, default=3)
    parser.add_argument("--programs", nargs="+", default=["fast", "local"])
    parser.add_argument("--tree", type=_tree, action="append",
                        help="LABEL=DIR: also run the harness of the checkout DIR "
                             "(repeatable; default: this checkout alone, as 'this')")
    args = parse_arguments(parser, argv, SMOKE)
    return run_benchmark("benchmarks.cell", args.json, lambda tmp: measure(args, tmp), report)


if __name__ == "__main__":
    sys.exit(main())
