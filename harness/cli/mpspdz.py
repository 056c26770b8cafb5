"""``ltm doctor`` and ``ltm mpspdz install``; the work is in :mod:`harness.engine.mpspdz`.

``--mp-spdz``, which every engine-using command shares, is defined with the
other shared options in :mod:`harness.cli.common`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.common import MP_SPDZ
from harness.engine import (
    NO_INSTALL_ENV_VAR,
    SHA256_ENV_VAR,
    SUPPORTED_VERSION,
    URL_ENV_VAR,
    default_home,
    doctor,
    install,
    release_url,
)
from harness.errors import MpSpdzError
from harness.fileio import check_output_dir

__all__ = ["add_commands", "add_mpspdz_argument"]


def add_mpspdz_argument(parser: argparse.ArgumentParser) -> None:
    """``--mp-spdz DIR``, shared by every subcommand that needs the engine."""
    MP_SPDZ.add(parser)


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    p_doctor = subparsers.add_parser(
        "doctor",
        description="Report the MP-SPDZ in use, its binaries, Python packages and openssl; "
        "exit 1 if something required is missing.",
    )
    add_mpspdz_argument(p_doctor)
    p_doctor.add_argument(
        "--fix",
        action="store_true",
        help="when no MP-SPDZ is configured, install the release into the default location "
        f"first (not with {NO_INSTALL_ENV_VAR}=1)",
    )
    p_doctor.set_defaults(func=_cmd_doctor)

    p_mpspdz = subparsers.add_parser("mpspdz")
    p_mpspdz.set_defaults(func=lambda _args: _print_help(p_mpspdz))
    sub = p_mpspdz.add_subparsers(dest="mpspdz_command", metavar="COMMAND")
    p_install = sub.add_parser(
        "install",
        help=f"install the official MP-SPDZ v{SUPPORTED_VERSION} binary release",
        description=f"Download the official MP-SPDZ v{SUPPORTED_VERSION} binary release "
        "(or use --archive) and set it up for this CPU.",
    )
    source = p_install.add_mutually_exclusive_group()
    source.add_argument(
        "--archive", metavar="FILE", help="install from a release tarball already on disk"
    )
    source.add_argument(
        "--url",
        metavar="URL",
        help=f"download from URL (default ${URL_ENV_VAR} or {release_url()})".replace("%", "%%"),
    )
    p_install.add_argument(
        "--prefix",
        metavar="DIR",
        help=f"install into DIR (default {str(default_home()).replace('%', '%%')})",
    )
    p_install.add_argument(
        "--force", action="store_true", help="replace an existing installation at the prefix"
    )
    p_install.add_argument(
        "--sha256",
        metavar="DIGEST",
        help=f"the archive's expected sha256 (default ${SHA256_ENV_VAR}); a mismatch is "
        "refused before anything is unpacked, and without one the digest is only printed",
    )
    p_install.set_defaults(func=_cmd_install)


def _print_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 1


def _cmd_doctor(args: argparse.Namespace) -> int:
    if not doctor(args.mp_spdz, fix=args.fix):
        # The report is on stdout; stderr gets the one line every failing command gives.
        raise MpSpdzError("a required component is missing (marked MISSING above); fix it "
                          "as that line says, then rerun `ltm doctor`")
    return 0


def _cmd_install(args: argparse.Namespace) -> int:
    if args.prefix:
        # install() stages beside the prefix and renames: the same rules as a run's --out.
        check_output_dir(Path(args.prefix).expanduser(), option="--prefix")
    install(
        prefix=args.prefix,
        archive=args.archive,
        url=args.url,
        force=args.force,
        sha256=args.sha256,
    )
    return 0
