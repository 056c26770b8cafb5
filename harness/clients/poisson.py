"""Poisson and Skellam draws that stay exact at every mean a run may ask for.

numpy's ``Generator.poisson`` draws means of 10 and above by Hormann's transformed
rejection (PTRS, 1993), which accepts a candidate k in its slow path when a uniform
falls below the Poisson log-probability log p(k) = -lam + k log(lam) - lgamma(k + 1).
numpy computes that as written: three terms of size lam log(lam) whose difference
is of order one, so their rounding errors grow with lam. The rounding of log(lam)
alone moves every k's test by the same amount, up to lam ulp(log lam) / 2 (0.05 at
lam = 3e13), which reweights the slow path against the fast one. Measured with 1e8
draws (standard error 1.4e-4), variance / lam is 1.0002 at 1e9, 1.0003 at 1e13 and
1.018 at 3e13; with 2^22, 0.974 at 8.8e13, 1.096 at 3e14 and 1.4 to 1.8 from 1e16.

:func:`poisson` runs the same algorithm (the same hat, squeeze and constants, so the
same proof of exactness) with log p(k) in Loader's saddle-point form (2000, the one
R's dpois uses): -stirlerr(k) - bd0(k, lam) - log(2 pi k) / 2, where bd0 = k log(k /
lam) + lam - k is summed from a series in (k - lam) / (k + lam) and stirlerr from
Stirling's series. Its terms stay below a few tens wherever a candidate can be
accepted, so the test's rounding error is of order 1e-14 at lam = 2^62 as at lam =
10 (not of order lam 1e-16), and a draw costs the same at every mean (about twice
numpy's). The candidate is kept as its offset k - floor(lam), exact however large
lam is.

Below :data:`EXACT_BELOW` numpy's own draw is used: there the rounding error of its
test is under lam log(lam) 2^-51, less than 1e-9 (and its draw is faster).
:data:`MAX_POISSON_MEAN` bounds the mean: there a uniform's 53 bits still cut each
integer k near the mean into more than a million steps, and k fits int64 with room.

A Skellam draw is the difference of two Poissons of equal mean taken as the
difference of their offsets k - floor(lam), so it is exact (and never overflows)
at any mean up to the bound; a sum of independent Skellams is Skellam.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["EXACT_BELOW", "MAX_POISSON_MEAN", "poisson", "skellam"]

EXACT_BELOW = 2.0**16
MAX_POISSON_MEAN = 2.0**62
# Elements drawn at once: bounds the temporaries (about 20 float64 arrays of it).
_BLOCK = 1 << 18
# Candidates past this offset from the mean have probability below e^-(2^40): rejected.
_FAR = 2.0**52
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
# Stirling's series for stirlerr(n) = lgamma(n + 1) - (n + 1/2) log n + n - log(2 pi)/2;
# from n = 16 on, its next term is below 2e-16.
_S0, _S1, _S2, _S3, _S4 = 1 / 12, 1 / 360, 1 / 1260, 1 / 1680, 1 / 1188
_SERIES_FROM = 16
_LGAMMA = np.array([math.lgamma(k + 1.0) for k in range(_SERIES_FROM)])
# bd0's series in v = (k - lam) / (k + lam) is used for |v| < 0.1: 14 terms reach 1e-28.
_BD0_TERMS = 14


def _log_pmf(base: np.ndarray | float, frac: np.ndarray | float, offset: np.ndarray,
             lam: np.ndarray | float) -> np.ndarray:
    """log P(k) of Poisson(lam) at k = base + offset, lam = base + frac (k >= 0)."""
    k = base + offset.astype(np.float64)
    small = k < _SERIES_FROM
    out = np.empty(k.shape)
    if small.any():  # far in the tail at any mean this module draws; direct is exact enough
        ks = k[small]
        lam_s = lam if np.ndim(lam) == 0 else np.asarray(lam)[small]
        out[small] = -lam_s + ks * np.log(lam_s) - _LGAMMA[ks.astype(np.int64)]
    big = ~small
    kb = k[big]
    lam_b = lam if np.ndim(lam) == 0 else np.asarray(lam)[big]
    frac_b = frac if np.ndim(frac) == 0 else np.asarray(frac)[big]
    diff = offset[big].astype(np.float64) - frac_b  # k - lam, to its own last bit
    total = kb + lam_b
    v = diff / total
    near = np.abs(v) < 0.1
    bd0 = kb * np.log(kb / lam_b) + lam_b - kb  # far from the mean: only its size matters
    vn, kn = v[near], kb[near]
    v2 = vn * vn
    series = np.zeros_like(vn)
    term = 2 * kn * vn
    for j in range(1, _BD0_TERMS + 1):
        term = term * v2
        series += term / (2 * j + 1)
    bd0[near] = diff[near] * vn + series
    inv2 = 1.0 / (kb * kb)
    stirlerr = (_S0 - (_S1 - (_S2 - (_S3 - _S4 * inv2) * inv2) * inv2) * inv2) / kb
    out[big] = -stirlerr - bd0 - _HALF_LOG_2PI - 0.5 * np.log(kb)
    return out


def _ptrs(rng: np.random.Generator, lam: np.ndarray | float, size: int) -> np.ndarray:
    """k - floor(lam) for ``size`` Poisson(lam) draws, lam >= 10 (a scalar, or one per draw)."""
    scalar = np.ndim(lam) == 0
    base = np.floor(lam)
    frac = lam - base  # exact
    b = 0.931 + 2.53 * np.sqrt(lam)
    a = -0.059 + 0.02483 * b
    log_alpha = np.log(1.1239 + 1.1328 / (b - 3.4))
    vr = 0.9277 - 3.6224 / (b - 2)
    consts = (base, frac, lam, a, b, log_alpha, vr)
    out = np.empty(size, dtype=np.int64)
    todo = np.arange(size)
    while todo.size:
        cbase, cfrac, clam, ca, cb, clog_alpha, cvr = (
            consts if scalar else tuple(np.asarray(x)[todo] for x in consts))
        u = rng.random(todo.size) - 0.5
        v = rng.random(todo.size)
        us = 0.5 - np.abs(u)
        with np.errstate(divide="ignore", invalid="ignore"):
            spread = (2 * ca / us + cb) * u + cfrac + 0.43
        # Held within the tails' reach: below -floor(lam) - 1 is k < 0 (rejected), past
        # _FAR the probability rejects it; both bounds keep the offset exact in a double.
        offset = np.floor(np.clip(spread, -cbase - 1, _FAR)).astype(np.int64)
        accept = (us >= 0.07) & (v <= cvr)
        tested = ~accept & (offset >= -cbase) & ~((us < 0.013) & (v > us))
        if tested.any():
            def sub(x: np.ndarray | float) -> np.ndarray | float:
                return x if scalar else np.asarray(x)[tested]  # noqa: B023 (used at once)

            ut = us[tested]
            with np.errstate(divide="ignore"):  # log(0) = -inf accepts, as it should
                lhs = np.log(v[tested]) + sub(clog_alpha) - np.log(sub(ca) / (ut * ut) + sub(cb))
            accept[tested] = lhs <= _log_pmf(sub(cbase), sub(cfrac), offset[tested], sub(clam))
        out[todo[accept]] = offset[accept]
        todo = todo[~accept]
    return out


def _check_means(lam: np.ndarray) -> None:
    if not (np.all(lam >= 0) and np.all(lam <= MAX_POISSON_MEAN)):
        raise ValueError(f"Poisson means must lie in [0, 2^62], got up to {np.max(lam)!r}")


def poisson(rng: np.random.Generator, lam: float | np.ndarray,
            size: int | tuple[int, ...]) -> np.ndarray:
    """Poisson(lam) draws as int64, exact at every mean up to :data:`MAX_POISSON_MEAN`;
    ``lam`` is one mean or one per draw (of the shape ``size``)."""
    shape = (size,) if isinstance(size, int) else tuple(size)
    means = np.broadcast_to(np.asarray(lam, dtype=np.float64), shape).ravel()
    _check_means(means)
    out = np.empty(means.size, dtype=np.int64)
    for start in range(0, means.size, _BLOCK):
        block = means[start:start + _BLOCK]
        low = block < EXACT_BELOW
        if low.all():
            out[start:start + block.size] = rng.poisson(block)
            continue
        part = np.empty(block.size, dtype=np.int64)
        part[low] = rng.poisson(block[low])
        high = block[~low]
        part[~low] = np.floor(high).astype(np.int64) + _ptrs(rng, high, high.size)
        out[start:start + block.size] = part
    return out.reshape(shape)


def skellam(rng: np.random.Generator, mu: float, shape: tuple[int, ...]) -> np.ndarray:
    """Poisson(mu/2) - Poisson(mu/2) per element as int64: Skellam of variance ``mu``,
    exact at every mu/2 up to :data:`MAX_POISSON_MEAN`."""
    half = mu / 2
    _check_means(np.asarray(half, dtype=np.float64))
    if half < EXACT_BELOW:
        return rng.poisson(half, size=shape) - rng.poisson(half, size=shape)
    count = math.prod(shape)
    out = np.empty(count, dtype=np.int64)
    for start in range(0, count, _BLOCK):
        n = min(_BLOCK, count - start)
        out[start:start + n] = _ptrs(rng, half, n) - _ptrs(rng, half, n)
    return out.reshape(shape)
