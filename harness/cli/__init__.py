"""The ``ltm`` command line: the top layer, which may import every other.

One module per subcommand group (``run``, ``reproduce``, ``analyze``, ``aws``,
``hosts``, ``mpspdz``), each adding its parsers through
``add_commands(subparsers)`` and pointing ``func`` at a handler that turns the
parsed arguments into a call of a plain function in a lower layer (which is
what tests call directly) and returns an exit status. Nothing but argument
parsing and printing lives here.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from harness._version import __version__
from harness.errors import LtmError

__all__ = ["build_parser", "main"]

_COMMAND_MODULES = (
    "harness.cli.run",
    "harness.cli.mpspdz",
    "harness.cli.analyze",
    "harness.cli.aws",
    "harness.cli.hosts",
    "harness.cli.reproduce",
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
