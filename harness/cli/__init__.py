"""The ``ltm`` command line: the top layer, which may import every other.

One module per subcommand group (``run``, ``reproduce``, ``analyze``, ``aws``,
``hosts``, ``mpspdz``), each adding its parsers through
``add_commands(subparsers)`` and pointing ``func`` at a handler that turns the
parsed arguments into a call of a plain function in a lower layer (which is
what tests call directly) and returns an exit status. Nothing but argument
parsing and printing lives here. The options several commands share, and the
rule that a command's defaults are its config dataclass's, are in
:mod:`harness.cli.common`.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import signal
import sys
import traceback
from typing import NoReturn

from harness._version import __version__
from harness.errors import Interrupted, LtmError, stop_on_signals

__all__ = ["DEBUG_ENV_VAR", "Interrupted", "build_parser", "main"]

# Set to 1 (or pass --debug) to see the traceback of an internal error.
DEBUG_ENV_VAR = "LTM_DEBUG"

# The argparse dests that hold a subcommand's name, outermost first: they name the
# command in an internal error's line.
_COMMAND_DESTS = ("command", "analysis", "grid", "hosts_command", "aws_command",
                  "mpspdz_command")

_COMMAND_MODULES = (
    "harness.cli.run",
    "harness.cli.mpspdz",
    "harness.cli.analyze",
    "harness.cli.aws",
    "harness.cli.hosts",
    "harness.cli.reproduce",
    "harness.cli.audit",
)

# Libraries of an optional extra (pyproject.toml), imported only by the commands that
# use them: a missing one is a missing extra, named in one line.
_EXTRAS = {"boto3": "aws", "botocore": "aws", "matplotlib": "analysis", "pandas": "analysis"}


class _Parser(argparse.ArgumentParser):
    """argparse with the harness's error format: one line, exit 1 (subcommands inherit it)."""

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"ltm: error: {self.prog}: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ltm",
        description="Differentially private secure sketching on MP-SPDZ (the LTM).",
    )
    parser.add_argument("--version", action="version", version=f"ltm-harness {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help=f"show the traceback of an internal error (also "
                             f"{DEBUG_ENV_VAR}=1)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        importlib.import_module(name).add_commands(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    debug = _debug_requested(argv)
    command = "ltm"
    previous: dict = {}
    try:
        # Inside the try: an option's type check (harness.cli.common.number) raises
        # InputError, which is one line like every other.
        args = parser.parse_args(argv)
        command = _command_name(args)
        if not getattr(args, "func", None):
            parser.print_help()
            return 1
        previous = stop_on_signals()
        return int(args.func(args) or 0)
    except LtmError as exc:
        # One clear line (plus a party's stderr tail where there is one), no traceback.
        _say(f"ltm: error: {exc}")
        return 1
    except ModuleNotFoundError as exc:
        extra = _EXTRAS.get((exc.name or "").partition(".")[0])
        if extra is None:
            raise
        _say(f"ltm: error: this command needs {exc.name}, which is not installed; install "
             f"it with: pip install 'ltm-harness[{extra}]'")
        return 1
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            # Every cleanup ran on the way here: no partial directory is left behind.
            where = f" writing {exc.filename}" if exc.filename else ""
            _say(f"ltm: error: the disk is full{where}; partial files were removed: free "
                 "some space, or choose an --out on another file system")
            return 1
        return _internal_error(command, exc, debug)
    except MemoryError:
        _say("ltm: error: out of memory; use a smaller input or parameters (fewer clients, "
             "rows or columns)")
        return 1
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        _say(f"ltm: interrupted by {signal.Signals(signum).name}")
        return 128 + signum
    except Exception as exc:  # noqa: BLE001 - the last line of defence: a bug, said in one line
        return _internal_error(command, exc, debug)
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: set outside Python, cannot be restored
                signal.signal(sig, handler)


def _debug_requested(argv: list[str] | None) -> bool:
    # Read from argv itself: the traceback is wanted even when parsing is what failed.
    words = sys.argv[1:] if argv is None else argv
    return "--debug" in words[:1] or os.environ.get(DEBUG_ENV_VAR, "") not in ("", "0")


def _command_name(args: argparse.Namespace) -> str:
    words = [str(w) for w in (getattr(args, d, None) for d in _COMMAND_DESTS) if w]
    return " ".join(["ltm", *words])


def _internal_error(command: str, exc: BaseException, debug: bool) -> int:
    """A bug (anything not an LtmError): one line, the traceback only when asked for."""
    if debug:
        _say("".join(traceback.format_exception(exc)).rstrip("\n"))
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    what = " ".join(what.split())  # one line, whatever the message holds
    hint = ("" if debug else f"rerun with --debug (or {DEBUG_ENV_VAR}=1) for the traceback "
            "and ")
    _say(f"ltm: internal error in `{command}`: {what}; {hint}report it to the harness's "
         "maintainers with the command line and this output")
    return 1


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr)
    except OSError:  # stderr went with the terminal (SIGHUP)
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
