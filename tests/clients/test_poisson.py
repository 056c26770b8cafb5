"""The Poisson and Skellam draws of the servers' and clients' noise: exact in law at
every mean a run can ask for, up to the largest (MAX_POISSON_MEAN), where numpy's
own sampler is off by up to three quarters of its variance."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from harness.clients import EXACT_BELOW, MAX_POISSON_MEAN, poisson, skellam
from harness.clients.poisson import _ptrs
from harness.errors import InputError
from harness.privacy import Dng, NoiseSpec, check_dng_draws, dng_noise, noise_rng

# 2^22 draws: variance / mu is read to sqrt(2 / 2^22) = 6.9e-4; 6 of those is 0.41 %,
# against numpy's 1.8 % at 3e13, 2.6 % at 8.8e13, 9.5 % at 3e14 and 40-75 % past 1e16.
DRAWS = 1 << 22
Z = 6.0


def _dng(server_mu: float) -> Dng:
    return Dng(1.0, 1e-6, 1.0, 1.0, 1.0, 16, servers=2, honest=1, server_mu=server_mu)


def _moments(draws: np.ndarray, mean: float, variance: float) -> tuple[float, float]:
    """z of the sample mean, and variance / expected as measured."""
    x = draws.astype(np.float64)
    return (x.mean() - mean) / math.sqrt(variance / x.size), x.var() / variance


@pytest.mark.parametrize("half", [3e13, 8.8e13, 3e14, 1e16, 1e17, MAX_POISSON_MEAN],
                         ids=["3e13", "8.8e13", "3e14", "1e16", "1e17", "largest"])
def test_each_servers_skellam_has_its_certified_variance_up_to_the_largest_mean(half):
    rng = np.random.default_rng(int(half) % 2**32)
    draws = _dng(2 * half).sample(rng, (DRAWS // 1024, 1024))
    assert draws.dtype == np.int64 and draws.shape == (DRAWS // 1024, 1024)
    mean_z, ratio = _moments(draws, 0.0, 2 * half)
    print(f"dng sampler at Poisson mean {half:.4g}: variance / mu = {ratio:.5f} "
          f"(+- {math.sqrt(2 / DRAWS):.1e}), mean z = {mean_z:+.2f}")
    assert abs(mean_z) < Z
    assert abs(ratio - 1) < Z * math.sqrt(2 / DRAWS)


def test_poisson_draws_have_their_mean_and_variance_at_the_largest_mean():
    draws = poisson(np.random.default_rng(7), MAX_POISSON_MEAN, DRAWS)
    # float64 would round the draws (2^62 + ~2^31) to multiples of 1024: centre in int64
    centred = draws - np.int64(MAX_POISSON_MEAN)
    mean_z, ratio = _moments(centred, 0.0, MAX_POISSON_MEAN)
    print(f"Poisson at mean 2^62: variance / lambda = {ratio:.5f}, mean z = {mean_z:+.2f}")
    assert abs(mean_z) < Z and abs(ratio - 1) < Z * math.sqrt(2 / DRAWS)


def _chi_square_p(draws: np.ndarray, lam: float) -> float:
    """Pearson's chi-square of the draws against Poisson(lam), cells of >= 50 expected."""
    low, high = (int(stats.poisson.ppf(q, lam)) for q in (1e-7, 1 - 1e-7))
    counts = np.bincount(np.clip(draws, low - 1, high + 1) - (low - 1), minlength=high - low + 3)
    expected = np.concatenate([[stats.poisson.cdf(low - 1, lam)],
                               stats.poisson.pmf(np.arange(low, high + 1), lam),
                               [stats.poisson.sf(high, lam)]]) * draws.size
    observed, wanted, o, e = [], [], 0, 0.0
    for count, mass in zip(counts, expected, strict=True):
        o, e = o + count, e + mass
        if e >= 50:
            observed.append(o)
            wanted.append(e)
            o, e = 0, 0.0
    observed[-1] += o
    wanted[-1] += e
    wanted_arr = np.array(wanted) * sum(observed) / sum(wanted)
    return float(stats.chisquare(observed, wanted_arr).pvalue)


@pytest.mark.parametrize("lam", [10.0, 10.5, 37.3, 1000.0, 65535.9, 123456.7, 2.5e7])
def test_the_rejection_sampler_draws_poisson_pmf_cell_by_cell(lam):
    # The same algorithm as at 2^62, run where the exact pmf can be tabulated: its
    # shape, tails included, and not only its moments.
    rng = np.random.default_rng(int(lam * 10))
    draws = np.int64(math.floor(lam)) + _ptrs(rng, lam, 1 << 21)
    assert _chi_square_p(draws, lam) > 1e-6


def test_per_draw_means_follow_each_their_own_law():
    # Polya draws pass one Gamma draw per Poisson: means on both sides of EXACT_BELOW
    rng = np.random.default_rng(11)
    means = np.repeat([0.0, 3.5, EXACT_BELOW / 2, 4e6, 3e14], 200_000)
    rng.shuffle(means)
    draws = poisson(rng, means, means.shape)
    assert np.all(draws[means == 0] == 0)
    for lam in (3.5, EXACT_BELOW / 2, 4e6, 3e14):
        picked = draws[means == lam] - np.int64(lam)
        mean_z, ratio = _moments(picked, lam - int(lam), lam)
        assert abs(mean_z) < Z and abs(ratio - 1) < Z * math.sqrt(2 / picked.size) + 1 / lam


def test_clients_skellam_and_polya_noise_keep_their_variance_at_large_means():
    # the LTM's clients draw Skellam and Polya (Poisson of a Gamma) on the lattice too
    skellam_spec = NoiseSpec("skellam", n=2000, m=10, d=20, s=1, epsilon=0.05, delta=1e-6,
                             frac_bits=20)
    assert skellam_spec.client_mu / 2 > 1e14  # where numpy's Poisson is off by percents
    draws = skellam_spec.sample_lattice(noise_rng(), (DRAWS,))
    mean_z, ratio = _moments(draws, 0.0, skellam_spec.client_mu)
    assert abs(mean_z) < Z and abs(ratio - 1) < Z * math.sqrt(2 / DRAWS)
    polya = NoiseSpec("laplace", n=100, m=10, d=3, s=10, epsilon=2.0, eta=0.5, frac_bits=30)
    q = math.exp(-1.0 / polya.laplace_lattice_scale)
    variance = 2 * polya.gamma_shape * q / (1 - q) ** 2  # of the Polya difference
    draws = polya.sample_lattice(noise_rng(), (DRAWS,))
    # a Gamma of shape 0.1 has kurtosis 60: the ratio is read to about 3e-3
    assert draws.astype(np.float64).var() / variance == pytest.approx(1, rel=0.02)


def test_skellam_refuses_a_mean_past_its_bound():
    with pytest.raises(ValueError, match="2\\^62"):
        skellam(np.random.default_rng(1), 4 * MAX_POISSON_MEAN, (3,))


def test_dng_noise_past_an_exact_draw_is_refused_in_one_line():
    # by its calibration already, before it is remembered
    with pytest.raises(InputError) as err:
        dng_noise(servers=2, honest=1, eta=1.0, s=1, d=10, epsilon=1e-4, delta=1e-6,
                  frac_bits=16)
    assert "2^62" in str(err.value) and "raise --epsilon" in str(err.value)
    assert "\n" not in str(err.value)
    check_dng_draws(_dng(2 * MAX_POISSON_MEAN))  # the largest is drawn
