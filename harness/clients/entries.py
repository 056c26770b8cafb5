"""The clients' check on the entries of A, wherever the rows come from."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from harness.errors import InputError

__all__ = ["check_matrix"]


def check_matrix(data: np.ndarray, eta: float, first_row: int = 0,
                 where: Callable[[int, int], str] | None = None) -> None:
    """Every entry finite and within eta; ``first_row`` numbers a chunk's rows in the file,
    and ``where`` (row, column) names an entry as its file does (a text file's line)."""
    finite = np.isfinite(data)
    if not finite.all():
        r, c = np.argwhere(~finite)[0]
        r += first_row
        raise InputError(f"data holds a non-finite value at row {r}, column {c}; "
                         "clean the data (NaN and infinity cannot be encoded)")
    worst = np.abs(data)
    if worst.size and float(worst.max()) > eta:
        r, c = np.unravel_index(int(np.argmax(worst)), worst.shape)
        entry = (f"{where(int(r) + first_row, int(c))}: |value|" if where
                 else f"|A[{r + first_row}, {c}]|")
        raise InputError(f"{entry} = {worst[r, c]:g} exceeds the bound eta = {eta:g} the "
                         "noise is calibrated for; pass --eta at least that large or scale "
                         "the data")
