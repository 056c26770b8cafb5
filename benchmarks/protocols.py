"""The cost of security on the fast paths: ``fast`` and ``local`` under each protocol.

For one workload (default n = 1,000,000, d = 10, m = 100, s = 1, S = 3) this
prepares each protocol's share files once (additive for semi2k, replicated
pairs for replicated-ring and ps-rep-ring) and then measures, per party and
repetition, with a warm file cache:

- fast: the vectorised program over the protocol's blocked share files;
- local: numpy aggregation of each server's own shares + the protocol opening
  the m x d aggregate (ps-rep-ring's open checks the servers' sums against each
  other);
- engine-read: the protocol's own binary running a program that only reads
  the same share file, in the same chunks: that format's ingestion limit.

Rounds are interleaved (every measurement once per round, the order rotated
from round to round). Each MPC run's revealed sketch is verified. The last
lines are ratios of the medians of the slowest party's time, with the targets:
each protocol's fast within 1.3x of its own engine read, and local under
ps-rep-ring within 2x of semi2k's local.

    python -m benchmarks.protocols [--clients N] [--repeat K] [--json FILE] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks._cli import add_workload_arguments, parse_arguments, run_benchmark
from benchmarks._servers import engine_read_program, local_round, timed_run
from harness.engine import LocalCluster, find_mpspdz
from harness.experiments import (
    RunConfig,
    build_workload,
    metadata,
    prepare_cluster,
    program_for,
)

PROTOCOLS = ("semi2k", "replicated-ring", "ps-rep-ring")
KINDS = ("fast", "local", "engine-read")
# The smallest size (--smoke): every measurement once, in seconds.
SMOKE = {"clients": 2000, "repeat": 1}


def measure(clients: int, dim: int, rows: int, sparsity: int, repeat: int, workdir: Path,
            mp_spdz: str | None = None, echo=print) -> dict:
    mp = find_mpspdz(mp_spdz)
    runners = {}
    sizes = {}
    for protocol in PROTOCOLS:
        base = dict(out=workdir / "unused", parties=3, clients=clients, dim=dim, rows=rows,
                    sparsity=sparsity, noise="gaussian", seed=1, protocol=protocol)
        fast_cfg = RunConfig(program="fast", **base).validate()
        local_cfg = RunConfig(program="local", **base).validate()
        echo(f"preparing {protocol}: n={clients} d={dim} m={rows} s={sparsity} S=3 ...")
        work = build_workload(fast_cfg)
        local_work = build_workload(local_cfg)
        shares = LocalCluster(mp, 3, workdir / protocol / "shares", protocol=protocol)
        expected = prepare_cluster(fast_cfg, work, shares).expected
        aggregated = LocalCluster(mp, 3, workdir / protocol / "aggregated", protocol=protocol)
        sizes[protocol] = shares.share_file(0).stat().st_size / 1e6
        fast_prog = program_for(mp, fast_cfg, work)
        open_prog = program_for(mp, local_cfg, local_work)
        read_prog = engine_read_program(mp, fast_cfg, work.blocks)

        def run_fast(shares=shares, prog=fast_prog, expected=expected, protocol=protocol):
            return timed_run(shares, prog, expected, f"{protocol} fast")

        def run_read(shares=shares, prog=read_prog, protocol=protocol):
            return timed_run(shares, prog, None, f"{protocol} engine-read")

        runners[f"{protocol} fast"] = run_fast
        runners[f"{protocol} local"] = local_round(aggregated, local_cfg, local_work, open_prog,
                                                   f"{protocol} local")
        runners[f"{protocol} engine-read"] = run_read
    for fn in runners.values():  # warm the file cache and the program cache
        fn()
    names = list(runners)
    times: dict[str, list[list[float]]] = {name: [] for name in names}
    for rep in range(repeat):
        # Rotate the order each round so that order effects fall on every measurement alike.
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(runners[name]())
        echo(f"  round {rep + 1}/{repeat} done")
    return {"parameters": {"clients": clients, "dim": dim, "rows": rows, "sparsity": sparsity,
                           "parties": 3, "repeat": repeat, "share_file_mb": sizes},
            "metadata": metadata(mp_spdz=mp.describe(), protocol=",".join(PROTOCOLS),
                                 parties=3),
            "times": times}


def report(result: dict) -> str:
    times = result["times"]
    p = result["parameters"]
    lines = [f"n={p['clients']} d={p['dim']} m={p['rows']} s={p['sparsity']} S=3, "
             f"{p['repeat']} repetitions; share file per party: "
             + ", ".join(f"{k} {v:.1f} MB" for k, v in p["share_file_mb"].items())
             + "; seconds",
             f"{'measurement':<28} {'P0 med':>8} {'P1 med':>8} {'P2 med':>8} "
             f"{'slowest med':>12} {'min':>8} {'max':>8}"]
    slowest = {}
    for name, reps in times.items():
        per_party = [statistics.median(rep[i] for rep in reps) for i in range(3)]
        worst = [max(rep) for rep in reps]
        slowest[name] = statistics.median(worst)
        lines.append(f"{name:<28} " + " ".join(f"{t:>8.4f}" for t in per_party)
                     + f" {slowest[name]:>12.4f} {min(worst):>8.4f} {max(worst):>8.4f}")
    for protocol in PROTOCOLS:
        ratio = slowest[f"{protocol} fast"] / slowest[f"{protocol} engine-read"]
        lines.append(f"{protocol} fast/engine-read: {ratio:.2f} (target <= 1.3)")
    for protocol in PROTOCOLS[1:]:
        for kind in ("fast", "local"):
            ratio = slowest[f"{protocol} {kind}"] / slowest[f"semi2k {kind}"]
            target = " (target <= 2)" if (protocol, kind) == ("ps-rep-ring", "local") else ""
            lines.append(f"{protocol} {kind}/semi2k {kind}: {ratio:.2f}{target}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.protocols",
                                     description=__doc__.split("\n\n")[0])
    add_workload_arguments(parser, clients=1_000_000, sparsity=1, repeat=5)
    parser.add_argument("--mp-spdz", dest="mp_spdz")
    args = parse_arguments(parser, argv, SMOKE)
    return run_benchmark(
        "benchmarks.protocols", args.json,
        lambda tmp: measure(args.clients, args.dim, args.rows, args.sparsity, args.repeat, tmp,
                            args.mp_spdz),
        report)


if __name__ == "__main__":
    sys.exit(main())
