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
import atexit
import difflib
import errno
import importlib
import os
import signal
import sys
import threading
import traceback
from typing import Any, NoReturn

from harness._version import __version__
from harness.errors import Interrupted, LtmError, stop_on_signals

__all__ = ["DEBUG_ENV_VAR", "Interrupted", "build_parser", "main"]

# Set to 1 (or pass --debug) to see the traceback of an internal error.
DEBUG_ENV_VAR = "LTM_DEBUG"

# The argparse dests that hold a subcommand's name, outermost first: they name the
# command in an internal error's line.
_COMMAND_DESTS = ("command", "analysis", "grid", "hosts_command", "loopback_command",
                  "aws_command", "mpspdz_command")

# Each command: the module whose ``add_commands`` adds its parser, and its line in
# ``ltm --help``. A module is imported when its command is parsed (or the whole
# parser is built, for the docs), so that ``ltm --help``, ``ltm --version`` and a
# mistyped command answer without importing any.
_COMMANDS = {
    "run": ("harness.cli.run", "run the secure sketch on local MP-SPDZ parties and verify it"),
    "doctor": ("harness.cli.mpspdz",
               "check that MP-SPDZ and the other requirements are installed"),
    "mpspdz": ("harness.cli.mpspdz", "manage the MP-SPDZ installation"),
    "analyze": ("harness.cli.analyze", "run the analyst's function on a run's revealed sketch"),
    "utility": ("harness.cli.analyze",
                "sweep n and plot the error of local / LTM / central mechanisms"),
    "aws": ("harness.cli.aws", "provision, list and remove MPC clusters on AWS EC2"),
    "hosts": ("harness.cli.hosts",
              "pin SSH host keys of, and check, the machines in a hosts inventory"),
    "reproduce": ("harness.cli.reproduce",
                  "reproduce the paper's Tables 3-5 (sweeps, tables, plots, report)"),
    "audit": ("harness.cli.audit",
              "audit the noise of one bucket empirically: a lower bound on epsilon"),
}

# The commands that run parties, each run with fresh TLS certificates and its shares
# streamed: the certificates' signer and the stream's fork server start before anything
# else loads, and load what they need on the other core while the command loads.
_RUNS_PARTIES = frozenset({"run", "reproduce"})

# Libraries of an optional extra (pyproject.toml), imported only by the commands that
# use them: a missing one is a missing extra, named in one line.
_EXTRAS = {"boto3": "aws", "botocore": "aws", "matplotlib": "analysis", "pandas": "analysis"}


class _Parser(argparse.ArgumentParser):
    """argparse with the harness's error format: one line, exit 1, the command's own help.

    Every parser below ``ltm`` is one of these (argparse makes subparsers of the
    parent's class), so each takes only whole option names: ``--client`` is not
    ``--clients``, and a new option never changes what an old abbreviation meant.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Subcommands)

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"ltm: error: {message}{self._suggestion(message)} "
                     f"(see `{self.prog} --help`)\n")

    def _suggestion(self, message: str) -> str:
        """``; did you mean --clients?`` for a mistyped option (Python 3.11's argparse
        suggests nothing): the closest of this parser's options to each unknown one."""
        prefix = "unrecognized arguments: "
        if not message.startswith(prefix):
            return ""
        # Compared without their dashes, which every option shares.
        known = {o[2:]: o for o in self._option_string_actions if o.startswith("--")}
        guesses = [known[close[0]] for word in message[len(prefix):].split()
                   if word.startswith("--")
                   for close in [difflib.get_close_matches(word[2:].split("=")[0], known, n=1,
                                                           cutoff=0.65)]
                   if close]
        return f"; did you mean {', '.join(dict.fromkeys(guesses))}?" if guesses else ""


class _Subcommands(argparse._SubParsersAction):
    """Subcommands whose parser reports what it does not know itself.

    argparse hands a subcommand's unknown arguments up to ``ltm``, whose error
    then points to ``ltm --help``; here ``ltm run --client 1`` points to ``ltm run
    --help``, where ``--clients`` is.
    """

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        name, *rest = values
        if self.dest is not argparse.SUPPRESS:
            setattr(namespace, self.dest, name)
        # choices were checked before this is called: the name is known
        for key, value in vars(self._parser_for(name).parse_args(rest)).items():
            setattr(namespace, key, value)

    def _parser_for(self, name: str) -> argparse.ArgumentParser:
        return self._name_parser_map[name]


class _Commands(_Subcommands):
    """``ltm``'s commands, listed from :data:`_COMMANDS`, each parser built when first used."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._modules: dict[str, str] = {}
        for name, (module, line) in _COMMANDS.items():
            self._choices_actions.append(self._ChoicesPseudoAction(name, (), line))
            self._name_parser_map[name] = None  # known, not built yet
            self._modules[name] = module

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if name in self._name_parser_map and self._name_parser_map[name] is None:
            del self._name_parser_map[name]  # the placeholder: the parser is built now
        return super().add_parser(name, **kwargs)

    def _parser_for(self, name: str) -> argparse.ArgumentParser:
        if self._name_parser_map[name] is None:
            self.load(self._modules[name])
        return self._name_parser_map[name]

    def load(self, module: str) -> None:
        """Add the parsers of ``module``'s commands."""
        importlib.import_module(module).add_commands(self)

    def load_all(self) -> None:
        """Build every command's parser (the docs and tests read the whole parser)."""
        for name, module in self._modules.items():
            if self._name_parser_map[name] is None:
                self.load(module)


def build_parser(*, lazy: bool = False) -> argparse.ArgumentParser:
    """``ltm``'s parser; with ``lazy``, a command's parser is built when it is parsed."""
    parser = _Parser(
        prog="ltm",
        description="Differentially private secure sketching on MP-SPDZ (the LTM).",
    )
    parser.add_argument("--version", action="version", version=f"ltm-harness {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help=f"show the traceback of an internal error (also "
                             f"{DEBUG_ENV_VAR}=1)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", action=_Commands)
    if not lazy:
        assert isinstance(commands, _Commands)
        commands.load_all()
    return parser


def main(argv: list[str] | None = None) -> int:
    debug = _debug_requested(argv)
    command = "ltm"
    # First of all: a stop signal while the command's modules load is an interruption
    # like any later one (its line, its exit status), not a traceback.
    previous = stop_on_signals()
    try:
        # Inside the try: an option's type check (harness.cli.common.number) raises
        # InputError, which is one line like every other.
        parser = build_parser(lazy=True)
        args = parser.parse_args(argv)
        command = _command_name(args)
        if not getattr(args, "func", None):
            parser.print_help()
            return 1
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
    except BrokenPipeError as exc:
        if not _stdout_gone():
            return _internal_error(command, exc, debug)
        # The reader of the output left (`ltm ... | head`): end as a program that
        # SIGPIPE ends, quietly, every cleanup having run on the way here.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 128 + signal.SIGPIPE
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


def console() -> NoReturn:
    """``ltm`` as a program (its entry point and ``python -m harness``): :func:`main`,
    then an exit that skips tearing down the interpreter.

    A command that runs parties first starts the certificates' signer and the
    stream's fork server, before any of its modules load
    (:func:`harness.engine.certs.start_signer`,
    :func:`harness.stream.forkserver.start_fork_server`).

    The atexit handlers (multiprocessing's, tempfile's, logging's) still run and the
    standard streams are flushed; skipped are the finalization of every module and
    object, which took 0.1 to 0.3 s after a run had loaded numpy and collected its
    processes' results: as long as the MPC it ran at n = 1e6. Every file the harness
    writes is closed (and renamed into place) before :func:`main` returns.
    """
    words = sys.argv[1:]
    if _command_word(words) in _RUNS_PARTIES and not {"-h", "--help"} & set(words):
        start_run_processes()
    status = main()
    for thread in threading.enumerate():  # as the interpreter's exit: wait for them
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more to say
            pass
    os._exit(status)


def start_run_processes() -> None:
    """What a command that runs parties starts before it loads anything: the
    certificates' signer and the stream's fork server, each in a process with one
    BLAS thread.

    Neither these commands nor the stream's processes multiply large matrices (the
    utility figures' small ones are on one thread anyway), and the cores belong to
    the stream: numpy's OpenBLAS then starts no threads, which otherwise spin at
    import for about 0.15 s of CPU in every process that loads numpy, beside the
    other core's imports. A value the user set is kept.
    """
    from harness.engine import start_signer
    from harness.stream import start_fork_server

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    start_signer()  # first: a fork, before the fork server's pipes exist
    start_fork_server()


def _command_word(words: list[str]) -> str | None:
    """The command ``words`` name, before they are parsed: the first that is no option."""
    return next((w for w in words if not w.startswith("-")), None)


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


def _stdout_gone() -> bool:
    """Whether standard output is a pipe whose reader closed it (a broken pipe of the
    command's own output, not of one of its processes')."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr)
    except OSError:  # stderr went with the terminal (SIGHUP)
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
