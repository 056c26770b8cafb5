"""Verifying a release whose servers added noise: the statistics every noisy
mechanism's :meth:`~harness.privacy.mechanism.Mechanism.verify` reports
(``--mechanism dng``'s in :mod:`.dng`, ``central``'s in :mod:`.central`).

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
from collections.abc import Callable, Mapping

import numpy as np

__all__ = ["FAIL_P", "FAIL_Z", "as_signed", "method_words", "opened_release",
           "release_statistics"]

# Far outside: a p-value or a standardised deviation that an honest run shows with
# probability below about 1e-9.
FAIL_P = 1e-9
FAIL_Z = 8.0


def method_words(name: str, rounded: str, exact: bool, digest: bool = False) -> str:
    """result.json's ``verification.method`` for the noise of mechanism ``name``: the
    release less ``rounded`` (the plaintext as the release rounds it, in words)."""
    test = (f"revealed - {rounded} is the {name} noise: mean, variance and a "
            "chi-square goodness-of-fit against its exact distribution")
    if digest:
        test += ("; and exactly the noise the servers drew: the sum of their digests of "
                 "it (weighted sums mod 2^64 under public random weights) equals the "
                 f"release's minus {rounded}'s")
    if exact:
        test += ("; and, with the noise revealed too (a test aid), released = "
                 f"{rounded} + noise bit for bit")
    return test


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


def as_signed(values: np.ndarray) -> np.ndarray:
    return values.astype(np.uint64).view(np.int64)


def opened_release(expected: np.ndarray, printed: Mapping[int, np.ndarray]
                   ) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """What a noisy release's check starts from: P0's printed values, how many values any
    party saw otherwise (every party must have seen what P0 saw; that is then checked
    against the noise), and the plaintext and the release, signed and flat."""
    first = printed[0]
    differ = max(int(np.count_nonzero(view != first)) for view in printed.values())
    return first, differ, as_signed(expected).ravel(), as_signed(first[0]).ravel()


def release_statistics(errors: np.ndarray, mean_shift: np.ndarray | float, variance: float,
                       cdf: Callable[[np.ndarray], np.ndarray], *, units: str, exact: bool,
                       digest_match: bool | None = None) -> dict:
    """The statistics of a release's ``errors`` (integers: released less the plaintext as
    rounded, per cell) against the noise certified: ``variance`` the noise's, the errors
    less ``mean_shift`` (the rounding's expected part per cell, whose variance adds to
    the noise's) centred; ``cdf`` the cells' average distribution. ``ok`` is False far
    outside, or where ``digest_match`` (the exact check by the servers' digests) failed."""
    shift = np.broadcast_to(np.asarray(mean_shift, dtype=np.float64), errors.shape)
    centred = errors - shift
    cells = errors.size
    observed_var = float(centred.var()) if cells > 1 else 0.0
    expected_var = variance + float((shift * (1 - shift)).mean())
    mean_z = float(centred.mean() / math.sqrt(expected_var / cells))
    var_z = float((observed_var / expected_var - 1) / math.sqrt(2 / max(cells - 1, 1)))
    p_value = _gof(errors, cdf)
    ok = (p_value >= FAIL_P and abs(mean_z) < FAIL_Z and abs(var_z) < FAIL_Z
          and digest_match is not False)
    return {"cells": cells, "mean": float(centred.mean()), "mean_z": mean_z,
            "variance": observed_var, "expected_variance": expected_var,
            "variance_z": var_z, "gof_p_value": p_value, "ok": ok,
            # the release against the servers' digests of their noise, exactly (None
            # where nothing knows the noise: central)
            "digest_match": digest_match, "units": units, "exact": exact}
