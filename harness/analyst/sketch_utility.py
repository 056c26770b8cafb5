"""What the analyst gets from each mechanism's released sketch in ``ltm reproduce
mechanisms``: the data every run sketches, and the errors psi and phi of a sketch.

The data is low-rank, so that the rank-k projection and the ridge regression have
something to find (on uniform rows, as ``ltm run`` draws them, every direction is
alike and both errors say nothing of the noise): features A of rank k (the
generator of the utility figures, :func:`.datasets.lowrank_data`), a target b = A x
plus a tenth of its spread in noise, and [A | b] scaled so that every entry lies in
[-1, 1], the clients' bound eta = 1. It is a function of (n, d, k, seed), drawn with
numpy's seeded generator: public test data, not noise.
"""

from __future__ import annotations

import numpy as np

from harness.analyst.analysis import analyze_lowrank, analyze_ridge
from harness.analyst.datasets import lowrank_data

__all__ = ["MechanismUtility"]


class MechanismUtility:
    """:class:`harness.experiments.SketchUtility` for the mechanisms sweep."""

    def data(self, n: int, d: int, rank: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        features = lowrank_data(n, d - 1, rank, rng)
        target = features @ rng.standard_normal(d - 1)
        target += 0.1 * target.std() * rng.standard_normal(n)
        matrix = np.column_stack([features, target])
        return matrix / np.abs(matrix).max()

    def measure(self, sketch: np.ndarray, data: np.ndarray, rank: int,
                lam: float) -> dict[str, float]:
        """psi of the rank-k projection of [A | b] and phi of the ridge regression of b."""
        data = np.asarray(data, dtype=np.float64)
        return {"psi": analyze_lowrank(sketch, data, rank)["psi"],
                "phi": analyze_ridge(sketch, data, lam)["phi"]}
