"""The bound a client's row is checked against (--validate), against scipy's exact tails."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from harness.clients import FAILURE_BITS, input_bound, noise_tail, precheck_bits
from harness.errors import InputError
from harness.privacy import NoiseSpec

ALLOWED = 2.0**-FAILURE_BITS


def _gaussian(n=20_000, m=10, d=3, s=1, epsilon=1.0) -> NoiseSpec:
    return NoiseSpec("gaussian", n=n, m=m, d=d, s=s, epsilon=epsilon)


# ------------------------------------------------------------------- the bound (no MP-SPDZ)


def test_plain_rows_are_bounded_by_eta_on_the_lattice_exactly():
    for noise in (None, NoiseSpec("none", n=100, m=10, d=3, s=1)):
        linf = input_bound("linf", noise, 0.75, 16, 100, 3)
        assert (linf.bound, linf.noise_bound, linf.z) == (round(0.75 * 2**16), 0, None)
        l2 = input_bound("l2", noise, 0.75, 16, 100, 3)
        assert l2.bound == math.ceil(math.sqrt(3) * round(0.75 * 2**16))


def test_the_gaussian_bound_is_the_least_that_keeps_every_honest_entry_in():
    noise, rows, d = _gaussian(), 20_000, 3
    b = input_bound("linf", noise, 1.0, 16, rows, d)
    sigma = noise.lattice_sigma
    # scipy's exact law of the rounded Gaussian, summed, where a sum still resolves it
    for t in (int(sigma), int(2 * sigma), int(4 * sigma)):
        k = np.arange(-t, t + 1)
        inside = stats.norm.cdf((k + 0.5) / sigma) - stats.norm.cdf((k - 0.5) / sigma)
        assert noise_tail(noise, t) == pytest.approx(1 - float(inside.sum()), rel=1e-6)
    t = b.noise_bound
    assert rows * d * noise_tail(noise, t) <= ALLOWED < rows * d * noise_tail(noise, t - 1)
    assert b.bound == 2**16 + t and b.z == pytest.approx(t / sigma)
    assert 7 < b.z < 10  # 2^-40 / 60,000 entries lies about eight sigma out


def test_the_l2_bound_covers_the_chi_tail_of_the_noise_norm():
    noise, rows, d = _gaussian(d=5), 20_000, 5
    b = input_bound("l2", noise, 1.0, 16, rows, d)
    norm = (b.noise_bound - math.sqrt(d) / 2) / noise.lattice_sigma
    assert rows * stats.chi.sf(norm, d) <= ALLOWED * (1 + 1e-6)
    assert b.data_bound == math.ceil(math.sqrt(d) * 2**16)


def test_laplace_and_skellam_tails_bound_scipys_exact_distributions():
    laplace = NoiseSpec("laplace", n=4000, m=4, d=2, s=4, epsilon=1.0)
    p = -math.expm1(-1.0 / laplace.laplace_lattice_scale)
    k = laplace.gamma_shape
    b = input_bound("linf", laplace, 1.0, 16, 4000 * 4, 2)
    # The exact tail of X - Y, X and Y negative binomial: the bound holds and is within
    # a factor 2 of it (a single binomial's tail dominates at the 2^-40 scale).
    t = b.noise_bound
    y = np.arange(0, 200)
    exact = 2 * float(np.sum(stats.nbinom.pmf(y, k, p) * stats.nbinom.sf(t + y, k, p)))
    assert exact <= noise_tail(laplace, t) <= 2.01 * exact
    assert 4000 * 4 * 2 * noise_tail(laplace, t) <= ALLOWED
    skellam = NoiseSpec("skellam", n=20_000, m=10, d=3, s=1, epsilon=1.0)
    half = skellam.client_mu / 2
    t = input_bound("linf", skellam, 1.0, 16, 20_000, 3).noise_bound
    assert noise_tail(skellam, t) == pytest.approx(2 * stats.skellam.sf(t, half, half))
    assert 20_000 * 3 * noise_tail(skellam, t) <= ALLOWED < 20_000 * 3 * noise_tail(skellam, t - 1)


def test_a_bound_the_ring_cannot_check_is_refused():
    with pytest.raises(InputError, match="does not fit the 64-bit ring"):
        input_bound("l2", _gaussian(), 1.0, 30, 20_000, 3)


def test_l2_refuses_a_bound_its_entry_pre_check_could_reject():
    # Plain rows of d = 3: B = ceil(sqrt(3) eta 2^F), checked only below 2^(PRE-1), where
    # every honest entry passes the pre-check; the largest eta that fits is accepted.
    top = 2 ** (precheck_bits(3) - 1)
    eta = (top - 2) / math.sqrt(3) / 2**16
    assert input_bound("l2", None, eta, 16, 100, 3).bound < top
    with pytest.raises(InputError, match="does not fit the 64-bit ring"):
        input_bound("l2", None, (top + 2) / math.sqrt(3) / 2**16, 16, 100, 3)
    # the pre-check's m: d squares of 1.5 2^m below 2^63, and not of 1.5 2^(m+1)
    for d in (1, 3, 10, 1000):
        m = precheck_bits(d)
        assert d * (3 * 2 ** (m - 1)) ** 2 < 2**63 <= d * (3 * 2**m) ** 2
