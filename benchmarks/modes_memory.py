"""Peak memory against n for every run mode that runs: flat, within 10%, from 1e6 to 1e7.

For each combination of program x input x sharing x placement that the table of
run modes (:mod:`harness.experiments.modes`) lets through, ``ltm run`` (the CLI's
d = 10, m = 100, s = 1 and 2 parties, no noise, verified) at two sizes, by default
1e6 and 1e7 clients. The peak proportional set size (PSS, as
:class:`harness.experiments.PeakMemory` reads it) is sampled every 0.1 s over the
run's whole process tree: the ``ltm`` process and everything below it (client
workers, servers, MP-SPDZ's parties), plus, on loopback hosts, each host's sshd
with every session below it (the hosts' agents and parties); on hosts, the ``ltm``
process's own tree (this machine's part) is reported beside it. Each run is killed
if that sum passes ``--kill-above-gib``.

Placements: ``loopback`` (every party here); ``network`` (``--network PROFILE``,
needs root and iproute2); ``hosts`` and ``client-hosts`` (real sshd servers on this
machine's loopback, as ``ltm hosts loopback start`` makes them, without and with a
``[[client]]`` host; need openssh-server). A placement this machine cannot give is
skipped with its reason.

One line per combination: its peaks at both sizes, their ratio and whether it is
within 1.10; the last line counts the combinations within it and names the worst.

    python -m benchmarks.modes_memory [--n1 N] [--n2 N] [--programs P ...]
        [--inputs I ...] [--sharings S ...] [--placements L ...] [--network PROFILE]
        [--kill-above-gib G] [--json FILE] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks._cli import parse_arguments, run_benchmark
from harness.errors import LtmError
from harness.experiments import PeakMemory, tree_pss_bytes
from harness.experiments.modes import (
    INPUTS,
    PLACEMENTS,
    PROGRAM_NAMES,
    SHARINGS,
    Mode,
    combinations,
    route_for,
)

TARGET = 1.10
# Per program, the two numbers of clients (the target: 1e6 against 1e7). Every
# program streams; `reference`'s MPC is one loop iteration per slot, so its runs at
# 1e7 take minutes (about 1.2 us per value under semi2k), not hours.
SIZES = {"fast": (10**6, 10**7), "reference": (10**6, 10**7), "local": (10**6, 10**7)}
PARTIES = 2
# The smallest size (--smoke): two combinations on this machine at 2000 and 4000
# clients, in seconds.
SMOKE = {"n1": 2000, "n2": 4000, "programs": ["local", "fast"], "inputs": ["shares"],
         "sharings": ["full"], "placements": ["loopback"]}


class RunFailed(LtmError):
    """One ``ltm run`` did not finish: the benchmark stops with this line."""


class _TreesPeak(PeakMemory):
    """The largest sum of the PSS of several process trees, sampled together."""

    def __init__(self, roots: list[int], *, interval: float = 0.1) -> None:
        super().__init__(roots[0], interval=interval)
        self.roots = roots
        self.coordinator = 0  # the first tree's own peak (``ltm run`` and its children)

    def sample(self) -> int:
        trees = [tree_pss_bytes(root) for root in self.roots]
        self.coordinator = max(self.coordinator, trees[0])
        self.bytes = max(self.bytes, sum(trees))
        self.samples += 1
        return self.bytes


def selected(args: argparse.Namespace) -> list[Mode]:
    """The table's combinations that run, within the axes asked for, in its order."""
    return [mode for mode in combinations()
            if route_for(mode).runs and mode.program in args.programs
            and mode.input in args.inputs and mode.sharing in args.sharings
            and mode.placement in args.placements]


def sizes(program: str, args: argparse.Namespace) -> tuple[int, int]:
    n1, n2 = SIZES[program]
    return (args.n1 or n1, args.n2 or n2)


@contextmanager
def placed(placement: str, scratch: Path, args: argparse.Namespace
           ) -> Iterator[tuple[list[str], list[int]]]:
    """The ``ltm run`` options of a placement and the hosts' sshd pids to sample; a
    LtmError (its reason) where this machine cannot give it."""
    if placement == "loopback":
        yield [], []
        return
    if placement == "network":
        from harness.engine import check_requirements

        check_requirements()
        yield ["--network", args.network], []
        return
    from harness.engine import find_free_ports, find_mpspdz
    from harness.remote import loopback_servers, start_loopback, stop_loopback, trust_hosts

    where = scratch / f"hosts-{placement}"
    inventory = start_loopback(PARTIES, where, find_mpspdz().root,
                               # the parties' ports and past them (fed) the streams'
                               base_port=find_free_ports(2 * PARTIES),
                               client_hosts=int(placement == "client-hosts"),
                               echo=lambda line: None)
    try:
        trust_hosts(inventory, echo=lambda line: None)
        yield ["--hosts", str(inventory)], list(loopback_servers(where).values())
    finally:
        stop_loopback(where, echo=lambda line: None)


def ltm_run(mode: Mode, n: int, out: Path, placement: list[str], hosts: list[int],
            args: argparse.Namespace) -> dict:
    """One verified ``ltm run`` of ``mode`` with ``n`` clients: its wall and peak PSS."""
    command = [sys.executable, "-m", "harness", "run", "--program", mode.program,
               "--input", mode.input, "--sharing", mode.sharing, *placement,
               "--clients", str(n), "--parties", str(PARTIES), "--noise", "none",
               "--seed", "1", "--timeout", "7200", "--out", str(out)]
    log = out.with_suffix(".log")  # a file, not a pipe: a full pipe would stall the run
    started = time.perf_counter()
    killed = False
    with open(log, "w") as sink:
        # Its own session: a kill at the limit takes the parties with it.
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        with _TreesPeak([proc.pid, *hosts]) as peak:
            while proc.poll() is None:
                if peak.bytes > args.kill_above_gib * 2**30:
                    os.killpg(proc.pid, signal.SIGKILL)
                    killed = True
                    break
                time.sleep(0.1)
            proc.wait()
    wall = time.perf_counter() - started
    name = f"{_name(mode)} at n={_short(n)}"
    if killed:
        raise RunFailed(f"{name} passed {args.kill_above_gib:g} GiB of PSS after {wall:.1f} s "
                        "and was killed (raise --kill-above-gib to let it go on)")
    if proc.returncode != 0:
        text = log.read_text(errors="replace").strip().splitlines()
        last = next((ln for ln in reversed(text) if ln.strip()), f"exit {proc.returncode}")
        raise RunFailed(f"{name} failed after {wall:.1f} s: {last.strip()}")
    result = json.loads((out / "result.json").read_text())
    if not result["verification"]["ok"]:
        raise RunFailed(f"{name} did not verify")
    return {"n": n, "wall_s": wall, "peak_pss_bytes": peak.bytes, "samples": peak.samples,
            "coordinator_peak_pss_bytes": peak.coordinator}


def measure(scratch: Path, args: argparse.Namespace, echo: Callable[[str], None]) -> dict:
    modes = selected(args)
    programs = sorted({m.program for m in modes}, key=PROGRAM_NAMES.index)
    echo("sizes: " + ", ".join(f"{p} n={_short(sizes(p, args)[0])} and "
                               f"{_short(sizes(p, args)[1])}" for p in programs))
    rows: list[dict] = []
    skipped: dict[str, str] = {}
    for placement in PLACEMENTS:
        here = [m for m in modes if m.placement == placement]
        if not here:
            continue
        try:
            with placed(placement, scratch, args) as (options, hosts):
                for mode in here:
                    runs = [ltm_run(mode, n, scratch / f"{_name(mode)}-{n}", options, hosts,
                                    args) for n in sizes(mode.program, args)]
                    row = {"mode": vars(mode), "runs": runs,
                           "ratio": runs[1]["peak_pss_bytes"] / runs[0]["peak_pss_bytes"]}
                    row["within"] = row["ratio"] <= TARGET
                    echo(_line(mode, row))
                    rows.append(row)
        except RunFailed:
            raise
        except LtmError as exc:  # the placement itself: no root, no sshd
            if any(r["mode"]["placement"] == placement for r in rows):
                raise
            skipped[placement] = str(exc)
            echo(f"{placement}: skipped ({len(here)} combinations): {exc}")
    if not rows:
        raise LtmError("no combination ran: " + "; ".join(f"{k}: {v}"
                                                          for k, v in skipped.items()))
    worst = max(rows, key=lambda r: r["ratio"])
    return {"target": TARGET, "parties": PARTIES,
            "sizes": {p: list(sizes(p, args)) for p in programs},
            "combinations": rows, "skipped": skipped,
            "within": sum(r["within"] for r in rows), "ran": len(rows),
            "worst_ratio": worst["ratio"], "worst": _name(Mode(**worst["mode"]))}


def report(result: dict) -> str:
    verdict = "all" if result["within"] == result["ran"] else "NOT all"
    skipped = f"; skipped: {', '.join(result['skipped'])}" if result["skipped"] else ""
    return (f"peak PSS within {result['target']:.2f}x between the two sizes: "
            f"{result['within']} of {result['ran']} combinations ({verdict}); worst "
            f"{result['worst']} at {result['worst_ratio']:.3f}{skipped}")


def _line(mode: Mode, row: dict) -> str:
    first, second = row["runs"]
    here = ""
    if Mode(**row["mode"]).on_hosts:  # this machine's own share of the trees
        low, high = (r["coordinator_peak_pss_bytes"] for r in row["runs"])
        here = (f"; this machine's tree {low / 2**30:.3f} and {high / 2**30:.3f} GiB, "
                f"ratio {high / low:.3f}")
    return (f"{_name(mode)}: peak n={_short(first['n'])} {_gib(first)} GiB, "
            f"n={_short(second['n'])} {_gib(second)} GiB, ratio {row['ratio']:.3f} "
            f"({'within' if row['within'] else 'ABOVE'} {TARGET:.2f}; walls "
            f"{first['wall_s']:.1f} s and {second['wall_s']:.1f} s{here})")


def _gib(run: dict) -> str:
    return f"{run['peak_pss_bytes'] / 2**30:.3f}"


def _name(mode: Mode) -> str:
    return f"{mode.program} {mode.input} {mode.sharing} {mode.placement}"


def _short(n: int) -> str:
    """1e7 for 10000000; 2.5e5 for 250000; 2000 as is."""
    if n < 10**4:
        return str(n)
    mantissa, exponent = f"{n:.1e}".split("e")
    return f"{mantissa.removesuffix('.0')}e{int(exponent)}"


def _count(text: str) -> int:
    value = float(text)
    if not value.is_integer() or not 1000 <= value <= 1e10:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of clients in "
                                         "[1000, 1e10], e.g. 1e6")
    return int(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.modes_memory",
                                     description=__doc__.split("\n\n")[0])
    defaults = ", ".join(f"{p} {_short(a)} and {_short(b)}" for p, (a, b) in SIZES.items())
    parser.add_argument("--n1", type=_count, help=f"the smaller n (default: {defaults})")
    parser.add_argument("--n2", type=_count, help="the larger n")
    parser.add_argument("--programs", nargs="+", choices=PROGRAM_NAMES,
                        default=list(PROGRAM_NAMES))
    parser.add_argument("--inputs", nargs="+", choices=INPUTS, default=list(INPUTS))
    parser.add_argument("--sharings", nargs="+", choices=SHARINGS, default=list(SHARINGS))
    parser.add_argument("--placements", nargs="+", choices=PLACEMENTS,
                        default=list(PLACEMENTS))
    parser.add_argument("--network", default="none", metavar="PROFILE",
                        help="the emulated network of the network placement (default none: "
                             "own namespaces, no shaping)")
    parser.add_argument("--kill-above-gib", type=float, default=4.0,
                        help="kill a run whose trees pass this PSS (default 4)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parse_arguments(parser, argv, SMOKE)
    for program in args.programs:
        n1, n2 = sizes(program, args)
        if n1 >= n2:
            parser.error(f"{program}: the smaller n ({n1}) must be below the larger ({n2})")
    if not args.kill_above_gib > 0:
        parser.error("--kill-above-gib must be positive")
    if not selected(args):
        parser.error("no combination of the table of run modes runs within these axes")
    return run_benchmark("benchmarks.modes_memory", args.json,
                         lambda scratch: measure(scratch, args, _echo), report)


def _echo(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
