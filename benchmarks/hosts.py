"""Streaming to your own hosts: memory of every machine against n, in one run.

Three server hosts and, in a second layout, two client hosts, each a real sshd on
this machine's loopback with this machine's harness and MP-SPDZ, as ``ltm hosts
setup`` leaves a host (``ltm hosts loopback start``; needs openssh-server). For each
layout, ``ltm run --hosts INV --program local --parties 3 --clients N`` (d = 10,
m = 100, s = 1, Gaussian) at N = ``--base`` and ``--big``, each verified, while
the peak PSS is sampled every 0.1 s of: this machine's ``ltm`` process tree (the
runner, and the clients' workers when there is no client host), each server
host's tree (its sshd: the ``serve`` agent, then MP-SPDZ), and each client
host's. The hosts share this machine's two cores, so walls are of the whole.

The last lines are, per layout, ``peak big / peak base`` of the runner, the
busiest server host and (with client hosts) the busiest client host: memory
independent of n when they stay near 1.

    python -m benchmarks.hosts [--base N] [--big N] [--layouts L ...] [--json FILE] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from benchmarks._cli import parse_arguments, run_benchmark
from harness.errors import LtmError
from harness.experiments import PeakMemory

# Each layout: its name in the report, and how many client hosts it has.
LAYOUTS = {"here": ("from here", 0), "client-hosts": ("two client hosts", 2)}
# The smallest size (--smoke): two small n, with client hosts (the runner's stream
# "from here" is the same script with none), in seconds.
SMOKE = {"base": 2000, "big": 4000, "layouts": ["client-hosts"]}


class RunFailed(LtmError):
    """One ``ltm run`` did not finish: the benchmark stops with this line."""


def measure(scratch: Path, args: argparse.Namespace) -> dict:
    from harness.engine import find_free_ports, find_mpspdz
    from harness.remote import loopback_servers, start_loopback, stop_loopback, trust_hosts

    mp = find_mpspdz()
    results: dict = {"base": args.base, "big": args.big, "layouts": {}}
    for layout, clients in (LAYOUTS[key] for key in args.layouts):
        where = scratch / f"hosts-{clients}"
        inv = start_loopback(3, where, mp.root, base_port=find_free_ports(3),
                             client_hosts=clients, echo=lambda line: None)
        try:
            trust_hosts(inv, echo=lambda line: None)
            servers = loopback_servers(where)
            runs = {}
            for n in (args.base, args.big):
                runs[str(n)] = _run(inv, servers, n, scratch / f"out-{clients}-{n}")
                print(f"{layout}, n={n}: {_line(runs[str(n)])}", flush=True)
            results["layouts"][layout] = runs
        finally:
            stop_loopback(where, echo=lambda line: None)
    return results


def _run(inv: Path, servers: dict[str, int], n: int, out: Path) -> dict:
    command = [sys.executable, "-m", "harness", "run", "--hosts", str(inv), "--program",
               "local", "--parties", "3", "--clients", str(n), "--dim", "10", "--rows", "100",
               "--seed", "1", "--timeout", "3600", "--out", str(out)]
    started = time.perf_counter()
    with ExitStack() as stack:
        hosts = {name: stack.enter_context(PeakMemory(pid)) for name, pid in servers.items()}
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
    parser.add_argument("--layouts", nargs="+", choices=sorted(LAYOUTS),
                        default=list(LAYOUTS),
                        help="the layouts to measure: here (the clients are this machine's "
                             "workers), client-hosts (two client hosts) (default: both)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parse_arguments(parser, argv, SMOKE)
    if not 0 < args.base < args.big:
        parser.error(f"need 0 < --base < --big, got {args.base} and {args.big}")
    return run_benchmark("benchmarks.hosts", args.json, lambda d: measure(d, args), report)


if __name__ == "__main__":
    sys.exit(main())
