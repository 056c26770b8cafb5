"""The clients' side, side by side: preparation against the write limit, full
against seeded sharing.

One workload, by default a fifth of Table 5's largest cell (n = 100,000 of its
500,000 clients, d = 10, m = 100, s = 50, S = 3: 50 million noisy entries,
400 MB of shares per server with full sharing). Per repetition, interleaved:

- prepare-full: noise, encoding, masks and all S share files, as ``ltm run``;
- write-limit: numpy writing the same number of bytes to the same files (the
  page cache's speed, which preparation cannot beat);
- prepare-seeded: the same with ``--sharing seeded``: the clients' work,
  including expanding every seeded component to subtract it;
- expand: the slowest server's expansion of its seeds into its share file.

Every seeded repetition's share files are checked to sum to the encoded rows
(no MPC: the engine is measured by ``benchmarks.programs``). The last lines
are ratios: prepare/write-limit, seeded/full upload bytes, and seeded/full
clients-plus-servers preparation time (prepare + slowest expand).

    python -m benchmarks.clients [--clients N] [--sparsity S] [--repeat K] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from harness.clients.noise import noise_rng
from harness.clients.prepare import ShareSink, prepare_inputs, read_share_file
from harness.clients.seeded import SeededSink, expand_party
from harness.experiments.results import metadata
from harness.experiments.run import RunConfig, build_workload

_WRITE_CHUNK = 1 << 22  # words per write, as large as the sinks' chunks


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


def _check_seeded(paths: list[Path], work, fmt, expected: np.ndarray) -> None:
    """The servers' expanded files sum, through the sketch, to the clients' result."""
    rows = sum(read_share_file(p, fmt) for p in paths).reshape(-1, work.d)
    lay, m = work.layout, work.sketch.m
    blocks = rows.reshape(-1, lay.block_rows, lay.chunk_blocks, work.d).sum(
        axis=1, dtype=np.uint64)
    acc = np.zeros((2 * m + 1, work.d), dtype=np.uint64)
    np.add.at(acc, lay.block_acc, blocks.reshape(-1, work.d))
    if not np.array_equal(acc[:m] - acc[m:2 * m], expected):
        raise SystemExit("seeded shares do not give the expected sketch")


def measure(clients: int, sparsity: int, parties: int, repeat: int, workdir: Path,
            echo=print) -> dict:
    cfg = RunConfig(out=workdir / "unused", parties=parties, clients=clients, dim=10,
                    rows=100, sparsity=sparsity, noise="gaussian", seed=1)
    cfg.validate()
    work = build_workload(cfg)
    fmt = cfg.share_format
    dirs = [workdir / f"P{i}" for i in range(parties)]
    paths = [d / "Persistence" / f"Transactions-P{i}.data" for i, d in enumerate(dirs)]
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
    samples: dict[str, list[float]] = {k: [] for k in
                                       ("prepare-full", "write-limit", "prepare-seeded",
                                        "expand")}
    uploads: dict[str, list[int]] = {}
    for rep in range(repeat):
        steps = ["full", "seeded", "write"]
        steps = steps[rep % 3:] + steps[:rep % 3]
        for step in steps:
            if step == "full":
                prepared = prepare_inputs(work.data, work.sketch, work.layout, work.noise,
                                          work.fp, ShareSink(paths, fmt), noise_rng())
                samples["prepare-full"].append(prepared.seconds)
                uploads["full"] = prepared.upload_bytes
                sizes = [p.stat().st_size for p in paths]
            elif step == "seeded":
                sink = SeededSink(dirs, work.layout, fmt, work.n, work.sketch.s, work.d)
                prepared = prepare_inputs(work.data, work.sketch, work.layout, work.noise,
                                          work.fp, sink, noise_rng())
                samples["prepare-seeded"].append(prepared.seconds)
                uploads["seeded"] = prepared.upload_bytes
                samples["expand"].append(max(
                    expand_party(i, dirs[i], paths[i], work.layout, fmt, parties, work.n,
                                 work.sketch.s) for i in range(parties)))
                if rep == 0:
                    _check_seeded(paths, work, fmt, prepared.expected)
            else:
                samples["write-limit"].append(_write_limit(paths, sizes, fmt.header))
        echo(f"round {rep + 1}/{repeat}: " + ", ".join(
            f"{k} {v[-1]:.2f} s" for k, v in samples.items() if v))
    medians = {k: statistics.median(v) for k, v in samples.items()}
    up_full, up_seeded = sum(uploads["full"]), sum(uploads["seeded"])
    return {
        "metadata": metadata(mp_spdz=None, protocol=cfg.protocol, parties=parties),
        "workload": {"clients": work.n, "dim": work.d, "rows": work.sketch.m,
                     "sparsity": work.sketch.s, "parties": parties, "repeat": repeat},
        "samples": samples, "medians": medians,
        "upload_bytes": {"full": uploads["full"], "seeded": uploads["seeded"]},
        "ratios": {
            "prepare/write-limit": medians["prepare-full"] / medians["write-limit"],
            "seeded/full upload": up_seeded / up_full,
            "seeded/full prepare+expand": (medians["prepare-seeded"] + medians["expand"])
            / medians["prepare-full"],
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.clients",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=100_000)
    parser.add_argument("--sparsity", type=int, default=50)
    parser.add_argument("--parties", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ltm-bench-clients-") as tmp:
        out = measure(args.clients, args.sparsity, args.parties, args.repeat, Path(tmp))
    print(f"{'step':<16}{'median s':>10}{'min':>9}{'max':>9}")
    for key, values in out["samples"].items():
        print(f"{key:<16}{statistics.median(values):>10.3f}{min(values):>9.3f}"
              f"{max(values):>9.3f}")
    up = out["upload_bytes"]
    print(f"upload bytes full {sum(up['full']):,} per server {up['full']}")
    print(f"upload bytes seeded {sum(up['seeded']):,} per server {up['seeded']}")
    for name, value in out["ratios"].items():
        print(f"{name}: {value:.2f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
