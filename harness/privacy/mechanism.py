"""The :class:`Mechanism` interface: who adds a run's noise, and all that differs with it.

A run holds one mechanism, chosen once from its config by name
(:func:`harness.privacy.mechanism_class`, the registry) and calibrated for the
run's sizes (:meth:`Mechanism.calibrate`). The run, the clusters, the programs'
callers and the summary then call it and never ask which one they hold. A
mechanism says:

- before the run: its refusals of the run's options (:meth:`Mechanism.check_options`,
  :attr:`Mechanism.programs`) and what the clients add to their rows
  (:meth:`Mechanism.clients_noise`, calibrated and refused there; none where the
  servers add the noise);
- calibrated, refusing in one line what it cannot certify: the step each server
  runs before the MPC, if any (:meth:`Mechanism.server_step`; a cluster runs it
  on every server, where the server runs), its parameters for the programs'
  templates (:meth:`Mechanism.template_params`) and the compiler's options it
  needs, what the MPC's random coins cost (:attr:`Mechanism.mpc_coins`);
- after the MPC: how the release decodes to reals, its verification of the release
  (:meth:`Mechanism.verify`) and the certificate it writes into result.json
  (:meth:`Mechanism.record`), and its words in the summary
  (:meth:`Mechanism.noise_words`).

The built-in mechanisms are :class:`~harness.privacy.ltm.Ltm` (the clients' noise,
the paper's), :class:`~harness.privacy.dng.Dng` (each server's) and
:class:`~harness.privacy.central.Central` (the MPC's); a new one is one class and
its :func:`~harness.privacy.register` call.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from harness.errors import InputError

if TYPE_CHECKING:
    from harness.clients import FixedPoint
    from harness.privacy.noise import NoiseSpec

__all__ = ["Check", "Mechanism", "Options", "Request", "ServerStep", "programs_refusal"]


def programs_refusal(names: str, programs: tuple[str, ...], program: str) -> str:
    """The refusal of ``--program program`` by the mechanisms ``names``, whose noise
    only ``programs`` add."""
    return (f"--mechanism {names} adds the servers' noise in the {' or '.join(programs)} "
            f"program, not --program {program}; use --program {programs[0]}")


@dataclass(frozen=True)
class Options:
    """What a mechanism checks of a run's options before anything starts."""

    mechanism: str
    program: str
    noise: str  # the clients' noise (--noise)
    grid_bits: int | None
    reveal_noise: bool
    tamper: int | None
    protocol: str
    malicious: bool  # the protocol aborts on a changed share


@dataclass(frozen=True)
class Request:
    """What a mechanism calibrates for: the run's public sizes and privacy parameters."""

    servers: int
    corrupt: int  # the servers the protocol tolerates corrupt
    n: int
    d: int
    s: int
    m: int
    eta: float
    frac_bits: int
    epsilon: float
    delta: float
    grid_bits: int | None
    # How the MPC draws random coins under the run's protocol: technique, summands.
    coins: Mapping[str, object]
    noise: str = "none"  # the clients' noise asked for (--noise), and its calibration
    calibration: str = "corollary"
    t_prime: int = 0  # the corrupt clients (--corrupt-clients)
    # What the clients add, once :meth:`Mechanism.clients_noise` said it.
    clients_noise: NoiseSpec | None = None


@dataclass(frozen=True)
class ServerStep:
    """What each server runs before the MPC, where it runs.

    Named by its mechanism and given only public parameters (``params``, JSON), it
    writes the server's own private input to the MPC for every cell of ``shape``
    into the server's input file, and reports the number of cells and a digest of
    what it wrote under the run's public digest key (:mod:`harness.clients.digest`).
    :func:`harness.privacy.run_server_step` runs it in this process; a host's agent
    runs it as its ``step`` subcommand.
    """

    mechanism: str
    params: str
    shape: tuple[int, int]
    what: str  # what it does, in words for an error: "--mechanism dng draws ..."


@dataclass(frozen=True)
class Check:
    """A release's verification: the entries found wrong, and for noise that can only
    be checked statistically, its statistics (result.json's ``noise_check``) and the
    method's words."""

    mismatches: int
    statistics: dict | None = None
    method: str | None = None


class Mechanism(ABC):
    """Who adds a run's noise; an instance is the noise calibrated for one run."""

    #: Its name: ``--mechanism NAME``, result.json's ``mechanism``.
    name: ClassVar[str]
    #: The server programs whose MPC adds its noise (None: every program).
    programs: ClassVar[tuple[str, ...] | None] = None
    #: Whether its MPC draws random coins for every cell (:attr:`mpc_coins`: its time
    #: grows with them) and needs the protocol's local share conversion (MP-SPDZ's -Z).
    draws_coins: ClassVar[bool] = False

    @classmethod
    def check_options(cls, options: Options) -> None:
        """Refuse, in one line, the run's options this mechanism cannot carry."""
        if cls.programs is not None and options.program not in cls.programs:
            raise InputError(programs_refusal(cls.name, cls.programs, options.program))

    @classmethod
    def clients_noise(cls, request: Request) -> NoiseSpec:
        """What the clients add to their rows, certified (by default none: they send
        their rows plain)."""
        from harness.privacy.noise import NoiseSpec

        return NoiseSpec("none", n=request.n, m=request.m, d=request.d, s=request.s,
                         frac_bits=request.frac_bits)

    @classmethod
    @abstractmethod
    def calibrate(cls, request: Request) -> Mechanism:
        """The noise for ``request``, certified; refused in one line where it cannot be."""

    @classmethod
    def noise_words(cls, noise: Mapping[str, object]) -> str:
        """The summary's words for the noise of a run (``noise``: its clients' noise as
        result.json's ``parameters.noise`` records it)."""
        return f"{cls.name} (the servers')"

    @classmethod
    def step_params(cls, text: str) -> Mechanism:
        """The mechanism its :class:`ServerStep`'s parameters describe, or one line
        saying what is wrong with them (a host's agent reads them from its command
        line)."""
        raise InputError(f"--mechanism {cls.name} has no step on the servers")

    def run_step(self, shape: tuple[int, int], path: str | os.PathLike[str], *,
                 append: bool, digest_key: bytes) -> tuple[int, int]:
        """One server's :class:`ServerStep`, where this runs: (cells written, digest)."""
        raise InputError(f"--mechanism {self.name} has no step on the servers")

    def server_step(self, shape: tuple[int, int]) -> ServerStep | None:
        """What each server runs before the MPC on ``shape`` cells (None: nothing). A
        run with a step cannot reuse its servers' inputs: the step appends to them."""
        return None

    def template_params(self, reveal_noise: bool) -> dict[str, object]:
        """What the programs' noise section is rendered with (``open.mpc.j2``): the
        template fragment that adds the noise (``noise_fragment``, default none) and
        the values it names beside the release that the test aid ``reveal_noise``
        reveals too (``revealed``)."""
        return {}

    def views(self, reveal_noise: bool) -> int:
        """How many m x d values the program prints: the release, and what
        ``reveal_noise`` reveals beside it."""
        revealed = self.template_params(reveal_noise).get("revealed", [])
        return 1 + len(revealed) if isinstance(revealed, list) else 1

    @property
    def mpc_coins(self) -> int:
        """The random coins its MPC draws per cell (what the MPC's time grows with)."""
        return 0

    def decode(self, revealed: np.ndarray, fp: FixedPoint) -> np.ndarray:
        """The revealed ring elements in reals."""
        return fp.decode(revealed)

    def verify(self, expected: np.ndarray, printed: Mapping[int, np.ndarray],
               digest: tuple[bytes, int] | None = None) -> Check:
        """The release against the plaintext sketch ``expected`` (m x d ring elements):
        ``printed`` is each party's views (:meth:`views` x m x d) that it printed. By
        default the release is exact: every party's view must equal the plaintext."""
        return Check(max(int(np.count_nonzero(view[0] != expected))
                         for view in printed.values()))

    @abstractmethod
    def record(self) -> dict:
        """result.json's ``privacy``: what was asked, certified, and the noise's price."""

    def to_json(self) -> str:
        """Its public parameters as JSON (what a server's step is given)."""
        from dataclasses import asdict, is_dataclass

        if not is_dataclass(self):
            raise TypeError(f"{type(self).__name__} is not a dataclass")
        return json.dumps(asdict(self))
