"""The clients' side end to end, full against seeded sharing, through the emulated
network.

One workload, by default a fifth of Table 5's largest cell (n = 100,000 of its
500,000 clients, d = 10, m = 100, s = 50, S = 3: 50 million noisy entries,
400 MB of shares per server with full sharing). Per repetition, interleaved:
e2e-full and e2e-seeded, a whole ``ltm run`` of the cell, ``fast`` program,
under ``--network t3.large-baseline`` (needs root), streamed as every run is:
T_end_to_end = the stream (preparation, upload through the shaped links, the
servers' expansion of the seeds and writing, side by side) + T_MPC, verified bit
for bit.

The last lines are ratios: seeded/full upload bytes (as each server counted
them on its stream) and seeded/full end-to-end time (medians).

    python -m benchmarks.clients [--clients N] [--sparsity S] [--repeat K]
                                 [--network PROFILE] [--json FILE] [--smoke]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

from benchmarks._cli import add_workload_arguments, parse_arguments, run_benchmark
from harness.engine import check_requirements
from harness.experiments import RunConfig, metadata, run

# The smallest size (--smoke): both runs once, in seconds.
SMOKE = {"clients": 2000, "sparsity": 1, "repeat": 1}


_E2E_PARTS = ("prepare_s", "client_upload_s", "stream_expand_s", "t_mpc_s", "t_end_to_end_s")


def _end_to_end(cfg: RunConfig, sharing: str, out: Path) -> dict:
    """One verified ``ltm run`` of the cell with ``sharing``: its parts, in seconds."""
    result = run(dataclasses.replace(cfg, out=out, sharing=sharing, force=True))
    if not result["upload_measured"]:
        raise SystemExit("the upload was not measured: the run did not cross the network")
    parts = {**result.timings, **result.to_json()}
    sent = [p["upload_bytes_sent"] for p in result["parties"]]
    slowest = max(result["parties"], key=lambda p: p["upload_s"])
    return {**{k: float(parts.get(k, 0.0)) for k in _E2E_PARTS}, "upload_bytes_sent": sent,
            "goodput_mbit": slowest["upload_bytes_sent"] * 8 / slowest["upload_s"] / 1e6}


def measure(clients: int, sparsity: int, parties: int, repeat: int, workdir: Path,
            network: str = "t3.large-baseline", echo=print, dim: int = 10,
            rows: int = 100) -> dict:
    cfg = RunConfig(out=workdir / "unused", parties=parties, clients=clients, dim=dim,
                    rows=rows, sparsity=sparsity, noise="gaussian", seed=1,
                    network=network).validate()
    check_requirements()  # root and iproute2 now, not after minutes of running
    samples: dict[str, list[float]] = {"e2e-full": [], "e2e-seeded": []}
    e2e: dict[str, list[dict]] = {"full": [], "seeded": []}
    for rep in range(repeat):
        order = ["full", "seeded"] if rep % 2 == 0 else ["seeded", "full"]
        for sharing in order:
            e2e[sharing].append(_end_to_end(cfg, sharing, workdir / f"run-{sharing}"))
            samples[f"e2e-{sharing}"].append(e2e[sharing][-1]["t_end_to_end_s"])
        echo(f"round {rep + 1}/{repeat}: " + ", ".join(
            f"{k} {v[-1]:.2f} s" for k, v in samples.items() if v))
    medians = {k: statistics.median(v) for k, v in samples.items()}
    uploads = {sharing: runs[-1]["upload_bytes_sent"] for sharing, runs in e2e.items()}
    up_full, up_seeded = sum(uploads["full"]), sum(uploads["seeded"])
    return {
        "metadata": metadata(mp_spdz=None, protocol=cfg.protocol, parties=parties),
        "workload": {"clients": clients, "dim": dim, "rows": rows,
                     "sparsity": sparsity, "parties": parties, "repeat": repeat},
        "network": network, "samples": samples, "medians": medians,
        "upload_bytes": {"full": uploads["full"], "seeded": uploads["seeded"]},
        "end_to_end": e2e,
        "end_to_end_medians": {
            sharing: {k: statistics.median(r[k] for r in runs) for k in
                      (*_E2E_PARTS, "goodput_mbit")} for sharing, runs in e2e.items()},
        "ratios": {
            "seeded/full upload": up_seeded / up_full,
            "seeded/full end-to-end": medians["e2e-seeded"] / medians["e2e-full"],
        },
    }


def report(out: dict) -> str:
    lines = [f"{'step':<16}{'median s':>10}{'min':>9}{'max':>9}"]
    for key, values in out["samples"].items():
        lines.append(f"{key:<16}{statistics.median(values):>10.3f}{min(values):>9.3f}"
                     f"{max(values):>9.3f}")
    up = out["upload_bytes"]
    lines += [f"upload bytes full {sum(up['full']):,} per server {up['full']}",
              f"upload bytes seeded {sum(up['seeded']):,} per server {up['seeded']}",
              f"end to end under --network {out['network']} (medians, s):",
              f"{'sharing':<10}{'prepare':>9}{'upload':>9}{'expand':>9}{'T_MPC':>9}"
              f"{'total':>9}{'Mbit/s':>9}"]
    for sharing, m in out["end_to_end_medians"].items():
        lines.append(f"{sharing:<10}{m['prepare_s']:>9.3f}{m['client_upload_s']:>9.3f}"
                     f"{m['stream_expand_s']:>9.3f}{m['t_mpc_s']:>9.3f}{m['t_end_to_end_s']:>9.3f}"
                     f"{m['goodput_mbit']:>9.0f}")
    lines += [f"{name}: {value:.2f}" for name, value in out["ratios"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.clients",
                                     description=__doc__.split("\n\n")[0])
    add_workload_arguments(parser, clients=100_000, sparsity=50, repeat=3)
    parser.add_argument("--parties", type=int, default=3)
    parser.add_argument("--network", default="t3.large-baseline", metavar="PROFILE",
                        help="the emulated network of the end-to-end runs (needs root)")
    args = parse_arguments(parser, argv, SMOKE)
    return run_benchmark(
        "benchmarks.clients", args.json,
        lambda tmp: measure(args.clients, args.sparsity, args.parties, args.repeat, tmp,
                            network=args.network, dim=args.dim, rows=args.rows),
        report)


if __name__ == "__main__":
    sys.exit(main())
