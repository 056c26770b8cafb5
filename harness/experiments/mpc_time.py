"""How long the parties of one run should take: the measured cost per noisy value
(:data:`COST_NS`) and per coin of central noise (:data:`CENTRAL_NS_PER_COIN`). The
sweep estimate (:mod:`.estimate`) charges its cells with it; ``ltm run`` says so
before a run whose MPC should take longer than :data:`LONG_RUN_S`, and shows the
MPC's elapsed time against it (MP-SPDZ prints nothing until the end).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.privacy import Mechanism

__all__ = ["CENTRAL_NS_PER_COIN", "CENTRAL_S_PER_CELL", "COST_NS", "LONG_RUN_S",
           "MPC_START_S", "PROGRESS_S", "VALIDATE_NS", "long_run_notice", "mpc_progress",
           "mpc_seconds"]

# (prepare, MPC) nanoseconds per noisy value, for each protocol x program. Source:
# benchmarks/reproduction/security/raw.jsonl (party 0's rows, S = 3, all five
# repetitions, every n of Table 3 and n = 500k at s = 10): prepare_ns is
# sum(prepare_s) / sum(V) and mpc_ns sum(wall_s - MPC_START_S) / sum(V), per
# combination, to two digits. That sweep ran on a loaded machine (load average 2
# to 8), most of it before the preparation was put on threads and its chunks
# encoded in place; the clients benchmark now prepares at ~50-80 ns per value on a
# quiet one, so the prepare figures are on the safe side: a planning model errs long.
COST_NS: dict[tuple[str, str], tuple[float, float]] = {
    ("semi2k", "fast"): (390, 45),
    ("semi2k", "local"): (290, 5.3),
    ("semi2k", "reference"): (460, 1200),
    ("replicated-ring", "fast"): (370, 110),
    ("replicated-ring", "local"): (330, 0.24),
    ("replicated-ring", "reference"): (460, 7800),
    ("ps-rep-ring", "fast"): (430, 100),
    ("ps-rep-ring", "local"): (340, 0.82),
    ("ps-rep-ring", "reference"): (420, 5800),
    ("malicious-rep-ring", "fast"): (360, 100),
    ("malicious-rep-ring", "local"): (380, 1.9),
    ("malicious-rep-ring", "reference"): (320, 4700),
    ("spdz2k", "local"): (170, 52),
    # spdz2k's party input (it runs only up to 200,000 values): 1.84 s per 200,000
    # values (MP-SPDZ v0.4.2, 2-core x86-64 VM, November 2026); preparing is semi2k's.
    ("spdz2k", "reference"): (460, 9200),
}
# The central noise's MPC time per coin (python -m benchmarks.mechanisms, MP-SPDZ v0.4.2
# on a 2-core x86-64 VM; the docs' Mechanisms page, "Speed"): replicated-ring 29 ns,
# semi2k 0.50 us and ps-rep-ring 0.38 us at 5,000 cells of 2,304 coins; malicious-rep-ring
# 1.03 us (the mechanisms sweep at n = 1e6, 59,392 coins a cell); spdz2k 1.7 ms (its
# arithmetic random bits, 200 cells of 1,024 coins).
CENTRAL_NS_PER_COIN: dict[str, float] = {
    "replicated-ring": 29.0, "semi2k": 500.0, "ps-rep-ring": 380.0,
    "malicious-rep-ring": 1030.0, "spdz2k": 1.7e6}
# And per cell, where that dominates at few coins a cell: malicious-rep-ring's, 2.5 ms
# (python -m benchmarks.mechanisms at 1,000 cells: 2.4 s for 768 coins a cell, 2.8 s
# for 720; 61 s for 59,392 in the sweep).
CENTRAL_S_PER_CELL: dict[str, float] = {"malicious-rep-ring": 2.5e-3}
# --validate's check, MPC nanoseconds per noisy value: the full-size validation sweep
# (benchmarks/reproduction/validation-full, MP-SPDZ v0.4.2 on a quiet 2-core x86-64 VM,
# November 2026: S = 3, d = 10, --program fast, the LTM's noise), the check's T_MPC less
# the unchecked run's, per value, at the largest n each ran (10^6 for replicated-ring,
# ps-rep-ring and malicious-rep-ring's l2, 10^5 for the others). spdz2k's random bits at
# 200 clients of d = 3, l2 the same (it bounds each entry as linf does).
VALIDATE_NS: dict[tuple[str, str], float] = {
    ("replicated-ring", "linf"): 1_560, ("replicated-ring", "l2"): 700,
    ("semi2k", "linf"): 292_000, ("semi2k", "l2"): 101_000,
    ("ps-rep-ring", "linf"): 37_100, ("ps-rep-ring", "l2"): 9_400,
    ("malicious-rep-ring", "linf"): 124_000, ("malicious-rep-ring", "l2"): 56_000,
    ("spdz2k", "linf"): 2.0e8, ("spdz2k", "l2"): 2.0e8}
# A run whose MPC should take longer than this says so before it starts.
LONG_RUN_S = 180.0
# The MPC's progress (elapsed against the estimate) is shown above this.
PROGRESS_S = 30.0
# The parties' start-up and shut-down around T_MPC: the median of wall_s - T_MPC
# over the same rows, 0.17 s, rounded up.
MPC_START_S = 0.2


def mpc_seconds(protocol: str, program: str, values: int,
                noise: Mechanism | None = None, cells: int = 0,
                validation: str = "none") -> float:
    """The parties' expected time for one run of ``values`` noisy values: start-up, the
    sketch (:data:`COST_NS`), the check of ``--validate`` (:data:`VALIDATE_NS`) and, for
    noise the MPC draws (central's), ``cells`` times its coins."""
    mpc_ns = COST_NS.get((protocol, program), (0.0, 0.0))[1]
    mpc_ns += VALIDATE_NS.get((protocol, validation), 0.0)
    seconds = MPC_START_S + values * mpc_ns * 1e-9
    coins = 0 if noise is None else noise.mpc_coins
    if coins:
        seconds += cells * (coins * CENTRAL_NS_PER_COIN.get(protocol, 0.0) * 1e-9
                            + CENTRAL_S_PER_CELL.get(protocol, 0.0))
    return seconds


def _duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _per_coin(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:g} ms"
    return f"{ns / 1e3:g} us" if ns >= 1e3 else f"{ns:g} ns"


def long_run_notice(protocol: str, program: str, values: int, noise: Mechanism | None,
                    cells: int, validation: str = "none") -> str | None:
    """One line for a run whose MPC should take over :data:`LONG_RUN_S`: the estimate
    and what would make it shorter (None for a shorter run)."""
    seconds = mpc_seconds(protocol, program, values, noise, cells, validation)
    if seconds <= LONG_RUN_S:
        return None
    line = f"note: this run's MPC should take about {_duration(seconds)}"
    if noise is not None and noise.mpc_coins:
        per_coin = CENTRAL_NS_PER_COIN.get(protocol, 0.0)
        fastest = min(CENTRAL_NS_PER_COIN, key=CENTRAL_NS_PER_COIN.__getitem__)
        other = mpc_seconds(fastest, program, values, noise, cells)
        return (f"{line} ({cells:,} cells x {noise.mpc_coins:,} coins of {noise.name} noise "
                f"at about "
                f"{_per_coin(per_coin)} a coin under {protocol}); a larger --epsilon, fewer "
                f"cells (--rows x --dim) or --protocol {fastest} (about "
                f"{_duration(other)}) make it shorter")
    if validation != "none":
        return (f"{line} ({values:,} noisy values under {protocol}, each checked by "
                f"--validate {validation}); fewer --clients, --validate l2 (cheaper than "
                "linf) or --protocol replicated-ring make it shorter")
    return f"{line} ({values:,} noisy values under {protocol}); fewer --clients make it shorter"


@contextlib.contextmanager
def mpc_progress(expected_s: float, *, file: object = None) -> Iterator[None]:
    """While the parties run (MP-SPDZ prints nothing until the end): a bar of the
    elapsed time against ``expected_s``, where that exceeds :data:`PROGRESS_S` and the
    output is a terminal."""
    out = sys.stderr if file is None else file
    if expected_s <= PROGRESS_S or not getattr(out, "isatty", lambda: False)():
        yield
        return
    from tqdm import tqdm

    done = threading.Event()
    total = max(1, round(expected_s))
    bar = tqdm(total=total, file=out, unit="s", leave=False,
               bar_format="MPC {n_fmt} s of about {total_fmt} s estimated |{bar}|")

    def tick() -> None:
        start = time.monotonic()
        while not done.wait(1.0):
            bar.n = min(round(time.monotonic() - start), total)  # the estimate may run over
            bar.refresh()

    ticker = threading.Thread(target=tick, name="mpc-progress", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        bar.close()
