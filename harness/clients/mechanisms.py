"""The servers' noise: distributed noise generation (``dng``) and the central model
(``central``) inside the MPC, beside the LTM's client noise (``ltm``).

The release is the m x d sketch T; one client moves s d of its entries by at
most 2 eta each (:func:`harness.clients.privacy.release_sensitivity`). In the
central model nobody needs the clients' noise, so no concentration of honest
clients enters (no delta_E): the servers' noise alone is certified.

- ``dng``: every server draws its own noise for each of the m x d cells and inputs
  it into the MPC. The noise lives on the fixed-point lattice 2^-F: Skellam,
  Poisson(mu_s/2) - Poisson(mu_s/2) per cell and server, so that any sum of
  servers' draws is again Skellam. Against the t corrupt servers the protocol
  tolerates, the S - t honest ones must suffice: each adds mu_s = mu / (S - t),
  where mu is the least Skellam variance that the privacy loss distribution of
  the exact Skellam pmf certifies at (epsilon, delta) for the s d entries a client
  moves, each by its lattice sensitivity (:mod:`harness.clients.skellam`, which
  says why smaller moves are covered); above a variance of 1e9 lattice steps^2
  (beyond scipy's Bessel functions) the Renyi bound
  :func:`~harness.clients.privacy.skellam_mu` calibrates and certifies instead,
  and ``accountant`` says which. A corrupt server's own draw is known to the
  adversary and subtracted (post-processing), but a cheating server can still
  spoil the output: it may input anything as its noise.
- ``central``: the servers jointly draw binomial noise that no party learns, the
  sum of N shared random coins minus N/2 per cell. Useful variances need too
  many coins at the lattice 2^-F, so the sketch is first rounded inside the MPC
  to a coarser grid 2^-g by probabilistic truncation of k = F - g bits (MP-SPDZ's
  TruncPr on rings: floor(v / 2^k) rounded up with probability the fraction, the
  low bits gone, so the revealed grid values carry nothing finer). A neighbour
  then moves an entry by at most ceil(E / 2^k) + 1 grid steps (E = 2 round(eta
  2^F) the lattice sensitivity; the one step for the rounding). The certificate
  is dp-accounting's privacy loss distribution from the exact probability mass
  functions of Binomial(N, 1/2) and its shift by that many steps, composed over
  the s d entries a client moves (a smaller shift of a log-concave noise is
  dominated by the largest: tests check both by brute force), and N is the least
  even number of coins it certifies at (epsilon, delta).

Every mechanism reports its noise's standard deviation per entry of T against
the central Gaussian's for the same (epsilon, delta, l2 sensitivity): 1.0 is the
central model's analytic Gaussian mechanism.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from harness.clients.noise import noise_rng
from harness.clients.prepare import format_integers
from harness.clients.privacy import (
    analytic_gaussian_sigma,
    release_sensitivity,
    skellam_epsilon,
    skellam_mu,
)
from harness.clients.skellam import skellam_pld_epsilon, skellam_pld_mu, skellam_route
from harness.errors import InputError
from harness.fileio import open_private, private_dir

__all__ = ["COIN_TARGET", "MAX_COINS", "MECHANISMS", "CoinLayout", "ServerNoise",
           "binomial_epsilon", "central_noise", "dng_noise", "grid_sensitivity",
           "input_server_noise", "least_coins", "server_noise"]

MECHANISMS = ("ltm", "dng", "central")
# The most coins per cell a central run draws: about two minutes of the MPC per
# thousand cells on the slowest protocol here (see benchmarks/mechanisms.py).
MAX_COINS = 1 << 22
# The automatic grid is the finest whose coins per cell stay within this.
COIN_TARGET = 1 << 16
# dp-accounting's discretisation of the privacy loss (pessimistic either way).
_DISCRETIZATION = 1e-4
_TAIL_SDS = 40.0  # binomial mass beyond 40 standard deviations is below 1e-300


def grid_sensitivity(eta: float, frac_bits: int, grid_bits: int) -> int:
    """How many grid steps 2^-g one client moves an entry of T, rounding included."""
    entry = 2 * round(eta * 2.0**frac_bits)  # lattice steps 2^-F
    shift = frac_bits - grid_bits
    if shift == 0:
        return entry
    return -(-entry // (1 << shift)) + 1


def _binomial_pmfs(coins: int, steps: int) -> tuple[dict, dict]:
    from scipy import stats

    spread = _TAIL_SDS * math.sqrt(coins) / 2
    low = max(0, math.floor(coins / 2 - spread - steps))
    high = min(coins, math.ceil(coins / 2 + spread + steps))
    xs = np.arange(low, high + 1)
    logs = stats.binom.logpmf(xs, coins, 0.5).tolist()
    return (dict(zip(xs.tolist(), logs, strict=True)),
            dict(zip((xs + steps).tolist(), logs, strict=True)))


@lru_cache(maxsize=256)
def binomial_epsilon(coins: int, steps: int, entries: int, delta: float) -> float:
    """The epsilon dp-accounting's PLD certifies at ``delta`` for Binomial(coins, 1/2)
    noise on each of ``entries`` entries, each moved by ``steps`` grid steps."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    if coins <= 0:
        return math.inf
    lower, upper = _binomial_pmfs(coins, steps)
    loss = pld.from_two_probability_mass_functions(
        lower, upper, pessimistic_estimate=True,
        value_discretization_interval=_DISCRETIZATION, log_mass_truncation_bound=-50)
    if entries > 1:
        loss = loss.self_compose(entries)
    return float(loss.get_epsilon_for_delta(delta))


def least_coins(steps: int, entries: int, epsilon: float, delta: float,
                limit: int = MAX_COINS) -> int | None:
    """The least even N with :func:`binomial_epsilon` <= ``epsilon``; None above ``limit``."""
    sigma = analytic_gaussian_sigma(steps * math.sqrt(entries), epsilon, delta)
    if 4 * sigma**2 > 2 * limit:  # the Gaussian's variance alone would need twice the limit
        return None
    # The binomial's variance N/4 never needs to be much below the Gaussian's.
    low = max(0, 2 * math.floor(sigma**2))  # even, and certifies nothing above epsilon
    while low > 0 and binomial_epsilon(low, steps, entries, delta) <= epsilon:
        low //= 2
        low -= low % 2
    high = max(2, 2 * math.ceil(2 * sigma**2 * 1.05))
    while binomial_epsilon(high, steps, entries, delta) > epsilon:
        if high > limit:
            return None
        low, high = high, 2 * high
    while high - low > 2:
        mid = (low + high) // 4 * 2
        if binomial_epsilon(mid, steps, entries, delta) > epsilon:
            low = mid
        else:
            high = mid
    return high if high <= limit else None


# One popcount counts at most this many coins per cell (the program's size grows with
# it), and one round's vectors hold at most this many coins (its memory).
_POPCOUNT_COINS = 2048
_ROUND_COINS = 1 << 25


@dataclass(frozen=True)
class CoinLayout:
    """How the MPC draws a cell's coins: ``rounds`` runtime rounds, each drawing
    ``edabits`` edaBits of ``bits`` bits for every cell in each of ``lanes`` lanes."""

    bits: int
    edabits: int
    lanes: int
    rounds: int

    @property
    def coins(self) -> int:
        return self.bits * self.edabits * self.lanes * self.rounds

    @classmethod
    def cover(cls, coins: int, cells: int) -> CoinLayout:
        """The layout for at least ``coins`` coins per cell (more by less than a
        round's share; the certificate is for the coins drawn)."""
        bits = min(64, coins)
        total = -(-coins // bits)  # edaBits per cell
        edabits = min(total, _POPCOUNT_COINS // bits)
        lanes = max(1, min(-(-total // edabits), _ROUND_COINS // (cells * bits * edabits)))
        rounds = -(-total // (edabits * lanes))
        edabits = -(-total // (rounds * lanes))  # spread evenly: the least overshoot
        return cls(bits, edabits, lanes, rounds)


@dataclass(frozen=True)
class ServerNoise:
    """The servers' noise of one run and its certificate.

    ``kind`` is ``dng`` (Skellam on the lattice 2^-F, ``server_mu`` per server and
    cell, in steps^2) or ``central`` (Binomial(coins, 1/2) - coins/2 per cell on the
    grid 2^-grid_bits, ``steps`` grid steps of sensitivity). ``std`` and
    ``central_std`` are per entry of T, in reals.
    """

    kind: str
    epsilon: float
    delta: float
    certified_epsilon: float
    std: float
    central_std: float
    frac_bits: int
    servers: int = 0
    honest: int = 0
    server_mu: float = 0.0
    coins: int = 0
    grid_bits: int = 0
    steps: int = 0
    layout: CoinLayout | None = None

    @property
    def shift(self) -> int:
        """central: the bits the MPC truncates the sketch by (F - g)."""
        return self.frac_bits - self.grid_bits

    @property
    def skellam_route(self) -> str:
        """dng: ``pld`` if the exact Skellam PLD certified it, ``rdp`` if the Renyi bound."""
        return skellam_route(self.server_mu * self.honest)

    @property
    def std_ratio(self) -> float:
        return self.std / self.central_std

    def sample(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """One server's dng noise per cell, int64 lattice steps."""
        if self.kind != "dng":
            raise ValueError("only dng noise is drawn outside the MPC")
        half = self.server_mu / 2
        return rng.poisson(half, size=shape) - rng.poisson(half, size=shape)

    def to_json(self) -> str:
        """Its parameters as JSON: all public (what a server is told to draw its noise)."""
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServerNoise:
        fields = json.loads(text)
        layout = fields.pop("layout", None)
        return cls(**fields, layout=None if layout is None else CoinLayout(**layout))

    def template_params(self) -> dict[str, object]:
        """What the program's noise section is rendered with."""
        params: dict[str, object] = {"mechanism": self.kind}
        if self.layout is not None:
            params.update(coins=self.coins, shift=self.shift, frac_bits=self.frac_bits,
                          edabit_bits=self.layout.bits, edabits=self.layout.edabits,
                          lanes=self.layout.lanes, rounds=self.layout.rounds)
        return params

    def accountant(self) -> str:
        if self.kind == "dng":
            if self.skellam_route == "pld":
                return ("dp-accounting PLD from the exact Skellam pmf (pessimistic), over the "
                        f"entries one client moves, for the {self.honest} honest servers' noise")
            return (f"dp-accounting RDP (Skellam, Agarwal et al. 2021, Thm 3.5) for the "
                    f"{self.honest} honest servers' noise (its variance is beyond the "
                    "exact pmf's range)")
        return ("dp-accounting PLD from the exact Binomial pmfs (pessimistic), over the "
                "entries one client moves")

    def record(self) -> dict:
        """result.json's ``privacy``: what was asked, certified, and the noise's price."""
        out: dict = {
            "mechanism": self.kind, "requested_epsilon": self.epsilon,
            "requested_delta": self.delta, "certified_epsilon": self.certified_epsilon,
            "certified_delta": self.delta, "accountant": self.accountant(),
            "calibration": (f"skellam-{self.skellam_route}" if self.kind == "dng"
                            else "binomial-pld"),
            "noise_std": self.std, "central_std": self.central_std,
            "std_ratio": self.std_ratio}
        if self.kind == "dng":
            out.update(servers=self.servers, honest_servers=self.honest,
                       server_mu=self.server_mu, frac_bits=self.frac_bits,
                       generator="each server's randomgen.AESCounter (key from os.urandom)")
        else:
            layout = self.layout
            out.update(coins_per_cell=self.coins, grid_bits=self.grid_bits,
                       coin_layout=None if layout is None else {
                           "bits": layout.bits, "edabits": layout.edabits,
                           "lanes": layout.lanes, "rounds": layout.rounds},
                       grid_sensitivity_steps=self.steps, frac_bits=self.frac_bits,
                       generator="the MPC's shared random bits (edaBits), no party learns "
                                 "them")
        return out


def _central_sigma(eta: float, s: int, d: int, epsilon: float, delta: float) -> float:
    sens = release_sensitivity(eta, s, d)
    return analytic_gaussian_sigma(sens.l2, epsilon, delta)


def dng_noise(*, servers: int, honest: int, eta: float, s: int, d: int, epsilon: float,
              delta: float, frac_bits: int) -> ServerNoise:
    """Skellam noise that the ``honest`` of ``servers`` servers' draws certify: the
    least variance the exact Skellam PLD certifies, the Renyi bound's above its range."""
    sens = release_sensitivity(eta, s, d, frac_bits)
    mu = skellam_pld_mu(int(sens.entry), sens.entries, epsilon, delta)
    if mu is None:
        mu = skellam_mu(sens, epsilon, delta)
    server_mu = mu / honest
    if server_mu * honest < mu:  # the honest servers' total is at least the calibrated mu
        server_mu = math.nextafter(server_mu, math.inf)
    total = server_mu * honest
    certified = (skellam_pld_epsilon(total, int(sens.entry), sens.entries, delta)
                 if skellam_route(total) == "pld" else skellam_epsilon(total, sens, delta))
    std = math.sqrt(servers * server_mu) / 2.0**frac_bits
    return ServerNoise("dng", epsilon, delta, certified, std,
                       _central_sigma(eta, s, d, epsilon, delta), frac_bits,
                       servers=servers, honest=honest, server_mu=server_mu)


def central_noise(*, eta: float, s: int, d: int, epsilon: float, delta: float,
                  frac_bits: int, cells: int, grid_bits: int | None = None) -> ServerNoise:
    """Binomial noise on the given grid 2^-g, or on the finest grid whose coins per
    cell stay within :data:`COIN_TARGET` (else the coarsest); refused in one line
    above :data:`MAX_COINS`."""
    entries = s * d
    if grid_bits is not None:
        if grid_bits > frac_bits or frac_bits - grid_bits > 60:
            raise InputError(f"--grid-bits {grid_bits} must lie in [{frac_bits - 60}, "
                             f"{frac_bits}] (--frac-bits {frac_bits})")
        grids = [grid_bits]
    else:
        entry = 2 * round(eta * 2.0**frac_bits)
        coarsest = frac_bits - max(0, math.ceil(math.log2(entry)))
        grids = list(range(frac_bits, coarsest - 1, -1))
    chosen = None
    for grid in grids:
        steps = grid_sensitivity(eta, frac_bits, grid)
        target = MAX_COINS if grid_bits is not None or grid == grids[-1] else COIN_TARGET
        coins = least_coins(steps, entries, epsilon, delta, limit=target)
        if coins is not None:
            chosen = (grid, steps, coins)
            break
    if chosen is None:
        grid = grids[-1]
        raise InputError(
            f"--mechanism central needs more than {MAX_COINS} coins per cell for epsilon "
            f"{epsilon:g}, delta {delta:g} at --grid-bits {grid} (the limit MAX_COINS); "
            "raise --epsilon, use a coarser --grid-bits, or --mechanism dng")
    grid, steps, least = chosen
    layout = CoinLayout.cover(least, cells)
    coins = layout.coins
    certified = binomial_epsilon(coins, steps, entries, delta)
    std = math.sqrt(coins) / 2 / 2.0**grid
    return ServerNoise("central", epsilon, delta, certified, std,
                       _central_sigma(eta, s, d, epsilon, delta), frac_bits,
                       coins=coins, grid_bits=grid, steps=steps, layout=layout)


def input_server_noise(noise: ServerNoise, shape: tuple[int, int],
                       path: str | os.PathLike[str], *, append: bool) -> int:
    """One server's own dng noise for every cell, drawn where this runs from a fresh
    CSPRNG (:func:`~harness.clients.noise_rng`) and written as its private input to the
    MPC: appended to ``path`` after its aggregate (``append``), else the whole file,
    0600 in a 0700 directory. Returns the number of cells drawn, nothing of the noise."""
    drawn = noise.sample(noise_rng(), shape)
    private_dir(os.path.dirname(os.path.abspath(path)))
    with open_private(path, "ab" if append else "wb") as fh:
        fh.write(format_integers(drawn.ravel()))
    cells = int(drawn.size)
    del drawn  # nothing of a server's noise is kept
    return cells


def server_noise(mechanism: str, *, servers: int, corrupt: int, eta: float, s: int, d: int,
                 m: int, epsilon: float, delta: float, frac_bits: int,
                 grid_bits: int | None = None) -> ServerNoise | None:
    """The servers' noise of ``mechanism`` (None for ``ltm``: the clients add it)."""
    if mechanism not in MECHANISMS:
        raise InputError(f"unknown --mechanism {mechanism!r}; choose {', '.join(MECHANISMS)}")
    if mechanism == "ltm":
        return None
    for name, value, low, high in (("epsilon", epsilon, 1e-3, 100.0),
                                   ("delta", delta, 1e-30, 0.5)):
        if not low <= value <= high:
            raise InputError(f"--{name} must lie in [{low:g}, {high:g}] for --mechanism "
                             f"{mechanism}, got {value}")
    if mechanism == "dng":
        return dng_noise(servers=servers, honest=servers - corrupt, eta=eta, s=s, d=d,
                         epsilon=epsilon, delta=delta, frac_bits=frac_bits)
    return central_noise(eta=eta, s=s, d=d, epsilon=epsilon, delta=delta,
                         frac_bits=frac_bits, cells=m * d, grid_bits=grid_bits)
