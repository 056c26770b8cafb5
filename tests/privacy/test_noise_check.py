"""A mechanism's check of a noisy release against its certified noise (numpy stand-ins
for the MPC)."""

from __future__ import annotations

import numpy as np
import pytest

from harness.privacy import central_noise, dng_noise

SHAPE = (40, 50)


def _central(grid_bits: int | None = 2, frac_bits: int = 8, eta: float = 1.0):
    return central_noise(eta=eta, s=1, d=4, epsilon=2.0, delta=1e-5, frac_bits=frac_bits,
                         cells=5 * 4, clients=2**20, grid_bits=grid_bits)


def check_noise_release(noise, expected, released, *revealed):
    """(mismatches, statistics) of P0's views: the release, and what the test aid
    reveals beside it."""
    check = noise.verify(expected, {0: np.stack([released, *revealed])})
    return check.mismatches, check.statistics


def _ring(values: np.ndarray) -> np.ndarray:
    return values.astype(np.int64).view(np.uint64)


def _central_release(noise, rng, scale: float = 1.0, bias: int = 0):
    """What the MPC reveals, in grid steps: the sketch times the public scale,
    truncated as MP-SPDZ's TruncPr does (floor((v + r) / 2^k), r uniform), plus noise."""
    k = noise.shift
    plain = rng.integers(-2**20, 2**20, size=SHAPE)
    rounded = (plain * noise.scale + rng.integers(0, 1 << k, size=SHAPE)) >> k
    drawn = rng.binomial(noise.coins, 0.5, size=SHAPE) - noise.coins // 2
    drawn = np.round(drawn * scale).astype(np.int64) + bias
    return _ring(plain), _ring(rounded + drawn), _ring(drawn), _ring(rounded)


@pytest.mark.parametrize("grid_bits,eta", [(2, 1.0), (None, 1.0), (None, 0.37)])
def test_true_binomial_noise_passes_and_is_bit_exact_with_the_noise_revealed(grid_bits, eta):
    rng = np.random.default_rng(1)
    noise = _central(grid_bits, eta=eta)
    plain, released, drawn, rounded = _central_release(noise, rng)
    mismatches, stats = check_noise_release(noise, plain, released, drawn, rounded)
    assert mismatches == 0 and stats["ok"] and stats["exact"]
    assert stats["gof_p_value"] > 1e-4 and abs(stats["mean_z"]) < 5


@pytest.mark.parametrize("scale,bias", [(1.5, 0), (0.5, 0), (1.0, 0.5)])
def test_noise_unlike_the_certified_one_fails(scale, bias):
    rng = np.random.default_rng(2)
    noise = _central()
    # a bias of half a standard deviation: 2000 cells see it
    plain, released, _, _ = _central_release(noise, rng, scale,
                                             round(bias * noise.coins**0.5 / 2))
    _, stats = check_noise_release(noise, plain, released)
    assert not stats["ok"]


def test_a_changed_entry_or_a_wrong_rounding_are_mismatches():
    rng = np.random.default_rng(3)
    noise = _central(None, eta=0.37)
    assert noise.scale > 1
    plain, released, drawn, rounded = _central_release(noise, rng)
    wrong = released.copy()
    wrong[0, 0] += np.uint64(1)
    assert check_noise_release(noise, plain, wrong, drawn, rounded)[0] == 1
    # an entry on the grid exactly, rounded up all the same
    plain[1, 1] = np.uint64(0)
    rounded[1, 1] = np.uint64(1)
    released[1, 1] = rounded[1, 1] + drawn[1, 1]
    assert check_noise_release(noise, plain, released, drawn, rounded)[0] == 1


def test_dng_skellam_noise_passes_and_other_noise_fails():
    rng = np.random.default_rng(4)
    noise = dng_noise(servers=2, honest=1, eta=1.0, s=1, d=4, epsilon=8.0, delta=1e-3,
                      frac_bits=2)
    plain = rng.integers(-2**40, 2**40, size=SHAPE)
    drawn = sum(noise.sample(rng, SHAPE) for _ in range(noise.servers))
    mismatches, stats = check_noise_release(noise, _ring(plain), _ring(plain + drawn),
                                            _ring(drawn))
    assert mismatches == 0 and stats["ok"]
    _, bad = check_noise_release(noise, _ring(plain), _ring(plain + 2 * drawn))
    assert not bad["ok"]
