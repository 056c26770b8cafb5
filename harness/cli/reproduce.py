"""``ltm reproduce``: argument parsing only; the work is
:func:`harness.experiments.reproduce`.

Its options default to :class:`~harness.experiments.ReproduceConfig`'s fields
(see :mod:`harness.cli.common`).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from harness.cli import common
from harness.cli.common import option
from harness.errors import InputError
from harness.experiments import ReproduceConfig
from harness.fileio import check_output_dir

REPEAT = option("--repeat", type=int, metavar="K", unset="the paper's 10",
                help="repetitions per cell (default: {default})")
# ReproduceConfig bounds --scale above (memory); below, a millionth of the paper's n
# already leaves cells of a few clients.
SCALE = option("--scale", type=common.number("--scale", low=1e-6), metavar="F",
               help="multiply every n by F, at least 1e-6, for quick looks (default "
                    "{default})")
FRESH_INPUTS = option("--fresh-inputs", action="store_true",
                      help="prepare the clients' inputs anew for every repetition (default: "
                           "once per cell, the servers rerun on them; always anew with "
                           "--hosts or --network, where the upload is measured)")
# The spec decides where --calibration is not given: the paper's corollary for its
# tables, the tightest (analytic) for the comparison of mechanisms and the check's.
CALIBRATION = dataclasses.replace(
    common.CALIBRATION, unset="the sweep's: analytic for mechanisms and validation, the "
                              "paper's corollary elsewhere")
NO_PROGRESS = option("--no-progress", dest="progress", action="store_false",
                     help="no progress bar")

# Unset unless given, so that ``ltm reproduce security`` and ``scale``, which run the
# programs and protocols their specs name, can refuse them; otherwise
# ReproduceConfig's defaults apply.
_UNSET = ("program", "protocol")


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "reproduce",
        description="Runs the paper's MPC sweeps (harness/experiments/specs/table*.toml), "
                    "verifying every repetition, and writes per-table CSV, Markdown, LaTeX and "
                    "PNG beside the paper's values, plus report.md. Finished repetitions are "
                    "appended to DIR/raw.jsonl at once; rerunning the same command resumes.")
    p.add_argument("tables", choices=("table3", "table4", "table5", "all", "security",
                                      "scale", "mechanisms", "validation"),
                   help="a table, all three (the paper's tables only), security: every "
                        "protocol x program on Table 3's grid and Table 5's point s = 10 "
                        "(harness/experiments/specs/security.toml), or scale: n = 1e6 to "
                        "1e9 with semi2k and local, wall, stages and peak memory beside "
                        "Table 3 extrapolated (specs/scale.toml; about 10 minutes at n = "
                        "1e9, so not part of all), or mechanisms: is the LTM worth it? "
                        "ltm, dng and central noise under every protocol at Table 3's "
                        "setting, n = 1e6, epsilon 0.1 and 1: cost against the "
                        "noise's std ratio and the analyst's errors psi and phi "
                        "(specs/mechanisms.toml), or validation: clients that lie, the cost "
                        "of checking every client's row (none, linf, l2) under every "
                        "protocol at n = 1e4, 1e5 and 1e6, and the analyst's psi with 0, 1 "
                        "and 10 lying clients with and without the check "
                        "(specs/validation.toml)")
    # A sweep needs its directory; an estimate needs none: one of the two is required.
    out_or_estimate = p.add_mutually_exclusive_group(required=True)
    out_or_estimate.add_argument(
        "--out", type=Path, metavar="DIR",
        help="sweep directory (created, or resumed if it holds the same sweep)")
    out_or_estimate.add_argument(
        "--estimate", action="store_true",
        help="only print the sweep's expected duration and its cost on AWS t3.large "
             "(servers plus one client machine), then exit")
    add = common.options_of(p, ReproduceConfig, unset=_UNSET)
    for opt in (REPEAT, SCALE, common.PROGRAM, common.PROTOCOL, common.SHARING, FRESH_INPUTS,
                common.HOSTS, common.NETWORK, common.NOISE, CALIBRATION,
                common.VALIDATE, common.SEED, common.TIMEOUT, NO_PROGRESS):
        add(opt)
    p.add_argument("--bandwidth", type=common.number("--bandwidth", low=0.001, high=10000),
                   default=0.512, metavar="GBIT",
                   help="with --estimate: the clients' upload bandwidth, in [0.001, 10000] "
                        "(default 0.512, t3.large's baseline)")
    add(common.MP_SPDZ)
    add(common.NO_INSTALL)
    p.set_defaults(func=_handle)


def _handle(args: argparse.Namespace) -> int:
    from harness.experiments import reproduce

    if not args.estimate:
        check_output_dir(args.out)  # before anything is planned or created
    if args.tables in ("security", "scale", "mechanisms", "validation") \
            and (args.program or args.protocol):
        raise InputError(f"ltm reproduce {args.tables} runs the protocols and programs its "
                         "specification names; drop --program and --protocol")
    if args.tables == "validation" and args.validation != "none":
        raise InputError("ltm reproduce validation runs every check its specification names "
                         "(none, linf and l2); drop --validate")
    # An estimate plans the same cells as the sweep would, so it gets the same settings.
    cfg = common.config_from(ReproduceConfig, args, unset=_UNSET, out=args.out or Path("."))
    if args.estimate:
        from harness.experiments import estimate_sweep

        est = estimate_sweep(cfg, bandwidth_gbit=args.bandwidth)
        print(f"ltm reproduce {args.tables}: expected {est.describe()}")
        return 0
    if args.tables in ("mechanisms", "validation"):
        from harness.analyst import MechanismUtility

        reproduce(cfg, echo=print, utility=MechanismUtility())
        return 0
    reproduce(cfg, echo=print)
    return 0
