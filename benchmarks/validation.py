"""What checking every client's row costs, per client, against a prototype of the check.

For one workload (default n = 10,000 clients, d = 10, m = 100, replicated-ring,
rows without noise) this runs, round after round with the order rotated,
``python -m harness run --validate V`` for V in ``none``, ``linf`` and ``l2`` (each
verified bit for bit by the run itself), and a reconstruction of the prototype the
check was first measured with: a plain .mpc program (:data:`PROTOTYPE`) that
checks n rows of d with two comparisons an entry, one of the squared norm, and
zeroes the rows that fail obliviously, compiled with ``-Z`` (local share
conversion) and run by the harness's engine on the same parties. It reports the
median T_MPC (the slowest party's) and data sent per client, and the ratios of
``linf`` and ``l2`` to the prototype (target for ``linf``: at most 1.5).

Then, once each, ``--validate linf`` at ``--mid`` and ``--big`` clients (default
100,000 and 1,000,000) under :class:`harness.experiments.PeakMemory`: their wall
time (target at 1,000,000: under 2 minutes) and the peak PSS of the whole process
tree, whose ratio says whether memory grows with n.

    python -m benchmarks.validation [--clients N] [--protocol P] [--repeat K]
        [--mid N] [--big N] [--json FILE] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._cli import add_workload_arguments, parse_arguments, run_benchmark
from harness.engine import (
    OUTPUT_MARKER,
    PROTOCOLS,
    REJECTED_MARKER,
    LocalCluster,
    compile_source,
    find_mpspdz,
    parse_output,
    parse_rejected,
)
from harness.errors import InputError, VerificationError
from harness.experiments import PeakMemory, metadata

ROOT = Path(__file__).resolve().parents[1]
SMOKE = {"clients": 300, "repeat": 1, "mid": 400, "big": 800}
CHECKS = ("none", "linf", "l2")
_TIMEOUT = 3600
# The prototype's bound: an entry within B = 2^16 (eta = 1 on the lattice of F = 16),
# a row's squared norm within d B^2; its rows are -B, 0 or B, so every row passes.
_B = 2**16

# The reconstruction: rows in chunks of C, column-major (entry j of row r at j C + r).
PROTOTYPE = """\
N, D, C, B = {n}, {d}, {chunk}, {bound}
total = sint.Array(D)
total.assign_all(0)
rejected = sint.Array(1)
rejected.assign_all(0)


@for_range(N // C)
def _(i):
    index = regint.inc(C * D) + i * (C * D)
    x = sint(cint(index % 3) * B - B)
    # two comparisons an entry: B - x < 0 or x + B < 0 fails it
    over = sint.concat([B - x, x + B]) < 0
    ok = 1 - over.get_vector(0, C)
    for j in range(1, 2 * D):
        ok = ok * (1 - over.get_vector(j * C, C))
    columns = [x.get_vector(j * C, C) for j in range(D)]
    norm = sum(c * c for c in columns)
    ok = ok * (1 - (D * B * B - norm < 0))  # the squared norm's comparison
    for j in range(D):  # the oblivious zeroing, summed
        total[j] = total[j] + sum(columns[j] * ok)
    rejected[0] = rejected[0] + C - sum(ok)


print_ln('{marker} %s', total.get_vector().reveal())
print_ln('{rejected_marker} %s', rejected[0].reveal())
"""


def _chunk(n: int) -> int:
    """The largest divisor of n up to 10,000: the prototype's vector length."""
    return max(c for c in range(1, min(n, 10_000) + 1) if n % c == 0)


def _prototype_expected(n: int, d: int, chunk: int) -> list[int]:
    """Each column's sum of the prototype's rows (all within the bound)."""
    sums = [0] * d
    for i in range(n // chunk):
        for j in range(d):
            base = i * chunk * d + j * chunk
            sums[j] += sum((base + r) % 3 * _B - _B for r in range(chunk))
    return [s % 2**64 for s in sums]


def prototype_run(cluster: LocalCluster, program, n: int, d: int, chunk: int) -> dict:
    """One run of the prototype: the slowest party's time, what it sent, its rounds
    (verified: every row accepted, the columns' sums exact)."""
    runs = cluster.run(program, timeout=_TIMEOUT)
    expected = _prototype_expected(n, d, chunk)
    for r in runs:
        got = parse_output(f"P{r.party}", r.completed.stdout, d)
        if [int(v) for v in got] != expected or parse_rejected(f"P{r.party}",
                                                              r.completed.stdout):
            raise VerificationError(f"the prototype's P{r.party} revealed a wrong sum")
    return {"t_mpc_s": max(r.stats["time_s"] for r in runs),
            "sent_mb": max(r.stats["data_sent_mb"] for r in runs),
            "global_mb": max(r.stats["global_data_sent_mb"] for r in runs),
            "rounds": max(r.stats["rounds"] for r in runs)}


def harness_run(check: str, n: int, args: argparse.Namespace, out: Path,
                peak: bool = False) -> dict:
    """One ``ltm run --validate check`` in a real subprocess: T_MPC, data sent and rounds
    (the slowest party's, from result.json); with ``peak``, the wall time and the peak
    PSS of its process tree."""
    argv = [sys.executable, "-m", "harness", "run", "--clients", str(n), "--dim",
            str(args.dim), "--rows", str(args.rows), "--sparsity", str(args.sparsity),
            "--noise", "none", "--protocol", args.protocol, "--validate", check,
            "--out", str(out), "--force"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=out.parent, stdin=subprocess.DEVNULL)
    with PeakMemory(proc.pid, interval=0.25) as sampler:
        stdout, stderr = proc.communicate(timeout=_TIMEOUT)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise InputError(f"ltm run --validate {check} --clients {n} failed: "
                         f"{(stderr or stdout).strip().splitlines()[-1:]}")
    result = json.loads((out / "result.json").read_text())
    parties = result["parties"]
    row = {"t_mpc_s": result["t_mpc_s"],
           "sent_mb": max(p["data_sent_mb"] for p in parties),
           "global_mb": max(p["global_data_sent_mb"] for p in parties),
           "rounds": max(p["rounds"] for p in parties)}
    if peak:
        row.update(wall_s=wall, peak_pss_bytes=sampler.bytes)
    return row


def measure(args: argparse.Namespace, workdir: Path) -> dict:
    mp = find_mpspdz(None)
    spec = PROTOCOLS[args.protocol]
    parties = spec.exact_parties or 2
    n, d = args.clients, args.dim
    chunk = _chunk(n)
    source = PROTOTYPE.format(n=n, d=d, chunk=chunk, bound=_B, marker=OUTPUT_MARKER,
                              rejected_marker=REJECTED_MARKER)
    program = compile_source(mp, "validation_prototype", source,
                             options=spec.split_args(parties))
    cluster = LocalCluster(mp, parties, workdir / "prototype", protocol=args.protocol)
    variants = [*CHECKS, "prototype"]
    samples: dict[str, list[dict]] = {v: [] for v in variants}
    for k in range(args.repeat):
        order = variants[k % len(variants):] + variants[:k % len(variants)]
        for v in order:
            if v == "prototype":
                samples[v].append(prototype_run(cluster, program, n, d, chunk))
            else:
                samples[v].append(harness_run(v, n, args, workdir / v))
            print(f"round {k + 1}: {v} {samples[v][-1]['t_mpc_s']:.3f} s", file=sys.stderr)
    medians = {v: {key: statistics.median(s[key] for s in samples[v])
                   for key in ("t_mpc_s", "sent_mb", "global_mb", "rounds")}
               for v in variants}
    per_client = {v: {"us": 1e6 * m["t_mpc_s"] / n, "bytes_sent": 1e6 * m["sent_mb"] / n,
                      "bytes_global": 1e6 * m["global_mb"] / n} for v, m in medians.items()}
    ratios = {f"{v}/prototype": {"time": medians[v]["t_mpc_s"] / medians["prototype"]["t_mpc_s"],
                                 "data": medians[v]["global_mb"]
                                 / medians["prototype"]["global_mb"]}
              for v in ("linf", "l2")}
    scale = {}
    for size in (args.mid, args.big):
        if size:
            scale[str(size)] = harness_run("linf", size, args, workdir / f"linf-{size}",
                                           peak=True)
            print(f"linf at n = {size}: {scale[str(size)]['wall_s']:.1f} s", file=sys.stderr)
    return {"parameters": {"clients": n, "dim": d, "rows": args.rows,
                           "sparsity": args.sparsity, "protocol": args.protocol,
                           "parties": parties, "repeat": args.repeat, "chunk": chunk},
            "metadata": metadata(mp_spdz=mp.describe(), protocol=args.protocol,
                                 parties=parties),
            "samples": samples, "medians": medians, "per_client": per_client,
            "ratios": ratios, "scale": scale}


def report(result: dict) -> str:
    p = result["parameters"]
    lines = [f"validation: n={p['clients']} d={p['dim']} m={p['rows']} {p['protocol']} "
             f"({p['parties']} parties), {p['repeat']} repetitions (medians; slowest party)",
             f"{'variant':<10} {'T_MPC s':>8} {'us/client':>10} {'sent B/client':>14} "
             f"{'global B/client':>16} {'rounds':>7}"]
    for v, m in result["medians"].items():
        c = result["per_client"][v]
        lines.append(f"{v:<10} {m['t_mpc_s']:>8.3f} {c['us']:>10.1f} {c['bytes_sent']:>14.0f} "
                     f"{c['bytes_global']:>16.0f} {m['rounds']:>7.0f}")
    for name, r in result["ratios"].items():
        target = " (target <= 1.5)" if name.startswith("linf") else ""
        lines.append(f"{name}: {r['time']:.2f}x the time, {r['data']:.2f}x the data{target}")
    scale = result["scale"]
    for size, s in scale.items():
        lines.append(f"linf at n = {int(size):,}: wall {s['wall_s']:.1f} s, T_MPC "
                     f"{s['t_mpc_s']:.2f} s, peak PSS {s['peak_pss_bytes'] / 2**20:.0f} MiB")
    if len(scale) == 2:
        (small, a), (big, b) = scale.items()
        lines.append(f"peak memory at n = {int(big):,} / n = {int(small):,}: "
                     f"{b['peak_pss_bytes'] / a['peak_pss_bytes']:.2f}x; wall at "
                     f"n = {int(big):,}: {b['wall_s'] / 60:.2f} min (target < 2)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.validation",
                                     description=__doc__.split("\n\n")[0])
    add_workload_arguments(parser, clients=10_000, sparsity=1, repeat=3)
    parser.add_argument("--protocol", default="replicated-ring",
                        choices=[p for p, s in PROTOCOLS.items() if s.splits])
    parser.add_argument("--mid", type=int, default=100_000,
                        help="the smaller size of the memory comparison (0: none)")
    parser.add_argument("--big", type=int, default=1_000_000,
                        help="the larger size, timed against 2 minutes (0: none)")
    args = parse_arguments(parser, argv, SMOKE)
    if min(args.clients, args.dim, args.rows, args.repeat) < 1 or min(args.mid, args.big) < 0:
        parser.error("sizes must be positive (--mid and --big 0 to leave them out)")
    return run_benchmark("benchmarks.validation", args.json,
                         lambda tmp: measure(args, tmp), report)


if __name__ == "__main__":
    sys.exit(main())
