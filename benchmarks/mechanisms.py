"""The central mechanism's cost: shared binomial noise inside the MPC, per protocol.

For C cells of N coins each (default C = 5,000 and N = 2,304, the reference
prototype's setting), this compiles the central mechanism's noise alone
(``mpc_programs/noise_cost.mpc.j2``: the coins, their popcount, the conversion
back, added to a sketch of zeros and revealed) and runs it under every protocol,
reporting the slowest party's time, the data sent and the rounds, per cell and
per coin. Each run's revealed noise is checked against Binomial(N, 1/2) - N/2.

Techniques (``--technique``): ``split`` (the harness's where the protocol converts
shares locally, compiled with ``-Z``: the bitwise XOR of a random ring element's
locally converted summands, free, then a binary popcount and one conversion per
2,048 coins), ``edabits`` (the harness's elsewhere: the binary halves of edaBits,
as the reference prototype), ``random-bits`` (arithmetic random bits, summed: the
textbook way), each also without ``-Z`` (``--no-split``); ``best`` (default) is
the harness's choice per protocol. The reference figures (2-core machine,
loopback): replicated-ring 0.71 s and 16 MB, semi2k 6.9 s and 774 MB; the
last lines are the ratios to them (target: within 1.5x) when C and N are theirs.

    python -m benchmarks.mechanisms [--cells C] [--coins N] [--repeat K]
        [--protocols P,...] [--technique T] [--no-split] [--smoke] [--json FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

from benchmarks._cli import run_benchmark
from harness.engine import PROTOCOLS, LocalCluster, compile_program, find_mpspdz, parse_output
from harness.errors import VerificationError
from harness.experiments import coin_technique, metadata
from harness.privacy import Central, CoinLayout

# The reference prototype's figures: (seconds, MB) for 5,000 cells of 2,304 coins.
REFERENCE = {"replicated-ring": (0.71, 16.0), "semi2k": (6.9, 774.0)}
REFERENCE_SIZE = (5000, 2304)
_SMOKE = {"cells": 20, "coins": 128, "repeat": 1}


def _noise(cells: int, coins: int) -> Central:
    layout = CoinLayout.cover(coins, cells)
    return Central(1.0, 1e-6, 0.0, 0.0, 1.0, 0, coins=layout.coins, grid_bits=0, steps=0,
                   layout=layout)


def measure(cells: int, coins: int, repeat: int, protocols: list[str], technique: str,
            split: bool, workdir: Path, mp_spdz: str | None = None, echo=print) -> dict:
    mp = find_mpspdz(mp_spdz)
    noise = _noise(cells, coins)
    rows = {}
    for name in protocols:
        spec = PROTOCOLS[name]
        parties = spec.exact_parties or 2
        options = spec.split_args(parties) if split else ()
        params = {"m": cells, "d": 1, **noise.template_params(False),
                  **coin_technique(spec, parties)}
        if technique != "best":
            params["technique"] = technique
        if params["technique"] == "split" and not spec.splits:
            echo(f"{name}: no local share conversion, so no split coins; skipped")
            continue
        program = compile_program(mp, "noise_cost", params, options=options)
        cluster = LocalCluster(mp, parties, workdir / name, protocol=name)
        echo(f"{name}: {parties} parties, {cells} cells x {noise.coins} coins "
             f"({params['technique']}{', -Z' if options else ''}) ...")
        reps = []
        for _ in range(repeat):
            runs = cluster.run(program, timeout=3600)
            released = parse_output("P0", runs[0].completed.stdout, cells)
            verdict = noise.verify(np.zeros((cells, 1), np.uint64),
                                   {0: released.reshape(1, cells, 1)})
            check = verdict.statistics or {}
            if verdict.mismatches or not check.get("ok"):
                raise VerificationError(f"{name}: the revealed noise is not Binomial"
                                        f"({noise.coins}, 1/2): {check}")
            reps.append({"time_s": max(r.stats["time_s"] for r in runs),
                         "global_mb": max(r.stats["global_data_sent_mb"] for r in runs),
                         "rounds": max(r.stats["rounds"] for r in runs)})
        rows[name] = {"parties": parties, "technique": params["technique"],
                      "split": bool(options), "runs": reps}
    return {"parameters": {"cells": cells, "coins": noise.coins, "repeat": repeat,
                           "technique": technique, "split": split},
            "metadata": metadata(mp_spdz=mp.describe(), protocol=",".join(protocols),
                                 parties=0),
            "protocols": rows}


def report(result: dict) -> str:
    p = result["parameters"]
    cells, coins = p["cells"], p["coins"]
    lines = [f"central noise: {cells} cells x {coins} coins, {p['repeat']} repetitions "
             "(medians; the slowest party)",
             f"{'protocol':<20} {'S':>2} {'coins':<14} {'T_MPC s':>9} {'global MB':>10} "
             f"{'rounds':>7} {'us/cell':>9} {'ns/coin':>8}"]
    ratios = []
    for name, row in result["protocols"].items():
        t = statistics.median(r["time_s"] for r in row["runs"])
        mb = statistics.median(r["global_mb"] for r in row["runs"])
        rounds = statistics.median(r["rounds"] for r in row["runs"])
        how = row["technique"] + (" -Z" if row["split"] else "")
        lines.append(f"{name:<20} {row['parties']:>2} {how:<14} {t:>9.3f} {mb:>10.1f} "
                     f"{rounds:>7.0f} "
                     f"{1e6 * t / cells:>9.2f} {1e9 * t / (cells * coins):>8.2f}")
        if name in REFERENCE and (cells, coins) == REFERENCE_SIZE:
            ref_t, ref_mb = REFERENCE[name]
            ratios.append(f"{name}: {t / ref_t:.2f}x the reference's time ({ref_t} s), "
                          f"{mb / ref_mb:.2f}x its data ({ref_mb:g} MB) (target <= 1.5)")
    return "\n".join(lines + ratios)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mechanisms",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=REFERENCE_SIZE[0])
    parser.add_argument("--coins", type=int, default=REFERENCE_SIZE[1])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--protocols", default=",".join(PROTOCOLS),
                        help="comma-separated (default: all)")
    parser.add_argument("--technique", choices=("best", "split", "edabits", "random-bits"),
                        default="best", help="how the coins are drawn (default: the "
                                             "harness's choice per protocol)")
    parser.add_argument("--no-split", dest="split", action="store_false",
                        help="compile without -Z even where the protocol supports it")
    parser.add_argument("--smoke", action="store_true",
                        help=f"the smallest size ({_SMOKE['cells']} cells x "
                             f"{_SMOKE['coins']} coins, once)")
    parser.add_argument("--mp-spdz", dest="mp_spdz")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.smoke:
        args.cells, args.coins, args.repeat = _SMOKE["cells"], _SMOKE["coins"], _SMOKE["repeat"]
    protocols = [p for p in args.protocols.split(",") if p]
    unknown = [p for p in protocols if p not in PROTOCOLS]
    if unknown or args.cells < 1 or args.coins < 2 or args.repeat < 1:
        print(f"benchmarks.mechanisms: error: unknown protocol {unknown} or a size below 1; "
              f"choose from {', '.join(PROTOCOLS)}", file=sys.stderr)
        return 1
    return run_benchmark(
        "benchmarks.mechanisms", args.json,
        lambda tmp: measure(args.cells, args.coins, args.repeat, protocols, args.technique,
                            args.split, tmp, args.mp_spdz),
        report)


if __name__ == "__main__":
    sys.exit(main())
