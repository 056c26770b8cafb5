"""dng's Skellam certificate against an exact hockey-stick sum of our own."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from _calibrate import server_noise
from scipy import stats

from harness.privacy.accounting import release_sensitivity, skellam_epsilon
from harness.privacy.skellam import PLD_MAX_MU, skellam_pld_epsilon, skellam_pld_mu


def _skellam_pmf(mu: float, width: int) -> np.ndarray:
    """P(Y = y) for y in [-width, width], as the convolution of the two Poissons'
    pmfs (no Bessel function: another road to the same law)."""
    k = np.arange(3 * width + 1)
    poisson = stats.poisson.pmf(k, mu / 2)
    full = np.convolve(poisson, poisson[::-1])  # index i is y = i - 3 width
    centre = 3 * width
    return full[centre - width:centre + width + 1]


def _hockey_stick(mu: float, shifts: tuple[int, ...], epsilon: float) -> float:
    """delta(epsilon) of Skellam(mu) on len(shifts) entries moved by ``shifts``, summed
    over the whole joint support (both neighbours' orders)."""
    width = int(30 * math.sqrt(mu)) + 40
    pmf = _skellam_pmf(mu, width)
    size = pmf.size + max(shifts)
    p = q = np.ones(())
    for shift in shifts:
        low = np.zeros(size)
        high = np.zeros(size)
        low[:pmf.size] = pmf
        high[shift:shift + pmf.size] = pmf
        p, q = np.multiply.outer(p, low), np.multiply.outer(q, high)
    return max(float(np.maximum(p - math.exp(epsilon) * q, 0).sum()),
               float(np.maximum(q - math.exp(epsilon) * p, 0).sum()))


def _exact_epsilon(mu: float, shifts: tuple[int, ...], delta: float) -> float:
    low, high = 0.0, 50.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if _hockey_stick(mu, shifts, mid) > delta else (low, mid)
    return high


@pytest.mark.parametrize("mu,steps,entries", [(30.0, 2, 2), (8.0, 1, 2), (120.0, 4, 1),
                                              (400.0, 6, 1)])
def test_skellam_certificate_is_sound_and_within_one_percent_of_exact(mu, steps, entries):
    delta = 1e-4
    certified = skellam_pld_epsilon(mu, steps, entries, delta)
    exact = _exact_epsilon(mu, (steps,) * entries, delta)
    assert _hockey_stick(mu, (steps,) * entries, certified) <= delta * (1 + 1e-9)
    assert exact <= certified <= 1.01 * exact
    # the Renyi bound it replaces is looser
    assert certified < skellam_epsilon(mu, release_sensitivity(steps / 2, entries, 1), delta)


def test_smaller_moves_are_dominated_by_the_largest():
    """A client may move an entry by less than its sensitivity, or not at all."""
    mu, steps, delta = 25.0, 3, 1e-4
    certified = skellam_pld_epsilon(mu, steps, 2, delta)
    for shifts in itertools.product(range(steps + 1), repeat=2):
        if any(shifts):
            assert _hockey_stick(mu, shifts, certified) <= delta * (1 + 1e-9), shifts
    # and the exact epsilon grows with the move, entry by entry
    exact = [_exact_epsilon(mu, (j,), delta) for j in range(1, steps + 1)]
    assert exact == sorted(exact)


def test_calibration_is_the_least_variance_it_certifies():
    steps, entries, epsilon, delta = 3, 4, 1.0, 1e-5
    mu = skellam_pld_mu(steps, entries, epsilon, delta)
    assert mu is not None
    assert skellam_pld_epsilon(mu, steps, entries, delta) <= epsilon
    assert skellam_pld_epsilon(mu * (1 - 2e-4), steps, entries, delta) > epsilon
    # beyond every variance dng draws there is no PLD calibration
    assert skellam_pld_mu(1 << 40, 10, epsilon, 1e-6) is None
    with pytest.raises(ValueError):
        skellam_pld_epsilon(2 * PLD_MAX_MU, 1, 1, delta)


@pytest.mark.parametrize("servers,corrupt,ratio", [(3, 1, 1.225), (3, 2, 1.732)])
def test_dng_is_certified_by_the_skellam_pld_at_its_least_variance(servers, corrupt, ratio):
    noise = server_noise("dng", servers=servers, corrupt=corrupt, eta=1.0, s=1, d=10, m=100,
                         epsilon=1.0, delta=1e-6, frac_bits=8)
    assert noise is not None
    record = noise.record()
    assert record["calibration"] == "skellam-pld" and "Skellam pmf" in record["accountant"]
    total = noise.server_mu * noise.honest
    assert 0.999 <= noise.certified_epsilon <= 1.0
    assert skellam_pld_epsilon(total, 512, 10, 1e-6) == noise.certified_epsilon
    assert skellam_pld_epsilon(total * (1 - 3e-4), 512, 10, 1e-6) > 1.0
    # sqrt(S / (S - t)) of the central Gaussian's, and almost nothing more
    assert noise.std_ratio == pytest.approx(ratio, abs=1e-3)
