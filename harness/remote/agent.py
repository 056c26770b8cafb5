"""The host agent: everything a host runs of the harness, as one command.

``python -m harness.remote.agent STEP ...``, in the party's (or the client
host's) remote working directory, with the harness ``ltm hosts setup``
installed there. A streamed run (:mod:`harness.remote.streaming`) takes two steps:

* ``serve SPEC PARTY PORT CERT KEY PEER DEST --bind ADDRESS [--schedule FILE]
  [--gate FIFO --party-pid-file FILE]``: a server binds ADDRESS:PORT, prints
  ``{"step": "listening"}``, then sums its stream of shares from every client
  worker as it arrives (TLS, PEER pinned) into DEST, its aggregate (or, for
  ``fast`` and ``reference``, writes its share file DEST and the public schedule
  FILE). With ``--gate`` its MPC party (whose process id FILE holds) was started
  first and waits at its public input, the FIFO: the server *feeds* it, DEST a
  ring of engine chunks and each chunk's schedule line into the FIFO, so the
  party sums the stream as it comes and no share file is ever whole; its reply
  says ``"fed": true``;
* ``stream SPEC TARGETS HOST CERT KEY``: client host HOST runs its client
  workers, each streaming to every server in TARGETS.

Between a streamed run's stream and its MPC, a mechanism whose servers run a step
of their own (:meth:`harness.privacy.Mechanism.server_step`: ``--mechanism dng``
draws each server's noise) takes one more:

* ``input MECHANISM PARAMS DEST --cells M D --digest-key HEX [--append]``: a server
  runs MECHANISM's step with its public parameters PARAMS (JSON, as the runner
  writes them) for each of the M x D cells, writing its own input into DEST, its
  input file (after its aggregate, with ``--append``), 0600; only the count of
  cells and their digest under the public weights of ``--digest-key HEX``
  (:mod:`harness.clients.digest`), by which the runner checks the release exactly,
  are printed. DEST is a path inside the working directory whose directories are
  there already: none is created, and no symbolic link is followed (the file is
  opened with ``O_NOFOLLOW``). An unknown mechanism, malformed parameters, a count
  of cells that could not be held in memory, or such a DEST are refused before
  anything is drawn.

Each step prints exactly one JSON object line on stdout, ``{"step": NAME,
...}``, with its figures (``seconds`` as measured on the host); a receiver
prints ``{"step": "listening"}`` first, once its port accepts connections.
Nothing else goes to stdout. A failure is one line on stderr and exit status 1
(2 for a malformed command line; for ``serve``, 3 when it only lost a client's
stream, 4 when a client broke the stream's protocol).

SIGTERM, SIGHUP and SIGINT (the runner's cleanup, or a lost SSH session: see
:func:`harness.remote._shell.guarded`) stop a step through its own cleanup (its
processes stopped, files it had half-written removed), then it says so in one line
and exits with 128 + the signal's number. Its streams' buffers need no cleanup: they
are memory that no file names, freed with the last process holding it, whatever
ends it (SIGKILL too).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

__all__ = ["LOST", "VIOLATION", "main"]

LOST = 3  # the exit status of a step whose stream was cut by the other side
VIOLATION = 4  # ... whose client sent what is no message of the stream: a cause


def _reply(step: str, **figures: object) -> None:
    print(json.dumps({"step": step, **figures}), flush=True)


def serve(args: argparse.Namespace) -> None:
    from harness.remote.streaming import serve as serve_stream

    figures = serve_stream(args.spec, args.party, args.bind, args.port, args.cert, args.key,
                           args.peer, args.dest, args.schedule, args.timeout,
                           on_listening=lambda: _reply("listening"), gate=args.gate,
                           party_pid_file=args.party_pid_file)
    _reply("serve", **figures, fed=args.gate is not None)


def stream(args: argparse.Namespace) -> None:
    from harness.remote.streaming import produce

    _reply("stream", **produce(args.spec, args.targets, args.host, args.cert, args.key,
                               args.timeout))


def server_input(args: argparse.Namespace) -> None:
    from harness.privacy import mechanism_class

    started = time.perf_counter()
    mechanism = mechanism_class(args.mechanism).step_params(args.params)
    shape = _cells(*args.cells)
    _check_dest(args.dest)
    key = _digest_key(args.digest_key)
    cells, digest = mechanism.run_step(shape, args.dest, append=args.append, digest_key=key)
    _reply("input", cells=cells, digest=digest, seconds=time.perf_counter() - started)


def _digest_key(text: str) -> bytes:
    from harness.clients import DIGEST_KEY_BYTES
    from harness.errors import InputError

    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != DIGEST_KEY_BYTES:
        raise InputError(f"--digest-key must be {DIGEST_KEY_BYTES} bytes in hex, got {text!r}")
    return key


# What the draw holds per cell at its peak: two Poisson arrays and their difference, and
# the text written (at most 21 bytes a value).
_BYTES_PER_CELL = 48


def _cells(m: int, d: int) -> tuple[int, int]:
    from harness.errors import InputError, check_memory

    if m < 1 or d < 1:
        raise InputError(f"--cells {m} {d}: the sketch has at least one row and one column")
    check_memory(_BYTES_PER_CELL * m * d, f"--cells {m} {d} ({m * d:,} cells of noise)",
                 "the runner asks for the m x d cells of its sketch only")
    return m, d


def _check_dest(dest: Path) -> None:
    """DEST lies in the run's working directory (this one), under directories that are
    there already and themselves, not links; the file itself, if there, is no link (it
    is then opened with O_NOFOLLOW, so none can take its place meanwhile)."""
    import stat

    from harness.errors import InputError

    if dest.is_absolute() or ".." in dest.parts or not dest.name:
        raise InputError(f"DEST {dest} must be a path inside the run's working directory "
                         "(relative, without ..)")
    for part in [*reversed(dest.parents[:-1]), dest]:
        try:
            mode = os.lstat(part).st_mode
        except FileNotFoundError:
            if part == dest:
                return
            raise InputError(f"DEST {dest}: its directory {part} is not in the run's working "
                             "directory; the runner uploads it before this step") from None
        if stat.S_ISLNK(mode):
            raise InputError(f"DEST {dest}: {part} is a symbolic link; the noise is written "
                             "only into the run's own files, never through a link")
        if part != dest and not stat.S_ISDIR(mode):
            raise InputError(f"DEST {dest}: {part} is not a directory")
    if not stat.S_ISREG(mode):
        raise InputError(f"DEST {dest} exists and is not a regular file")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness.remote.agent",
                                description="What a host runs of the harness; one JSON line "
                                            "per step on stdout.")
    steps = p.add_subparsers(dest="step", required=True)
    s = steps.add_parser("serve", help="a server: sum (or write) its stream as it arrives")
    s.add_argument("spec", type=Path)
    s.add_argument("party", type=int)
    s.add_argument("port", type=int)
    for name in ("cert", "key", "peer", "dest"):
        s.add_argument(name, type=Path)
    s.add_argument("--bind", required=True, help="the address to listen on (this host's)")
    s.add_argument("--schedule", type=Path)
    s.add_argument("--gate", type=Path, help="the FIFO its started party reads its public "
                                             "input from: feed it the stream as it comes")
    s.add_argument("--party-pid-file", type=Path,
                   help="with --gate: the file holding that party's process id")
    s.add_argument("--timeout", type=float, default=900.0)
    s = steps.add_parser("stream", help="a client host: stream its clients' shares")
    s.add_argument("spec", type=Path)
    s.add_argument("targets", type=Path)
    s.add_argument("host", type=int)
    s.add_argument("cert", type=Path)
    s.add_argument("key", type=Path)
    s.add_argument("--timeout", type=float, default=900.0)
    s = steps.add_parser("input", help="a server: run its mechanism's step (--mechanism dng: "
                                       "draw its own noise) into its input file")
    s.add_argument("mechanism", help="the mechanism whose step it is")
    s.add_argument("params", help="the step's public parameters, JSON")
    s.add_argument("dest", type=Path)
    s.add_argument("--cells", type=int, nargs=2, required=True, metavar=("M", "D"))
    s.add_argument("--append", action="store_true", help="after the aggregate in DEST")
    s.add_argument("--digest-key", required=True, metavar="HEX",
                   help="the run's public key of the weights the digest is taken under")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    if args.step == "serve" and (args.gate is None) != (args.party_pid_file is None):
        p.error("--gate and --party-pid-file go together")
    os.umask(0o077)  # shares, seeds and aggregates are secret from creation
    from harness.errors import Interrupted, LtmError, stop_on_signals
    from harness.stream import StreamError, StreamLost, StreamViolation

    stop_on_signals()
    try:
        {"serve": serve, "stream": stream, "input": server_input}[args.step](args)
    except Interrupted as exc:
        print(f"agent {args.step}: stopped by {exc}", file=sys.stderr)
        return 128 + exc.signum
    except StreamViolation as exc:
        # The cause of the run's failure, named first: not a consequence, as a lost stream is.
        print(f"agent {args.step}: {exc}", file=sys.stderr)
        return VIOLATION
    except (StreamLost, StreamError) as exc:
        # A server that lost a client's stream, or a client host whose workers lost theirs
        # to a server: the consequence of a failure elsewhere, which the runner names
        # first (status 3 says so).
        print(f"agent {args.step}: {exc}", file=sys.stderr)
        return LOST if isinstance(exc, StreamLost) or exc.lost else 1
    except (LtmError, OSError, ValueError, KeyError) as exc:
        # A missing or malformed file, a refused or cut connection: one line for the
        # runner, which names the host. Anything else is a bug and keeps its traceback.
        print(f"agent {args.step}: {exc or type(exc).__name__}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
