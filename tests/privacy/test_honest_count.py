"""The LTM's honest draws per entry of T: the exact binomial tail against our own sums."""

from __future__ import annotations

import math
from functools import cache

import mpmath
import numpy as np
import pytest

from harness.clients import Sketch
from harness.privacy import NoiseSpec
from harness.privacy import accounting as privacy
from harness.privacy.certificates import central_sigma


def _exact_tail(n: int, p: mpmath.mpf, below: int) -> mpmath.mpf:
    """P[Binomial(n, p) < below], summed term by term at 50 digits."""
    mpmath.mp.dps = 50
    return mpmath.fsum(mpmath.binomial(n, k) * p**k * (1 - p) ** (n - k) for k in range(below))


@pytest.mark.parametrize("n,m,s,t_prime,failure", [(2_000, 10, 1, 0, 1e-6),
                                                    (5_000, 20, 3, 250, 1e-9),
                                                    (800, 8, 2, 10, 1e-3)])
def test_honest_count_is_the_largest_the_exact_tail_allows(n, m, s, t_prime, failure):
    honest = privacy.binomial_honest(n, m, s, t_prime, failure)
    p = mpmath.mpf(s) / m
    below = m * _exact_tail(n - t_prime, p, honest)
    above = m * _exact_tail(n - t_prime, p, honest + 1)
    assert below <= failure < above
    assert privacy.binomial_failure(n, m, s, t_prime, honest) == pytest.approx(float(below),
                                                                               rel=1e-9)


def test_the_issue_figure_and_the_chernoff_bound_it_replaces():
    honest = privacy.binomial_honest(1_000_000, 100, 1, 0, 1e-7)
    assert honest == 9_409
    assert privacy.honest_contributors(1_000_000, 100, 1, 0) == 5_000


def _least_row(clients: int, m: int, below: int) -> float:
    """P[some row of a uniform s = 1 sketch holds fewer than ``below`` clients], exactly
    (a sum over the multinomial's count vectors, row by row)."""
    @cache
    def all_at_least(rows: int, left: int) -> float:
        # P[each of ``rows`` rows gets >= below of ``left`` clients spread over them]
        if rows == 1:
            return 1.0 if left >= below else 0.0
        p = 1 / rows
        return sum(math.comb(left, k) * p**k * (1 - p) ** (left - k)
                   * all_at_least(rows - 1, left - k) for k in range(below, left + 1))
    return 1 - all_at_least(m, clients)


@pytest.mark.parametrize("n,m,below", [(40, 4, 6), (60, 5, 8), (30, 3, 5)])
def test_union_bound_covers_the_exact_chance_that_a_row_runs_short(n, m, below):
    exact = _least_row(n, m, below)
    bound = privacy.binomial_failure(n, m, 1, 0, below)
    assert exact <= bound <= 1.5 * exact + 1e-12


def test_each_client_lands_in_a_row_with_probability_s_over_m():
    """The model's assumption, on the harness's own sketch: a column's s rows are a
    uniform s-subset, so a row's count over many clients is Binomial(n, s/m)."""
    n, m, s = 200_000, 8, 3
    sketch = Sketch(m=m, count=n, sparsity=s, seed=7)
    counts = np.bincount(sketch.rows.ravel(), minlength=m)
    assert all(len(set(col)) == s for col in sketch.rows.T[:1000])
    sd = math.sqrt(n * s / m * (1 - s / m))
    assert np.all(np.abs(counts - n * s / m) < 5 * sd)


@pytest.mark.parametrize("n", [100_000, 1_000_000])
def test_analytic_split_minimises_each_clients_variance(n):
    m, s, epsilon, delta = 100, 1, 1.0, 1e-6
    honest, failure = privacy.analytic_split(n, m, s, 0, epsilon, delta)
    assert failure == privacy.binomial_failure(n, m, s, 0, honest) < delta

    def variance(h: int) -> float:
        rest = delta - privacy.binomial_failure(n, m, s, 0, h)
        return privacy.analytic_gaussian_sigma(1.0, epsilon, rest) ** 2 / h

    best = variance(honest)
    assert best <= variance(honest - 1) and best <= variance(honest + 1)
    for share in (0.001, 0.01, 0.1, 0.5, 0.9):
        assert best <= variance(privacy.binomial_honest(n, m, s, 0, delta * share))


@pytest.mark.parametrize("n,ratio", [(100_000, 1.111), (1_000_000, 1.033)])
def test_analytic_calibration_certifies_epsilon_at_about_half_the_chernoff_variance(n, ratio):
    spec = NoiseSpec("gaussian", n=n, m=100, d=10, s=1, epsilon=1.0, delta=1e-6,
                     calibration="analytic")
    certified, _ = privacy.certify(spec)
    assert 0.999 <= certified <= 1.0
    # the std of an entry of T (n s / m clients' draws) against the central Gaussian's
    std = math.sqrt(spec.sigma2 * n / 100) / central_sigma(2 * math.sqrt(10), 1.0, 1e-6)
    assert std == pytest.approx(ratio, abs=2e-3)
    chernoff = privacy.analytic_gaussian_sigma(
        2 * math.sqrt(10), 1.0, 1e-6 - privacy.concentration_failure(n, 100, 1, 0)) ** 2 \
        / privacy.honest_contributors(n, 100, 1, 0)
    assert spec.sigma2 < 0.65 * chernoff
    assert "exact binomial tail" in privacy.accountant(spec)
