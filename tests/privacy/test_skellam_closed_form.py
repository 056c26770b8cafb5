"""dng's Skellam certificate at any variance (the pmf in closed form, outcomes merged
by loss) against exact computations of our own: the pmf from Bessel's integral in
mpmath, hockey-stick sums over the support, scipy's pmf bucketed outcome by outcome,
and the Gaussian limit."""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import mpmath
import numpy as np
import pytest
from _calibrate import server_noise
from dp_accounting.pld import privacy_loss_distribution as pld
from scipy.special import ive

from harness.privacy.accounting import gaussian_epsilon, release_sensitivity, skellam_epsilon
from harness.privacy.skellam_pld import loss_buckets, loss_interval, skellam_log_pmf_closed

# harness.clients exports a function named skellam, which shadows the module
skellam = importlib.import_module("harness.privacy.skellam")
ROOT = Path(__file__).resolve().parents[2]


def _mp_log_pmf(y: int, mu: float) -> float:
    """ln(e^(-mu) I_y(mu)) from I_y(x) = (1/pi) int_0^pi e^(x cos t) cos(y t) dt, at 80
    digits (no series, no asymptotics)."""
    with mpmath.workdps(80):
        x = mpmath.mpf(mu)
        width = 1 / mpmath.sqrt(x)
        points = [0] + [width * k for k in (1, 2, 4, 8, 16, 32, 64)] + [mpmath.pi]
        value = mpmath.quad(lambda t: mpmath.exp(x * (mpmath.cos(t) - 1)) * mpmath.cos(y * t),
                            points, maxdegree=12)
        return float(mpmath.log(value / mpmath.pi))


@pytest.mark.parametrize("mu", [1e6, 1e8, 1e12])
def test_closed_form_pmf_is_far_inside_the_loss_slack(mu):
    sigma = math.sqrt(mu)
    for y in (0, 3, round(sigma), round(5 * sigma), round(14 * sigma)):
        closed = float(skellam_log_pmf_closed(mu, np.array([y]))[0])
        assert abs(closed - _mp_log_pmf(y, mu)) < 1e-13, y


def _pmf(mu: float, width: int) -> np.ndarray:
    """scipy's pmf on [-width, width] (accurate to about 1e-12 relative up to 1e8)."""
    return ive(np.abs(np.arange(-width, width + 1)).astype(np.float64), mu)


def _exact_single_epsilon(mu: float, steps: int, delta: float) -> float:
    """The exact epsilon of Y against Y + steps: hockey-stick sums over the support
    (40 standard deviations each side), by bisection."""
    width = math.ceil(40 * math.sqrt(mu)) + steps
    p = _pmf(mu, width)
    shifted = np.zeros_like(p)
    shifted[steps:] = p[:-steps]

    def hockey(epsilon: float) -> float:
        return float(np.maximum(p - math.exp(epsilon) * shifted, 0).sum())

    low, high = 0.0, 20.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if hockey(mid) > delta else (low, mid)
    return high


@pytest.mark.parametrize("mu,steps", [(4e6, 200), (1e8, 2000), (1e8, 9000)])
def test_one_entry_is_within_one_percent_above_the_exact_hockey_stick(mu, steps):
    delta = 1e-6
    certified = skellam.skellam_pld_epsilon(mu, steps, 1, delta)
    exact = _exact_single_epsilon(mu, steps, delta)
    assert exact <= certified <= 1.01 * exact


def _pld_from_outcomes(mu: float, steps: int, entries: int) -> pld.PrivacyLossDistribution:
    """Our own pessimistic PLD: scipy's pmf at every outcome of the window, each loss
    rounded up to the certificate's grid, the rest infinite (no merging, no expansion)."""
    width = math.ceil(14 * math.sqrt(mu)) + 60 + steps
    interval = loss_interval(mu, steps)
    p = _pmf(mu, width)
    losses = np.log(p[:-steps]) - np.log(p[steps:])
    bins = np.ceil((losses + 1e-11) / interval).astype(np.int64)
    values, where = np.unique(bins, return_inverse=True)
    sums = np.bincount(where, weights=p[:-steps])
    loss = pld.PrivacyLossDistribution.create_from_rounded_probability(
        dict(zip(values.tolist(), sums.tolist(), strict=True)),
        max(0.0, 1 - float(p[:-steps].sum())), interval)
    return loss.self_compose(entries)


@pytest.mark.parametrize("mu,steps", [(4.7e7, 512), (1e8, 850), (1e7, 80)])
def test_merged_buckets_agree_with_every_outcome_bucketed(mu, steps):
    """Where scipy's pmf runs, merging the outcomes by loss changes the composed
    epsilon by under 1e-6 relatively (upwards, by the masses' slack)."""
    delta = 1e-6
    certified = skellam.skellam_pld_epsilon(mu, steps, 10, delta)
    outcomes = _pld_from_outcomes(mu, steps, 10).get_epsilon_for_delta(delta)
    assert abs(certified - outcomes) <= 1e-6 * outcomes


def _optimistic_epsilon(mu: float, steps: int, entries: int, delta: float) -> float:
    """A lower bound on the exact epsilon: each loss rounded down, nothing infinite."""
    interval = loss_interval(mu, steps)
    rounded, infinity = loss_buckets(mu, steps, interval, pessimistic=False)
    loss = pld.PrivacyLossDistribution.create_from_rounded_probability(
        rounded, infinity, interval, pessimistic_estimate=False)
    return loss.self_compose(entries).get_epsilon_for_delta(delta)


@pytest.mark.parametrize("mu", [1e12, 3e12, 1e16, 1e20, 1e24])
def test_large_variances_meet_the_gaussian_limit_below_the_renyi_bound(mu):
    """Beyond any brute force: bracketed by its optimistic counterpart within 1 %, within
    0.2 % of the Gaussian of the same variance, and below the Renyi-DP bound."""
    delta, entries = 1e-6, 10
    steps = round(0.085 * math.sqrt(mu))  # dng's calibrated ratio at epsilon 1, d = 10
    certified = skellam.skellam_pld_epsilon(mu, steps, entries, delta)
    lower = _optimistic_epsilon(mu, steps, entries, delta)
    assert lower <= certified <= 1.01 * lower
    gaussian = gaussian_epsilon(math.sqrt(mu), steps * math.sqrt(entries), delta)
    assert certified == pytest.approx(gaussian, rel=2e-3)
    assert certified < skellam_epsilon(mu, release_sensitivity(steps / 2, 1, entries), delta)


def test_buckets_keep_the_whole_mass_and_no_floor_under_delta():
    rounded, infinity = loss_buckets(3e12, 131072, 1e-4)
    # beyond 14 standard deviations lies about e^-98 (Chernoff's bound, 2.8e-43 here);
    # the masses are raised by 1e-12, no more
    assert 1e-44 < infinity < 1e-42
    assert 0 < sum(rounded.values()) - 1 < 1.01e-12
    # so a single entry certifies even a delta far below 1e-12
    mu, steps = 1e12, 85000
    assert skellam.skellam_pld_epsilon(mu, steps, 1, 1e-25) < \
        gaussian_epsilon(math.sqrt(mu), steps, 1e-25) * 1.01


@pytest.mark.parametrize("mu,steps", [(1e7, 300), (1e7, 7)])
def test_merged_buckets_dominate_every_outcome_rounded_up(mu, steps):
    """For every loss level, at least as much mass lies at or above it in the merged
    buckets (infinity included) as in scipy's pmf, outcome by outcome, rounded up:
    nothing is moved down, which the certificate's soundness needs."""
    rounded, infinity = loss_buckets(mu, steps, 1e-4)
    width = math.ceil(14 * math.sqrt(mu)) + 60 + steps  # beyond it, e^-98: in infinity
    p = _pmf(mu, width)
    losses = np.log(p[:-steps]) - np.log(p[steps:])
    exact = np.ceil(losses / 1e-4).astype(np.int64)
    levels = np.arange(exact.min(), exact.max() + 2)
    order = np.argsort(exact)
    true_tail = np.cumsum(p[:-steps][order][::-1])[::-1]  # mass at or above each outcome
    first = np.searchsorted(exact[order], levels)
    true_at = np.append(true_tail, 0.0)[first]
    keys = np.array(sorted(rounded))
    merged = np.append(np.cumsum(np.array([rounded[k] for k in keys])[::-1])[::-1], 0.0)
    merged_at = merged[np.searchsorted(keys, levels)] + infinity
    assert (merged_at >= true_at * (1 - 1e-10)).all()
    # and tightly so: nothing is moved up by more than one bucket
    assert (merged_at[1:] <= true_at[:-1] * (1 + 1e-10) + infinity).all()


@pytest.mark.parametrize("servers,corrupt,epsilon", [(3, 1, 1.0), (3, 2, 1.0), (3, 1, 0.1)])
def test_dng_at_the_default_lattice_is_certified_tight(servers, corrupt, epsilon):
    noise = server_noise("dng", servers=servers, corrupt=corrupt, eta=1.0, s=1, d=10, m=100,
                         epsilon=epsilon, delta=1e-6, frac_bits=16)
    assert noise is not None and noise.server_mu * noise.honest > 1e12
    record = noise.record()
    assert record["calibration"] == "skellam-pld" and "closed form" in record["accountant"]
    assert 0.999 * epsilon <= noise.certified_epsilon <= epsilon
    exact = math.sqrt(servers / (servers - corrupt))
    assert exact <= noise.std_ratio <= 1.01 * exact


_DNG_PROBE = """
import importlib, json
from harness.privacy import Request, mechanism_class
noise = mechanism_class("dng").calibrate(Request(
    servers=3, corrupt=1, n=1000, d=10, s=1, m=100, eta=1.0, frac_bits=16, epsilon=1.0,
    delta=1e-6, grid_bits=None, coins={"technique": "edabits", "summands": 0}))
built = importlib.import_module("harness.privacy.skellam")._single_pld.cache_info().misses
print(json.dumps({"mu": noise.server_mu, "epsilon": noise.certified_epsilon,
                  "built": built}))
"""


def test_a_second_run_reads_dngs_calibration_without_building_the_pld(tmp_path):
    def probe() -> dict:
        done = subprocess.run([sys.executable, "-c", _DNG_PROBE], cwd=ROOT,
                              env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)},
                              capture_output=True, text=True, timeout=600, check=True)
        return json.loads(done.stdout)

    first = probe()
    assert first["built"] > 1  # the calibration's bisection
    again = probe()
    assert again["built"] == 0
    assert (again["mu"], again["epsilon"]) == (first["mu"], first["epsilon"])
