"""The ``ltm`` command line.

Each subcommand's work lives in a plain function that tests call directly; the
modules listed in ``_COMMAND_MODULES`` add their parsers through
``add_commands(subparsers)`` and point ``func`` at a handler that takes the
parsed arguments and returns an exit status.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from harness._version import __version__
from harness.errors import LtmError

_COMMAND_MODULES = (
    "harness._cmd_run",
    "harness.mpspdz",
    "harness._cmd_analyze",
    "harness._cmd_aws",
    "harness._cmd_hosts",
    "harness._cmd_reproduce",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ltm",
        description="Differentially private secure sketching on MP-SPDZ (the LTM).",
    )
    parser.add_argument("--version", action="version", version=f"ltm-harness {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        importlib.import_module(name).add_commands(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except LtmError as exc:
        # One clear line (plus a party's stderr tail where there is one), no traceback.
        print(f"ltm: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("ltm: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
