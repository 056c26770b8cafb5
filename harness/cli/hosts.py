"""`ltm hosts trust | setup | check`: the SSH side of a hosts inventory.

The handlers only translate arguments; the work is in :mod:`harness.remote._trust`
and :mod:`harness.remote.setup`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.cli.common import number
from harness.errors import InputError, LtmError

__all__ = ["add_commands"]


def add_commands(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "hosts",
        description="Work with the machines of a hosts inventory "
                    "(TOML, see harness/remote/hosts.py).")
    commands = parser.add_subparsers(dest="hosts_command", metavar="ACTION", required=True)

    trust = commands.add_parser(
        "trust", help="fetch each host's SSH key and pin it in the inventory's known_hosts",
        description="Fetch every host's SSH host key, print its SHA256 fingerprint and pin it "
                    "in the known_hosts file the inventory names. Compare the fingerprints "
                    "with the machines' own (e.g. `ssh-keygen -lf "
                    "/etc/ssh/ssh_host_ed25519_key.pub` on the console) before confirming.")
    trust.add_argument("inventory", type=Path, metavar="FILE", help="the hosts inventory")
    trust.add_argument("--yes", "-y", action="store_true",
                       help="pin without asking for confirmation")
    trust.add_argument("--replace", action="store_true",
                       help="replace keys that differ from the pinned ones (after a host was "
                            "rebuilt); without it a changed key is refused")
    trust.add_argument("--timeout", type=number("--timeout", low=0, high=3600, open_low=True),
                       default=10.0, metavar="SECONDS",
                       help="per-host connection timeout, in (0, 3600] (default: 10)")
    trust.set_defaults(func=_trust)

    setup = commands.add_parser(
        "setup", help="install the harness and MP-SPDZ on every host (in parallel)",
        description="Prepare every host of the inventory (and its client hosts) over SSH "
                    "with the pinned keys: a wheel of this harness, installed into a venv in "
                    "the login user's home, and MP-SPDZ. A second run skips what is there "
                    "already and says so.")
    setup.add_argument("inventory", type=Path, metavar="FILE", help="the hosts inventory")
    setup.add_argument("--mp-spdz", dest="mode", choices=("local", "release"), default="local",
                       help="local: upload this machine's MP-SPDZ (compiler, party binaries, "
                            "its libraries); release: each host installs the official release "
                            "itself (needs its internet) (default: local)")
    setup.add_argument("--mp-spdz-dir", type=Path, default=None, metavar="DIR",
                       help="with --mp-spdz local: the MP-SPDZ to upload (default: "
                            "$MP_SPDZ_HOME or ~/.local/share/ltm-harness/mp-spdz)")
    setup.add_argument("--yes", "-y", action="store_true",
                       help="do not ask before changing the hosts")
    setup.set_defaults(func=_setup)

    check = commands.add_parser(
        "check", help="log in to each host (keys verified) and look for MP-SPDZ",
        description="Connect to every host with host-key checking and report whether its "
                    "MP-SPDZ (semi2k-party.x) is there, and which version, and which harness "
                    "`ltm hosts setup` installed (flagged if it differs from this one).")
    check.add_argument("inventory", type=Path, metavar="FILE", help="the hosts inventory")
    check.set_defaults(func=_check)


def _ask(question: str) -> bool:
    if not sys.stdin.isatty():
        raise InputError("cannot ask for confirmation (stdin is not a terminal); check the "
                         "fingerprints above and rerun with --yes")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def _trust(args: argparse.Namespace) -> int:
    from harness.remote import trust_hosts  # paramiko loads only for this command

    trust_hosts(args.inventory, replace=args.replace, timeout=args.timeout,
                confirm=None if args.yes else _ask)
    return 0


def _setup(args: argparse.Namespace) -> int:
    from harness.remote import load_inventory, setup_hosts

    if not args.yes:
        inventory = load_inventory(args.inventory)
        count = len(inventory.hosts) + len(inventory.clients)
        if not _ask(f"Install the harness and MP-SPDZ ({args.mode}) on {count} host(s) of "
                    f"{args.inventory}?"):
            raise InputError("not confirmed; nothing was changed (pass --yes to skip the "
                             "question)")
    setup_hosts(args.inventory, mode=args.mode, mp_spdz=args.mp_spdz_dir)
    return 0


def _check(args: argparse.Namespace) -> int:
    from harness.remote import check_hosts

    checks = check_hosts(args.inventory)
    failed = sum(not c.ok for c in checks)
    if failed:
        raise LtmError(f"{failed} of {len(checks)} host(s) failed the check: each FAILED line "
                       f"above says why (`ltm hosts setup {args.inventory}` installs what is "
                       "missing)")
    return 0
