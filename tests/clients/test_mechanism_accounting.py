"""The servers' noise: its accountant against brute force, the grid's sensitivity, refusals."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from harness.clients import (
    MAX_COINS,
    CoinLayout,
    binomial_epsilon,
    grid_sensitivity,
    least_coins,
    server_noise,
)
from harness.clients.privacy import release_sensitivity
from harness.clients.skellam import skellam_pld_epsilon
from harness.errors import InputError


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
def test_grid_sensitivity_bounds_every_probabilistic_rounding(eta, frac_bits, grid_bits):
    """Every pair of lattice values within the lattice sensitivity, rounded down or up
    independently, lands within grid_sensitivity grid steps (exhaustively)."""
    entry = 2 * round(eta * 2**frac_bits)
    k = frac_bits - grid_bits
    worst = 0
    for v in range(-3 * 2**frac_bits, 3 * 2**frac_bits):
        for w in (v + entry, v - entry, v + entry // 2):
            for a, b in itertools.product((0, 1), repeat=2):
                # probabilistic truncation rounds down, or up when there is a fraction
                rv = (v >> k) + (a if v % (1 << k) else 0)
                rw = (w >> k) + (b if w % (1 << k) else 0)
                worst = max(worst, abs(rv - rw))
    assert worst <= grid_sensitivity(eta, frac_bits, grid_bits)
    assert grid_sensitivity(eta, frac_bits, grid_bits) <= worst + 1


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


def test_central_noise_is_certified_on_its_grid_and_reports_its_price():
    noise = server_noise("central", servers=3, corrupt=1, eta=1.0, s=1, d=10, m=100,
                         epsilon=1.0, delta=1e-6, frac_bits=16)
    assert noise is not None and noise.coins <= 1 << 16 and noise.grid_bits < 16
    assert noise.certified_epsilon <= 1.0
    assert noise.certified_epsilon == binomial_epsilon(noise.coins, noise.steps, 10, 1e-6)
    assert noise.std == pytest.approx(math.sqrt(noise.coins) / 2 / 2**noise.grid_bits)
    # the finest grid within the coin target: one step finer would need more
    finer = least_coins(grid_sensitivity(1.0, 16, noise.grid_bits + 1), 10, 1.0, 1e-6,
                        limit=MAX_COINS)
    assert finer is None or finer > 1 << 16
    assert 1.0 < noise.std_ratio < 1.5


def test_too_many_coins_is_refused_in_one_line_naming_the_limit_and_ways_out():
    with pytest.raises(InputError) as err:
        server_noise("central", servers=2, corrupt=1, eta=1.0, s=1, d=10, m=100,
                     epsilon=0.01, delta=1e-6, frac_bits=16, grid_bits=8)
    message = str(err.value)
    assert "\n" not in message and f"{MAX_COINS}" in message
    assert "--grid-bits" in message and "--epsilon" in message and "dng" in message


def test_coin_layout_covers_the_coins_with_little_to_spare():
    for coins, cells in ((16, 4), (100, 6), (2304, 5000), (57882, 1000), (4_000_000, 1000)):
        layout = CoinLayout.cover(coins, cells)
        assert coins <= layout.coins <= coins + layout.rounds * layout.lanes * 64
        assert layout.edabits * layout.bits <= 2048
