"""How long ``ltm`` takes beyond its work: ``ltm --help``, and ``ltm run`` around its run.

Two paired ratios, each taken pair by pair in one interleaved loop (A B A B ...,
the order alternating), so that a drifting load on a shared machine moves both
sides of a pair alike; the headline is the median of the pairs' ratios:

- ``ltm --help`` against ``python3 -c "import numpy"``, whole processes (target
  at most 2);
- ``ltm run --clients N --parties 3 --program local``: the process's wall time
  against the T_end_to_end it reports (target at most 1.5 at N = 1e6).

Beside the second, the same command run in an instrumented process says where
the rest of the wall time goes: interpreter start, imports, the config's checks
and the accountant, MP-SPDZ's lookup, the workload, the compile cache, the
cluster's directories and certificates, the stream and the MPC (T_end_to_end),
verification, and writing the results. Each run writes into a scratch directory,
removed after; the first of each kind is a warm-up (the compile cache and the
accountant's certificate are then the warm ones a user's second run sees).

Python's bytecode cache of the harness's modules is written first, as pip writes
it when it installs a package: without it (``PYTHONDONTWRITEBYTECODE`` set, say,
where every run would compile the harness's modules again) the figures would be
those of no installed ``ltm``. ``--baseline DIR`` also runs, in the same loop and
order, the ``ltm run`` of the checkout in ``DIR`` (the code before a change), each
pair's wall times as a ratio.

    python -m benchmarks.cli_startup [--clients N] [--repeat K] [--baseline DIR]
                                     [--no-compile] [--json FILE] [--smoke]
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._cli import parse_arguments, run_benchmark

# This checkout: the code measured, unless --baseline names another beside it.
ROOT = Path(__file__).resolve().parents[1]
HELP_TARGET = 2.0
# The smallest size (--smoke): a few runs and helps, in seconds.
SMOKE = {"clients": 2000, "repeat": 1, "help_repeat": 2}
RUN_TARGET = 1.5

# Runs `ltm run` in this process with timers around the run path's steps (the
# functions its modules look up by name), then writes them as JSON to argv[1].
_INSTRUMENTED = r"""
import importlib, json, sys, time
wall0 = time.time()
started = time.perf_counter()
from harness.engine import start_signer
from harness.stream import start_fork_server
start_signer()  # as `ltm run` does first of all
start_fork_server()
import harness.cli
# the modules, not the package's functions of the same names
run_mod = importlib.import_module("harness.experiments.run")
execute_mod = importlib.import_module("harness.experiments.execute")
ltm_mod = importlib.import_module("harness.privacy.ltm")
from harness.experiments import RunConfig
imported = time.perf_counter() - started
spent = {}

def timed(module, name, label):
    inner = getattr(module, name)
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0.0) + time.perf_counter() - t
    setattr(module, name, wrapper)

timed(RunConfig, "validate", "config checks")
timed(run_mod, "check_noise", "noise calibration and accountant")
timed(run_mod, "ensure_mpspdz", "MP-SPDZ lookup")
timed(run_mod, "check_protocol_usable", "MP-SPDZ lookup")
timed(run_mod, "check_placement", "config checks")
timed(run_mod, "build_workload", "workload (sketch, noise)")
timed(run_mod, "program_for", "program (render, compile cache)")
timed(run_mod, "execute", "execute")
timed(run_mod, "_run_in", "run and its outputs")
timed(execute_mod, "make_cluster", "cluster (party directories, certificates)")
timed(execute_mod, "_verify", "verification")
timed(ltm_mod, "privacy_record", "result record (accountant)")
timed(run_mod, "summary", "summary")
timers = sys.argv[1]
sys.argv = ["ltm", *sys.argv[2:]]
inner_main = harness.cli.main

def main_timed(argv=None):
    t = time.perf_counter()
    try:
        return inner_main(argv)
    finally:
        spent["main"] = time.perf_counter() - t
        spent["imports"] = imported
        spent["_started_at"] = wall0
        json.dump(spent, open(timers, "w"))

harness.cli.main = main_timed
harness.cli.console()  # and its exit, as `ltm` exits
"""


def compile_bytecode(env: dict[str, str]) -> None:
    """Write the bytecode cache of the harness the runs under ``env`` import (its
    ``PYTHONPATH`` first, else this process's), as ``pip install`` does."""
    roots = [Path(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    found = [root / "harness" for root in roots if (root / "harness" / "__init__.py").is_file()]
    if not found:
        spec = importlib.util.find_spec("harness")
        assert spec is not None and spec.submodule_search_locations
        found = [Path(next(iter(spec.submodule_search_locations)))]
    if not compileall.compile_dir(found[0], quiet=1):
        raise RuntimeError(f"could not compile {found[0]}")


def _wall(argv: list[str], env: dict[str, str]) -> float:
    # Run from the checkout whose code is measured: ``python -m`` and ``-c`` put the
    # working directory first on sys.path, before PYTHONPATH, so from another checkout
    # they would import that one's harness.
    checkout = env["PYTHONPATH"].split(os.pathsep)[0]
    started = time.perf_counter()
    subprocess.run(argv, env=env, cwd=checkout, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def _spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def measure_help(repeat: int, env: dict[str, str]) -> dict:
    help_cmd = [sys.executable, "-m", "harness", "--help"]
    numpy_cmd = [sys.executable, "-c", "import numpy"]
    _wall(help_cmd, env), _wall(numpy_cmd, env)  # warm-up: the page cache
    pairs = []
    for k in range(repeat):
        first, second = (help_cmd, numpy_cmd) if k % 2 == 0 else (numpy_cmd, help_cmd)
        a, b = _wall(first, env), _wall(second, env)
        ltm, numpy = (a, b) if k % 2 == 0 else (b, a)
        pairs.append((ltm, numpy))
    return {"ltm_help_s": _spread([p[0] for p in pairs]),
            "import_numpy_s": _spread([p[1] for p in pairs]),
            "ratio": _spread([a / b for a, b in pairs])}


def _run_once(scratch: Path, k: int, args: list[str], env: dict[str, str],
              instrumented: bool) -> tuple[float, float, dict]:
    out = scratch / f"run-{k}-{int(instrumented)}"
    timers = scratch / f"timers-{k}.json"
    base = ([sys.executable, "-c", _INSTRUMENTED, str(timers)] if instrumented
            else [sys.executable, "-m", "harness"])
    before = time.time()
    wall = _wall([*base, "run", *args, "--out", str(out)], env)
    t_e2e = json.loads((out / "result.json").read_text())["t_end_to_end_s"]
    spent = json.loads(timers.read_text()) if instrumented else {}
    if spent:
        spent["interpreter start"] = spent.pop("_started_at") - before
    shutil.rmtree(out)
    return wall, t_e2e, spent


def breakdown(wall: float, t_e2e: float, spent: dict) -> dict[str, float]:
    """Wall time in disjoint parts that add up to it (the rest is what no timer covers)."""
    timed = ("interpreter start", "imports", "config checks",
             "noise calibration and accountant", "MP-SPDZ lookup", "workload (sketch, noise)",
             "program (render, compile cache)", "cluster (party directories, certificates)")
    parts = {name: spent.get(name, 0.0) for name in timed}
    parts["T_end_to_end (stream + MPC)"] = t_e2e
    parts["verification"] = spent.get("verification", 0.0)
    parts["result record (accountant)"] = spent.get("result record (accountant)", 0.0)
    # _run_in is the program, execute and then the outputs
    execute = spent.get("execute", 0.0)
    parts["writing outputs (result, output; sketch, data if asked)"] = max(
        spent.get("run and its outputs", 0.0) - execute
        - parts["program (render, compile cache)"], 0.0)
    parts["summary"] = spent.get("summary", 0.0)
    inside_execute = (t_e2e + parts["verification"] + parts["result record (accountant)"]
                      + parts["cluster (party directories, certificates)"])
    parts["execute, not timed above (parties' launch, release and exit)"] = max(
        execute - inside_execute, 0.0)
    parts["rest (parsing, lock, output directory, exit)"] = max(wall - sum(parts.values()), 0.0)
    return parts


def measure_run(clients: int, repeat: int, scratch: Path, env: dict[str, str],
                baseline: dict[str, str] | None = None) -> dict:
    """The paired runs (and, with ``baseline``, an environment running other code, its
    runs in the same loop)."""
    args = ["--clients", str(clients), "--parties", "3", "--program", "local"]
    envs = {"plain": env, "instrumented": env, **({"baseline": baseline} if baseline else {})}
    _run_once(scratch, -1, args, env, False)  # warm-up: compile cache, certificate
    if baseline:
        _run_once(scratch, -1, args, baseline, False)
    kinds = list(envs)
    runs: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
    parts = []
    for k in range(repeat):
        for kind in (kinds if k % 2 == 0 else kinds[::-1]):
            wall, t_e2e, spent = _run_once(scratch, k, args, envs[kind],
                                           kind == "instrumented")
            runs[kind].append((wall, t_e2e))
            if kind == "instrumented":
                parts.append(breakdown(wall, t_e2e, spent))
    names = list(parts[0])
    result = {"clients": clients, **_runs(runs["plain"]),
              "breakdown_median_s": {n: statistics.median(p[n] for p in parts) for n in names}}
    if baseline:
        result["baseline"] = {**_runs(runs["baseline"]), "wall_over_baseline": _spread(
            [a[0] / b[0] for a, b in zip(runs["plain"], runs["baseline"], strict=True)])}
    return result


def _runs(pairs: list[tuple[float, float]]) -> dict[str, dict[str, float]]:
    return {"wall_s": _spread([w for w, _ in pairs]),
            "t_end_to_end_s": _spread([t for _, t in pairs]),
            "ratio": _spread([w / t for w, t in pairs])}


def report(result: dict) -> str:
    h, r = result["help"], result["run"]
    lines = [
        f"load average at start {result['load']}, {os.cpu_count()} cores"
        + ("" if result.get("bytecode_compiled", True) else ", bytecode cache as found"),
        f"ltm --help {h['ltm_help_s']['median']:.3f} s, python3 -c 'import numpy' "
        f"{h['import_numpy_s']['median']:.3f} s: ratio median {h['ratio']['median']:.2f} "
        f"(min {h['ratio']['min']:.2f}, max {h['ratio']['max']:.2f}; target <= {HELP_TARGET})",
        f"ltm run --clients {r['clients']} --parties 3 --program local: wall "
        f"{r['wall_s']['median']:.3f} s, T_end_to_end {r['t_end_to_end_s']['median']:.3f} s: "
        f"ratio median {r['ratio']['median']:.2f} (min {r['ratio']['min']:.2f}, max "
        f"{r['ratio']['max']:.2f}; target <= {RUN_TARGET})",
        "where an instrumented run's wall time goes (medians, s):",
    ]
    lines += [f"  {name:<62} {value:7.3f}" for name, value in
              r["breakdown_median_s"].items()]
    if "baseline" in r:
        b = r["baseline"]
        lines += [
            f"the baseline's ltm run, in the same loop: wall {b['wall_s']['median']:.3f} s, "
            f"T_end_to_end {b['t_end_to_end_s']['median']:.3f} s: ratio median "
            f"{b['ratio']['median']:.2f} (min {b['ratio']['min']:.2f}, max "
            f"{b['ratio']['max']:.2f})",
            f"wall / the baseline's wall, pair by pair: median "
            f"{b['wall_over_baseline']['median']:.2f} (min {b['wall_over_baseline']['min']:.2f},"
            f" max {b['wall_over_baseline']['max']:.2f})"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--help-repeat", type=int, default=15)
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="also run the ltm of this checkout (the directory holding its "
                             "harness/), alternating with this one's")
    parser.add_argument("--no-compile", action="store_true",
                        help="leave the bytecode cache as it is (by default the harness's "
                             "modules are compiled first, as pip does when it installs them)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parse_arguments(parser, argv, SMOKE)
    env = {**os.environ, "LTM_NO_INSTALL": os.environ.get("LTM_NO_INSTALL", "1"),
           "PYTHONPATH": str(ROOT)}
    baseline = None
    if args.baseline is not None:
        if not (args.baseline / "harness" / "__init__.py").is_file():
            parser.error(f"--baseline {args.baseline} holds no harness/ package")
        baseline = {**env, "PYTHONPATH": str(args.baseline.resolve())}

    def measure(scratch: Path) -> dict:
        if not args.no_compile:
            for where in (env, *([baseline] if baseline else [])):
                compile_bytecode(where)
        return {"load": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
                "bytecode_compiled": not args.no_compile,
                "help": measure_help(args.help_repeat, env),
                "run": measure_run(args.clients, args.repeat, scratch, env, baseline)}

    return run_benchmark("cli_startup", args.json, measure, report)


if __name__ == "__main__":
    sys.exit(main())
