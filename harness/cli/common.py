"""The options several subcommands share, each defined once, and where defaults come from.

An :class:`Option` is one option's flags, argparse settings and help text; the
help says the default through ``{default}``, which is filled in for the command
that adds it. A command's defaults are the field defaults of the dataclass its
handler builds (``RunConfig`` for ``ltm run``, ``ReproduceConfig`` for ``ltm
reproduce``): :func:`options_of` reads them with :func:`dataclasses.fields`, so
no number is written twice, and :func:`config_from` builds the dataclass back
from the parsed namespace by field name.

Where ``run`` and ``reproduce`` differ, the difference is their configs':
``--seed`` is unset (random) for one run but 1 for a sweep, whose cells must be
comparable, and ``--timeout`` is 900 s for one run but 3600 s for a repetition of
the paper's largest cells. The two places where the command line departs from
its config are :data:`CLI_DEFAULTS` and the ``unset`` options of
:func:`options_of`, each with its reason.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from harness.clients import VALIDATIONS
from harness.engine import ENV_VAR, NO_INSTALL_ENV_VAR, default_home
from harness.errors import InputError, check_number
from harness.experiments import PROGRAMS, PROTOCOLS, SHARINGS
from harness.privacy import CALIBRATIONS, NOISE_KINDS

__all__ = [
    "CALIBRATION", "CLI_DEFAULTS", "HOSTS", "MP_SPDZ", "NETWORK", "NOISE", "NO_INSTALL",
    "Option", "PROGRAM", "PROTOCOL", "SEED", "SEED_MAX", "SHARED", "SHARING", "TIMEOUT",
    "VALIDATE",
    "config_defaults", "config_from", "number", "option", "options_of",
]

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

C = TypeVar("C", bound="DataclassInstance")

# The command line installs MP-SPDZ on first use (``--no-install`` turns it off); a
# library call (a test, a script) must never download anything unless it asks, so
# the configs' own default is False.
CLI_DEFAULTS: Mapping[str, Any] = {"install_mpspdz": True}


@dataclasses.dataclass(frozen=True)
class Option:
    """One option: its flags, argparse settings and help, the same for every command."""

    flags: tuple[str, ...]
    dest: str
    help: str  # "{default}" stands for the default of the command that adds it
    unset: str | Callable[[], str] = ""  # what a default of None means, for the help
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def add(self, parser: argparse.ArgumentParser, default: Any = None,
            shown: Any = None) -> argparse.Action:
        """Add to ``parser`` with ``default``; the help shows ``shown`` if given."""
        text = self.help.replace("{default}", self.describe(
            default if shown is None else shown).replace("%", "%%"))
        return parser.add_argument(*self.flags, dest=self.dest, default=default, help=text,
                                   **self.settings)

    def describe(self, value: Any) -> str:
        """A default as the help writes it: 1 for 1.0, ``unset`` for None."""
        if value is None:
            return self.unset() if callable(self.unset) else self.unset
        if isinstance(value, float):
            return f"{value:g}"
        return str(value)


def option(*flags: str, help: str, dest: str | None = None,
           unset: str | Callable[[], str] = "", **settings: Any) -> Option:
    """An :class:`Option`; ``dest`` as argparse derives it from the first long flag."""
    return Option(flags, dest or flags[0].lstrip("-").replace("-", "_"), help, unset, settings)


def config_defaults(config: type[DataclassInstance]) -> dict[str, Any]:
    """The default of each field of the dataclass ``config`` that has one."""
    defaults = {}
    for f in dataclasses.fields(config):
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            defaults[f.name] = f.default_factory()
    return defaults


def options_of(parser: argparse.ArgumentParser, config: type[DataclassInstance],
               unset: Iterable[str] = ()) -> Callable[[Option], argparse.Action]:
    """A function adding an option to ``parser`` with its default from ``config``.

    Every option added this way is a field of ``config`` (a typo fails at once);
    its default is the field's, or :data:`CLI_DEFAULTS`' for the command line. The
    options named in ``unset`` parse to None when not given, so that the handler
    can tell them apart from an explicit value; their help still shows the field's
    default, which the handler falls back to (see :func:`config_from`).
    """
    defaults = config_defaults(config)
    parse_to_none = frozenset(unset)

    def add(opt: Option) -> argparse.Action:
        default = defaults[opt.dest]  # a KeyError here: the option is no field of config
        default = CLI_DEFAULTS.get(opt.dest, default)
        if opt.dest in parse_to_none:
            return opt.add(parser, None, shown=default)
        return opt.add(parser, default)

    return add


def config_from(config: type[C], args: argparse.Namespace, unset: Iterable[str] = (),
                **given: Any) -> C:
    """The dataclass ``config`` from the parsed options named like its fields.

    ``given`` overrides the namespace; options in ``unset`` that were not given
    (None) are left to the field's default.
    """
    names = {f.name for f in dataclasses.fields(config) if f.init}
    skip = frozenset(unset)
    values = {k: v for k, v in vars(args).items()
              if k in names and not (k in skip and v is None)}
    return config(**{**values, **given})


def number(option: str, *, low: float | None = None, high: float | None = None,
           integer: bool = False, open_low: bool = False) -> Callable[[str], Any]:
    """An argparse ``type=`` that parses ``option``'s value and checks its range.

    A value out of ``[low, high]`` (or not finite, or not a number) raises
    :class:`~harness.errors.InputError` from :func:`~harness.errors.check_number`,
    which argparse passes on: ``ltm`` prints it as its usual one line, range included.
    """
    def parse(text: str) -> int | float:
        try:
            value: int | float = int(text) if integer else float(text)
        except ValueError:
            kind = "an integer" if integer else "a number"
            raise InputError(f"{option} must be {kind}, got {text!r}") from None
        check_number(option, value, low=low, high=high, integer=integer, open_low=open_low)
        return value

    parse.__name__ = "integer" if integer else "number"
    return parse


# The largest seed any command takes: numpy takes any non-negative integer, and a
# seed of 63 bits keeps a run's recorded parameters in a signed 64-bit JSON reader.
SEED_MAX = 2**63 - 1

# -------------------------------------------------------------- shared options

HOSTS = option("--hosts", type=Path, metavar="FILE",
               help="hosts inventory (TOML): run party i on the i-th host over SSH")
NETWORK = option("--network", metavar="PROFILE",
                 help="run each local party in its own network namespace, links shaped to "
                      "PROFILE (t3.large, t3.large-baseline or none; needs root)")
SEED = option("--seed", type=int, unset="random",
              help="seed of the public sketch and synthetic data (default {default})")
TIMEOUT = option("--timeout", type=float,
                 help="seconds before the parties are stopped, per repetition in a sweep "
                      "(default {default})")
NOISE = option("--noise", choices=NOISE_KINDS,
               help="the noise the clients add to their rows (default {default})")
CALIBRATION = option("--calibration", choices=CALIBRATIONS,
                     help="Gaussian noise's calibration: corollary, the paper's (not "
                          "(epsilon, delta)-DP at every d: a run whose certified epsilon "
                          "exceeds --epsilon is refused), or analytic, the analytic Gaussian "
                          "mechanism over the honest draws the exact binomial tail guarantees, "
                          "the tightest certified (default {default})")
PROGRAM = option("--program", choices=PROGRAMS,
                 help="what the servers run on their shares: fast, MP-SPDZ sums the shares "
                      "in blocks as they stream in; reference, the textbook program that "
                      "adds one row at a time; local, each server sums its own shares and "
                      "MP-SPDZ only opens the sums; the docs page Concepts > Programs "
                      "compares them (default {default})")
# Not argparse choices: an unknown name gets the harness's one-line error and exit 1.
PROTOCOL = option("--protocol", metavar="NAME",
                  help=f"MP-SPDZ protocol: {', '.join(PROTOCOLS)} (default {{default}}; the "
                       "replicated ones need exactly 3 parties; see the docs page "
                       "Concepts > Protocols)")
SHARING = option("--sharing", choices=SHARINGS,
                 help="full: every server receives all its share words; seeded: all but one "
                      "sharing component (client j's component j mod C, spread over the "
                      "servers) travel as 32-byte seeds per client, which the servers expand "
                      "(computationally hiding; a sweep leaves out cells without share "
                      "files; default {default})")
VALIDATE = option("--validate", dest="validation", choices=VALIDATIONS,
                  help="check each client's row inside the MPC before it counts: linf, every "
                       "entry within B; l2, the row's norm within B (B: eta, plus the "
                       "client's noise at a 2^-40 chance of rejecting any honest client); a "
                       "row past B counts as zeros and only the number rejected is revealed "
                       "(--program fast or reference; default {default})")
# A function for the default: tests change HOME and XDG_DATA_HOME after import.
MP_SPDZ = option("--mp-spdz", metavar="DIR", unset=lambda: str(default_home()),
                 help=f"MP-SPDZ directory (precedence: --mp-spdz > ${ENV_VAR} > {{default}})")
NO_INSTALL = option("--no-install", dest="install_mpspdz", action="store_false",
                    help="when no MP-SPDZ is configured, fail instead of downloading the "
                         "release into the default location (also "
                         f"{NO_INSTALL_ENV_VAR}=1)")

# The options both ``ltm run`` and ``ltm reproduce`` take (tests check they agree).
SHARED = (HOSTS, NETWORK, SEED, TIMEOUT, NOISE, CALIBRATION, PROGRAM, PROTOCOL, SHARING, VALIDATE,
          MP_SPDZ, NO_INSTALL)
