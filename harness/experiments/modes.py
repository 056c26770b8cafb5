"""The run modes: every combination of program, input, sharing and placement, as data.

One table says, for each combination, whether ``ltm run`` runs it and how, or
why not in the words the user reads. :meth:`RunConfig.validate
<harness.experiments.RunConfig.validate>` refuses with its message,
:attr:`RunConfig.streams`, the workload's disk check and the file shape read its
:class:`~harness.engine.Route`, resolved once; the route then travels on the
clients' job (:attr:`ClientJob.route <harness.engine.ClientJob.route>`) and the
clusters follow it. The docs' table of modes is :func:`markdown` of it, and a
test runs every combination against it.

Every combination that runs streams: nothing proportional to n is held in
memory. A route names what the stream makes (its *sink*) and *where*:

- ``sum``: each server sums its stream into its m x d aggregate (``local``);
- ``shares``: each server writes its share file as the chunks arrive, server 0
  the public schedule beside it;
- ``owner``: the data owner (this machine) writes party 0's input text and the
  public schedule, a chunk of clients at a time (``--input party``): no server
  takes a stream.

A file's *shape* is the program's: ``blocked`` per chunk of clients (``fast``,
:mod:`harness.stream.blocks`) or one row per slot (``reference``,
:mod:`harness.stream.slots`).

``servers``: each server takes its stream where it runs (this machine's
processes, in their namespaces under ``--network``, or its host's agent);
``here``: this machine, the data owner, writes party 0's input text, which goes
to party 0's host whole by SFTP (``--input party``), so hosts without the
harness (only MP-SPDZ) can run it. No share file is ever sent whole.

Its *feeding* says how the parties take their inputs: ``fifo`` (started first,
each is fed its server's stream through its public input as it comes), ``held``
(started first, they wait at their inputs until the stream is done) or ``files``
(they start on the complete files); its *transport*, how the clients' data reach
the servers: ``shm`` (shared memory here), ``tls`` (to each server's namespace or
host), ``sftp`` (written here, then sent whole) or ``none`` (written where read).

Options beside the four axes that rule out a route (``--network`` with
``--hosts``, a ``--protocol`` whose shares no client can write,
``--dense``, ``--tamper``, ``--validate``, ``--poison``) are :data:`LIMITS`,
checked against the route the axes chose; a ``--mechanism`` says itself which
programs add its noise (:meth:`harness.privacy.Mechanism.check_options`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import product

from harness.engine import INPUT_MODES, PROGRAMS, PROTOCOLS, Route
from harness.errors import InputError
from harness.privacy import mechanism_class, mechanism_names, programs_refusal

__all__ = ["INPUTS", "LIMITS", "PLACEMENTS", "PLACEMENT_NAMES", "PROGRAM_NAMES", "ROUTES",
           "SHARINGS", "Limit", "Mode", "combinations", "files_here", "markdown",
           "route_for"]

# The axes: the server programs' registry (harness.engine.server_programs), the input
# modes, and the sharings (full: every server receives all its words; seeded: all but
# one component as seeds).
PROGRAM_NAMES = tuple(PROGRAMS)
INPUTS = INPUT_MODES
SHARINGS = ("full", "seeded")
# loopback: every party a process on this machine; network: each behind an emulated link
# (--network); hosts: one party per SSH host (--hosts, also what `ltm aws up` writes);
# client-hosts: --hosts whose inventory has [[client]] hosts, which make the shares.
PLACEMENTS = ("loopback", "network", "hosts", "client-hosts")
PLACEMENT_NAMES = {"loopback": "this machine", "network": "`--network`",
                   "hosts": "`--hosts`", "client-hosts": "`--hosts` with `[[client]]` hosts"}
SINKS = {"sum": "each server sums it", "shares": "each server writes its share file",
         "owner": "the data owner writes party 0's input text"}
SHAPES = {"": "", "blocked": ", blocked", "slots": ", a row per slot"}
# What the docs' table says of a route's feeding and transport beside its sink (the
# rest is said once, in the text around the table).
FEEDINGS = {"fifo": "; its party fed through a FIFO"}
TRANSPORTS = {"sftp": "; sent by SFTP"}
_ANY = None
_HOSTS = ("hosts", "client-hosts")
_HERE = ("loopback",)  # every party a process of this machine, on no emulated link


@dataclass(frozen=True)
class Mode:
    """One combination of the four axes."""

    program: str
    input: str
    sharing: str
    placement: str

    @property
    def on_hosts(self) -> bool:
        return self.placement in _HOSTS


def files_here(mode: Mode, route: Route) -> bool:
    """Whether ``route``'s files are written on this machine's disk (they need room
    there): a share file or text, by this machine's servers or its data owner."""
    return route.sink != "sum" and (not mode.on_hosts or route.here)


@dataclass(frozen=True)
class _Rule:
    """The route of every combination that matches (None matches any value)."""

    route: Route
    program: str | None = _ANY
    input: str | None = _ANY
    sharing: str | None = _ANY
    placement: tuple[str, ...] | None = _ANY

    def matches(self, mode: Mode) -> bool:
        return ((self.program is None or mode.program == self.program)
                and (self.input is None or mode.input == self.input)
                and (self.sharing is None or mode.sharing == self.sharing)
                and (self.placement is None or mode.placement in self.placement))


def _refuse(message: str, **axes: object) -> _Rule:
    return _Rule(Route(refused=message), **axes)  # type: ignore[arg-type]


def _stream(sink: str, where: str, shape: str, feeding: str, transport: str,
            **axes: object) -> _Rule:
    return _Rule(Route(sink, where, shape, feeding, transport), **axes)  # type: ignore[arg-type]


# First match wins. Every combination is matched (a test checks it).
ROUTES: tuple[_Rule, ...] = (
    _refuse("--program local aggregates the servers' own shares; it needs --input shares",
            program="local", input="party"),
    _refuse("--sharing seeded compresses the servers' share files, and with --input party "
            "the servers receive none; use --input shares or --sharing full",
            input="party", sharing="seeded"),
    # The sums are the MPC's only input: its parties start at once and wait for them.
    _stream("sum", "servers", "", "held", "shm", program="local", placement=_HERE),
    _stream("sum", "servers", "", "files", "tls", program="local"),
    # The data owner is this machine: its text goes to party 0 (by SFTP to a host); a
    # client host makes shares, and has none to make here.
    _stream("owner", "here", "blocked", "files", "sftp", program="fast", input="party",
            placement=_HOSTS),
    _stream("owner", "here", "slots", "files", "sftp", program="reference", input="party",
            placement=_HOSTS),
    _stream("owner", "here", "blocked", "files", "none", program="fast", input="party"),
    _stream("owner", "here", "slots", "files", "none", program="reference", input="party"),
    # fast reads its blocked file as it is written: its parties are fed, here and on each
    # host by its agent; no share file is ever whole. Under --network they run in their
    # namespaces, started after the stream.
    _stream("shares", "servers", "blocked", "fifo", "shm", program="fast", placement=_HERE),
    _stream("shares", "servers", "blocked", "files", "tls", program="fast",
            placement=("network",)),
    _stream("shares", "servers", "blocked", "fifo", "tls", program="fast"),
    # reference reads its file whole: each server writes it where it runs.
    _stream("shares", "servers", "slots", "files", "shm", program="reference",
            placement=_HERE),
    _stream("shares", "servers", "slots", "files", "tls", program="reference"),
)


@dataclass(frozen=True)
class Limit:
    """An option beside the axes that some routes cannot carry: refused with ``message``
    (formatted with the option's value and the mode's axes) where it applies."""

    option: str  # the RunConfig field
    values: tuple[object, ...] | None  # the option's values it applies to (None: any given)
    message: str
    programs: tuple[str, ...] = PROGRAM_NAMES
    inputs: tuple[str, ...] = INPUTS
    placements: tuple[str, ...] = PLACEMENTS
    where: str | None = None  # only routes that stream there

    def applies(self, value: object, mode: Mode, route: Route) -> bool:
        given = value is not None if self.values is None else value in self.values
        return (given and mode.program in self.programs and mode.input in self.inputs
                and mode.placement in self.placements
                and (self.where is None or route.where == self.where))


LIMITS: tuple[Limit, ...] = (
    Limit("network", None,
          "--network emulates a network between parties on this machine; with --hosts the "
          "real network is used: drop one of them", placements=_HOSTS),
    # A protocol whose shares carry a MAC under the servers' key: no client can write
    # them, so only the programs that read the clients' share files as they are refuse it.
    *(Limit("protocol", (spec.name,),
            f"--protocol {spec.name} cannot run --program {{program}} on client share files "
            f"({spec.no_client_shares}); use --program local (the servers input their "
            "aggregates) or --input party",
            programs=tuple(name for name, program in PROGRAMS.items()
                           if program.reads_client_shares("shares")), inputs=("shares",))
      for spec in PROTOCOLS.values() if spec.share_format is None),
    # The check reads each client's row inside the MPC; local's servers sum them first.
    Limit("validation", ("linf", "l2"),
          "--validate {value} checks each client's row inside the MPC, and --program local's "
          "servers sum their shares before it, so the MPC never sees a client's row; use "
          "--program fast or reference, or drop --validate", programs=("local",)),
    # A host computes each client's buckets from the sketch's seed; the dense sketch is
    # drawn here and held whole.
    Limit("dense", (True,),
          "--dense draws the sketch here and holds it whole, and the hosts compute the "
          "sketch from its seed, which only a sparse sketch has; drop --dense, or use "
          "--program fast or reference with --input party (the data owner's input is "
          "then written here)",
          placements=_HOSTS, where="servers"),
    # Test aids: they change a server's input file on this machine after preparation.
    Limit("tamper", None,
          "--tamper changes a party's input on this machine, and with --hosts the parties "
          "run on their hosts; drop --tamper or --hosts", placements=_HOSTS),
    Limit("tamper", None,
          "--tamper changes a server's shares, and with --input party the servers hold "
          "none; use --input shares", inputs=("party",)),
)


def combinations() -> list[Mode]:
    """Every combination of the four axes, in the table's order."""
    return [Mode(*axes) for axes in product(PROGRAM_NAMES, INPUTS, SHARINGS, PLACEMENTS)]


def route_for(mode: Mode, *, tamper: bool = False) -> Route:
    """The route of ``mode`` (its refusal if it does not run). With ``tamper`` (a test
    aid: a server changes its shares once they are all in) no party is fed: it would
    have read them as they came."""
    route = next(rule.route for rule in ROUTES if rule.matches(mode))
    if tamper and route.fed:
        return dataclasses.replace(route, feeding="files")
    return route


def check_limits(mode: Mode, route: Route, options: Mapping[str, object]) -> None:
    """Refuse the first of :data:`LIMITS` that ``options`` (field: value) hit on ``route``."""
    for limit in LIMITS:
        value = options.get(limit.option)
        if limit.applies(value, mode, route):
            raise InputError(limit.message.format(value=value, **vars(mode)))


def markdown() -> str:
    """The table of modes for the docs: one row per program, input and sharing, one
    column per placement; each cell the route, or a numbered refusal listed below."""
    head = ["program", "input", "sharing", *(PLACEMENT_NAMES[p] for p in PLACEMENTS)]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    reasons: list[str] = []
    for program, input_mode, sharing in product(PROGRAM_NAMES, INPUTS, SHARINGS):
        cells = [f"`{program}`", f"`{input_mode}`", f"`{sharing}`"]
        for placement in PLACEMENTS:
            route = route_for(Mode(program, input_mode, sharing, placement))
            if route.refused:
                if route.refused not in reasons:
                    reasons.append(route.refused)
                cells.append(f"refused ({reasons.index(route.refused) + 1})")
            else:
                how = FEEDINGS.get(route.feeding, "") + TRANSPORTS.get(route.transport, "")
                cells.append(f"{SINKS[route.sink]}{SHAPES[route.shape]}{how}")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines += [f"({k}) {reason}" for k, reason in enumerate(reasons, 1)]
    lines.append("")
    lines.append("Beside these, some options rule out a route:")
    lines.append("")
    for limit in LIMITS:
        lines.append("- " + limit.message.format(
            value=" or ".join(map(str, limit.values or ())),
            program=" or ".join(limit.programs)))
    # and a mechanism, in every program but those that add its noise
    grouped: dict[tuple[str, ...], list[str]] = {}
    for name in mechanism_names():
        programs = mechanism_class(name).programs
        if programs is not None:
            grouped.setdefault(programs, []).append(name)
    for programs, names in grouped.items():
        others = " or ".join(p for p in PROGRAM_NAMES if p not in programs)
        lines.append("- " + programs_refusal(" or ".join(names), programs, others))
    return "\n".join(lines) + "\n"
