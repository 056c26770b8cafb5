"""``ltm run``: argument parsing only; the work is :func:`harness.experiments.run.run`."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

from harness.cli.mpspdz import add_install_argument, add_mpspdz_argument
from harness.clients import NOISE_KINDS
from harness.experiments import INPUT_MODES, PROGRAMS, PROTOCOLS, SHARINGS, RunConfig, run


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run", help="run the secure sketch on local MP-SPDZ parties and verify it",
        description="Clients' noisy rows are secret-shared among S MP-SPDZ parties, which "
                    "compute T = (1/sqrt s) sum_i S_i (A + G_i) and reveal it; the result is "
                    "checked bit for bit against a plaintext computation.")
    p.add_argument("--parties", type=int, metavar="S",
                   help="servers (default: 2, or every host of --hosts)")
    p.add_argument("--clients", type=int, default=100_000, metavar="n",
                   help="clients, one row each (default 100000; taken from --data if given)")
    p.add_argument("--dim", type=int, default=10, metavar="d", help="columns (default 10)")
    p.add_argument("--rows", type=int, default=100, metavar="m", help="sketch rows (default 100)")
    p.add_argument("--sparsity", type=int, default=1, metavar="s",
                   help="non-zeros per sketch column (default 1)")
    p.add_argument("--dense", action="store_true", help="the dense sketch: s = m")
    p.add_argument("--data", type=Path, metavar="FILE",
                   help="the n x d data matrix (.npy or .csv); default: uniform in [-eta, eta]")
    p.add_argument("--noise", choices=NOISE_KINDS, default="gaussian")
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-6)
    p.add_argument("--eta", type=float, default=1.0, help="bound on |A| (default 1)")
    p.add_argument("--corrupt-clients", type=int, default=0, metavar="t'",
                   help="clients the noise must tolerate colluding (default 0)")
    p.add_argument("--program", choices=PROGRAMS, default="fast")
    add_protocol_argument(p, "semi2k")
    p.add_argument("--tamper", type=int, metavar="PARTY",
                   help="test aid (local parties only): after preparation, change one word of "
                        "PARTY's input; malicious protocols must abort, semi-honest ones "
                        "reveal a wrong sketch that verification reports")
    p.add_argument("--sharing", choices=SHARINGS, default="full",
                   help="full: every server receives all its share words; seeded: all but "
                        "one sharing component (client j's component j mod C, spread over "
                        "the servers) travel as 32-byte seeds per client, which the servers "
                        "expand (computationally hiding; default full)")
    p.add_argument("--input", dest="input_mode", choices=INPUT_MODES,
                   help="shares: each server reads its own share file; party: party 0 inputs "
                        "the noisy rows (default: party for reference, shares otherwise)")
    p.add_argument("--frac-bits", type=int, default=16, help="fixed-point fraction bits")
    p.add_argument("--seed", type=int, help="seed of the public sketch and synthetic data")
    p.add_argument("--port", type=int,
                   help="first party port (default: a free range; 5000 inside --network)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds before parties are "
                   "stopped (default 900)")
    p.add_argument("--hosts", type=Path, metavar="FILE",
                   help="hosts inventory (TOML): run party i on the i-th host over SSH")
    p.add_argument("--network", metavar="PROFILE",
                   help="run each local party in its own network namespace, links shaped to "
                        "PROFILE (t3.large, t3.large-baseline or none; needs root)")
    p.add_argument("--out", type=Path, help="result directory (default results/run-<time>)")
    p.add_argument("--force", action="store_true", help="replace an existing --out")
    p.add_argument("--keep-work", action="store_true",
                   help="keep the parties' working directories in --out/work")
    add_mpspdz_argument(p)
    add_install_argument(p)
    p.set_defaults(func=_handle)


def add_protocol_argument(p: argparse.ArgumentParser, default: str | None = None) -> None:
    # Not argparse choices: an unknown name gets the harness's one-line error and exit 1.
    p.add_argument("--protocol", default=default, metavar="NAME",
                   help=f"MP-SPDZ protocol: {', '.join(PROTOCOLS)} (default semi2k; the "
                        "replicated ones need exactly 3 parties; see the README's "
                        "security-model table)")


def _handle(args: argparse.Namespace) -> int:
    out = args.out or Path("results") / dt.datetime.now().strftime("run-%Y%m%d-%H%M%S")
    cfg = RunConfig(
        out=out, parties=args.parties, clients=args.clients, dim=args.dim, rows=args.rows,
        sparsity=args.sparsity, dense=args.dense, data=args.data, noise=args.noise,
        epsilon=args.epsilon, delta=args.delta, eta=args.eta,
        corrupt_clients=args.corrupt_clients, program=args.program,
        input_mode=args.input_mode, frac_bits=args.frac_bits, seed=args.seed,
        mp_spdz=args.mp_spdz, port=args.port, timeout=args.timeout, force=args.force,
        keep_work=args.keep_work, hosts=args.hosts, network=args.network,
        install_mpspdz=args.install_mpspdz, protocol=args.protocol, tamper=args.tamper,
        sharing=args.sharing)
    run(cfg, echo=print)
    return 0
