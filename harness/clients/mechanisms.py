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
  the Skellam pmf certifies at (epsilon, delta) for the s d entries a client
  moves, each by its lattice sensitivity (:mod:`harness.clients.skellam`, which
  says why smaller moves are covered; above a variance of 1e6 lattice steps^2 the
  pmf in closed form, :mod:`harness.clients.skellam_pld`, at any variance dng
  draws; the Renyi bound :func:`~harness.clients.privacy.skellam_mu` only for a
  delta below what the composed PLD resolves; ``accountant`` says which). A
  corrupt server's own draw is known to the adversary and subtracted
  (post-processing), but a cheating server can still spoil the output: it may
  input anything as its noise.
- ``central``: the servers jointly draw binomial noise that no party learns, the
  sum of N shared random coins minus N/2 per cell. Useful variances need too
  many coins at the lattice 2^-F, so the sketch is first scaled by a public
  integer c and rounded inside the MPC to a coarser grid by probabilistic
  truncation of k bits, one grid step being 2^k / c lattice steps (MP-SPDZ's
  TruncPr on rings: floor((v + r) / 2^k) with r uniform on [0, 2^k), drawn inside
  the MPC independently of the data, the low bits gone, so the revealed grid values
  carry nothing finer). Given r the rounding is monotone in v, so a neighbour moves
  an entry by at most ceil(E c / 2^k) grid steps for every r (E = 2 round(eta 2^F)
  the lattice sensitivity), and by the joint convexity of the hockey-stick
  divergence the mixture over r is no less private than that shift (the coupling
  argument in docs/privacy.md; tests check it by brute force). The certificate
  is dp-accounting's privacy loss distribution from the exact probability mass
  functions of Binomial(N, 1/2) and its shift by that many steps, composed over
  the s d entries a client moves (a smaller shift of a log-concave noise is
  dominated by the largest: tests check both by brute force), and N is the least
  even number of coins it certifies at (epsilon, delta). The same noise in reals
  needs coins in proportion to the square of the sensitivity in steps, so the
  grid is the coarsest on which a neighbour moves an entry by one step (c / 2^k
  about 1 / E, as finely as the ring allows), unless the rounding's variance (at
  most a quarter of a step squared, 1 / N of the noise's) would exceed 1 % of the
  noise's: then by the fewest steps K that keep it below. ``--grid-bits g`` instead
  fixes c = 1 and k = F - g.

Every mechanism reports its noise's standard deviation per entry of T against
the central Gaussian's for the same (epsilon, delta, l2 sensitivity): 1.0 is the
central model's analytic Gaussian mechanism.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from harness.clients.binomial import MAX_COINS, binomial_epsilon, grid_sensitivity, least_coins
from harness.clients.certificates import calibrated, central_sigma
from harness.clients.digest import digest_weights, weighted_digest
from harness.clients.noise import noise_rng
from harness.clients.poisson import MAX_POISSON_MEAN, skellam
from harness.clients.prepare import format_integers
from harness.clients.privacy import (
    analytic_gaussian_sigma,
    release_sensitivity,
    skellam_epsilon,
    skellam_mu,
)
from harness.clients.skellam import (
    EXACT_PMF_MAX_MU,
    skellam_pld_epsilon,
    skellam_pld_mu,
    skellam_route,
)
from harness.errors import InputError
from harness.fileio import open_private, private_dir

__all__ = ["ROUNDING_COINS", "MECHANISMS", "CoinLayout", "ServerNoise", "central_noise",
           "check_dng_draws", "dng_noise", "input_server_noise", "server_noise"]

MECHANISMS = ("ltm", "dng", "central")
# The automatic grid takes at least this many coins per cell: the rounding's variance,
# at most a quarter of a step squared, is then at most 1 % of the noise's (N / 4).
ROUNDING_COINS = 100
# The ring's bound on the scaled sketch: MP-SPDZ's TruncPr reads it as a 63-bit
# signed value.
_RING_BOUND = 1 << 62
_NOISE_BLOCK = 1 << 20  # cells a dng server draws and writes at once
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
        """The layout for at least ``coins`` coins per cell (more by less than one
        coin per edaBit, under 2 %; the certificate is for the coins drawn)."""
        bits = min(64, coins)
        total = -(-coins // bits)  # edaBits per cell
        edabits = min(total, _POPCOUNT_COINS // bits)
        lanes = max(1, min(-(-total // edabits), _ROUND_COINS // (cells * bits * edabits)))
        rounds = -(-total // (edabits * lanes))
        edabits = -(-total // (rounds * lanes))  # spread evenly: the least overshoot
        # and each edaBit no wider than needed: fewer than one coin over per edaBit
        bits = -(-coins // (edabits * lanes * rounds))
        return cls(bits, edabits, lanes, rounds)


@dataclass(frozen=True)
class ServerNoise:
    """The servers' noise of one run and its certificate.

    ``kind`` is ``dng`` (Skellam on the lattice 2^-F, ``server_mu`` per server and
    cell, in steps^2) or ``central`` (Binomial(coins, 1/2) - coins/2 per cell in grid
    steps of 2^-grid_bits / scale, ``steps`` grid steps of sensitivity: the MPC
    multiplies the sketch by ``scale`` and truncates F - grid_bits bits). ``std`` and
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
    scale: int = 1
    # central: how the program draws its coins (split, edabits or random-bits) and,
    # split, into how many summands a random ring element is converted
    technique: str = "edabits"
    summands: int = 0

    @property
    def step(self) -> float:
        """central: one grid step, in reals."""
        return 2.0**-self.grid_bits / self.scale

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
        # numpy's own Poisson is biased at the means dng asks for (harness.clients.poisson)
        return skellam(rng, self.server_mu, shape)

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
            params.update(coins=self.coins, shift=self.shift, scale=self.scale,
                          frac_bits=self.frac_bits, edabit_bits=self.layout.bits,
                          edabits=self.layout.edabits, lanes=self.layout.lanes,
                          rounds=self.layout.rounds, technique=self.technique,
                          summands=self.summands)
        return params

    def accountant(self) -> str:
        if self.kind == "dng":
            servers = "server's" if self.honest == 1 else "servers'"
            if self.skellam_route == "pld":
                pmf = ("the exact Skellam pmf" if self.server_mu * self.honest
                       <= EXACT_PMF_MAX_MU else "the Skellam pmf in closed form (Debye's "
                       "expansion), outcomes merged by loss")
                return (f"dp-accounting PLD from {pmf} (pessimistic), over the "
                        f"entries one client moves, for the {self.honest} honest {servers} "
                        "noise")
            return (f"dp-accounting RDP (Skellam, Agarwal et al. 2021, Thm 3.5) for the "
                    f"{self.honest} honest {servers} noise (its variance is beyond the "
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
                       grid_scale=self.scale, grid_step=self.step,
                       grid_sensitivity_steps=self.steps, frac_bits=self.frac_bits,
                       # probabilistic rounding: unbiased, below one step, variance at
                       # most a quarter of a step squared (1 / N of the noise's)
                       rounding_error_bound={"abs": self.step,
                                             "variance": self.step**2 / 4,
                                             "variance_vs_noise": 1 / self.coins},
                       generator=_COIN_SOURCES[self.technique].format(self.summands,
                                                                       self.summands))
        return out


# What result.json says of each way the program draws its coins (the summary keeps the
# words before the parenthesis).
_COIN_SOURCES = {
    "split": "the MPC's secret coins from locally split shares (the bits of the XOR of a "
             "shared random ring element's {} summands, each converted to binary locally: "
             "MP-SPDZ's split_to_n_summands, compiled with -Z {}; no party learns them)",
    "edabits": "the MPC's secret coins from edaBits (their binary halves: MP-SPDZ's "
               "sint.get_edabit; no party learns them)",
    "random-bits": "the MPC's secret coins from random bits (MP-SPDZ's arithmetic "
                   "sint.get_random_bit; no party learns them)",
}


def _central_sigma(eta: float, s: int, d: int, epsilon: float, delta: float) -> float:
    sens = release_sensitivity(eta, s, d)
    return analytic_gaussian_sigma(sens.l2, epsilon, delta)


@dataclass(frozen=True)
class _DngRequest:
    """What dng's calibration (``value`` epsilon) or certificate (``value`` the honest
    servers' total variance) depends on: its key among the remembered certificates
    (``honest`` too: a calibration is remembered only where its draws are not refused)."""

    steps: int
    entries: int
    value: float
    delta: float
    honest: int


def dng_noise(*, servers: int, honest: int, eta: float, s: int, d: int, epsilon: float,
              delta: float, frac_bits: int) -> ServerNoise:
    """Skellam noise that the ``honest`` of ``servers`` servers' draws certify: the
    least variance the Skellam PLD certifies (the Renyi bound's where it cannot).
    Refused in one line (:func:`check_dng_draws`) before anything is remembered where
    no exact Poisson draw reaches it."""
    sens = release_sensitivity(eta, s, d, frac_bits)
    steps = int(sens.entry)

    def calibrate() -> float:
        mu = skellam_pld_mu(steps, sens.entries, epsilon, delta)
        if mu is None:
            mu = skellam_mu(sens, epsilon, delta)
        check_dng_draws(ServerNoise("dng", epsilon, delta, 0.0, 0.0, 0.0, frac_bits,
                                    server_mu=mu / honest))
        return mu

    # the PLD's bisection takes seconds: remembered across runs
    mu = calibrated(_DngRequest(steps, sens.entries, epsilon, delta, honest), "dng mu",
                    calibrate)
    server_mu = mu / honest
    if server_mu * honest < mu:  # the honest servers' total is at least the calibrated mu
        server_mu = math.nextafter(server_mu, math.inf)
    total = server_mu * honest
    certified = calibrated(
        _DngRequest(steps, sens.entries, total, delta, honest), "dng certificate",
        lambda: (skellam_pld_epsilon(total, steps, sens.entries, delta)
                 if skellam_route(total) == "pld" else skellam_epsilon(total, sens, delta)))
    std = math.sqrt(servers * server_mu) / 2.0**frac_bits
    # remembered with the LTM's (the same figure): a later run loads no dp-accounting
    central = central_sigma(release_sensitivity(eta, s, d).l2, epsilon, delta)
    return ServerNoise("dng", epsilon, delta, certified, std, central, frac_bits,
                       servers=servers, honest=honest, server_mu=server_mu)


def _scaled_grid(entry: int, steps: int, bound: int) -> tuple[int, int]:
    """(k, c): the grid on which ``entry`` lattice steps are at most ``steps`` grid
    steps of 2^k / c, as close to exactly as the ring allows (c ``bound`` < 2^62)."""
    # c within 31 bits, an immediate of MP-SPDZ's: its excess over K / E is at most 2^-30
    largest = max(1, min((1 << 31) - 1, (_RING_BOUND - 1) // max(1, bound)))
    best = None
    for shift in range(61):
        scale = (steps << shift) // entry
        if scale > largest:
            break
        if scale >= 1:
            best = (shift, scale)
    if best is None:  # only where even c = 1 could overflow: refused before this
        raise InputError("the sketch could sum past 2^62 in one bucket, beyond what "
                         "--mechanism central rounds inside the MPC; use fewer --clients "
                         "or lower --frac-bits")
    return best


def central_noise(*, eta: float, s: int, d: int, epsilon: float, delta: float,
                  frac_bits: int, cells: int, clients: int,
                  grid_bits: int | None = None) -> ServerNoise:
    """Binomial noise at its fewest coins per cell: on the grid where one client moves
    an entry by one step (or the fewest steps keeping the rounding's variance within
    1 % of the noise's, :data:`ROUNDING_COINS`), scaled so that ``clients`` rows stay
    within the ring; or on the grid 2^-``grid_bits``. Refused in one line above
    :data:`MAX_COINS`."""
    entries = s * d
    entry = 2 * round(eta * 2.0**frac_bits)
    if entry < 1:
        raise InputError(f"--eta {eta:g} rounds to 0 at --frac-bits {frac_bits}: no client "
                         "moves the sketch; raise --eta or --frac-bits")
    if grid_bits is not None:
        if grid_bits > frac_bits or frac_bits - grid_bits > 60:
            raise InputError(f"--grid-bits {grid_bits} must lie in [{frac_bits - 60}, "
                             f"{frac_bits}] (--frac-bits {frac_bits})")
        shift, scale = frac_bits - grid_bits, 1
        steps = grid_sensitivity(eta, frac_bits, grid_bits)
        least = least_coins(steps, entries, epsilon, delta)
    else:
        target = 1
        while True:
            least = least_coins(target, entries, epsilon, delta)
            if least is None or least >= ROUNDING_COINS:
                break
            # coins grow with the square of the steps: jump close to the least K
            target = max(target + 1, math.ceil(target * math.sqrt(ROUNDING_COINS / least)))
        shift, scale = _scaled_grid(entry, target, clients * s * (entry // 2))
        steps = grid_sensitivity(eta, frac_bits, frac_bits - shift, scale)
        if steps != target:  # c / 2^k fell short of K / E: certify the steps there are
            least = least_coins(steps, entries, epsilon, delta)
    if least is None:
        where = "on the coarsest useful grid" if grid_bits is None else \
            f"at --grid-bits {grid_bits}"
        raise InputError(
            f"--mechanism central needs more than {MAX_COINS} coins per cell for epsilon "
            f"{epsilon:g}, delta {delta:g} {where} (the limit MAX_COINS); raise --epsilon"
            f"{'' if grid_bits is None else ', use a coarser --grid-bits'}, or "
            "--mechanism dng")
    layout = CoinLayout.cover(least, cells)
    coins = layout.coins
    certified = binomial_epsilon(coins, steps, entries, delta)
    grid = frac_bits - shift
    std = math.sqrt(coins) / 2 * 2.0**-grid / scale
    return ServerNoise("central", epsilon, delta, certified, std,
                       _central_sigma(eta, s, d, epsilon, delta), frac_bits,
                       coins=coins, grid_bits=grid, steps=steps, layout=layout, scale=scale)


def check_dng_draws(noise: ServerNoise) -> None:
    """Refuse, in one line, dng noise whose Poissons no exact draw reaches: each server
    draws two Poisson(server_mu / 2) per cell, exact up to :data:`MAX_POISSON_MEAN`."""
    mean = noise.server_mu / 2
    if noise.kind != "dng" or mean <= MAX_POISSON_MEAN:
        return
    raise InputError(
        f"--mechanism dng needs each server to draw Poissons of mean 2^{math.log2(mean):.1f} "
        f"per cell for epsilon {noise.epsilon:g}, delta {noise.delta:g} at --frac-bits "
        f"{noise.frac_bits}, beyond the 2^{math.log2(MAX_POISSON_MEAN):.0f} an exact draw "
        "reaches; raise --epsilon or --delta, or lower --frac-bits, --eta, --dim or "
        "--sparsity")


def input_server_noise(noise: ServerNoise, shape: tuple[int, int],
                       path: str | os.PathLike[str], *, append: bool,
                       digest_key: bytes) -> tuple[int, int]:
    """One server's own dng noise for every cell, drawn where this runs from a fresh
    CSPRNG (:func:`~harness.clients.noise_rng`) and written as its private input to the
    MPC: appended to ``path`` after its aggregate (``append``), else the whole file,
    0600 in a 0700 directory. Returns the number of cells drawn and the noise's digest
    under the run's public ``digest_key`` (:mod:`harness.clients.digest`), by which the
    release is checked exactly; nothing else of the noise."""
    rng = noise_rng()
    rows, cols = shape
    weights = digest_weights(digest_key, rows * cols)
    digest = 0
    # A block of rows at a time: what is held stays small however many cells there are.
    step = max(1, _NOISE_BLOCK // max(cols, 1))
    blocks: Iterator[np.ndarray | None] = (
        noise.sample(rng, (min(step, rows - start), cols)) for start in range(0, rows, step))
    drawn = next(blocks, None)  # noise that cannot be drawn here is refused before any file opens
    done = 0
    # The run's own directory, never made here; the file itself, never through a link.
    private_dir(os.path.dirname(os.path.abspath(path)), create=False)
    with open_private(path, "ab" if append else "wb", follow=False) as fh:
        while drawn is not None:
            fh.write(format_integers(drawn.ravel()))
            digest += weighted_digest(drawn, weights[done:done + drawn.size])
            done += drawn.size
            del drawn  # nothing of a server's noise is kept
            drawn = next(blocks, None)
    return done, digest % (1 << 64)


def server_noise(mechanism: str, *, servers: int, corrupt: int, eta: float, s: int, d: int,
                 m: int, epsilon: float, delta: float, frac_bits: int,
                 clients: int | None = None,
                 grid_bits: int | None = None) -> ServerNoise | None:
    """The servers' noise of ``mechanism`` (None for ``ltm``: the clients add it);
    ``clients`` (central's) bounds the sketch it scales inside the ring."""
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
    if clients is None:
        raise ValueError("central noise needs the number of clients")
    return central_noise(eta=eta, s=s, d=d, epsilon=epsilon, delta=delta,
                         frac_bits=frac_bits, cells=m * d, clients=clients,
                         grid_bits=grid_bits)
