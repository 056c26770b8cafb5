"""``central``: the servers jointly draw binomial noise that no party learns, the
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

Its noise is known to no one: nothing can check its release exactly (the check is
statistical, :mod:`.noise_check`), and ``--tamper`` under a semi-honest protocol
is refused for it before the run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from harness.errors import InputError
from harness.privacy.binomial import MAX_COINS, binomial_epsilon, grid_sensitivity, least_coins
from harness.privacy.mechanism import Check, Options, Request
from harness.privacy.noise_check import as_signed, method_words, opened_release, release_statistics
from harness.privacy.servers import ServersNoise, central_sigma_for

if TYPE_CHECKING:
    from harness.clients import FixedPoint

__all__ = ["ROUNDING_COINS", "Central", "CoinLayout", "central_noise"]

# The automatic grid takes at least this many coins per cell: the rounding's variance,
# at most a quarter of a step squared, is then at most 1 % of the noise's (N / 4).
ROUNDING_COINS = 100
# The ring's bound on the scaled sketch: MP-SPDZ's TruncPr reads it as a 63-bit
# signed value.
_RING_BOUND = 1 << 62
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
class Central(ServersNoise):
    """Binomial(coins, 1/2) - coins/2 per cell in grid steps of 2^-grid_bits / scale,
    ``steps`` grid steps of sensitivity: the MPC multiplies the sketch by ``scale``
    and truncates F - grid_bits bits, then adds the noise it draws itself."""

    coins: int
    grid_bits: int
    steps: int
    layout: CoinLayout
    scale: int = 1
    # how the program draws its coins (split, edabits or random-bits) and, split, into
    # how many summands a random ring element is converted
    technique: str = "edabits"
    summands: int = 0

    name = "central"
    draws_coins = True
    # its probabilistic truncation reads the sketch as a 63-bit signed value
    ring_limit = 2.0**62
    ring_words = "rounds inside the MPC"
    ring_first = True

    @classmethod
    def check_grid(cls, options: Options) -> None:
        if options.tamper is not None and not options.malicious:
            # A malicious protocol aborts on the changed word; a semi-honest one reveals
            # it inside noise that no one knows, where no check can tell it.
            raise InputError(f"--tamper under the semi-honest {options.protocol} cannot be "
                             "detected with --mechanism central: its noise is known to no "
                             "one, and a changed word hides in it; use --mechanism dng "
                             "(checked against the servers' digests of their noise), a "
                             "malicious protocol, or drop --tamper")

    @classmethod
    def calibrated(cls, request: Request) -> Central:
        r = request
        return central_noise(eta=r.eta, s=r.s, d=r.d, epsilon=r.epsilon, delta=r.delta,
                             frac_bits=r.frac_bits, cells=r.m * r.d, clients=r.n,
                             grid_bits=r.grid_bits, technique=str(r.coins["technique"]),
                             summands=int(r.coins["summands"]))  # type: ignore[call-overload]

    @property
    def step(self) -> float:
        """One grid step, in reals."""
        return 2.0**-self.grid_bits / self.scale

    @property
    def shift(self) -> int:
        """The bits the MPC truncates the sketch by (F - g)."""
        return self.frac_bits - self.grid_bits

    @property
    def mpc_coins(self) -> int:
        return self.coins

    def template_params(self, reveal_noise: bool) -> dict[str, object]:
        return {"noise_fragment": "central_noise.mpc.j2",
                "noise_words": " with the servers' noise (central)",
                "revealed": ["noise", "rounded"] if reveal_noise else [],
                "coins": self.coins, "shift": self.shift, "scale": self.scale,
                "frac_bits": self.frac_bits, "edabit_bits": self.layout.bits,
                "edabits": self.layout.edabits, "lanes": self.layout.lanes,
                "rounds": self.layout.rounds, "technique": self.technique,
                "summands": self.summands}

    def decode(self, revealed: np.ndarray, fp: FixedPoint) -> np.ndarray:
        """Grid steps, in reals."""
        signed = np.asarray(revealed, dtype=np.uint64).view(np.int64)
        return signed.astype(np.float64) * self.step

    def grid_words(self) -> str:
        """The grid step in words: 2^-g, or 2^-g / c with a public scale c."""
        power = f"2^-{self.grid_bits}" if self.grid_bits >= 0 else f"2^{-self.grid_bits}"
        return power if self.scale == 1 else f"{power} / {self.scale} = {self.step:.6g}"

    def verify(self, expected: np.ndarray, printed: Mapping[int, np.ndarray],
               digest: tuple[bytes, int] | None = None) -> Check:
        from scipy import stats

        first, differ, plain, out = opened_release(expected, printed)
        k = self.shift
        scaled = plain * self.scale  # below 2^62: the run was refused otherwise
        floor = scaled >> k  # arithmetic: floor(v c / 2^k)
        frac = (scaled - (floor << k)) / 2.0**k
        errors = out - floor  # noise + the rounding's 0 or 1, in grid steps
        binom = stats.binom(self.coins, 0.5)
        half = self.coins // 2
        up = float(frac.mean())  # the cells' average chance of rounding up

        def cdf(x: np.ndarray) -> np.ndarray:
            return (1 - up) * binom.cdf(x + half) + up * binom.cdf(x - 1 + half)
        exact = len(first) > 1
        mismatches = 0
        if len(first) > 2:
            drawn = as_signed(first[1]).ravel()
            rounded = as_signed(first[2]).ravel()
            # up only where there is a fraction: an exact value is never rounded
            bad = ((out != rounded + drawn) | (rounded < floor)
                   | (rounded > floor + (frac > 0)) | (np.abs(drawn) > half))
            mismatches += int(np.count_nonzero(bad))
        statistics = release_statistics(errors, frac, self.coins / 4, cdf,
                                        units=f"grid steps {self.grid_words()}", exact=exact)
        rounded_words = f"the plaintext sketch truncated to the grid of {self.grid_words()}"
        return Check(differ + mismatches, statistics,
                     method_words(self.name, rounded_words, exact))

    def accountant(self) -> str:
        return ("dp-accounting PLD from the exact Binomial pmfs (pessimistic), over the "
                "entries one client moves")

    @property
    def calibration(self) -> str:
        return "binomial-pld"

    def parameters(self) -> dict:
        layout = self.layout
        return {"coins_per_cell": self.coins, "grid_bits": self.grid_bits,
                "coin_layout": {"bits": layout.bits, "edabits": layout.edabits,
                                "lanes": layout.lanes, "rounds": layout.rounds},
                "grid_scale": self.scale, "grid_step": self.step,
                "grid_sensitivity_steps": self.steps, "frac_bits": self.frac_bits,
                # probabilistic rounding: unbiased, below one step, variance at most a
                # quarter of a step squared (1 / N of the noise's)
                "rounding_error_bound": {"abs": self.step, "variance": self.step**2 / 4,
                                         "variance_vs_noise": 1 / self.coins},
                "generator": _COIN_SOURCES[self.technique].format(self.summands,
                                                                  self.summands)}


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
                  grid_bits: int | None = None, technique: str = "edabits",
                  summands: int = 0) -> Central:
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
    return Central(epsilon, delta, certified, std, central_sigma_for(eta, s, d, epsilon, delta),
                   frac_bits, coins=coins, grid_bits=grid, steps=steps, layout=layout,
                   scale=scale, technique=technique, summands=summands)
