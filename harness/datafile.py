"""The clients' data matrix A (n x d): from a file, or synthetic."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.errors import InputError

__all__ = ["load_matrix", "synthetic_matrix", "check_matrix"]


def load_matrix(path: str | Path) -> np.ndarray:
    """Read an n x d numeric matrix from .npy or .csv (an optional header line)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"data file {path} does not exist; pass an existing .npy or .csv file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            data = np.load(path, allow_pickle=False)
        elif suffix == ".csv":
            data = _load_csv(path)
        else:
            raise InputError(f"data file {path} must end in .npy or .csv")
    except (ValueError, OSError) as exc:
        raise InputError(f"cannot read data file {path}: {exc}") from exc
    if data.dtype.kind not in "biuf":
        raise InputError(f"data file {path} holds {data.dtype} values; it must be numeric")
    if data.ndim == 1:
        data = data[:, None]
    if data.ndim != 2 or data.shape[0] < 1 or data.shape[1] < 1:
        raise InputError(f"data file {path} has shape {data.shape}; it must be an n x d matrix")
    return np.ascontiguousarray(data, dtype=np.float64)


def _load_csv(path: Path) -> np.ndarray:
    with open(path) as fh:
        first = fh.readline()
    try:
        [float(tok) for tok in first.strip().split(",")]
        skip = 0
    except ValueError:
        skip = 1  # a header line
    try:
        return np.loadtxt(path, delimiter=",", skiprows=skip, ndmin=2)
    except ValueError as exc:
        raise InputError(f"data file {path} is not a numeric CSV matrix: {exc}") from exc


def synthetic_matrix(n: int, d: int, eta: float, seed: int | None) -> np.ndarray:
    """Uniform entries in [-eta, eta]: bounded by eta as the mechanism requires."""
    return np.random.default_rng(seed).uniform(-eta, eta, size=(n, d))


def check_matrix(data: np.ndarray, eta: float) -> None:
    finite = np.isfinite(data)
    if not finite.all():
        r, c = np.argwhere(~finite)[0]
        raise InputError(f"data holds a non-finite value at row {r}, column {c}; "
                         "clean the data (NaN and infinity cannot be encoded)")
    worst = np.abs(data)
    if worst.size and float(worst.max()) > eta:
        r, c = np.unravel_index(int(np.argmax(worst)), worst.shape)
        raise InputError(f"|A[{r}, {c}]| = {worst[r, c]:g} exceeds the bound eta = {eta:g} the "
                         "noise is calibrated for; pass --eta at least that large or scale "
                         "the data")
