"""`ltm hosts trust | setup | check | loopback`: the SSH side of a hosts inventory.

The handlers only translate arguments; the work is in :mod:`harness.remote._trust`,
:mod:`harness.remote.setup` and :mod:`harness.remote.loopback`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from harness.cli.common import number
from harness.errors import InputError, LtmError

# Kept equal to harness.remote.loopback.MAX_HOSTS (a test checks), so that --help loads
# neither paramiko nor the engine.
MAX_LOOPBACK_HOSTS = 16

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
    _add_loopback(commands)


# `ltm hosts loopback start|stop`: where the hosts live unless --dir says otherwise, in
# the user's state directory: never in the working directory, which may be a checkout
# (the hosts' directory holds the private key that logs in to them).
LOOPBACK_DIR_SHOWN = ("~/.local/state/ltm-harness/loopback-hosts, or under $XDG_STATE_HOME if "
                      "set")


def default_loopback_dir() -> Path:
    """The hosts' directory without --dir (a function: tests change HOME after import)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "ltm-harness" / "loopback-hosts"


def _add_loopback(commands: Any) -> None:
    loopback = commands.add_parser(
        "loopback", help="start or stop OpenSSH servers on this machine to try --hosts on",
        description="Run OpenSSH servers on this machine's loopback, one per party, each "
                    "with its own host key and home, and write their hosts inventory: a "
                    "--hosts run on one machine, as on real hosts (pinned keys, SSH, TLS "
                    "between the parties). Needs /usr/sbin/sshd (openssh-server).")
    actions = loopback.add_subparsers(dest="loopback_command", metavar="ACTION", required=True)
    start = actions.add_parser(
        "start", help="start N sshd servers and write DIR/hosts.toml",
        description="Start N sshd servers on free loopback ports as background daemons, "
                    "each with a new host key and a home whose harness is this one (as "
                    "`ltm hosts setup` leaves a host) and this machine's MP-SPDZ, and a new "
                    "key for you to log in with (as the user running this command); write "
                    "their inventory DIR/hosts.toml. Every file is 0600 in a 0700 "
                    "directory. Pin the keys next: `ltm hosts trust DIR/hosts.toml`.")
    start.add_argument("count", type=number("N", low=2, high=MAX_LOOPBACK_HOSTS, integer=True),
                       metavar="N", help=f"how many hosts (parties), 2 to {MAX_LOOPBACK_HOSTS}")
    start.add_argument("--client-hosts", type=number("--client-hosts", low=0,
                                                     high=MAX_LOOPBACK_HOSTS, integer=True),
                       default=0, metavar="K",
                       help="also K client hosts ([[client]] entries), which stream the "
                            "clients' shares to the servers (default: 0, this machine does)")
    start.add_argument("--dir", type=Path, default=None, metavar="DIR",
                       help="a new (or empty) directory for the hosts' keys (your login "
                            "key among them), homes and inventory (default: "
                            f"{LOOPBACK_DIR_SHOWN})")
    start.add_argument("--mp-spdz", type=Path, default=None, metavar="DIR",
                       help="the MP-SPDZ the hosts run (default: $MP_SPDZ_HOME or "
                            "~/.local/share/ltm-harness/mp-spdz, installed on first use)")
    start.set_defaults(func=_loopback_start)
    stop = actions.add_parser(
        "stop", help="stop the servers and remove DIR (keys, homes, inventory)",
        description="Stop the sshd servers `ltm hosts loopback start` started in DIR, with "
                    "every session and party they run, and remove DIR: its keys, the "
                    "hosts' homes and working directories, the inventory and its pinned "
                    "keys.")
    stop.add_argument("--dir", type=Path, default=None, metavar="DIR",
                      help=f"the directory given to start (default: {LOOPBACK_DIR_SHOWN})")
    stop.set_defaults(func=_loopback_stop)


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


def _loopback_start(args: argparse.Namespace) -> int:
    from harness.engine import ensure_mpspdz, find_free_ports
    from harness.remote import check_loopback, start_loopback

    directory = args.dir or default_loopback_dir()
    check_loopback(args.count, directory, args.client_hosts)  # before any install
    mp = ensure_mpspdz(args.mp_spdz)
    start_loopback(args.count, directory, mp.root, base_port=find_free_ports(args.count),
                   client_hosts=args.client_hosts)
    return 0


def _loopback_stop(args: argparse.Namespace) -> int:
    from harness.remote import stop_loopback

    stop_loopback(args.dir or default_loopback_dir())
    return 0
