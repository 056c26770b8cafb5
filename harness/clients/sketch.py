"""The paper's decomposed sparse sketch S = (1/sqrt s) * sum_i S_i (eq. Ts).

Every S_i in {-1, 0, 1}^{m x n} has exactly one non-zero per column, so the
sketch is stored as two (s, n) arrays: ``rows[i, j]`` is the bucket and
``signs[i, j]`` the sign that component i gives client j. The s non-zeros of a
column sit in distinct rows, assigned to the components in uniformly random
order. The sketch is public: it is drawn from a seeded generator so that runs
can be reproduced.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from harness.errors import InputError
from harness.fileio import write_atomic

__all__ = ["Sketch", "check_dimensions"]


def check_dimensions(n: int, m: int, s: int, *, dense: bool = False) -> None:
    """Reject shapes the mechanism is not defined for, naming the fix."""
    for name, value, flag in (("n", n, "--clients"), ("m", m, "--rows"), ("s", s, "--sparsity")):
        if int(value) != value or value < 1:
            raise InputError(f"{name} must be a positive integer, got {value} (set {flag})")
    if m > n:
        raise InputError(f"the sketch has more rows than there are clients: m={m} > n={n}; "
                         "lower --rows or add clients")
    if s > m:
        raise InputError(f"sparsity s={s} exceeds the number of rows m={m}: each column's "
                         "s non-zeros need distinct rows; lower --sparsity")
    if dense and n % m:
        raise InputError(f"the dense sketch needs m to divide n (n/m non-zeros per row), "
                         f"got n={n}, m={m}; choose --clients as a multiple of --rows")


@dataclass(frozen=True)
class Sketch:
    m: int
    rows: np.ndarray  # (s, n) bucket of client j in component i
    signs: np.ndarray  # (s, n) +1 / -1

    @property
    def s(self) -> int:
        return int(self.rows.shape[0])

    @property
    def n(self) -> int:
        return int(self.rows.shape[1])

    @property
    def dense(self) -> bool:
        return self.s == self.m

    @classmethod
    def sparse(cls, n: int, m: int, s: int, seed: int | None = None) -> Sketch:
        """s non-zeros per column in distinct, uniformly random rows."""
        check_dimensions(n, m, s)
        rng = np.random.default_rng(seed)
        rows = _distinct_rows(rng, n, m, s)
        signs = _signs(rng, (s, n))
        return cls(m, rows, signs)

    @classmethod
    def dense_sketch(cls, n: int, m: int, seed: int | None = None) -> Sketch:
        """s = m: every column hits every row; each S_i has n/m non-zeros per row.

        Columns are split at random into n/m groups of m; within a group the
        components use a random Latin square, whose rows (components) and
        columns (clients) are both permutations of the m buckets.
        """
        check_dimensions(n, m, m, dense=True)
        rng = np.random.default_rng(seed)
        groups = n // m
        clients = rng.permutation(n).reshape(groups, m)
        # L[g, i, k] = pi3_g[(pi1_g[i] + pi2_g[k]) mod m]: a random Latin square per group
        pi1 = rng.permuted(np.tile(np.arange(m), (groups, 1)), axis=1)
        pi2 = rng.permuted(np.tile(np.arange(m), (groups, 1)), axis=1)
        pi3 = rng.permuted(np.tile(np.arange(m), (groups, 1)), axis=1)
        square = (pi1[:, :, None] + pi2[:, None, :]) % m
        square = np.take_along_axis(pi3[:, :, None], square.reshape(groups, -1, 1), axis=1)
        square = square.reshape(groups, m, m)  # [group, component, position in group]
        rows = np.empty((m, n), dtype=np.int32)
        rows[:, clients.reshape(-1)] = square.transpose(1, 0, 2).reshape(m, n)
        return cls(m, rows, _signs(rng, (m, n)))

    @classmethod
    def generate(cls, n: int, m: int, s: int, seed: int | None = None,
                 dense: bool = False) -> Sketch:
        if dense:
            if s not in (m, None):
                raise InputError(f"the dense sketch has sparsity s = m = {m}, got s={s}")
            return cls.dense_sketch(n, m, seed)
        return cls.sparse(n, m, s, seed)

    def matrix(self) -> np.ndarray:
        """The (m, n) matrix sqrt(s) * S = sum_i S_i, for small checks only."""
        out = np.zeros((self.m, self.n), dtype=np.int64)
        cols = np.arange(self.n)
        for i in range(self.s):
            np.add.at(out, (self.rows[i], cols), self.signs[i])
        return out

    def apply(self, copies: np.ndarray) -> np.ndarray:
        """sum_i S_i X_i for copies X of shape (s, n, d), without the 1/sqrt(s) factor."""
        s, n, d = copies.shape
        if (s, n) != self.rows.shape:
            raise InputError(f"copies have shape {copies.shape}, the sketch needs ({self.s}, "
                             f"{self.n}, d)")
        out = np.zeros((self.m, d), dtype=np.result_type(copies.dtype, np.int8))
        for i in range(s):
            np.add.at(out, self.rows[i], copies[i] * self.signs[i][:, None].astype(out.dtype))
        return out

    def save(self, path: str | os.PathLike) -> None:
        write_atomic(path, lambda fh: np.savez(fh, rows=self.rows, signs=self.signs,
                                               m=np.int64(self.m)))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Sketch:
        try:
            with np.load(path) as data:
                rows = data["rows"].astype(np.int32)
                signs = data["signs"].astype(np.int8)
                m = int(data["m"]) if "m" in data else int(rows.max()) + 1
        except (OSError, KeyError, ValueError) as exc:
            raise InputError(f"cannot read sketch {path}: {exc}") from exc
        sk = cls(m, rows, signs)
        sk.validate()
        return sk

    def validate(self) -> None:
        if self.rows.ndim != 2 or self.rows.shape != self.signs.shape:
            raise InputError("sketch arrays rows and signs must both have shape (s, n)")
        if self.rows.size and (self.rows.min() < 0 or self.rows.max() >= self.m):
            raise InputError(f"sketch rows must lie in [0, {self.m})")
        if not np.isin(self.signs, (-1, 1)).all():
            raise InputError("sketch signs must be +1 or -1")
        if self.s > 1:
            ordered = np.sort(self.rows, axis=0)
            if (ordered[1:] == ordered[:-1]).any():
                raise InputError("a column of the sketch repeats a row; its s non-zeros "
                                 "must sit in distinct rows")


def _signs(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    return (rng.integers(0, 2, size=shape, dtype=np.int8) * 2 - 1).astype(np.int8)


def _distinct_rows(rng: np.random.Generator, n: int, m: int, s: int) -> np.ndarray:
    """For each of n columns, s distinct rows of [m] in uniformly random order."""
    if s == 1:
        return rng.integers(0, m, size=(1, n), dtype=np.int32)
    # Floyd's algorithm, vectorised over columns: draws s distinct values with
    # O(s) work per column; a final shuffle makes the order uniform.
    chosen = np.empty((n, s), dtype=np.int32)
    taken = np.zeros((n, m), dtype=bool)
    cols = np.arange(n)
    for step, top in enumerate(range(m - s, m)):
        pick = rng.integers(0, top + 1, size=n, dtype=np.int32)
        clash = taken[cols, pick]
        pick[clash] = top
        taken[cols, pick] = True
        chosen[:, step] = pick
    chosen = rng.permuted(chosen, axis=1)
    return np.ascontiguousarray(chosen.T)
