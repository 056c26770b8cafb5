"""``ltm reproduce``: argument parsing only; the work is
:func:`harness.experiments.reproduce.reproduce`."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.mpspdz import add_install_argument, add_mpspdz_argument
from harness.cli.run import add_protocol_argument
from harness.clients import NOISE_KINDS
from harness.experiments import PROGRAMS, SHARINGS


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "reproduce", help="reproduce the paper's Tables 3-5 (sweeps, tables, plots, report)",
        description="Runs the paper's MPC sweeps (harness/experiments/specs/table*.toml), "
                    "verifying every repetition, and writes per-table CSV, Markdown, LaTeX and "
                    "PNG beside the paper's values, plus report.md. Finished repetitions are "
                    "appended to DIR/raw.jsonl at once; rerunning the same command resumes.")
    p.add_argument("tables", choices=("table3", "table4", "table5", "all", "security"),
                   help="a table, all three, or security: every protocol x program on "
                        "Table 3's grid and Table 5's point s = 10 "
                        "(harness/experiments/specs/security.toml)")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="sweep directory (created, or resumed if it holds the same sweep)")
    p.add_argument("--repeat", type=int, metavar="K",
                   help="repetitions per cell (default: the paper's 10)")
    p.add_argument("--scale", type=float, default=1.0, metavar="F",
                   help="multiply every n by F, for quick looks (default 1)")
    p.add_argument("--program", choices=PROGRAMS, help="server program (default fast)")
    add_protocol_argument(p)
    p.add_argument("--sharing", choices=SHARINGS, default="full",
                   help="full: every server receives all its share words; seeded: all but "
                        "one sharing component (client j's component j mod C, spread over "
                        "the servers) travel as 32-byte seeds per client, which the servers "
                        "expand (computationally hiding; cells without share files "
                        "are left out; default full)")
    p.add_argument("--fresh-inputs", action="store_true",
                   help="prepare the clients' inputs anew for every repetition (default: "
                        "once per cell, the servers rerun on them; always anew with "
                        "--hosts or --network, where the upload is measured)")
    p.add_argument("--hosts", type=Path, metavar="FILE",
                   help="hosts inventory: run party i on the i-th host over SSH")
    p.add_argument("--network", metavar="PROFILE",
                   help="local parties in network namespaces shaped to PROFILE "
                        "(t3.large, t3.large-baseline or none; needs root)")
    p.add_argument("--noise", choices=NOISE_KINDS, default="gaussian")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of the public sketch and synthetic data (default 1)")
    p.add_argument("--timeout", type=float, default=3600.0,
                   help="seconds before one repetition's parties are stopped (default 3600)")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no progress bar")
    p.add_argument("--estimate", action="store_true",
                   help="only print the sweep's expected duration and its cost on AWS "
                        "t3.large (servers plus one client machine), then exit")
    p.add_argument("--bandwidth", type=float, default=0.512, metavar="GBIT",
                   help="with --estimate: the clients' upload bandwidth (default 0.512, "
                        "t3.large's baseline)")
    add_mpspdz_argument(p)
    add_install_argument(p)
    p.set_defaults(func=_handle)


def _handle(args: argparse.Namespace) -> int:
    from harness.errors import InputError
    from harness.experiments import ReproduceConfig, reproduce

    if args.out is None and not args.estimate:
        raise InputError("--out DIR is required: the sweep's directory (a rerun resumes it)")
    if args.tables == "security" and (args.program or args.protocol):
        raise InputError("ltm reproduce security runs every protocol and program itself; "
                         "drop --program and --protocol")
    # An estimate plans the same cells as the sweep would, so it gets the same settings.
    cfg = ReproduceConfig(tables=args.tables, out=args.out or Path("."), repeat=args.repeat,
                          scale=args.scale, program=args.program or "fast",
                          protocol=args.protocol or "semi2k", sharing=args.sharing,
                          fresh_inputs=args.fresh_inputs,
                          hosts=args.hosts, network=args.network, noise=args.noise,
                          seed=args.seed, timeout=args.timeout, mp_spdz=args.mp_spdz,
                          progress=args.progress, install_mpspdz=args.install_mpspdz)
    if args.estimate:
        from harness.experiments import estimate_sweep

        est = estimate_sweep(cfg, bandwidth_gbit=args.bandwidth)
        print(f"ltm reproduce {args.tables}: expected {est.describe()}")
        return 0
    reproduce(cfg, echo=print)
    return 0
