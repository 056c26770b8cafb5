"""A server's dng noise, checked exactly without leaving its server: its digest.

The release of a dng run is T + N_1 + ... + N_S in Z_2^64 (the plaintext sketch
plus each server's own noise, on the fixed-point lattice). A statistical check of
the release against the certified noise cannot see a small change (one changed word
of a server's input moves a few cells by a few steps, far inside the noise), and no
server's noise may leave it. So each server reports only the digest

    D_j = sum_k w_k N_j[k]  (mod 2^64)

of the noise it input, under public weights w_k drawn for the run (odd, so that a
change of any single cell changes D), and the runner checks, exactly in the ring,

    D_1 + ... + D_S == sum_k w_k (released_k - T_k)  (mod 2^64).

A change of the servers' inputs or of the computation after the draw (``--tamper``,
a damaged file, a wrong program) fails it unless the change happens to lie in the
kernel of the weights, which for weights it did not depend on happens with
probability at most 2^-(63 - v), v the least number of trailing zero bits of the
cells' changes; a change of one cell by an odd amount (as ``--tamper``'s 5) is
caught for certain. It is no check against a server that lies: a
cheating server may report any digest, as it may input any noise (see
:mod:`harness.privacy.mechanisms`).

The digests reach only the runner, which computes the plaintext sketch anyway; they
are compared and dropped, never written.
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["DIGEST_KEY_BYTES", "digest_weights", "noise_digest", "weighted_digest"]

DIGEST_KEY_BYTES = 16


def digest_weights(key: bytes, cells: int) -> np.ndarray:
    """The run's public weights for ``cells`` cells: odd 64-bit words from SHAKE-256 of
    ``key`` (the same on every server and the runner)."""
    words = np.frombuffer(hashlib.shake_256(key).digest(8 * cells), dtype="<u8")
    return words.astype(np.uint64) | np.uint64(1)


def noise_digest(values: np.ndarray, key: bytes) -> int:
    """sum_k w_k values[k] mod 2^64 of integer ``values`` (int64 lattice steps, or ring
    elements as uint64), in row-major order, under :func:`digest_weights` of ``key``."""
    return weighted_digest(values, digest_weights(key, np.size(values)))


def weighted_digest(values: np.ndarray, weights: np.ndarray) -> int:
    """sum_k weights[k] values[k] mod 2^64: one block's part of :func:`noise_digest`,
    the block's own slice of the weights given (parts add up modulo 2^64)."""
    flat = np.ascontiguousarray(values).ravel()
    ring = flat.view(np.uint64) if flat.dtype == np.int64 else flat.astype(np.uint64)
    # Unsigned products and sums wrap modulo 2^64, as the ring does.
    return int((weights * ring).sum(dtype=np.uint64))
