"""The Skellam privacy loss distribution at any variance, in closed form.

:mod:`harness.privacy.skellam` builds dng's certificate from the Skellam pmf at
every outcome of a window of about 28 standard deviations, at a cost that grows
as sqrt(mu), from scipy's Bessel function, which returns nan beyond a variance of
about 1e9 lattice steps^2 and loses digits well before (1e-11 in the log pmf at
1e8). dng's variance at the default ``--frac-bits 16`` is about 3e12, and each
server's Poissons may have means up to 2^62. This module gives the same privacy
loss distribution, rounded the same pessimistic way, at a cost that does not grow
with mu:

- **The pmf in closed form.** P(Y = y) = e^(-mu) I_|y|(mu), and Debye's uniform
  expansion of I_v(x) (DLMF 10.41.3) in R = sqrt(v^2 + x^2) and p = v / R:
  ln(e^(-x) I_v(x)) = (R - x) - v asinh(v / x) - ln(2 pi R) / 2
  + ln(1 + U_1(p) / v + U_2(p) / v^2 + U_3(p) / v^3 + ...), each U_k(p) / v^k a
  polynomial in p^2 over R^k, so the expansion is uniform in v down to v = 0
  (where it is Hankel's expansion of I_0) with an error of order R^-4 <= mu^-4
  (DLMF 10.41(iv) bounds it). R - x is evaluated as v^2 / (R + x): no
  cancellation, about 1e-13 absolute in the log pmf across the window.
- **Outcomes merged by their loss.** Skellam is log-concave, so the loss
  L(y) = ln P(y) - ln P(y + steps) is nondecreasing in y. For each bucket k of the
  loss grid a vectorised bisection (bracketed on a grid of sigma / 8) finds the
  last outcome whose rounded-up loss is at most k. Between consecutive such
  thresholds (and that grid's points, for the quadrature's sake) every outcome's
  loss is at most that of the panel's last outcome, where the panel's whole mass
  is put (pessimistic, as rounding each outcome up is, and equal to it when the
  thresholds are exact).
- **A panel's mass** sum_{y=a}^{b} P(y) by the Euler-Maclaurin formula: the
  integral of the pmf's closed form over [a, b] (8-point Gauss-Legendre on a
  panel of at most sigma / 8, where the log pmf is almost linear), the ends'
  half weights and the P'/12 term; what is left is of order mu^-2 relatively.

Pessimism: every loss is rounded up after adding :data:`_LOSS_SLACK`, far above
its float error; every mass is raised by a relative :data:`_MASS_SLACK`, far above
the sums' error, so that no bucket holds less than the outcomes rounded into it
(delta(epsilon), of one entry and of their composition, grows with every mass);
and the mass outside the window [-W, W - steps], W = 14 sigma + steps + 60 (as the
exact pmf's), is infinite loss, by Chernoff's bound on each tail,
P(Y >= t) <= exp(-(t asinh(t / mu) - sqrt(t^2 + mu^2) + mu)) (the Skellam's moment
generating function is exp(mu (cosh lambda - 1))): about e^-98. The buckets number about
28 steps / (sigma * discretization), as the exact pmf's, whatever mu
(:func:`loss_interval` keeps that about 28,000).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["MAX_MU", "MIN_MU", "loss_buckets", "loss_interval", "skellam_log_pmf_closed",
           "skellam_loss"]

# Below MIN_MU scipy's pmf is as accurate and cheap (the certificate uses it there);
# the expansion's error, of order mu^-4, is negligible from it on. Up to MAX_MU
# float64 still holds the window's outcomes exactly (W is about 1.4e13 at 1e24, beyond
# any honest servers' total of Poissons of mean 2^62).
MIN_MU = 1e6
MAX_MU = 1e24
_TAIL_SDS = 14.0
_TAIL_STEPS = 60
_LOSS_SLACK = 1e-11
_MASS_SLACK = 1e-12  # the masses' float error is about 1e-14
_PANEL_SDS = 1 / 8
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(8)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _check(mu: float) -> None:
    if not MIN_MU <= mu <= MAX_MU:
        raise ValueError(f"the closed-form Skellam PLD holds for {MIN_MU:g} <= mu <= "
                         f"{MAX_MU:g}, got {mu}")


def loss_interval(mu: float, steps: int) -> float:
    """The loss grid for a shift by ``steps``: 1e-4, or a thousandth of the loss's
    spread per entry (steps / sigma) where that is finer, so that the rounding's share
    of epsilon (at most this per entry) does not grow as epsilon shrinks; the buckets
    then number about 28,000 whatever epsilon."""
    return min(1e-4, 1e-3 * steps / math.sqrt(mu))


def skellam_log_pmf_closed(mu: float, ys: np.ndarray) -> np.ndarray:
    """ln P(Skellam(mu) = y) for real ``ys`` by Debye's expansion (``mu`` >= :data:`MIN_MU`)."""
    v = np.abs(np.asarray(ys, dtype=np.float64))
    x = float(mu)
    r = np.hypot(v, x)
    p2 = (v / r) ** 2
    series = ((3 - 5 * p2) / (24 * r)
              + (81 + p2 * (-462 + 385 * p2)) / (1152 * r**2)
              + (30375 + p2 * (-369603 + p2 * (765765 - 425425 * p2))) / (414720 * r**3))
    return (v * v / (r + x) - v * np.arcsinh(v / x) - _HALF_LOG_2PI - 0.5 * np.log(r)
            + np.log1p(series))


def skellam_loss(mu: float, steps: int, ys: np.ndarray) -> np.ndarray:
    """L(y) = ln P(y) - ln P(y + ``steps``): the privacy loss at outcome y of Y
    against Y + steps (nondecreasing in y)."""
    ys = np.asarray(ys, dtype=np.float64)
    return skellam_log_pmf_closed(mu, ys) - skellam_log_pmf_closed(mu, ys + steps)


def _log_pmf_slope(mu: float, ys: np.ndarray) -> np.ndarray:
    """d/dy of the log pmf's leading terms (the series' slope is of order mu^-2)."""
    return -np.arcsinh(ys / mu) - 0.5 * ys / (ys * ys + mu * mu)


def _panel_masses(mu: float, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """sum_{y=first}^{last} P(y) per panel (Euler-Maclaurin, Gauss-Legendre)."""
    a = first.astype(np.float64)
    b = last.astype(np.float64)
    half = (b - a) / 2
    nodes = (a + half)[:, None] + half[:, None] * _NODES[None, :]
    integral = half * (np.exp(skellam_log_pmf_closed(mu, nodes)) @ _WEIGHTS)
    ha = np.exp(skellam_log_pmf_closed(mu, a))
    hb = np.exp(skellam_log_pmf_closed(mu, b))
    slope = (hb * _log_pmf_slope(mu, b) - ha * _log_pmf_slope(mu, a)) / 12
    return np.where(first == last, ha, integral + (ha + hb) / 2 + slope)


def _bins(mu: float, steps: int, ys: np.ndarray, discretization: float,
          pessimistic: bool) -> np.ndarray:
    loss = skellam_loss(mu, steps, ys)
    if pessimistic:
        return np.ceil((loss + _LOSS_SLACK) / discretization).astype(np.int64)
    return np.floor((loss - _LOSS_SLACK) / discretization).astype(np.int64)


def loss_buckets(mu: float, steps: int, discretization: float,
                 pessimistic: bool = True) -> tuple[dict[int, float], float]:
    """The privacy loss distribution of (Y, Y + ``steps``), Y ~ Skellam(``mu``), on
    the grid ``discretization``: ({k: mass of losses in bucket k}, infinite mass),
    for dp-accounting's ``create_from_rounded_probability``.

    Pessimistic (the default): each loss rounded up, masses raised, the tails
    beyond the window infinite. ``pessimistic=False`` gives the optimistic
    counterpart (each panel at its first outcome's loss rounded down, nothing
    infinite), a lower bound on the exact distribution's epsilon, for the tests to
    bracket the exact value with.
    """
    _check(mu)
    if steps <= 0:
        raise ValueError(f"steps must be positive, got {steps}")
    sigma = math.sqrt(mu)
    window = math.ceil(_TAIL_SDS * sigma) + _TAIL_STEPS + steps
    lo, hi = -window, window - steps
    ends = np.array([lo, hi], dtype=np.float64)
    k_lo, k_hi = (int(k) for k in _bins(mu, steps, ends, discretization, True))
    grid = np.unique(np.linspace(lo, hi, math.ceil((hi - lo) / (_PANEL_SDS * sigma)) + 2)
                     .astype(np.int64))
    # The last outcome of each pessimistic bucket k: bracketed on the grid, then a
    # vectorised bisection keeping bin(low) <= k < bin(high) (lo - 1 and hi + 1 are
    # sentinels; the running maximum makes the grid's bins monotone for searchsorted
    # without breaking the invariant).
    points = np.concatenate([[lo - 1], grid, [hi + 1]])
    at_grid = np.maximum.accumulate(_bins(mu, steps, grid.astype(np.float64),
                                          discretization, True))
    bins_at = np.concatenate([[np.iinfo(np.int64).min], at_grid, [np.iinfo(np.int64).max]])
    ks = np.arange(k_lo, k_hi + 1, dtype=np.int64)
    above = np.searchsorted(bins_at, ks, side="right")
    low, high = points[above - 1], points[above]
    while np.any(high - low > 1):
        mid = (low + high) // 2
        ok = _bins(mu, steps, mid.astype(np.float64), discretization, True) <= ks
        low = np.where(ok, mid, low)
        high = np.where(ok, high, mid)
    cuts = np.unique(np.concatenate([low, grid, [lo - 1, hi]]))
    cuts = cuts[(cuts >= lo - 1) & (cuts <= hi)]
    first, last = cuts[:-1] + 1, cuts[1:]
    masses = _panel_masses(mu, first, last)
    if pessimistic:
        bins = _bins(mu, steps, last.astype(np.float64), discretization, True)
        masses = masses * (1 + _MASS_SLACK)
    else:
        bins = _bins(mu, steps, first.astype(np.float64), discretization, False)
    values, where = np.unique(bins, return_inverse=True)
    sums = np.bincount(where, weights=masses)
    rounded = {int(v): float(p) for v, p in zip(values, sums, strict=True) if p > 0}
    infinity = 2 * _tail_bound(mu, hi + 1) if pessimistic else 0.0
    return rounded, infinity


def _tail_bound(mu: float, t: int) -> float:
    """Chernoff's bound on P(Y >= t) = P(Y <= -t), t > 0: at lambda = asinh(t / mu)."""
    r = math.hypot(t, mu)
    return math.exp(-(t * math.asinh(t / mu) - t * t / (r + mu)))
