"""``ltm run``: argument parsing only; the work is :func:`harness.experiments.run`.

Every option but ``--out`` is a field of :class:`~harness.experiments.RunConfig`
and defaults to it (see :mod:`harness.cli.common`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
from pathlib import Path

from harness.cli import common
from harness.cli.common import option
from harness.experiments import INPUT_MODES, RunConfig
from harness.fileio import check_output_dir
from harness.privacy import MAX_COINS, mechanism_names

# ``ltm run``'s own options; the shared ones are in harness.cli.common.
PARTIES = option("--parties", type=int, metavar="S", unset="2, or every host of --hosts",
                 help="servers (default: {default})")
CLIENTS = option("--clients", type=int, metavar="n",
                 help="clients, one row each (default {default}; taken from --data if given)")
DIM = option("--dim", type=int, metavar="d", help="columns (default {default})")
ROWS = option("--rows", type=int, metavar="m", help="sketch rows (default {default})")
SPARSITY = option("--sparsity", type=int, metavar="s",
                  help="non-zeros per sketch column (default {default})")
DENSE = option("--dense", action="store_true", help="the dense sketch: s = m")
DATA = option("--data", type=Path, metavar="FILE", unset="uniform in [-eta, eta]",
              help="the n x d data matrix (.npy, .csv or .txt; one row per client); "
                   "default: {default}. With Gaussian or Skellam noise it needs n > 8 m "
                   "ln(dm/delta) + s + t' rows, else R_D would send zeros and the run is "
                   "refused (see --allow-zero-output)")
HEADER = option("--header", action=argparse.BooleanOptionalAction, unset="detected",
                help="whether --data's first line is a header line (skipped) or a row "
                     "(default: {default}: a line with text is a header; the summary says "
                     "which)")
ALLOW_ZERO_OUTPUT = option(
    "--allow-zero-output", action="store_true",
    help="run --data below R_D's threshold n > 8 m ln(dm/delta) + s + t' as the paper "
         "does: every client sends zeros and the revealed sketch is all zero")
# The other numbers' ranges are RunConfig's (checked before any data is drawn); an
# epsilon has no natural upper end there, so the command line gives one.
EPSILON = option("--epsilon", type=common.number("--epsilon", low=0, high=1e6, open_low=True),
                 metavar="EPS", help="differential privacy's epsilon, in (0, 1e6] (default "
                                     "{default})")
DELTA = option("--delta", type=float, help="differential privacy's delta (default {default})")
ETA = option("--eta", type=float, help="bound on |A| (default {default})")
CORRUPT_CLIENTS = option("--corrupt-clients", type=int, metavar="t'",
                         help="clients the noise must tolerate colluding (default {default})")
TAMPER = option("--tamper", type=int, metavar="PARTY",
                help="test aid (local parties only): after preparation, change one word of "
                     "PARTY's input; malicious protocols must abort, semi-honest ones reveal "
                     "a wrong sketch that verification reports (with --mechanism dng, by the "
                     "servers' digests of their noise; with central, whose noise no one "
                     "knows, refused under them)")
INPUT = option("--input", dest="input_mode", choices=INPUT_MODES,
               unset="party for reference, shares otherwise",
               help="shares: each server reads its own share file; party: party 0 inputs the "
                    "noisy rows (default: {default})")
FRAC_BITS = option("--frac-bits", type=int,
                   help="fixed-point fraction bits (default {default})")
PORT = option("--port", type=int, unset="a free range; 5000 inside --network",
              help="first party port (default: {default})")
MECHANISM = option("--mechanism", choices=mechanism_names(),
                   help="who adds the noise: ltm, the clients (--noise); dng, each server "
                        "draws its own for every cell and inputs it (the honest servers' "
                        "noise suffices); central, the servers jointly draw binomial noise "
                        "inside the MPC, which no party learns (--program local; default "
                        "{default}). A noisy release is verified statistically against the "
                        "certified noise, which sees noise of the wrong size or shape but not "
                        "a small change such as one word; dng's also exactly, against each "
                        "server's digest of its own noise")
GRID_BITS = option("--grid-bits", type=int, metavar="g", unset="the grid on which one client "
                   "moves an entry by one step, its fewest coins",
                   help="--mechanism central: round the sketch inside the MPC to the grid "
                        f"2^-g before its noise (at most {MAX_COINS:,} coins per cell; "
                        "default: {default})")
POISON = option("--poison", type=int, metavar="K",
                help="test and study aid: K clients, drawn at random and named in "
                     "result.json, send the largest words the encoding holds with random "
                     "signs; verification expects them counted, or with --validate rejected")
FORCE = option("--force", action="store_true", help="replace an existing --out")
KEEP_WORK = option("--keep-work", action="store_true",
                   help="keep the parties' working directories in --out/work")
EXPORT_SKETCH = option("--export-sketch", action="store_true",
                       help="also save the sketch's buckets and signs as sketch.npz (n x s "
                            "of each); by default they are recomputed from the seed in "
                            "result.json")


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        description="Clients' noisy rows are secret-shared among S MP-SPDZ parties, which "
                    "compute T = (1/sqrt s) sum_i S_i (A + G_i) and reveal it; the result is "
                    "checked bit for bit against a plaintext computation.")
    add = common.options_of(p, RunConfig)
    for opt in (PARTIES, CLIENTS, DIM, ROWS, SPARSITY, DENSE, DATA, HEADER,
                ALLOW_ZERO_OUTPUT, common.NOISE,
                common.CALIBRATION, EPSILON, DELTA, ETA, CORRUPT_CLIENTS, common.PROGRAM,
                common.PROTOCOL, TAMPER, common.SHARING, INPUT, FRAC_BITS, common.SEED, PORT,
                common.TIMEOUT, common.HOSTS, common.NETWORK, MECHANISM, GRID_BITS,
                common.VALIDATE, POISON):
        add(opt)
    p.add_argument("--out", type=Path, help="result directory (default results/run-<time>)")
    for opt in (FORCE, KEEP_WORK, EXPORT_SKETCH, common.MP_SPDZ, common.NO_INSTALL):
        add(opt)
    p.set_defaults(func=_handle)


def _handle(args: argparse.Namespace) -> int:
    from harness.experiments import run  # the whole run path: not for building the parser

    out = args.out or Path("results") / dt.datetime.now().strftime("run-%Y%m%d-%H%M%S")
    check_output_dir(out)  # before anything is read, drawn or created
    # flushed: a long run's notice must show before the run, also through a pipe
    run(common.config_from(RunConfig, args, out=out), echo=functools.partial(print, flush=True))
    return 0
