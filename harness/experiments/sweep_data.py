"""The data a sweep with a spec's ``[utility]`` sketches, and who makes it.

The mechanisms sweep runs every mechanism on the same data and measures the
analyst's errors of each revealed sketch on it. Both the data and the errors are
the analyst's (a layer above this one), so the caller passes them in as a
:class:`SketchUtility`; this module writes the data where the runs read it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

import numpy as np

from harness.experiments.sweeps import Cell
from harness.fileio import open_private, private_dir

__all__ = ["SketchUtility", "utility_data"]


class SketchUtility(Protocol):
    """The analyst's side of a sweep with a spec's ``[utility]``: the data every
    mechanism's run sketches, and the errors of a revealed sketch on it.

    Passed in by the caller (the analyst sits above this layer); the command line
    passes :class:`harness.analyst.MechanismUtility`.
    """

    def data(self, n: int, d: int, rank: int, seed: int) -> np.ndarray:
        """The n x d matrix of one point, a function of its arguments, entries in [-1, 1]."""
        ...

    def measure(self, sketch: np.ndarray, data: np.ndarray, rank: int,
                lam: float) -> dict[str, float]:
        """The errors of the revealed ``sketch`` (m x d, scaled) on ``data``: psi, phi."""
        ...


def utility_data(utility: SketchUtility, cell: Cell, seed: int | None, workroot: Path,
                 rank: int) -> Path:
    """The point's data file, written once per sweep (0600: it is the clients' data)."""
    path = private_dir(workroot / "data") / f"n={cell.clients}-k={rank}-seed={seed}.npy"
    if not path.exists():
        matrix = utility.data(cell.clients, cell.dim, rank, seed or 0)
        part = path.with_name(path.name + ".part")
        with open_private(part) as fh:
            np.save(fh, matrix)
        os.replace(part, path)
    return path
