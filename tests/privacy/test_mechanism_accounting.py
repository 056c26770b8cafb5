"""The servers' noise: its accountant against brute force, the grid's sensitivity, refusals."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from _calibrate import server_noise
from scipy import stats

from harness.errors import InputError
from harness.privacy import (
    MAX_COINS,
    ROUNDING_COINS,
    CoinLayout,
    binomial_epsilon,
    grid_sensitivity,
    least_coins,
)
from harness.privacy.accounting import release_sensitivity
from harness.privacy.skellam import skellam_pld_epsilon


def _hockey_stick(coins: int, shifts: tuple[int, ...], epsilon: float) -> float:
    """delta(epsilon) of Binomial(coins, 1/2) noise on len(shifts) entries moved by
    ``shifts``, summed over the whole joint support (no accountant involved)."""
    pmf = stats.binom.pmf(np.arange(coins + 1), coins, 0.5)
    width = coins + 1 + max(shifts)
    p = q = np.ones(())
    for shift in shifts:
        low = np.zeros(width)
        high = np.zeros(width)
        low[:coins + 1] = pmf
        high[shift:shift + coins + 1] = pmf
        p, q = np.multiply.outer(p, low), np.multiply.outer(q, high)
    # Both orders of the neighbours: the noise is symmetric, but check it anyway.
    return max(float(np.maximum(p - math.exp(epsilon) * q, 0).sum()),
               float(np.maximum(q - math.exp(epsilon) * p, 0).sum()))


def _brute_epsilon(coins: int, shifts: tuple[int, ...], delta: float) -> float:
    low, high = 0.0, 50.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if _hockey_stick(coins, shifts, mid) > delta else (low, mid)
    return high


@pytest.mark.parametrize("coins,steps", [(40, 2), (64, 3), (30, 1)])
def test_binomial_certificate_holds_and_is_tight_against_brute_force(coins, steps):
    delta = 1e-3
    certified = binomial_epsilon(coins, steps, 2, delta)
    exact = _brute_epsilon(coins, (steps, steps), delta)
    assert _hockey_stick(coins, (steps, steps), certified) <= delta * (1 + 1e-9)
    # pessimistic, by at most its discretisation over two compositions
    assert exact <= certified <= exact + 1e-3


def test_smaller_moves_are_covered_by_the_certificate():
    """A client may move an entry by less than the sensitivity, or not at all."""
    coins, steps, delta = 48, 3, 1e-3
    certified = binomial_epsilon(coins, steps, 2, delta)
    for shifts in itertools.product(range(steps + 1), repeat=2):
        if any(shifts):
            assert _hockey_stick(coins, shifts, certified) <= delta * (1 + 1e-9), shifts


def test_least_coins_is_the_least_even_count():
    steps, entries, epsilon, delta = 3, 4, 2.0, 1e-5
    coins = least_coins(steps, entries, epsilon, delta)
    assert coins is not None and coins % 2 == 0
    assert binomial_epsilon(coins, steps, entries, delta) <= epsilon
    assert binomial_epsilon(coins - 2, steps, entries, delta) > epsilon


@pytest.mark.parametrize("eta,frac_bits,grid_bits", [(1.0, 6, 0), (0.3, 6, 2), (0.7, 5, 3),
                                                     (1.0, 4, 4)])
def test_grid_sensitivity_bounds_every_coupled_probabilistic_rounding(eta, frac_bits, grid_bits):
    """MP-SPDZ's TruncPr on rings rounds v to floor((v + r) / 2^k), r uniform on
    [0, 2^k) and independent of the data: for every r, two lattice values within the
    lattice sensitivity land within grid_sensitivity grid steps, and some pair with
    some r lands exactly that far (exhaustively)."""
    entry = 2 * round(eta * 2**frac_bits)
    k = frac_bits - grid_bits
    worst = 0
    for v in range(-3 * 2**frac_bits, 3 * 2**frac_bits):
        for w in (v + entry, v - entry, v + entry // 2):
            for r in range(1 << k):
                worst = max(worst, abs(((v + r) >> k) - ((w + r) >> k)))
    assert worst == grid_sensitivity(eta, frac_bits, grid_bits)


def _rounded_release_pmfs(coins: int, k: int, values: tuple[int, ...]) -> np.ndarray:
    """The exact pmf of floor((v + r) / 2^k) + Binomial(coins, 1/2) for each lattice
    value v: a mixture over the truncation's r, uniform on [0, 2^k). Rows share one
    support, starting at floor(min(values) / 2^k)."""
    binom = stats.binom.pmf(np.arange(coins + 1), coins, 0.5)
    base = min(values) >> k
    width = (max(values) >> k) - base + 2 + coins
    out = np.zeros((len(values), width))
    for row, v in enumerate(values):
        for r in range(1 << k):
            at = ((v + r) >> k) - base
            out[row, at:at + coins + 1] += binom / (1 << k)
    return out


def _rounded_brute_epsilon(coins: int, k: int, entry: int, entries: int,
                           delta: float) -> float:
    """The least epsilon at which central's release, rounding included, is
    (epsilon, delta)-DP on ``entries`` entries each moved by at most ``entry`` lattice
    steps: the worst pair of neighbours over every fractional part (v mod 2^k) and
    every move, the hockey-stick divergence summed over the joint support."""
    pairs = [(v, v + e) for v in range(1 << k) for e in range(-entry, entry + 1) if e]
    pmfs = {pair: _rounded_release_pmfs(coins, k, (min(pair[0], pair[1]), *pair))[1:]
            for pair in pairs}
    joint = []
    for combo in itertools.product(pairs, repeat=entries):
        p = q = np.ones(())
        for pair in combo:
            low, high = pmfs[pair]
            p, q = np.multiply.outer(p, low), np.multiply.outer(q, high)
        joint.append((p.ravel(), q.ravel()))

    def divergence(epsilon: float) -> float:
        scale = math.exp(epsilon)
        return max(float(np.maximum(p - scale * q, 0).sum()) for p, q in joint)

    low, high = 0.0, 50.0
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (mid, high) if divergence(mid) > delta else (low, mid)
    return high


# (coins, k bits truncated, lattice sensitivity E, entries): E a multiple of 2^k is
# where a neighbour can move an entry by the full ceil(E / 2^k) steps for every r.
@pytest.mark.parametrize("coins,k,entry,entries", [(40, 2, 4, 1), (24, 1, 4, 1),
                                                   (20, 2, 4, 2), (30, 1, 2, 2)])
def test_central_certificate_is_within_one_percent_of_the_rounded_release(
        coins, k, entry, entries):
    """binomial_epsilon at grid_sensitivity steps against an exact brute-force epsilon
    of the release with MPC rounding (a mixture over r): never below, at most 1 %
    above (the old extra step for the rounding certified far more)."""
    delta = 1e-3
    frac_bits = 6
    steps = grid_sensitivity(entry / 2 / 2**frac_bits, frac_bits, frac_bits - k)
    certified = binomial_epsilon(coins, steps, entries, delta)
    exact = _rounded_brute_epsilon(coins, k, entry, entries, delta)
    assert exact <= certified <= 1.01 * exact


@pytest.mark.parametrize("coins,k,entry,entries", [(40, 2, 2, 1), (30, 2, 6, 1),
                                                   (16, 2, 6, 2)])
def test_central_certificate_covers_the_rounded_release_at_any_sensitivity(
        coins, k, entry, entries):
    """Where E is no multiple of 2^k the rounding itself hides part of the move: the
    certificate still holds (never below the exact epsilon)."""
    delta = 1e-3
    frac_bits = 6
    steps = grid_sensitivity(entry / 2 / 2**frac_bits, frac_bits, frac_bits - k)
    assert steps == -(-entry // (1 << k))
    assert _rounded_brute_epsilon(coins, k, entry, entries, delta) <= \
        binomial_epsilon(coins, steps, entries, delta)


def test_dng_honest_servers_alone_certify_epsilon():
    for servers, corrupt in ((2, 1), (3, 1), (4, 3)):
        noise = server_noise("dng", servers=servers, corrupt=corrupt, eta=1.0, s=1, d=4, m=5,
                             epsilon=1.0, delta=1e-6, frac_bits=8)
        assert noise is not None and noise.honest == servers - corrupt
        sens = release_sensitivity(1.0, 1, 4, 8)
        # what the honest servers alone add certifies the request
        assert skellam_pld_epsilon(noise.server_mu * noise.honest, int(sens.entry),
                                   sens.entries, 1e-6) <= 1.0
        # every server adds its share: the price is sqrt(S / (S - t)) and Skellam's own
        assert math.sqrt(servers / (servers - corrupt)) <= noise.std_ratio \
            <= 1.15 * math.sqrt(servers / (servers - corrupt))
        # the accountant's line agrees in number with the honest servers it names
        honest = servers - corrupt
        assert noise.accountant().endswith(
            "for the 1 honest server's noise" if honest == 1
            else f"for the {honest} honest servers' noise"), noise.accountant()


@pytest.mark.parametrize("epsilon,eta,s,d", [(1.0, 1.0, 1, 10), (0.1, 1.0, 1, 10),
                                             (1.0, 0.37, 2, 5), (0.5, 3.3, 1, 4)])
def test_central_noise_takes_its_fewest_coins_on_a_one_step_grid(epsilon, eta, s, d):
    """At epsilon <= 1 a neighbour moves an entry by one grid step of 2^k / c lattice
    steps (any eta: the public scale c), so the coins are least_coins(1, s d) up to
    the layout's rounding, and the std is within 2 % of the central Gaussian's."""
    delta = 1e-6
    noise = server_noise("central", servers=3, corrupt=1, eta=eta, s=s, d=d, m=100,
                         epsilon=epsilon, delta=delta, frac_bits=16, clients=10**6)
    assert noise is not None and noise.steps == 1
    least = least_coins(1, s * d, epsilon, delta)
    assert least is not None and least <= noise.coins <= 1.05 * least
    assert noise.certified_epsilon <= epsilon
    assert noise.certified_epsilon == binomial_epsilon(noise.coins, 1, s * d, delta)
    # a neighbour moves an entry by at most one step: 2 eta in reals, within the step
    assert 2 * round(eta * 2**16) / 2**16 <= noise.step < 2 * eta * (1 + 1e-4)
    assert noise.std == pytest.approx(math.sqrt(noise.coins) / 2 * noise.step)
    assert noise.std_ratio <= 1.02
    bound = noise.record()["rounding_error_bound"]
    assert bound == {"abs": noise.step, "variance": noise.step**2 / 4,
                     "variance_vs_noise": 1 / noise.coins}
    assert bound["variance_vs_noise"] <= 0.01
    # the sketch times the scale stays inside the ring at the clients given
    assert 10**6 * s * round(eta * 2**16) * noise.scale < 2**62


def test_central_noise_takes_more_steps_where_one_would_round_too_coarsely():
    """At a large epsilon one step would need so few coins that the rounding's
    variance would pass 1 % of the noise's: the grid is finer, by the fewest steps."""
    noise = server_noise("central", servers=3, corrupt=1, eta=1.0, s=1, d=1, m=10,
                         epsilon=8.0, delta=1e-6, frac_bits=16, clients=1000)
    assert noise is not None and noise.steps > 1
    assert noise.coins >= ROUNDING_COINS
    assert (least_coins(noise.steps - 1, 1, 8.0, 1e-6) or 0) < ROUNDING_COINS


def test_grid_bits_overrides_the_grid_without_a_scale():
    noise = server_noise("central", servers=3, corrupt=1, eta=1.0, s=1, d=10, m=100,
                         epsilon=1.0, delta=1e-6, frac_bits=16, clients=10**6, grid_bits=2)
    assert noise is not None and noise.scale == 1 and noise.grid_bits == 2
    assert noise.steps == grid_sensitivity(1.0, 16, 2) == 8
    assert noise.std == pytest.approx(math.sqrt(noise.coins) / 2 / 4)


def test_too_many_coins_is_refused_in_one_line_naming_the_limit_and_ways_out():
    with pytest.raises(InputError) as err:
        server_noise("central", servers=2, corrupt=1, eta=1.0, s=1, d=10, m=100,
                     epsilon=0.01, delta=1e-6, frac_bits=16, clients=1000, grid_bits=8)
    message = str(err.value)
    assert "\n" not in message and f"{MAX_COINS}" in message
    assert "--grid-bits" in message and "--epsilon" in message and "dng" in message


def test_coin_layout_covers_the_coins_with_little_to_spare():
    for coins, cells in ((16, 4), (100, 6), (2304, 5000), (57882, 1000), (4_000_000, 1000)):
        layout = CoinLayout.cover(coins, cells)
        assert coins <= layout.coins < coins + layout.rounds * layout.lanes * layout.edabits
        assert layout.coins <= 1.02 * coins or coins < 64
        assert layout.edabits * layout.bits <= 2048
