"""`ltm hosts trust | check`: the SSH side of a hosts inventory.

The handlers only translate arguments; the work is in :mod:`harness.remote._trust`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.errors import InputError

__all__ = ["add_commands"]


def add_commands(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "hosts", help="pin SSH host keys of, and check, the machines in a hosts inventory",
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
    trust.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                       help="per-host connection timeout (default: 10)")
    trust.set_defaults(func=_trust)

    check = commands.add_parser(
        "check", help="log in to each host (keys verified) and look for MP-SPDZ",
        description="Connect to every host with host-key checking and report whether its "
                    "MP-SPDZ (semi2k-party.x) is there, and which version.")
    check.add_argument("inventory", type=Path, metavar="FILE", help="the hosts inventory")
    check.set_defaults(func=_check)


def _ask(question: str) -> bool:
    if not sys.stdin.isatty():
        raise InputError("cannot ask for confirmation (stdin is not a terminal); check the "
                         "fingerprints above and rerun with --yes")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def _trust(args: argparse.Namespace) -> int:
    from harness.remote._trust import trust_hosts  # paramiko loads only for this command

    trust_hosts(args.inventory, replace=args.replace, timeout=args.timeout,
                confirm=None if args.yes else _ask)
    return 0


def _check(args: argparse.Namespace) -> int:
    from harness.remote._trust import check_hosts

    checks = check_hosts(args.inventory)
    return 0 if all(c.ok for c in checks) else 1
