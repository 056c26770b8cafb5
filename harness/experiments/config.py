"""``ltm run``'s and ``ltm reproduce``'s settings and their checks, before anything is
read or drawn.

:meth:`RunConfig.validate` returns the settings a run uses (the input mode and
the number of parties resolved from their defaults) and leaves the caller's
config as it was, so one config can be checked, copied and run again.

The command line reads its defaults from these dataclasses to build its parser
(``ltm --help``), so this module imports only what the fields need; the checks
import the rest when they run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.clients import ADDITIVE, VALIDATIONS, ShareFormat
from harness.engine import (
    DEFAULT_PROTOCOL,
    INPUT_MODES,
    PROGRAMS,
    PROTOCOLS,
    Protocol,
    Route,
    ServerProgram,
    protocol_for,
    server_program,
)
from harness.errors import InputError, check_number
from harness.experiments.modes import SHARINGS, Mode, check_limits, route_for
from harness.privacy import CALIBRATIONS, DEFAULT_MECHANISM, Options, mechanism_class

if TYPE_CHECKING:
    from harness.experiments.sweeps import Spec
    from harness.remote import Inventory

__all__ = ["INPUT_MODES", "MAX_CLIENTS", "MAX_DIM", "MAX_PARTIES", "MAX_REPEAT", "MAX_SCALE",
           "PROGRAMS", "PROTOCOLS", "SHARINGS", "ReproduceConfig", "RunConfig", "check_numbers",
           "default_input_mode"]


def load_inventory(path: Path) -> Inventory:
    """The hosts inventory at ``path``: the remote package loads only for a run with
    ``--hosts`` (its modules and TOML parser are no part of a local run's start)."""
    from harness.remote import load_inventory as load

    return load(path)


# Far beyond any run this harness can do, yet small enough to fail cleanly.
MAX_CLIENTS = 1 << 40
MAX_DIM = 1 << 24
MAX_PARTIES = 256


def default_input_mode(program: str) -> str:
    return server_program(program).default_input


@dataclass(frozen=True)
class RunConfig:
    out: Path
    parties: int | None = None  # default: every host of --hosts, else 2
    clients: int = 100_000
    dim: int = 10
    rows: int = 100
    sparsity: int = 1
    dense: bool = False
    data: Path | None = None
    header: bool | None = None  # --data's first line: a header, a row, or None: detected
    # Below R_D's threshold a run reveals zeros (the paper's R_D); a run of --data is
    # refused there unless asked for (see workload.check_zero_output).
    allow_zero_output: bool = False
    noise: str = "gaussian"
    # Gaussian noise: analytic, the tightest certified (it spends the whole epsilon), or
    # the paper's corollary (what reproductions of its tables use)
    calibration: str = "analytic"
    epsilon: float = 1.0
    delta: float = 1e-6
    eta: float = 1.0
    corrupt_clients: int = 0
    program: str = "fast"
    input_mode: str | None = None  # default: the program's
    frac_bits: int = 16
    seed: int | None = None
    mp_spdz: Path | None = None
    port: int | None = None
    timeout: float = 900.0
    force: bool = False
    keep_work: bool = False
    cache_dir: Path | None = None
    hosts: Path | None = None  # inventory: run each party on its own host over SSH
    network: str | None = None  # emulated network profile for local parties
    install_mpspdz: bool = False  # install the release on first use (the CLI's default)
    protocol: str = DEFAULT_PROTOCOL
    tamper: int | None = None  # test aid: change one word of this party's input
    sharing: str = "full"
    export_sketch: bool = False  # save sketch.npz (by default recomputed from the seed)
    # Who adds the noise: the clients (ltm), each server (dng) or the MPC (central).
    mechanism: str = DEFAULT_MECHANISM
    grid_bits: int | None = None  # central: the grid 2^-g (default: chosen by coins)
    reveal_noise: bool = False  # test aid: the MPC reveals the servers' noise as well
    # Each client's row checked inside the MPC before it counts: none, linf or l2.
    validation: str = "none"
    poison: int | None = None  # test and study aid: this many clients send out-of-range rows

    @property
    def mode(self) -> Mode:
        """This run's combination of program, input, sharing and placement
        (:mod:`harness.experiments.modes`)."""
        # --network or --tamper beside --hosts is refused on any hosts (limits of the
        # table), so without reading the inventory first.
        placement = ("loopback" if self.hosts is None and self.network is None
                     else "network" if self.hosts is None
                     else "hosts" if self.network is not None or self.tamper is not None
                     else "client-hosts" if load_inventory(self.hosts).clients else "hosts")
        return Mode(self.program, self.input_mode or default_input_mode(self.program),
                    self.sharing, placement)

    @property
    def route(self) -> Route:
        """How this run streams, from the table of modes (its refusal if it does not run)."""
        return route_for(self.mode, tamper=self.tamper is not None)

    @property
    def streams(self) -> bool:
        """Whether the run streams: every run the table of modes lets through does
        (:mod:`harness.experiments.modes`). Its clients and servers then hold nothing
        proportional to n (:mod:`harness.stream.launch`): ``local``'s servers write no
        share file, ``fast``'s and ``reference``'s write theirs as the shares arrive,
        laid out per chunk of clients, or the data owner its input text; through a
        network, preparation, upload, expansion of the seeds and aggregation (or
        writing) overlap."""
        return self.route.runs

    @property
    def spec(self) -> Protocol:
        return protocol_for(self.protocol)

    @property
    def server_program(self) -> ServerProgram:
        return server_program(self.program)

    @property
    def share_format(self) -> ShareFormat:
        """The clients' sharing: the protocol's own, or additive for servers to input."""
        return self.spec.share_format or ADDITIVE

    @property
    def inputs_aggregates(self) -> bool:
        """Servers aggregate additive shares and input the sums through the protocol."""
        return self.server_program.aggregates and self.spec.share_format is None

    @property
    def party_count(self) -> int:
        """The number of parties of a validated config."""
        if self.parties is None:
            raise ValueError("RunConfig.parties is unset: run the config that validate() "
                             "returns")
        return self.parties

    @property
    def input_kind(self) -> str:
        """The input mode of a validated config."""
        if self.input_mode is None:
            raise ValueError("RunConfig.input_mode is unset: run the config that validate() "
                             "returns")
        return self.input_mode

    def validate(self) -> RunConfig:
        """These settings checked, with the input mode and parties resolved; a new config."""
        check_numbers(self)
        program = server_program(self.program)
        input_mode = self.input_mode or program.default_input
        if input_mode not in INPUT_MODES:
            raise InputError(f"unknown --input {input_mode!r}; choose shares or party")
        spec = protocol_for(self.protocol)
        if self.sharing not in SHARINGS:
            raise InputError(f"unknown --sharing {self.sharing!r}; choose full or seeded")
        if self.calibration not in CALIBRATIONS:
            raise InputError(f"unknown --calibration {self.calibration!r}; choose "
                             f"{' or '.join(CALIBRATIONS)}")
        resolved = dataclasses.replace(self, input_mode=input_mode)
        mode, route = resolved.mode, resolved.route
        if route.refused:
            raise InputError(route.refused)
        check_limits(mode, route, vars(resolved))
        check_mechanism(resolved)
        parties = self.parties
        if parties is None:
            parties = (len(load_inventory(self.hosts).hosts) if self.hosts
                       else spec.exact_parties or 2)
        if parties < 2:
            raise InputError(f"--parties must be at least 2 ({spec.name}), got {parties}")
        spec.check_parties(parties)
        if self.tamper is not None and not 0 <= self.tamper < parties:
            raise InputError(f"--tamper {self.tamper} is not a party; choose one of "
                             f"0..{parties - 1}")
        if self.timeout <= 0:
            raise InputError("--timeout must be positive")
        if self.validation not in VALIDATIONS:
            raise InputError(f"unknown --validate {self.validation!r}; choose "
                             f"{', '.join(VALIDATIONS)}")
        if self.network is not None:
            from harness.engine import profile_for

            profile_for(self.network)
        return dataclasses.replace(resolved, parties=parties)


def check_mechanism(cfg: RunConfig) -> None:
    """The mechanism's refusals of the run's options
    (:meth:`harness.privacy.Mechanism.check_options`)."""
    mechanism_class(cfg.mechanism).check_options(Options(
        mechanism=cfg.mechanism, program=cfg.program, noise=cfg.noise,
        grid_bits=cfg.grid_bits, reveal_noise=cfg.reveal_noise, tamper=cfg.tamper,
        protocol=cfg.protocol, malicious=cfg.spec.malicious))


def check_numbers(cfg: RunConfig) -> None:
    """Every numeric option finite and in range, before anything is read or drawn."""
    # Lower bounds of the dimensions and parties: checked (and worded) by the sketch and
    # validate(), still before any data is drawn.
    for option, value, low, high in (
            ("--clients", cfg.clients, None, MAX_CLIENTS), ("--dim", cfg.dim, None, MAX_DIM),
            ("--rows", cfg.rows, None, MAX_CLIENTS),
            ("--sparsity", cfg.sparsity, None, MAX_CLIENTS),
            ("--corrupt-clients", cfg.corrupt_clients, 0, MAX_CLIENTS),
            ("--frac-bits", cfg.frac_bits, 0, 52)):
        check_number(option, value, low=low, high=high, integer=True)
    optional: tuple[tuple[str, int | None, int | None, int], ...] = (
        ("--parties", cfg.parties, None, MAX_PARTIES), ("--seed", cfg.seed, 0, 2**63 - 1),
        ("--port", cfg.port, 1024, 65535), ("--grid-bits", cfg.grid_bits, -44, 52),
        ("--poison", cfg.poison, 0, MAX_CLIENTS))
    for name, given, least, most in optional:
        if given is not None:
            check_number(name, given, low=least, high=most, integer=True)
    check_number("--epsilon", cfg.epsilon, low=0, open_low=True)
    check_number("--delta", cfg.delta, low=0, high=1, open_low=True)
    check_number("--eta", cfg.eta, low=0, open_low=True)
    check_number("--timeout", cfg.timeout, low=0, high=10**7, open_low=True)


MAX_REPEAT = 100_000
MAX_SCALE = 1e6
# Settings that define what a sweep measures: resuming with other values would
# mix incomparable repetitions in one table.
_IDENTITY = ("program", "protocol", "sharing", "scale", "network", "hosts", "noise",
             "calibration", "seed", "validate")


@dataclass
class ReproduceConfig:
    tables: str
    out: Path
    repeat: int | None = None  # default: the spec's (10, as in the paper)
    scale: float = 1.0
    program: str = "fast"
    protocol: str = DEFAULT_PROTOCOL
    hosts: Path | None = None
    network: str | None = None
    noise: str = "gaussian"
    # None: the spec's (the paper's corollary for its tables, under which they were
    # measured; analytic, the tightest, where mechanisms are compared).
    calibration: str | None = None
    seed: int | None = 1  # the public sketch and synthetic data; fixed so cells are comparable
    timeout: float = 3600.0
    mp_spdz: Path | None = None
    cache_dir: Path | None = None
    progress: bool = True
    install_mpspdz: bool = False  # install the release on first use (the CLI's default)
    sharing: str = "full"
    # Prepare (and upload) the clients' inputs for every repetition, not once per cell.
    fresh_inputs: bool = False
    # Each client's row checked inside the MPC (none, linf, l2), as ltm run --validate.
    validation: str = "none"

    @property
    def reuses_inputs(self) -> bool:
        """Repetitions of a cell rerun the servers on the cell's first inputs, where
        the cluster can (:attr:`harness.engine.Cluster.reuses_inputs`).

        The tables' repetitions measure the servers (T_MPC); drawing new noise and
        masks for each changes no distribution they measure, and the clients'
        figures are the first repetition's. Over a network (emulated or real) the
        upload is part of what is measured, so there the cluster keeps nothing and
        every repetition sends anew.
        """
        return not self.fresh_inputs

    def calibration_of(self, spec: Spec) -> str:
        """The LTM's Gaussian calibration in ``spec``'s cells: ``--calibration`` or the
        spec's."""
        return self.calibration or spec.calibration

    def identity(self) -> dict:
        from harness.experiments.sweeps import load_spec, resolve_tables

        # A sweep whose spec names its protocols and programs runs them all.
        specs = [load_spec(t) for t in resolve_tables(self.tables)]
        per_cell = any(spec.protocols for spec in specs)
        calibrations = {self.calibration_of(spec) for spec in specs}
        calibration = calibrations.pop() if len(calibrations) == 1 else "per spec"
        values = {"program": "per cell" if per_cell else self.program,
                  "protocol": "per cell" if per_cell else self.protocol,
                  "sharing": self.sharing, "scale": self.scale,
                  "network": self.network or "none",
                  "hosts": str(self.hosts) if self.hosts else "local", "noise": self.noise,
                  "calibration": calibration, "seed": self.seed,
                  "validate": self.validation}
        return {k: values[k] for k in _IDENTITY}

    def validate(self) -> list[str]:
        from harness.experiments.sweeps import load_spec, resolve_tables

        tables = resolve_tables(self.tables)
        if self.program not in PROGRAMS:
            raise InputError(f"unknown --program {self.program!r}; choose {', '.join(PROGRAMS)}")
        if self.repeat is not None and self.repeat < 1:
            raise InputError(f"--repeat must be at least 1, got {self.repeat}")
        if not self.scale > 0:
            raise InputError(f"--scale must be positive, got {self.scale}")
        if self.repeat is not None:
            check_number("--repeat", self.repeat, low=1, high=MAX_REPEAT, integer=True)
        check_number("--scale", self.scale, low=0, high=MAX_SCALE, open_low=True)
        if self.seed is not None:
            check_number("--seed", self.seed, low=0, high=2**63 - 1, integer=True)
        check_number("--timeout", self.timeout, low=0, high=10**7, open_low=True)
        if self.sharing not in SHARINGS:
            raise InputError(f"unknown --sharing {self.sharing!r}; choose full or seeded")
        per_cell = any(load_spec(t).protocols for t in tables)
        if self.sharing == "seeded" and not per_cell \
                and default_input_mode(self.program) != "shares":
            # A table sweep runs one program: refuse it whole rather than leave out every cell.
            raise InputError(f"--sharing seeded compresses the servers' share files, and "
                             f"--program {self.program} has party 0 input the noisy rows "
                             "(no share files); use --program fast or local, or --sharing full")
        # the same rules as one run's (cells' server counts are checked per cell)
        # (a per-cell sweep's programs are its cells': those --validate cannot run are
        # left out, each with its reason)
        RunConfig(out=self.out, program=self.program, hosts=self.hosts, network=self.network,
                  protocol=self.protocol, sharing=self.sharing, noise=self.noise,
                  calibration=self.calibration_of(load_spec(tables[0])),
                  validation=self.validation if not per_cell else "none",
                  parties=protocol_for(self.protocol).exact_parties or 2).validate()
        return tables
