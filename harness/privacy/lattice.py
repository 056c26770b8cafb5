"""The accountant for Gaussian noise as released: rounded to the 2^-F lattice per client.

Each honest client adds R = round(sc Z) lattice steps (Z standard normal, sc the
client's standard deviation in steps) to its encoded value; an entry of T carries
S = R_1 + ... + R_H, and a neighbour shifts it by an integer of at most
``shift`` steps in each of ``entries`` entries. Two routes, both upper bounds
(docs/privacy.md proves them):

- ``sc >= GAUSSIAN_ROUTE``: S's pmf equals, to within a total variation eta of
  order (H sc)^2 e^(-pi^2 sc^2 / 2) (below 1e-20 here), the law of round(G + U),
  G ~ N(0, H sc^2) and U a sum of H - 1 independent uniforms on [-1/2, 1/2]
  (Poisson summation). That is a
  post-processing of the Gaussian mechanism, so the analytic Gaussian's epsilon at
  l2 sensitivity shift sqrt(entries) and delta - (1 + e^eps) entries eta bounds it.
- below: S's pmf is computed (its characteristic function to the H-th power,
  inverted by an FFT on a window whose outside mass is bounded by a sub-Gaussian
  tail), the privacy loss distribution of (S + shift, S) is built from it, rounded
  up (pessimistic), composed ``entries`` times by dp-accounting, and read at delta
  minus the same (1 + e^eps) entries eta for the window's and the FFT's error.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from harness.optional import lazy_import

dp_accounting = lazy_import("dp_accounting")


def _ndtr(x: Any) -> Any:
    """The standard normal CDF; scipy loads on first use (the CLI's start-up never needs it)."""
    from scipy.special import ndtr

    return ndtr(x)

__all__ = ["GAUSSIAN_ROUTE", "gaussian_route", "rounded_gaussian_epsilon", "rounded_gaussian_pmf",
           "rounded_gaussian_variance"]

GAUSSIAN_ROUTE = 4.0
# The privacy loss is rounded up to this grid (dp-accounting's pessimistic estimate).
_LOSS_GRID = 1e-4
# Outside mass allowed per tail of the window, before it counts in eta.
_TAIL = 1e-18
_UNIT = 2.0**-53  # unit roundoff of float64
# No window beyond this: past it the Gaussian route is used whatever sc is.
_MAX_WINDOW = 1 << 20
# rounded_gaussian_variance's closed form from here (its terms then do not cancel).
_SERIES_FROM = 1.0


def _client_support(sc: float) -> int:
    """K_c: one client's pmf is kept on [-K_c, K_c]; beyond, mass 2 Phi(-12.5) < 1e-35."""
    return int(math.ceil(12.5 * sc)) + 1


def _client_pmf(sc: float) -> np.ndarray:
    """P(round(sc Z) = k) for k = 0..K_c (symmetric), from upper tails (no cancellation)."""
    k = np.arange(_client_support(sc) + 1, dtype=np.float64)
    upper = _ndtr(-(k - 0.5) / sc)
    pmf = upper - _ndtr(-(k + 0.5) / sc)
    pmf[0] = 1.0 - 2.0 * _ndtr(-0.5 / sc)
    return pmf


def rounded_gaussian_variance(sc: float) -> float:
    """Var(round(sc Z)) in lattice steps^2: what one client releases.

    From ``_SERIES_FROM`` steps on, the Fourier series of the rounding error
    round(x) - x and of its square (Sheppard's correction, exact for the Gaussian):

        Var = sc^2 + 1/12 + sum_j>=1 (-1)^j e^(-2 pi^2 j^2 sc^2) (4 sc^2 + 1/(pi j)^2),

    whose terms past j = 1 are below the unit roundoff there; it needs no scipy, so a
    run's result record loads none. Below, where the series' terms would cancel,
    the pmf is summed.
    """
    if sc <= 0:
        return 0.0
    if sc >= _SERIES_FROM:
        correction = 0.0
        for j in range(1, 4):  # e^(-2 pi^2 j^2) at j = 4 is below 1e-137
            correction += ((-1) ** j * math.exp(-2.0 * (math.pi * j * sc) ** 2)
                           * (4.0 * sc * sc + 1.0 / (math.pi * j) ** 2))
        return sc * sc + 1.0 / 12.0 + correction
    pmf = _client_pmf(sc)
    k = np.arange(pmf.size, dtype=np.float64)
    return float(2.0 * np.dot(pmf[1:], k[1:] ** 2))


def _window(sc: float, honest: int, tail: float) -> int:
    """K with P(|S| > K) <= tail: |round(g)| <= 2|g| makes S sub-Gaussian, proxy 4 H sc^2."""
    return int(math.ceil(math.sqrt(8.0 * honest * sc * sc * math.log(2.0 / tail)))) + 1


def rounded_gaussian_pmf(sc: float, honest: int) -> tuple[np.ndarray, float]:
    """S's pmf on [-K, K] (index K is 0) and its l1 error bound (window and FFT).

    The characteristic function is real: phi(w) = 1 - 2 sum_k p_k (1 - cos wk), and
    phi^H is taken as exp(H log1p(phi - 1)) with phi - 1 summed directly, so
    its error stays near the unit roundoff where |phi|^H is not negligible.
    """
    K = _window(sc, honest, _TAIL)
    length = 1 << max(4, (2 * K + 2 - 1).bit_length())
    pmf = _client_pmf(sc)
    w = 2 * np.pi * np.arange(length // 2 + 1) / length
    gap = np.zeros_like(w)  # 1 - phi(w)
    for k in range(1, pmf.size):
        gap += (4.0 * pmf[k]) * np.sin(w * (k / 2.0)) ** 2
    phi = 1.0 - gap
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.where(gap < 0.5, np.log1p(-np.minimum(gap, 0.5)), np.log(np.abs(phi)))
    power = np.exp(honest * logs)
    if honest % 2:
        power = np.where(phi < 0, -power, power)
    full = np.fft.irfft(power, length)
    window = np.concatenate([full[length - K:], full[: K + 1]])
    # Higham, Accuracy and Stability (2002), Thm 24.2: the FFT's l2 error is at most
    # log2(L) eta ||x||_2 (eta < 8u with exact twiddles to u), ||x||_2 <= 1; plus the
    # few-ulp error of every coefficient. l1 on the window <= sqrt(2K+1) l2.
    fft_l2 = (8.0 * math.log2(length) + 8.0) * _UNIT
    error = (math.sqrt(2 * K + 1) * fft_l2
             + 3 * _TAIL  # outside the window, and the aliased mass folded into it
             + 2 * honest * _ndtr(-(_client_support(sc) + 0.5) / sc))
    return window, error


def _tv_slack(epsilon: float, entries: int, log_eta: float) -> float:
    """(1 + e^epsilon) entries eta, from log eta (eta may lie far below 1e-308)."""
    log = math.log1p(math.exp(-epsilon)) + epsilon + math.log(entries) + log_eta
    return math.exp(min(log, 700.0))


def _solve(epsilon_at: Callable[[float], float], delta: float, entries: int,
           log_eta: float) -> float:
    """The least epsilon with delta(epsilon) + (1 + e^epsilon) entries eta <= delta."""
    epsilon = float(epsilon_at(delta))
    for _ in range(4):
        rest = delta - _tv_slack(epsilon + 1.0, entries, log_eta)
        if rest <= 0:
            return math.inf
        better = float(epsilon_at(rest))
        if better <= epsilon + 1.0:
            return better
        epsilon = better
    return math.inf


def _poisson_log_eta(sc: float, honest: int) -> float:
    """log TV(S, round(G + U)) <= log((2K+1)(H+1) a + 2 a), a the aliases' bound,
    with the window K chosen so that each tail outside it is at most a."""
    log_a = (math.log(2.0) - (math.pi * sc) ** 2 / 2
             - math.log(-math.expm1(-4 * (math.pi * sc) ** 2)))
    K = int(math.ceil(math.sqrt(8.0 * honest * sc * sc * (math.log(2.0) - log_a)))) + 1
    return math.log((2 * K + 1) * (honest + 1) + 2) + log_a


def gaussian_route(sc: float, honest: int) -> bool:
    """True when :func:`rounded_gaussian_epsilon` bounds S by the Gaussian it rounds."""
    return sc >= GAUSSIAN_ROUTE or 2 * _window(sc, honest, _TAIL) + 1 > _MAX_WINDOW


@functools.lru_cache(maxsize=256)
def rounded_gaussian_epsilon(sc: float, honest: int, shift: int, entries: int,
                             delta: float) -> float:
    """Certified epsilon at ``delta`` for ``entries`` entries of S, each shifted by <= ``shift``."""
    if shift <= 0:
        return 0.0
    if sc <= 0:
        return math.inf
    if gaussian_route(sc, honest):
        log_eta = _poisson_log_eta(sc, honest)
        sigma = math.sqrt(honest) * sc
        sens = shift * math.sqrt(entries)

        def gaussian(at: float) -> float:
            with np.errstate(divide="ignore", invalid="ignore"):
                return float(dp_accounting.get_epsilon_gaussian(sigma / sens, at))
        return _solve(gaussian, delta, entries, log_eta)
    pmf, error = rounded_gaussian_pmf(sc, honest)
    pld = _shift_pld(pmf, shift)
    if entries > 1:
        pld = pld.self_compose(entries)
    return _solve(lambda at: pld.get_epsilon_for_delta(at), delta, entries, math.log(error))


def _shift_pld(window: np.ndarray, shift: int) -> Any:
    """The pessimistic PLD of (S~, S~ + shift), S~ the clipped, normalised window."""
    from dp_accounting.pld import privacy_loss_distribution as pld_module

    p = np.clip(window, 0.0, None)
    p = (p + p[::-1]) / 2  # S is symmetric: so is the approximation, and both directions agree
    p /= p.sum()
    upper = np.concatenate([p, np.zeros(shift)])
    lower = np.concatenate([np.zeros(shift), p])
    live = upper > 0
    both = live & (lower > 0)
    infinity = float(upper[live & ~both].sum())
    loss = np.log(upper[both]) - np.log(lower[both])
    index = np.ceil(loss / _LOSS_GRID).astype(np.int64)
    keys, inverse = np.unique(index, return_inverse=True)
    masses = np.bincount(inverse, weights=upper[both])
    rounded = {int(k): float(v) for k, v in zip(keys, masses, strict=True)}
    return pld_module.PrivacyLossDistribution.create_from_rounded_probability(
        rounded, infinity, _LOSS_GRID, pessimistic_estimate=True)
