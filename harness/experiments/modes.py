"""The run modes: every combination of program, input, sharing and placement, as data.

One table says, for each combination, whether ``ltm run`` runs it and how, or
why not in the words the user reads. :meth:`RunConfig.validate
<harness.experiments.RunConfig.validate>` refuses with its message,
:attr:`RunConfig.streams`, the workload's disk check and the file shape, and
the SSH cluster's choice of where the stream runs (:attr:`ClientJob.here
<harness.engine.ClientJob.here>`) read its :class:`Route`; the docs' table of
modes is :func:`markdown` of it, and a test runs every combination against it.

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
``here``: this machine's processes write every file, which then go to the hosts
by SFTP, so hosts without the harness (only MP-SPDZ) can run it.

Options beside the four axes that rule out a route (``--network`` with
``--hosts``, a ``--protocol`` whose shares no client can write, ``--mechanism``,
``--dense``, ``--tamper``, ``--validate``, ``--poison``) are :data:`LIMITS`,
checked against the route the axes chose.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import product

from harness.engine import INPUT_MODES, PROGRAMS, PROTOCOLS
from harness.errors import InputError

__all__ = ["INPUTS", "LIMITS", "PLACEMENTS", "PLACEMENT_NAMES", "PROGRAM_NAMES", "ROUTES",
           "SHARINGS", "Limit", "Mode", "Route", "combinations", "markdown", "route_for"]

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
_ANY = None
_HOSTS = ("hosts", "client-hosts")


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


@dataclass(frozen=True)
class Route:
    """What a combination does: its stream's sink and where it runs, or the refusal."""

    sink: str = ""  # "sum", "shares" or "owner"
    where: str = ""  # "servers" or "here"
    shape: str = ""  # the files': "blocked" or "slots" ("" for a sum)
    refused: str = ""  # the one-line refusal, naming the way out

    @property
    def runs(self) -> bool:
        return not self.refused

    @property
    def here(self) -> bool:
        """The stream runs on this machine and its files go to the hosts whole (SFTP)."""
        return self.where == "here"

    def files_here(self, mode: Mode) -> bool:
        """Its files are written on this machine's disk (they need room there)."""
        return self.sink != "sum" and (not mode.on_hosts or self.here)


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


def _stream(sink: str, where: str, shape: str, **axes: object) -> _Rule:
    return _Rule(Route(sink, where, shape), **axes)  # type: ignore[arg-type]


# First match wins. Every combination is matched (a test checks it).
ROUTES: tuple[_Rule, ...] = (
    _refuse("--program local aggregates the servers' own shares; it needs --input shares",
            program="local", input="party"),
    _refuse("--sharing seeded compresses the servers' share files, and with --input party "
            "the servers receive none; use --input shares or --sharing full",
            input="party", sharing="seeded"),
    _stream("sum", "servers", "", program="local"),
    # The data owner is this machine: its text goes to party 0 (by SFTP to a host); a
    # client host makes shares, and has none to make here.
    _stream("owner", "here", "blocked", program="fast", input="party"),
    _stream("owner", "here", "slots", program="reference", input="party"),
    # Full shares to hosts with no client host: streamed here into the share files, so the
    # hosts need only MP-SPDZ. Seeded shares expand on the servers' hosts.
    _stream("shares", "here", "blocked", program="fast", sharing="full", placement=("hosts",)),
    _stream("shares", "servers", "blocked", program="fast"),
    _stream("shares", "here", "slots", program="reference", sharing="full",
            placement=("hosts",)),
    _stream("shares", "servers", "slots", program="reference"),
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
    Limit("mechanism", ("dng", "central"),
          "--mechanism {value} adds the servers' noise in the local program, not --program "
          "{program}; use --program local", programs=("fast", "reference")),
    # A host computes each client's buckets from the sketch's seed; the dense sketch is
    # drawn here and held whole.
    Limit("dense", (True,),
          "--dense draws the sketch here and holds it whole, and the hosts compute the "
          "sketch from its seed, which only a sparse sketch has; drop --dense, or use "
          "--program fast or reference with --sharing full and no [[client]] host (the "
          "stream then runs here)",
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


def route_for(mode: Mode) -> Route:
    """The route of ``mode`` (its refusal if it does not run)."""
    return next(rule.route for rule in ROUTES if rule.matches(mode))


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
                where = "; sent by SFTP" if route.here and placement in _HOSTS else ""
                cells.append(f"{SINKS[route.sink]}{SHAPES[route.shape]}{where}")
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
    return "\n".join(lines) + "\n"
