"""The Skellam noise's privacy loss distribution, from its exact pmf.

Skellam(mu) is Poisson(mu/2) - Poisson(mu/2): P(Y = y) = e^(-mu) I_|y|(mu), with I
the modified Bessel function of the first kind (scipy's ``ive`` is e^(-mu) I, so
the pmf needs no overflowing intermediate). A release adds independent Skellam(mu)
noise to each entry; a neighbour moves ``entries`` entries by at most ``steps``
lattice steps each. The certificate is dp-accounting's privacy loss distribution of
(Y + steps, Y), its losses rounded up to a grid of 1e-4 (finer at large variance,
:func:`harness.privacy.skellam_pld.loss_interval`; pessimistic), composed over
the entries, and read at delta.

Why the largest shift on every entry covers every neighbour: Skellam is log-concave
(a convolution of log-concave Poissons), so its shifts form a family with monotone
likelihood ratio. The most powerful test of Y against Y + j is a threshold test on
the output for every j > 0, the same test for every j, and its power grows with j
(the shifts are stochastically ordered); so the trade-off function of a shift by j
lies above that of a shift by ``steps`` >= j, every hockey-stick divergence of the
smaller shift is at most the larger's, and domination survives composition over
independent entries. A shift by -j is the mirror image of one by j (Y is symmetric).

The pmf is evaluated on [-T, T] with T about 14 standard deviations (and 60 steps)
past the shift; every bit of mass it leaves out, and the mass whose loss would need
the pmf beyond T, counts as infinite privacy loss (pessimistic). scipy's ``ive``
loses digits as mu grows (1e-11 in the log pmf at 1e8, 1e-10 at 1e9, nan beyond),
and the window grows as sqrt(mu): above :data:`EXACT_PMF_MAX_MU` the same
distribution comes from the pmf's closed form, its outcomes merged by their loss
(:mod:`harness.privacy.skellam_pld`, accurate to about 1e-14 and at a cost that
does not grow with mu), up to :data:`PLD_MAX_MU`, beyond every variance dng draws;
above it the Renyi bound of :func:`harness.privacy.accounting.skellam_epsilon` would be
used instead (:func:`skellam_route` says which).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from harness.optional import lazy_import
from harness.privacy import skellam_pld

dp_accounting = lazy_import("dp_accounting")

__all__ = ["EXACT_PMF_MAX_MU", "PLD_MAX_MU", "skellam_log_pmf", "skellam_pld_epsilon",
           "skellam_pld_mu", "skellam_route"]

# The largest variance certified from scipy's pmf (its log is within 1e-12 there, far
# inside the loss slack), and from the closed form (every Poisson mean dng draws).
EXACT_PMF_MAX_MU = skellam_pld.MIN_MU
PLD_MAX_MU = skellam_pld.MAX_MU
_DISCRETIZATION = 1e-4
_TAIL_SDS = 14.0
_TAIL_STEPS = 60
# Losses are computed in float64 to about 1e-13; rounding them up after adding this
# keeps the rounding pessimistic.
_LOSS_SLACK = 1e-11
# A calibrated mu stays this far inside the range, so that mu / S * S does too.
_CALIBRATE_MAX = PLD_MAX_MU * (1 - 1e-9)


def skellam_route(mu: float) -> str:
    """``pld`` where :func:`skellam_pld_epsilon` certifies ``mu``, else ``rdp``."""
    return "pld" if 0 < mu <= PLD_MAX_MU else "rdp"


def skellam_log_pmf(mu: float, ys: np.ndarray) -> np.ndarray:
    """ln P(Skellam(mu) = y) for integer ``ys`` (-inf where the pmf underflows)."""
    from scipy.special import ive

    with np.errstate(divide="ignore"):
        return np.log(ive(np.abs(ys).astype(np.float64), mu))


@lru_cache(maxsize=256)
def _single_pld(mu: float, steps: int):
    from dp_accounting.pld import privacy_loss_distribution as pld

    if mu > EXACT_PMF_MAX_MU:
        interval = skellam_pld.loss_interval(mu, steps)
        rounded, infinity = skellam_pld.loss_buckets(mu, steps, interval)
        return pld.PrivacyLossDistribution.create_from_rounded_probability(
            rounded, infinity, interval, pessimistic_estimate=True)
    window = math.ceil(_TAIL_SDS * math.sqrt(mu)) + _TAIL_STEPS + steps
    ys = np.arange(-window, window + 1)
    log_pmf = skellam_log_pmf(mu, ys)
    if not np.all(np.isfinite(log_pmf[window - 10:window + 11])):
        raise ValueError(f"the Skellam pmf at mu={mu} is out of scipy's range")
    # The loss of output x = y + steps, drawn under the shifted noise: ln P(y) - ln P(y + steps).
    upper = log_pmf[:-steps] if steps else log_pmf
    lower = log_pmf[steps:]
    mass = np.exp(upper)
    finite = np.isfinite(lower) & (mass > 0)
    losses = upper[finite] - lower[finite]
    bins = np.ceil((losses + _LOSS_SLACK) / _DISCRETIZATION).astype(np.int64)
    kept = mass[finite]
    values, where = np.unique(bins, return_inverse=True)
    sums = np.bincount(where, weights=kept)
    # Whatever is not in the window, or has no partner in it, is infinite loss.
    infinity = max(0.0, 1.0 - float(np.sum(kept, dtype=np.float64)))
    rounded = {int(v): float(p) for v, p in zip(values, sums, strict=True) if p > 0}
    return pld.PrivacyLossDistribution.create_from_rounded_probability(
        rounded, infinity, _DISCRETIZATION, pessimistic_estimate=True)


@lru_cache(maxsize=256)
def skellam_pld_epsilon(mu: float, steps: int, entries: int, delta: float) -> float:
    """The epsilon at ``delta`` of Skellam(``mu``) noise on ``entries`` entries, each
    moved by at most ``steps`` lattice steps (dp-accounting's PLD, pessimistic)."""
    if not 0 < mu <= PLD_MAX_MU:
        raise ValueError(f"the Skellam PLD certifies 0 < mu <= {PLD_MAX_MU:g}, got {mu}")
    if steps <= 0:
        return 0.0
    loss = _single_pld(mu, int(steps))
    if entries > 1:
        loss = loss.self_compose(entries)
    return float(loss.get_epsilon_for_delta(delta))


def skellam_pld_mu(steps: int, entries: int, epsilon: float, delta: float,
                   rtol: float = 1e-4) -> float | None:
    """The least mu (to ``rtol``) whose :func:`skellam_pld_epsilon` is <= ``epsilon``;
    None when it lies above :data:`PLD_MAX_MU`, or when twice the Gaussian's variance
    above :data:`EXACT_PMF_MAX_MU` does not certify (the Renyi bound's calibration then)."""
    from harness.privacy.accounting import analytic_gaussian_sigma

    def certifies(mu: float) -> bool:
        return mu <= _CALIBRATE_MAX and skellam_pld_epsilon(mu, steps, entries, delta) <= epsilon

    # The Gaussian of the same variance is the large-mu limit: start just around it.
    guess = analytic_gaussian_sigma(steps * math.sqrt(entries), epsilon, delta) ** 2
    low, high = 0.99 * guess, 1.03 * guess
    while not certifies(high):
        # Above 1e6 Skellam's loss is the Gaussian's to about 1e-6: failing at twice its
        # variance, delta lies below what the composed PLD resolves (its truncation).
        if high > _CALIBRATE_MAX or (high > EXACT_PMF_MAX_MU and high > 2 * guess):
            return None
        low, high = high, 1.5 * high
    while certifies(low):
        high, low = low, low / 1.5
    while high - low > rtol * high:
        mid = (low + high) / 2
        low, high = (low, mid) if certifies(mid) else (mid, high)
    return high
