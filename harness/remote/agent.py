"""The host agent: everything a host runs of the harness, as one command.

``python -m harness.remote.agent STEP ...``, in the party's (or the client
host's) remote working directory, with the harness ``ltm hosts setup``
installed there:

* ``expand PARTY PLAN OUT``: seeded sharing, the server expands the seeds it
  received (in ``Upload/``) into its share file ``OUT``
  (:func:`harness.clients.expand_file`);
* ``aggregate SOURCE PLAN DEST``: the ``local`` program, the server sums its own
  shares into its m x d aggregate (:func:`harness.engine.aggregate_file`);
* ``prepare DIR``: the ``[client]`` host prepares every server's files from
  the clients' data in ``DIR`` (:func:`harness.remote.transfer.prepare`);
* ``send TARGETS CERT KEY``: the client host sends each server its own files;
* ``receive BIND PORT CERT KEY PEER --file NAME...``: a server accepts its
  files from the client host, then, as told (``--expand``, ``--aggregate``),
  expands and aggregates them. With several client hosts, ``--sender NAME...``
  once per host instead: it accepts one connection from each, expands each
  host's seeds (``--expand-part``), joins the hosts' share files end to end
  (``--join``) and aggregates the whole.

A streamed run (:mod:`harness.remote.streaming`) has two more:

* ``serve SPEC PARTY PORT CERT KEY PEER DEST --bind ADDRESS [--schedule FILE]``:
  a server binds ADDRESS:PORT, prints ``{"step": "listening"}``, then sums its stream of shares
  from every client worker as it arrives (TLS, PEER pinned) into DEST, its
  aggregate (or, for ``fast``, writes its blocked share file DEST and the
  public schedule FILE);
* ``stream SPEC TARGETS HOST CERT KEY``: client host HOST runs its client
  workers, each streaming to every server in TARGETS.

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
from pathlib import Path

__all__ = ["LOST", "VIOLATION", "main"]

LOST = 3  # the exit status of a step whose stream was cut by the other side
VIOLATION = 4  # ... whose client sent what is no message of the stream: a cause


def _reply(step: str, **figures: object) -> None:
    print(json.dumps({"step": step, **figures}), flush=True)


def expand(party: int, plan: Path, out: Path) -> None:
    from harness.clients import expand_file

    seconds = expand_file(party, plan, out)
    _reply("expand", party=party, seconds=seconds, bytes=out.stat().st_size)


def expand_parts(parts: list[list[str]]) -> None:
    """Each client host's seeds (under its own directory) into its own share file."""
    from harness.clients import expand_file

    seconds, size = 0.0, 0
    for party, plan, out, directory in parts:
        seconds += expand_file(int(party), Path(plan), Path(out), Path(directory))
        size += Path(out).stat().st_size
    _reply("expand", party=int(parts[0][0]), seconds=seconds, bytes=size)


def join(fmt: str, out: Path, parts: list[Path]) -> None:
    from harness.remote.transfer import join as join_files

    size, seconds = join_files(fmt, out, parts)
    _reply("join", seconds=seconds, bytes=size)


def aggregate(source: Path, plan: Path, dest: Path, *, remove_source: bool) -> None:
    from harness.engine import aggregate_file

    seconds = aggregate_file(source, plan, dest)
    if remove_source:
        source.unlink()
    _reply("aggregate", seconds=seconds, bytes=dest.stat().st_size)


def prepare(directory: Path) -> None:
    from harness.remote.transfer import prepare as prepare_files

    _reply("prepare", **prepare_files(directory))


def send(targets: Path, cert: Path, key: Path) -> None:
    from harness.remote.transfer import send as send_files

    seconds = send_files(json.loads(targets.read_text()), cert, key)
    _reply("send", seconds={str(party): s for party, s in seconds.items()})


def receive(args: argparse.Namespace) -> None:
    from harness.remote.transfer import receive as receive_files

    senders = args.senders or [args.files]
    got, seconds = receive_files(args.bind, args.port, args.cert, args.key, args.peer,
                                 senders, on_listening=lambda: _reply("listening"))
    _reply("receive", bytes=got, seconds=seconds)
    if args.expand_part:
        expand_parts(args.expand_part)
    if args.join is not None:
        fmt, out, *parts = args.join
        join(fmt, Path(out), [Path(p) for p in parts])
    if args.expand is not None:
        party, plan, out = args.expand
        expand(int(party), Path(plan), Path(out))
    if args.aggregate is not None:
        source, plan, dest = (Path(a) for a in args.aggregate)
        aggregate(source, plan, dest, remove_source=True)


def serve(args: argparse.Namespace) -> None:
    from harness.remote.streaming import serve as serve_stream

    figures = serve_stream(args.spec, args.party, args.bind, args.port, args.cert, args.key,
                           args.peer, args.dest, args.schedule, args.timeout,
                           on_listening=lambda: _reply("listening"))
    _reply("serve", **figures)


def stream(args: argparse.Namespace) -> None:
    from harness.remote.streaming import produce

    _reply("stream", **produce(args.spec, args.targets, args.host, args.cert, args.key,
                               args.timeout))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness.remote.agent",
                                description="What a host runs of the harness; one JSON line "
                                            "per step on stdout.")
    steps = p.add_subparsers(dest="step", required=True)
    s = steps.add_parser("expand", help="expand this server's seeds into its share file")
    s.add_argument("party", type=int)
    s.add_argument("plan", type=Path)
    s.add_argument("out", type=Path)
    s = steps.add_parser("aggregate", help="sum this server's shares (the local program)")
    s.add_argument("source", type=Path)
    s.add_argument("plan", type=Path)
    s.add_argument("dest", type=Path)
    s.add_argument("--remove-source", action="store_true",
                   help="delete SOURCE once the aggregate is written")
    s = steps.add_parser("prepare", help="the client host: prepare every server's files")
    s.add_argument("dir", type=Path)
    s = steps.add_parser("send", help="the client host: send each server its files")
    s.add_argument("targets", type=Path)
    s.add_argument("cert", type=Path)
    s.add_argument("key", type=Path)
    s = steps.add_parser("receive", help="a server: receive its files from the client host")
    s.add_argument("bind")
    s.add_argument("port", type=int)
    for name in ("cert", "key", "peer"):
        s.add_argument(name, type=Path)
    files = s.add_mutually_exclusive_group(required=True)
    files.add_argument("--file", action="append", dest="files")
    files.add_argument("--sender", action="append", nargs="+", dest="senders",
                       metavar="NAME", help="one client host's files (once per host)")
    s.add_argument("--expand", nargs=3, metavar=("PARTY", "PLAN", "OUT"))
    s.add_argument("--expand-part", nargs=4, action="append",
                   metavar=("PARTY", "PLAN", "OUT", "DIR"),
                   help="expand the seeds one client host sent (under DIR) into OUT")
    s.add_argument("--join", nargs="+", metavar="FORMAT OUT PART",
                   help="the client hosts' share files, end to end, into OUT")
    s.add_argument("--aggregate", nargs=3, metavar=("SOURCE", "PLAN", "DEST"))
    s = steps.add_parser("serve", help="a server: sum (or write) its stream as it arrives")
    s.add_argument("spec", type=Path)
    s.add_argument("party", type=int)
    s.add_argument("port", type=int)
    for name in ("cert", "key", "peer", "dest"):
        s.add_argument(name, type=Path)
    s.add_argument("--bind", required=True, help="the address to listen on (this host's)")
    s.add_argument("--schedule", type=Path)
    s.add_argument("--timeout", type=float, default=900.0)
    s = steps.add_parser("stream", help="a client host: stream its clients' shares")
    s.add_argument("spec", type=Path)
    s.add_argument("targets", type=Path)
    s.add_argument("host", type=int)
    s.add_argument("cert", type=Path)
    s.add_argument("key", type=Path)
    s.add_argument("--timeout", type=float, default=900.0)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    os.umask(0o077)  # shares, seeds and aggregates are secret from creation
    from harness.engine import StreamError, StreamLost, StreamViolation
    from harness.errors import Interrupted, LtmError, stop_on_signals

    stop_on_signals()
    try:
        if args.step == "expand":
            expand(args.party, args.plan, args.out)
        elif args.step == "aggregate":
            aggregate(args.source, args.plan, args.dest, remove_source=args.remove_source)
        elif args.step == "prepare":
            prepare(args.dir)
        elif args.step == "send":
            send(args.targets, args.cert, args.key)
        elif args.step == "serve":
            serve(args)
        elif args.step == "stream":
            stream(args)
        else:
            receive(args)
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
