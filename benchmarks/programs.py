"""Three server strategies side by side, with the engine's and the disk's limits.

For one workload (default n = 1,000,000, d = 10, m = 100, s = 1, S = 2) this
measures, per party and repetition, each server's own work as ``ltm run`` does it
(every one of these runs streams: the clients' shares reach the servers a chunk at a
time), with a warm file cache:

- reference: the textbook program, party 0 inputting the rows (its input text
  written once, a chunk of clients at a time), one loop iteration per row;
- fast: the vectorised program over the share files the servers wrote as the
  chunks arrived (blocked per chunk of clients), written once;
- local: each server's busy time summing its shares as they arrive (the clients
  streaming anew each repetition, their own time not counted) + MP-SPDZ opening
  the m x d sums;
- engine-read: an MP-SPDZ program that only reads the same share files as fast;
- io-limit: numpy reading and summing the same share file.

Repetitions are interleaved (every strategy once per round, the order rotated
from round to round) so that machine noise and order effects hit all alike.
Each MPC run's output is verified. The last four lines printed are the ratios
of the medians of the slowest party's time.

    python -m benchmarks.programs [--clients N] [--repeat K] [--json FILE] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks._cli import add_workload_arguments, parse_arguments, run_benchmark
from benchmarks._servers import engine_read_program, local_round, timed_run
from harness.engine import LocalCluster, find_mpspdz, read_and_sum
from harness.experiments import (
    RunConfig,
    build_workload,
    metadata,
    prepare_cluster,
    program_for,
)

STRATEGIES = ("reference", "fast", "local", "engine-read", "io-limit")
# The smallest size (--smoke): every strategy once, in seconds.
SMOKE = {"clients": 2000, "repeat": 1}


def measure(clients: int, dim: int, rows: int, sparsity: int, parties: int, repeat: int,
            workdir: Path, mp_spdz: str | None = None, echo=print) -> dict:
    mp = find_mpspdz(mp_spdz)
    base = dict(out=workdir / "unused", parties=parties, clients=clients, dim=dim, rows=rows,
                sparsity=sparsity, noise="gaussian", seed=1)
    ref_cfg = RunConfig(program="reference", **base).validate()
    fast_cfg = RunConfig(program="fast", **base).validate()
    local_cfg = RunConfig(program="local", **base).validate()
    echo(f"preparing n={clients} d={dim} m={rows} s={sparsity} S={parties} ...")
    fast_work = build_workload(fast_cfg)
    ref_work = build_workload(ref_cfg)
    local_work = build_workload(local_cfg)

    shares = LocalCluster(mp, parties, workdir / "shares")
    expected = prepare_cluster(fast_cfg, fast_work, shares).expected
    textbook = LocalCluster(mp, parties, workdir / "textbook")
    ref_expected = prepare_cluster(ref_cfg, ref_work, textbook).expected
    aggregated = LocalCluster(mp, parties, workdir / "aggregated")

    fast_prog = program_for(mp, fast_cfg, fast_work)
    ref_prog = program_for(mp, ref_cfg, ref_work)
    open_prog = program_for(mp, local_cfg, local_work)
    read_prog = engine_read_program(mp, fast_cfg, fast_work.blocks)
    assert fast_work.blocks is not None

    runners = {
        "reference": lambda: timed_run(textbook, ref_prog, ref_expected, "reference"),
        "fast": lambda: timed_run(shares, fast_prog, expected, "fast"),
        "local": local_round(aggregated, local_cfg, local_work, open_prog, "local"),
        "engine-read": lambda: timed_run(shares, read_prog, None, "engine-read"),
        "io-limit": lambda: [read_and_sum(shares.share_file(i))[0] for i in range(parties)],
    }
    for fn in runners.values():  # warm the file cache and the program cache
        fn()
    times: dict[str, list[list[float]]] = {name: [] for name in STRATEGIES}
    for rep in range(repeat):
        # Rotate the order each round: whatever a strategy's predecessor leaves
        # behind (a cold cache, a busy allocator) falls on every strategy alike.
        shift = rep % len(STRATEGIES)
        for name in STRATEGIES[shift:] + STRATEGIES[:shift]:
            times[name].append(runners[name]())
        echo(f"  round {rep + 1}/{repeat} done")
    return {"parameters": {"clients": clients, "dim": dim, "rows": rows, "sparsity": sparsity,
                           "parties": parties, "repeat": repeat,
                           "share_file_mb": shares.share_file(0).stat().st_size / 1e6,
                           "blocks": fast_work.blocks.describe()},
            "metadata": metadata(mp_spdz=mp.describe(), protocol="semi2k", parties=parties),
            "times": times}


def report(result: dict) -> str:
    times = result["times"]
    parties = result["parameters"]["parties"]
    lines = [f"{'strategy':<12} " + " ".join(f"{'P' + str(i) + ' median':>10}"
                                            for i in range(parties))
             + f" {'slowest med':>12} {'min':>8} {'max':>8}"]
    slowest = {}
    for name in STRATEGIES:
        per_party = [statistics.median(rep[i] for rep in times[name]) for i in range(parties)]
        worst = [max(rep) for rep in times[name]]
        slowest[name] = statistics.median(worst)
        lines.append(f"{name:<12} " + " ".join(f"{t:>10.4f}" for t in per_party)
                     + f" {slowest[name]:>12.4f} {min(worst):>8.4f} {max(worst):>8.4f}")
    p = result["parameters"]
    lines.insert(0, f"n={p['clients']} d={p['dim']} m={p['rows']} s={p['sparsity']} "
                    f"S={parties}, {p['repeat']} repetitions, share file "
                    f"{p['share_file_mb']:.1f} MB; seconds")
    lines += [
        f"reference/fast: {slowest['reference'] / slowest['fast']:.2f}",
        f"fast/engine-read: {slowest['fast'] / slowest['engine-read']:.2f}",
        f"reference/local: {slowest['reference'] / slowest['local']:.2f}",
        f"local/io-limit: {slowest['local'] / slowest['io-limit']:.2f}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.programs",
                                     description=__doc__.split("\n\n")[0])
    add_workload_arguments(parser, clients=1_000_000, sparsity=1, repeat=5)
    parser.add_argument("--parties", type=int, default=2)
    parser.add_argument("--mp-spdz", dest="mp_spdz")
    args = parse_arguments(parser, argv, SMOKE)
    return run_benchmark(
        "benchmarks.programs", args.json,
        lambda tmp: measure(args.clients, args.dim, args.rows, args.sparsity, args.parties,
                            args.repeat, tmp, args.mp_spdz),
        report)


if __name__ == "__main__":
    sys.exit(main())
