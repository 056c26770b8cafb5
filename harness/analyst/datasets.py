"""Input matrices: the paper's synthetic generators, a user's table, a run's output.

Files are read by :func:`harness.clients.matrices.load_matrix`, the one loader.

Synthetic data follows Section "Interpolation between Local and Central DP",
paragraph "Datasets":

- low rank: draw A' with N(0, 1) entries, take its SVD U' S' V' and replace the
  singular values by k values sqrt(n/k) and d-k values 1/n, A = U' diag(...) V'.
  Rows then have norm about 1, so the nominal entry bound eta = 1 is roughly met.
- regression: A with N(0, 1) entries, x ~ N(0, mu^2 I), b = A x (no label noise).

Like the paper, the generators do not clip entries to the bound eta that the
privacy calibration assumes; the harness measures utility, not privacy.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.clients import SyntheticRows, all_rows, load_matrix, npy_error
from harness.errors import InputError, check_memory

__all__ = [
    "RunOutput",
    "load_run",
    "lowrank_data",
    "parse_mu2",
    "regression_data",
    "split_columns",
]


# --- synthetic generators ----------------------------------------------------


def lowrank_data(n: int, d: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """n x d matrix on random bases with k singular values sqrt(n/k), the rest 1/n."""
    if d < 2 or n < d:
        raise InputError(f"low-rank data needs n >= d >= 2, got n={n}, d={d}; "
                         "raise --n-min or lower --d")
    if not 1 <= k < d:
        raise InputError(f"the rank k must satisfy 1 <= k < d={d}, got {k}; set --k")
    u, _, vt = np.linalg.svd(rng.standard_normal((n, d)), full_matrices=False)
    sigma = np.full(d, 1.0 / n)
    sigma[:k] = np.sqrt(n / k)
    return (u * sigma) @ vt


def parse_mu2(value: str | float, n: int) -> float:
    """mu^2 as a number or relative to n: "1", "n", "n^2" (the paper's {1, n, n^2})."""
    text = str(value).strip().replace(" ", "").replace("**", "^")
    if text in ("n", "n^1"):
        return float(n)
    if text.startswith("n^"):
        try:
            return float(n) ** float(text[2:])
        except ValueError:
            pass
    else:
        try:
            mu2 = float(text)
        except ValueError:
            mu2 = -1.0
        if mu2 > 0:
            return mu2
    raise InputError(f"--mu2 must be a positive number, 'n' or 'n^p', got {value!r}")


def regression_data(n: int, d: int, mu2: float, rng: np.random.Generator
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A, b, x) with A ~ N(0, 1)^{n x d}, x ~ N(0, mu2 I_d) and b = A x."""
    if d < 1 or n < d:
        raise InputError(f"regression data needs n >= d >= 1, got n={n}, d={d}; "
                         "raise --n-min or lower --d")
    if not mu2 > 0:
        raise InputError(f"mu^2 must be positive, got {mu2}; set --mu2")
    A = rng.standard_normal((n, d))
    x = rng.normal(0.0, np.sqrt(mu2), size=d)
    return A, A @ x, x


# --- a user's table ----------------------------------------------------------


def _resolve_column(target: int | str, names: list[str]) -> int:
    if isinstance(target, str) and target in names:
        return names.index(target)
    try:
        index = int(target)
    except ValueError:
        raise InputError(f"no column named {target!r}; columns are "
                         f"{', '.join(names[:10])}{' ...' if len(names) > 10 else ''}") from None
    if not -len(names) <= index < len(names):
        raise InputError(f"target column {index} is out of range for {len(names)} columns "
                         f"(use 0..{len(names) - 1}, -1 for the last, or a column name)")
    return index % len(names)


def split_columns(matrix: np.ndarray, names: list[str], target: int | str
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(A, b): the target column (index, negative index, or name) and the rest."""
    col = _resolve_column(target, names)
    if matrix.shape[1] < 2:
        raise InputError("regression needs at least one feature column besides the target")
    return np.delete(matrix, col, axis=1), matrix[:, col].copy()


# --- a run's output directory --------------------------------------------------


@dataclass(frozen=True)
class RunOutput:
    """What ``ltm run`` left in its directory: T (m x d) and the input A (n x d)."""

    directory: Path
    sketch: np.ndarray
    data: np.ndarray
    params: dict = field(default_factory=dict)


def _read_params(directory: Path) -> dict:
    path = directory / "result.json"
    if not path.is_file():
        return {}
    try:
        params = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc
    return params if isinstance(params, dict) else {}


def _load_npy(path: Path, what: str) -> np.ndarray:
    if path.stat().st_size == 0:
        raise InputError(f"{what} {path} is empty (0 bytes); the run that wrote it did not "
                         "finish: rerun `ltm run`")
    try:
        # Mapped: a header that claims more than the file holds is refused unallocated.
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"cannot read {what} {path}: {npy_error(exc)}") from exc
    if arr.ndim != 2:
        raise InputError(f"{what} {path} must be a 2-D array, got shape {arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise InputError(f"{what} {path} holds {arr.dtype} values; a run writes real "
                         "numbers: the file is not an `ltm run` output")
    check_memory(8.0 * arr.size, f"{what} {path} (shape {arr.shape})",
                 "analyse it on a machine with more memory")
    values = np.array(arr, dtype=np.float64)
    if not np.isfinite(values).all():
        r, c = np.argwhere(~np.isfinite(values))[0]
        raise InputError(f"{what} {path} holds a non-finite value at row {r}, column {c}; "
                         "the file is damaged or not an `ltm run` output: rerun `ltm run`")
    return values


def _run_data(directory: Path, params: dict, data: str | os.PathLike | None,
              header: bool | None) -> np.ndarray:
    if data is not None:
        return load_matrix(data, header=header)[0]
    path = directory / "data.npy"
    if path.is_file():
        return _load_npy(path, "input matrix")
    recorded = params.get("parameters")
    named = recorded.get("data") if isinstance(recorded, dict) else params.get("data")
    if isinstance(named, str) and named and Path(named).is_file():
        layout = recorded.get("layout") if isinstance(recorded, dict) else None
        read = layout.get("data_header") if isinstance(layout, dict) else None
        return load_matrix(named, header=read if isinstance(read, bool) else header)[0]
    synthetic = _synthetic_rows(recorded if isinstance(recorded, dict) else {})
    if synthetic is not None:  # above EXPORT_LIMIT no data.npy: recompute it from the seed
        return all_rows(synthetic)
    raise InputError(f"{directory} has no data.npy, which the error measure needs (it "
                     "compares with the optimum on A); pass the run's input with --data FILE "
                     "or rerun `ltm run` with a current harness, which saves data.npy")


def _synthetic_rows(recorded: dict) -> SyntheticRows | None:
    """A run's synthetic data, recomputed from the seed its result.json records."""
    layout = recorded.get("layout")
    if recorded.get("data") != "synthetic" or not isinstance(layout, dict):
        return None
    seed, eta = layout.get("sketch_seed"), layout.get("synthetic_eta")
    if not isinstance(seed, int) or not isinstance(eta, (int, float)):
        return None
    try:
        return SyntheticRows(int(recorded["clients"]), int(recorded["dim"]), float(eta), seed)
    except (KeyError, TypeError, ValueError):
        return None


def load_run(directory: str | os.PathLike, data: str | os.PathLike | None = None,
             header: bool | None = None) -> RunOutput:
    """Load output.npy and the input matrix from a run directory, checking their shapes.

    ``header`` says whether a text ``data`` file's first line is a header (None:
    detected); the file the run recorded is read as the run read it.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"run directory {directory} does not exist; pass the --out "
                         "directory of an `ltm run`")
    out = directory / "output.npy"
    if not out.is_file():
        raise InputError(f"{directory} has no output.npy; is it the directory of a finished "
                         "`ltm run`?")
    params = _read_params(directory)
    sketch = _load_npy(out, "revealed sketch")
    matrix = _run_data(directory, params, data, header)
    _check_run_shapes(sketch, matrix, params)
    return RunOutput(directory, sketch, matrix, params)


def _check_run_shapes(sketch: np.ndarray, matrix: np.ndarray, params: dict) -> None:
    if sketch.shape[1] != matrix.shape[1]:
        raise InputError(f"output.npy has {sketch.shape[1]} columns but the input matrix has "
                         f"{matrix.shape[1]}; pass the run's own input with --data")
    recorded = params.get("parameters")
    recorded = recorded if isinstance(recorded, dict) else {}
    for key, value in (("clients", matrix.shape[0]), ("dim", matrix.shape[1]),
                       ("rows", sketch.shape[0])):
        expected = recorded.get(key)
        if isinstance(expected, int) and expected != value:
            raise InputError(f"result.json says {key}={expected} but the files give {value}; "
                             "the directory mixes files from different runs: pass the run's "
                             "own input with --data, or rerun `ltm run`")
