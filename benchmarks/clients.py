"""The clients' side, side by side: preparation against the write limit, full
against seeded sharing, and both end to end through the emulated network.

One workload, by default a fifth of Table 5's largest cell (n = 100,000 of its
500,000 clients, d = 10, m = 100, s = 50, S = 3: 50 million noisy entries,
400 MB of shares per server with full sharing). Per repetition, interleaved:

- prepare-full: noise, encoding, masks and all S whole share files, as ``ltm run``
  does when it does not stream (several client hosts, seeded shares to hosts);
- write-limit: numpy writing the same number of bytes to the same files (the
  page cache's speed, which preparation cannot beat);
- prepare-seeded: the same with ``--sharing seeded``: the clients' work,
  including expanding every seeded component to subtract it;
- expand: the slowest server's expansion of its seeds into its share file;
- e2e-full, e2e-seeded: a whole ``ltm run`` of the same cell, ``fast``
  program, under ``--network t3.large-baseline`` (needs root), streamed: T_end_to_end
  = the stream (preparation, upload through the shaped links, expansion and the
  servers' writing side by side) + T_MPC, verified bit for bit.

The first seeded repetition's share files are checked to sum to the encoded
rows. The last lines are ratios: prepare/write-limit, seeded/full upload
bytes, and seeded/full end-to-end time (medians).

    python -m benchmarks.clients [--clients N] [--sparsity S] [--repeat K]
                                 [--network PROFILE] [--json FILE] [--smoke]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks._cli import add_workload_arguments, parse_arguments, run_benchmark
from harness.clients import (
    Layout,
    SeededSink,
    ShareSink,
    expand_party,
    noise_rng,
    prepare_inputs,
    read_share_file,
)
from harness.engine import check_requirements
from harness.experiments import RunConfig, build_workload, metadata, run

_WRITE_CHUNK = 1 << 22  # words per write, as large as the sinks' chunks
# The smallest size (--smoke): every step once, in seconds.
SMOKE = {"clients": 2000, "sparsity": 1, "repeat": 1}


def _write_limit(paths: list[Path], sizes: list[int], header: bytes) -> float:
    block = np.random.default_rng(0).integers(0, 2**63, _WRITE_CHUNK, dtype=np.uint64)
    started = time.perf_counter()
    for path, size in zip(paths, sizes, strict=True):
        with open(path, "wb") as fh:
            fh.write(header)
            left = size - len(header)
            while left > 0:
                piece = min(left, block.nbytes)
                fh.write(memoryview(block).cast("B")[:piece])
                left -= piece
    return time.perf_counter() - started


def _check_seeded(paths: list[Path], work, lay: Layout, fmt, expected: np.ndarray) -> None:
    """The servers' expanded files sum, through the sketch, to the clients' result."""
    rows = sum(read_share_file(p, fmt) for p in paths).reshape(-1, work.d)
    m = work.sketch.m
    blocks = rows.reshape(-1, lay.block_rows, lay.chunk_blocks, work.d).sum(
        axis=1, dtype=np.uint64)
    acc = np.zeros((2 * m + 1, work.d), dtype=np.uint64)
    np.add.at(acc, lay.block_acc, blocks.reshape(-1, work.d))
    if not np.array_equal(acc[:m] - acc[m:2 * m], expected):
        raise SystemExit("seeded shares do not give the expected sketch")


_E2E_PARTS = ("prepare_s", "client_upload_s", "expand_s", "t_mpc_s", "t_end_to_end_s")


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
    check_requirements()  # root and iproute2 now, not after minutes of preparing
    work = build_workload(cfg)
    fmt = cfg.share_format
    # The whole-file preparation (what a run that does not stream does: one with
    # several client hosts, or seeded shares to hosts) lays the files out at once; the
    # end-to-end runs stream, as ``ltm run`` does.
    lay = Layout.blocked(work.sketch, work.d, share_words=fmt.words)
    dirs = [workdir / f"P{i}" for i in range(parties)]
    paths = [d / "Persistence" / f"Transactions-P{i}.data" for i, d in enumerate(dirs)]
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
    samples: dict[str, list[float]] = {k: [] for k in
                                       ("prepare-full", "write-limit", "prepare-seeded",
                                        "expand", "e2e-full", "e2e-seeded")}
    uploads: dict[str, list[int]] = {}
    e2e: dict[str, list[dict]] = {"full": [], "seeded": []}
    for rep in range(repeat):
        steps = ["full", "seeded", "write", "e2e-full", "e2e-seeded"]
        steps = steps[rep % len(steps):] + steps[:rep % len(steps)]
        for step in steps:
            if step == "full":
                prepared = prepare_inputs(work.data, work.sketch, lay, work.noise,
                                          work.fp, ShareSink(paths, fmt), noise_rng())
                samples["prepare-full"].append(prepared.seconds)
                uploads["full"] = prepared.upload_bytes
                sizes = [p.stat().st_size for p in paths]
            elif step == "seeded":
                sink = SeededSink(dirs, lay, fmt, work.n, work.sketch.s, work.d)
                prepared = prepare_inputs(work.data, work.sketch, lay, work.noise,
                                          work.fp, sink, noise_rng())
                samples["prepare-seeded"].append(prepared.seconds)
                uploads["seeded"] = prepared.upload_bytes
                samples["expand"].append(max(
                    expand_party(i, dirs[i], paths[i], lay, fmt, parties, work.n,
                                 work.sketch.s) for i in range(parties)))
                if rep == 0:
                    _check_seeded(paths, work, lay, fmt, prepared.expected)
            elif step == "write":
                samples["write-limit"].append(_write_limit(paths, sizes, fmt.header))
            else:
                sharing = step.removeprefix("e2e-")
                e2e[sharing].append(_end_to_end(cfg, sharing, workdir / f"run-{sharing}"))
                samples[step].append(e2e[sharing][-1]["t_end_to_end_s"])
        echo(f"round {rep + 1}/{repeat}: " + ", ".join(
            f"{k} {v[-1]:.2f} s" for k, v in samples.items() if v))
    medians = {k: statistics.median(v) for k, v in samples.items()}
    up_full, up_seeded = sum(uploads["full"]), sum(uploads["seeded"])
    return {
        "metadata": metadata(mp_spdz=None, protocol=cfg.protocol, parties=parties),
        "workload": {"clients": work.n, "dim": work.d, "rows": work.sketch.m,
                     "sparsity": work.sketch.s, "parties": parties, "repeat": repeat},
        "network": network, "samples": samples, "medians": medians,
        "upload_bytes": {"full": uploads["full"], "seeded": uploads["seeded"]},
        "end_to_end": e2e,
        "end_to_end_medians": {
            sharing: {k: statistics.median(r[k] for r in runs) for k in
                      (*_E2E_PARTS, "goodput_mbit")} for sharing, runs in e2e.items()},
        "ratios": {
            "prepare/write-limit": medians["prepare-full"] / medians["write-limit"],
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
                     f"{m['expand_s']:>9.3f}{m['t_mpc_s']:>9.3f}{m['t_end_to_end_s']:>9.3f}"
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
