"""Additive secret sharing over Z_2^64.

Masks come from the operating system's CSPRNG (``os.urandom``): a seeded
generator would let anyone who learns the seed reconstruct every input.
"""

from __future__ import annotations

import os

import numpy as np

__all__ = ["random_ring", "share"]


def random_ring(shape: tuple[int, ...]) -> np.ndarray:
    count = int(np.prod(shape))
    return np.frombuffer(os.urandom(8 * count), dtype=np.uint64).reshape(shape).copy()


def share(values: np.ndarray, parties: int,
          masks: np.ndarray | None = None) -> list[np.ndarray]:
    """Split uint64 ``values`` into ``parties`` arrays that sum to them mod 2^64.

    Any parties - 1 of the shares are independent and uniformly random.
    ``masks`` (parties - 1 arrays of ``values``' shape from :func:`random_ring`)
    lets a caller draw them ahead, e.g. in a thread while it computes the values.
    """
    if parties < 2:
        raise ValueError("additive sharing needs at least two parties")
    values = np.asarray(values, dtype=np.uint64)
    if masks is None:
        masks = random_ring((parties - 1, *values.shape))
    elif masks.shape != (parties - 1, *values.shape) or masks.dtype != np.uint64:
        raise ValueError(f"masks must be uint64 of shape {(parties - 1, *values.shape)}")
    masks = list(masks)
    last = values.copy()
    for mask in masks:
        last -= mask  # wraps mod 2^64 by design
    return [*masks, last]
