"""Streaming to your own hosts: memory of every machine against n, in one run.

Three server hosts and, in a second layout, two client hosts, each a real sshd on
this machine's loopback with the harness "installed" as ``ltm hosts setup``
leaves it (the test suite's fakes, ``tests/_sshd.py``; run as root). For each
layout, ``ltm run --hosts INV --program local --parties 3 --clients N`` (d = 10,
m = 100, s = 1, Gaussian) at N = ``--base`` and ``--big``, each verified, while
the peak PSS is sampled every 0.1 s of: this machine's ``ltm`` process tree (the
runner, and the clients' workers when there is no client host), each server
host's tree (its sshd: the ``serve`` agent, then MP-SPDZ), and each client
host's. The hosts share this machine's two cores, so walls are of the whole.

The last lines are, per layout, ``peak big / peak base`` of the runner, the
busiest server host and (with client hosts) the busiest client host: memory
independent of n when they stay near 1.

    python -m benchmarks.hosts [--base N] [--big N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from benchmarks._cli import run_benchmark
from harness.errors import LtmError
from harness.experiments import PeakMemory

_TESTS = Path(__file__).resolve().parent.parent / "tests"
LAYOUTS = {"from here": 0, "two client hosts": 2}


class RunFailed(LtmError):
    """One ``ltm run`` did not finish: the benchmark stops with this line."""


def measure(scratch: Path, args: argparse.Namespace) -> dict:
    if os.geteuid() != 0:
        raise LtmError("benchmarks.hosts starts sshd servers logged into as root: run it "
                       "as root")
    sys.path.insert(0, str(_TESTS))
    from _sshd import SshFarm, trusted_inventory

    from harness.engine import find_mpspdz

    mp = find_mpspdz()
    results: dict = {"base": args.base, "big": args.big, "layouts": {}}
    for layout, clients in LAYOUTS.items():
        farm = SshFarm(scratch / f"farm-{clients}")
        try:
            where = scratch / f"inv-{clients}"
            where.mkdir()
            inv, fakes = trusted_inventory(where, farm, mp.root, 3, clients)
            runs = {}
            for n in (args.base, args.big):
                runs[str(n)] = _run(inv, fakes, n, scratch / f"out-{clients}-{n}")
                print(f"{layout}, n={n}: {_line(runs[str(n)])}", flush=True)
            results["layouts"][layout] = runs
        finally:
            farm.close()
    return results


def _run(inv: Path, fakes: list, n: int, out: Path) -> dict:
    command = [sys.executable, "-m", "harness", "run", "--hosts", str(inv), "--program",
               "local", "--parties", "3", "--clients", str(n), "--dim", "10", "--rows", "100",
               "--seed", "1", "--timeout", "3600", "--out", str(out)]
    started = time.perf_counter()
    with ExitStack() as stack:
        hosts = {f.name: stack.enter_context(PeakMemory(f.proc.pid)) for f in fakes}
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        with PeakMemory(proc.pid) as runner:
            _, err = proc.communicate()
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RunFailed(f"ltm run --hosts at n={n} failed: {err.strip()[-400:]}")
    result = json.loads((out / "result.json").read_text())
    if not result["verification"]["ok"]:
        raise RunFailed(f"ltm run --hosts at n={n} did not verify")
    gib = 2.0**30
    return {"wall_s": wall, "t_end_to_end_s": result["t_end_to_end_s"],
            "stream_wall_s": result["timings"]["stream_wall_s"],
            "runner_gib": runner.bytes / gib,
            "servers_gib": max(m.bytes for name, m in hosts.items() if name.startswith("p"))
            / gib,
            "clients_gib": max((m.bytes for name, m in hosts.items()
                                if name.startswith("client")), default=0) / gib}


def _line(run: dict) -> str:
    text = (f"wall {run['wall_s']:.1f} s, T_end_to_end {run['t_end_to_end_s']:.2f} s "
            f"(stream {run['stream_wall_s']:.2f} s); peak PSS: this machine "
            f"{run['runner_gib']:.3f} GiB, busiest server host {run['servers_gib']:.3f} GiB")
    if run["clients_gib"]:
        text += f", busiest client host {run['clients_gib']:.3f} GiB"
    return text


def report(result: dict) -> str:
    base, big = str(result["base"]), str(result["big"])
    lines = []
    for layout, runs in result["layouts"].items():
        ratios = [f"this machine {runs[big]['runner_gib'] / runs[base]['runner_gib']:.2f}",
                  f"servers {runs[big]['servers_gib'] / runs[base]['servers_gib']:.2f}"]
        if runs[base]["clients_gib"]:
            ratios.append(
                f"client hosts {runs[big]['clients_gib'] / runs[base]['clients_gib']:.2f}")
        lines.append(f"{layout}: peak {_short(int(big))} / peak {_short(int(base))}: "
                     + ", ".join(ratios))
    return "\n".join(lines)


def _short(n: int) -> str:
    exponent = len(str(n)) - 1
    return f"1e{exponent}" if n == 10**exponent else str(n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hosts",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=int, default=1_000_000)
    parser.add_argument("--big", type=int, default=10_000_000)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if not 0 < args.base < args.big:
        parser.error(f"need 0 < --base < --big, got {args.base} and {args.big}")
    return run_benchmark("benchmarks.hosts", args.json, lambda d: measure(d, args), report)


if __name__ == "__main__":
    sys.exit(main())
