"""The central mechanism's accountant: Binomial(N, 1/2) noise on a grid, certified by
dp-accounting's privacy loss distribution from the exact probability mass functions
of the binomial and its shift by the sensitivity in grid steps, composed over the
entries one client moves (:mod:`.mechanisms` draws it; the coupling argument that
the MPC's rounding adds no step is in docs/privacy.md)."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from harness.privacy.accounting import analytic_gaussian_sigma

__all__ = ["MAX_COINS", "binomial_epsilon", "grid_sensitivity", "least_coins"]

# The most coins per cell a central run draws: about two minutes of the MPC per
# thousand cells on the slowest protocol here (see benchmarks/mechanisms.py).
MAX_COINS = 1 << 22
# dp-accounting's discretisation of the privacy loss (pessimistic either way).
_DISCRETIZATION = 1e-4
_TAIL_SDS = 40.0  # binomial mass beyond 40 standard deviations is below 1e-300


def grid_sensitivity(eta: float, frac_bits: int, grid_bits: int, scale: int = 1) -> int:
    """How many grid steps one client moves an entry of T, rounding included, where
    the MPC scales the sketch by ``scale`` and truncates F - g bits: ceil(E scale /
    2^(F - g)). The probabilistic truncation's randomness is shared by both
    neighbours (it is independent of the data), and given it the rounding is
    monotone, so it adds no step of its own."""
    entry = 2 * round(eta * 2.0**frac_bits)  # lattice steps 2^-F
    shift = frac_bits - grid_bits
    return -(-entry * scale // (1 << shift))


def _binomial_pmfs(coins: int, steps: int) -> tuple[dict, dict]:
    from scipy import stats

    spread = _TAIL_SDS * math.sqrt(coins) / 2
    low = max(0, math.floor(coins / 2 - spread - steps))
    high = min(coins, math.ceil(coins / 2 + spread + steps))
    xs = np.arange(low, high + 1)
    logs = stats.binom.logpmf(xs, coins, 0.5).tolist()
    return (dict(zip(xs.tolist(), logs, strict=True)),
            dict(zip((xs + steps).tolist(), logs, strict=True)))


@lru_cache(maxsize=256)
def binomial_epsilon(coins: int, steps: int, entries: int, delta: float) -> float:
    """The epsilon dp-accounting's PLD certifies at ``delta`` for Binomial(coins, 1/2)
    noise on each of ``entries`` entries, each moved by ``steps`` grid steps."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    if coins <= 0:
        return math.inf
    lower, upper = _binomial_pmfs(coins, steps)
    loss = pld.from_two_probability_mass_functions(
        lower, upper, pessimistic_estimate=True,
        value_discretization_interval=_DISCRETIZATION, log_mass_truncation_bound=-50)
    if entries > 1:
        loss = loss.self_compose(entries)
    return float(loss.get_epsilon_for_delta(delta))


def least_coins(steps: int, entries: int, epsilon: float, delta: float,
                limit: int = MAX_COINS) -> int | None:
    """The least even N with :func:`binomial_epsilon` <= ``epsilon``; None above ``limit``."""
    sigma = analytic_gaussian_sigma(steps * math.sqrt(entries), epsilon, delta)
    if 4 * sigma**2 > 2 * limit:  # the Gaussian's variance alone would need twice the limit
        return None
    # The binomial's variance N/4 never needs to be much below the Gaussian's.
    low = max(0, 2 * math.floor(sigma**2))  # even, and certifies nothing above epsilon
    while low > 0 and binomial_epsilon(low, steps, entries, delta) <= epsilon:
        low //= 2
        low -= low % 2
    high = max(2, 2 * math.ceil(2 * sigma**2 * 1.05))
    while binomial_epsilon(high, steps, entries, delta) > epsilon:
        if high > limit:
            return None
        low, high = high, 2 * high
    while high - low > 2:
        mid = (low + high) // 4 * 2
        if binomial_epsilon(mid, steps, entries, delta) > epsilon:
            low = mid
        else:
            high = mid
    return high if high <= limit else None
