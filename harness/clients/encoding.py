"""Fixed-point encoding into the ring Z_2^64.

A real x becomes round(x * 2^f) as a two's-complement 64-bit integer. Sums in
the ring are exact, so a revealed sum decodes correctly as long as its true
value stays inside (-2^63, 2^63); :func:`check_bucket_bound` enforces that
before any party starts.
"""

from __future__ import annotations

import math

import numpy as np

from harness.errors import InputError

__all__ = ["RING_BITS", "FixedPoint"]

RING_BITS = 64
_LIMIT = 2.0 ** (RING_BITS - 1)


class FixedPoint:
    def __init__(self, frac_bits: int = 16) -> None:
        if not 0 <= frac_bits <= 52:
            raise InputError(
                f"--frac-bits must lie in [0, 52] (float64 precision), got {frac_bits}")
        self.frac_bits = frac_bits
        self.scale = float(2**frac_bits)

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Encode reals as ring elements (uint64 holding two's complement)."""
        return self.encode_in_place(np.array(x, dtype=np.float64))[0]

    def encode_in_place(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`encode` of float64 ``x``, overwriting it; also returns ``|x|`` scaled.

        The same ring elements as :meth:`encode`, in fewer passes over memory:
        preparation encodes every noisy entry, and the magnitudes it needs for
        the bucket bound come out of the same pass.
        """
        np.multiply(x, self.scale, out=x)
        np.rint(x, out=x)
        magnitude = np.abs(x)
        worst = float(magnitude.max()) if magnitude.size else 0.0
        if worst >= _LIMIT:
            raise InputError(
                f"fixed-point overflow: a value encodes to 2^{math.log2(worst):.1f}, beyond the "
                f"ring's bound 2^{RING_BITS - 1}; lower --frac-bits (now {self.frac_bits}) "
                "or scale the data")
        return x.astype(np.int64).view(np.uint64), magnitude

    def decode(self, ring: np.ndarray) -> np.ndarray:
        return np.asarray(ring, dtype=np.uint64).view(np.int64).astype(np.float64) / self.scale

    def check_bucket_bound(self, abs_sums: np.ndarray) -> None:
        """Every output entry's sum of |encoded inputs| must stay below 2^63.

        abs_sums[r, c] bounds |T[r, c]| in encoded units; past 2^63 the revealed
        value would wrap around and decode to garbage.
        """
        worst = float(np.max(abs_sums)) if np.size(abs_sums) else 0.0
        # float64 sums carry a relative error far below this margin
        if worst >= _LIMIT * (1 - 1e-9):
            row, col = np.unravel_index(int(np.argmax(abs_sums)), np.shape(abs_sums))
            raise InputError(
                f"fixed-point overflow: sketch entry ({row}, {col}) sums values up to "
                f"2^{math.log2(worst):.1f} in absolute value, beyond the ring's bound "
                f"2^{RING_BITS - 1}; lower --frac-bits (now {self.frac_bits}) or scale the data")
