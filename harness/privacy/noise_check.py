"""Verifying a run whose servers added noise (``--mechanism dng`` or ``central``).

Such a sketch is not bit-equal to the plaintext one, so the revealed sketch
minus the plaintext sketch (on the central mechanism's grid) is checked against
the noise the accountant certified: its mean, its variance and a chi-square
goodness-of-fit p-value against the exact distribution, recorded in the run's
diagnostics.json (0600: computed from the plaintext, with the release they would
give away its exact sum), and in result.json only whether it passed;
a run far outside fails. That check is statistical: it sees noise of the wrong
size or shape, never a small change such as one changed word of a server's input,
which moves a few cells by a few steps inside the noise.

dng's noise is known where it was drawn, so its release is also checked exactly:
each server's digest of its noise (:mod:`harness.clients.digest`) must add up to
the digest of the release minus the plaintext sketch, in Z_2^64 (``digest_match``).
central's noise is known to no one: nothing can check its release exactly, and
``--tamper`` under a semi-honest protocol is refused for it before the run.

With the test aid ``reveal_noise`` the MPC also reveals
the noise (and the rounded sketch), and every entry is checked bit for bit:
released = rounded + noise in grid steps, with rounded the plaintext sketch times
the grid's public scale, truncated down or up.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from harness.clients import noise_digest
from harness.privacy.mechanisms import ServerNoise

__all__ = ["FAIL_P", "FAIL_Z", "check_noise_release", "method"]

# Far outside: a p-value or a standardised deviation that an honest run shows with
# probability below about 1e-9.
FAIL_P = 1e-9
FAIL_Z = 8.0
# Above this total variance (lattice steps^2) Skellam is Normal to far below what a
# chi-square test over a few thousand cells can see.
_SKELLAM_EXACT = 1e6


def method(noise: ServerNoise, exact: bool, digest: bool = False) -> str:
    rounded = (f"the plaintext sketch truncated to the grid of {_grid_words(noise)}"
               if noise.kind == "central" else "the plaintext sketch")
    test = (f"revealed - {rounded} is the {noise.kind} noise: mean, variance and a "
            "chi-square goodness-of-fit against its exact distribution")
    if digest:
        test += ("; and exactly the noise the servers drew: the sum of their digests of "
                 "it (weighted sums mod 2^64 under public random weights) equals the "
                 f"release's minus {rounded}'s")
    if exact:
        test += ("; and, with the noise revealed too (a test aid), released = "
                 f"{rounded} + noise bit for bit")
    return test


def _grid_words(noise: ServerNoise) -> str:
    """central's grid step in words: 2^-g, or 2^-g / c with a public scale c."""
    power = f"2^-{noise.grid_bits}" if noise.grid_bits >= 0 else f"2^{-noise.grid_bits}"
    return power if noise.scale == 1 else f"{power} / {noise.scale} = {noise.step:.6g}"


def _gof(errors: np.ndarray, cdf: Callable[[np.ndarray], np.ndarray]) -> float:
    """Pearson's chi-square p-value of integer ``errors`` against the average of the
    cells' distributions (``cdf(x)``: per x, the mean over cells of P(error <= x))."""
    from scipy import stats

    cells = errors.size
    bins = int(max(2, min(50, cells // 10)))
    # Edges at the distribution's quantiles, as integers (the errors are integers).
    support = np.arange(errors.min() - 1, errors.max() + 1) if np.ptp(errors) < 4096 else None
    if support is None:
        grid = np.linspace(errors.min() - 1, errors.max(), 4097).round().astype(np.int64)
        support = np.unique(grid)
    cum = cdf(support)
    edges: list[int] = []
    for q in np.linspace(0, 1, bins + 1)[1:-1]:
        at = support[min(np.searchsorted(cum, q), support.size - 1)]
        if not edges or at > edges[-1]:
            edges.append(int(at))
    if not edges:
        return 1.0
    edge_arr = np.array(edges, dtype=np.int64)
    probs = np.diff(np.concatenate([[0.0], cdf(edge_arr), [1.0]]))
    counts = np.bincount(np.searchsorted(edge_arr, errors, side="left"),
                         minlength=edge_arr.size + 1)
    expected = probs * cells
    keep = expected > 0
    if keep.sum() < 2:
        return 1.0
    chi2 = float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    return float(stats.chi2.sf(chi2, int(keep.sum()) - 1))


def _as_signed(values: np.ndarray) -> np.ndarray:
    return values.astype(np.uint64).view(np.int64)


def check_noise_release(noise: ServerNoise, expected: np.ndarray, released: np.ndarray,
                        revealed_noise: np.ndarray | None = None,
                        revealed_rounded: np.ndarray | None = None, *,
                        digest: tuple[bytes, int] | None = None) -> tuple[int, dict]:
    """(mismatches, statistics) of a noisy release against the plaintext ``expected``
    (both uint64 ring elements); mismatches only from the bit-exact check. ``digest``
    (dng): the run's digest key and the sum of the servers' digests of their noise,
    which the release minus ``expected`` must match exactly."""
    from scipy import stats

    plain = _as_signed(expected).ravel()
    out = _as_signed(released).ravel()
    mismatches = 0
    digest_match = None
    if noise.kind == "dng":
        errors = (out - plain).astype(np.int64)  # wraps as the ring does
        if digest is not None:
            key, servers = digest
            digest_match = noise_digest(errors, key) == servers
        variance = noise.servers * noise.server_mu
        mean_shift = np.zeros(errors.size)
        if variance <= _SKELLAM_EXACT:
            dist = stats.skellam(variance / 2, variance / 2)
            def cdf(x: np.ndarray) -> np.ndarray:
                return dist.cdf(x)
        else:
            def cdf(x: np.ndarray) -> np.ndarray:
                return stats.norm.cdf((x + 0.5) / math.sqrt(variance))
        if revealed_noise is not None:
            mismatches = int(np.count_nonzero(
                out != plain + _as_signed(revealed_noise).ravel()))
    else:
        k = noise.shift
        scaled = plain * noise.scale  # below 2^62: the run was refused otherwise
        floor = scaled >> k  # arithmetic: floor(v c / 2^k)
        frac = (scaled - (floor << k)) / 2.0**k
        errors = out - floor  # noise + the rounding's 0 or 1, in grid steps
        variance = noise.coins / 4
        mean_shift = frac
        binom = stats.binom(noise.coins, 0.5)
        half = noise.coins // 2
        up = float(frac.mean())  # the cells' average chance of rounding up

        def cdf(x: np.ndarray) -> np.ndarray:
            return (1 - up) * binom.cdf(x + half) + up * binom.cdf(x - 1 + half)
        if revealed_noise is not None and revealed_rounded is not None:
            drawn = _as_signed(revealed_noise).ravel()
            rounded = _as_signed(revealed_rounded).ravel()
            # up only where there is a fraction: an exact value is never rounded
            bad = ((out != rounded + drawn) | (rounded < floor)
                   | (rounded > floor + (frac > 0)) | (np.abs(drawn) > half))
            mismatches += int(np.count_nonzero(bad))
    centred = errors - mean_shift
    cells = errors.size
    observed_var = float(centred.var()) if cells > 1 else 0.0
    expected_var = variance + (float((mean_shift * (1 - mean_shift)).mean())
                               if noise.kind == "central" else 0.0)
    mean_z = float(centred.mean() / math.sqrt(expected_var / cells))
    var_z = float((observed_var / expected_var - 1) / math.sqrt(2 / max(cells - 1, 1)))
    p_value = _gof(errors, cdf)
    ok = (p_value >= FAIL_P and abs(mean_z) < FAIL_Z and abs(var_z) < FAIL_Z
          and digest_match is not False)
    statistics = {"cells": cells, "mean": float(centred.mean()), "mean_z": mean_z,
                  "variance": observed_var, "expected_variance": expected_var,
                  "variance_z": var_z, "gof_p_value": p_value, "ok": ok,
                  # dng: the release against the servers' digests of their noise, exactly
                  # (None where nothing knows the noise: central)
                  "digest_match": digest_match,
                  "units": "lattice steps 2^-F" if noise.kind == "dng"
                  else f"grid steps {_grid_words(noise)}",
                  "exact": revealed_noise is not None}
    return mismatches, statistics
