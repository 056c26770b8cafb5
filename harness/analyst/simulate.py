"""The exact-sufficient-statistics simulation behind the paper's utility figures.

Why it is fast. Every mechanism here needs only a few d x d or m x d
statistics of the data, never the n x d matrix after the statistics are made:

- the local model's noisy Gram (Z + N)^T (Z + N) is drawn exactly from Z^T Z:
  with Z = Q F (Q orthonormal, r columns), Z^T N = F^T W for W = Q^T N with iid
  entries, and N^T N = W^T W plus an independent Wishart(n - r) part;
- the LTM's noise in a bucket of c clients is one draw of the summed noise
  (N(0, c sigma^2), a Gamma difference for Laplace), not c draws;
- the central mechanisms perturb Z^T Z; psi and phi are quadratic forms in it.

For the synthetic data even the n x d Gaussian matrix is never drawn: its
Gram and its two sketches are drawn jointly and exactly from the sketches'
own Gram (:func:`synthetic_stats`), once per n and run and shared by all
panels. What is left is O(n m^2 / 64) bit counting and O(m d + d^3) per
mechanism.

This module draws the statistics (of the synthetic data, or of a given
matrix) and :mod:`.mechanisms` runs each mechanism on them. Used by
:mod:`.figures` (the synthetic grids), :mod:`.uci` (the real datasets) and
``ltm analyze``'s baselines on a run's own data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from harness.errors import InputError

__all__ = [
    "Stats",
    "explicit_synthetic_stats",
    "gram_factor",
    "lowrank_stats",
    "ridge_stats",
    "stats_from_matrix",
    "synthetic_stats",
    "wishart",
]


# --- the statistics every mechanism works from ----------------------------------------


@dataclass
class Stats:
    """What the mechanisms need of one data matrix Z (n x c) and its two sketches.

    ``factor`` F (r x c) satisfies Z = Q F for some Q with orthonormal columns,
    so F^T F = Z^T Z. ``sparse`` is S Z for a sparse sketch with s = 1 whose
    buckets hold ``counts`` clients; ``dense`` is (sum_i S_i) Z for the dense
    sketch, without the 1/sqrt(m).
    """

    n: int
    gram: np.ndarray
    factor: np.ndarray
    counts: np.ndarray
    sparse: np.ndarray
    dense: np.ndarray
    _eig: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    @property
    def m(self) -> int:
        return int(self.counts.shape[0])

    def eig(self) -> tuple[np.ndarray, np.ndarray]:
        """Eigenvalues (descending) and eigenvectors of Z^T Z, computed once."""
        if self._eig is None:
            values, vectors = np.linalg.eigh(self.gram)
            self._eig = (values[::-1].copy(), vectors[:, ::-1].copy())
        return self._eig

    def transform(self, M: np.ndarray, gram: np.ndarray | None = None,
                  factor: np.ndarray | None = None) -> Stats:
        """The statistics of Z M (``gram``/``factor`` override M^T Z^T Z M / F M)."""
        return Stats(self.n, M.T @ self.gram @ M if gram is None else gram,
                     self.factor @ M if factor is None else factor, self.counts,
                     self.sparse @ M, self.dense @ M)


def _dense_product(X: np.ndarray, m: int, rng: np.random.Generator,
                   chunk: int = 1 << 15) -> np.ndarray:
    """R X for an m x n matrix R of iid random signs: the dense sketch's sum_i S_i.

    Every client sends one copy to every row with a uniform, independent sign,
    so sum_i S_i is a sign matrix whatever Latin square assigns the copies.
    """
    n, c = X.shape
    out = np.zeros((m, c))
    for start in range(0, n, chunk):
        block = X[start:start + chunk]
        bits = rng.integers(0, 2, size=(m, block.shape[0]), dtype=np.int8)
        # R = 2B - 1, so R X = 2 B X - 1 1^T X.
        out += 2.0 * (bits.astype(np.float64) @ block) - block.sum(axis=0)
    return out


def gram_factor(gram: np.ndarray) -> np.ndarray:
    """F with F^T F = gram (symmetric square root; tolerates a singular Gram)."""
    values, vectors = np.linalg.eigh(gram)
    return np.sqrt(np.clip(values, 0.0, None))[:, None] * vectors.T


def stats_from_matrix(Z: np.ndarray, m: int, rng: np.random.Generator,
                      gram: np.ndarray | None = None, factor: np.ndarray | None = None,
                      dense: bool = True) -> Stats:
    """Draw both sketches for a given matrix (the real datasets) and sketch it.

    ``dense=False`` leaves out the dense sketch (O(n m d), the costly part), for
    callers without a Laplace LTM; its product is then zeros.
    """
    Z = np.asarray(Z, dtype=np.float64)
    n, c = Z.shape
    if m > n:
        raise InputError(f"the sketch has more rows than there are clients: m={m} > n={n}")
    gram = Z.T @ Z if gram is None else gram
    factor = gram_factor(gram) if factor is None else factor
    rows = rng.integers(0, m, size=(n,))
    signs = rng.integers(0, 2, size=(n,)).astype(np.float64) * 2 - 1
    index = rows[:, None] * c + np.arange(c)
    sparse = np.bincount(index.ravel(), weights=(Z * signs[:, None]).ravel(),
                         minlength=m * c).reshape(m, c)
    return Stats(n, gram, factor, np.bincount(rows, minlength=m), sparse,
                 _dense_product(Z, m, rng) if dense else np.zeros((m, c)))


def _popcount(words: np.ndarray) -> np.ndarray:
    count = getattr(np, "bitwise_count", None)  # numpy >= 2.0
    if count is not None:
        return count(words)
    as_bytes = words.view(np.uint8).reshape(*words.shape, 8)
    return _BYTE_BITS[as_bytes].sum(axis=-1)


_BYTE_BITS = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def _sign_grams(counts: np.ndarray, m: int, rng: np.random.Generator
                ) -> tuple[np.ndarray, np.ndarray]:
    """R R^T and S R^T for a random sign matrix R (m x n), clients grouped by bucket.

    Drawn as bits, 64 clients to a word, each bucket's clients in their own
    words (the unused bits are 0 in every row, so they never count): an entry of
    R R^T is n - 2 * (bits that differ), one of S R^T is c - 2 * (bits set).
    """
    words = (counts + 63) // 64
    ends = np.cumsum(words)
    total = int(ends[-1])
    bits = np.frombuffer(rng.bytes(8 * m * total), dtype=np.uint64).reshape(m, total).copy()
    for end, c in zip(ends, counts, strict=True):
        if c % 64:
            bits[:, end - 1] &= np.uint64((1 << int(c % 64)) - 1)
    n = int(counts.sum())
    differ = np.zeros((m, m))
    for a in range(m):
        differ[a, a:] = _popcount(bits[a] ^ bits[a:]).sum(axis=1)
    differ = np.triu(differ) + np.triu(differ, 1).T
    starts = ends - words
    set_bits = np.add.reduceat(_popcount(bits), starts, axis=1).T.astype(np.float64)
    set_bits[counts == 0] = 0.0  # reduceat repeats a column for an empty segment
    return n - 2.0 * differ, counts[:, None] - 2.0 * set_bits


def synthetic_stats(n: int, d: int, m: int, rng: np.random.Generator,
                    dense: bool = True) -> Stats:
    """Statistics of an n x d matrix X of iid N(0, 1) entries and its two sketches,
    drawn exactly without X (``dense=False``: the sparse sketch only, whose rows
    are orthogonal, so large m costs nothing; ``dense`` is then zeros).

    Stack both sketches into B (2m x n; the sparse one without its signs, which
    drop out because X's rows are symmetric and independent of everything). Given
    B = L O with orthonormal rows O, O X is an iid Gaussian Z and B X = L Z, while
    X^T X = Z^T Z + X^T (I - O^T O) X, the last an independent Wishart(n - rank B).
    So only B B^T is needed: the bucket counts, R R^T and S R^T, counted in bits.
    """
    counts = rng.multinomial(n, np.full(m, 1.0 / m))
    full = counts > 0
    if not dense:
        Z = rng.standard_normal((int(full.sum()), d))
        sparse = np.zeros((m, d))
        sparse[full] = np.sqrt(counts[full])[:, None] * Z
        gram = Z.T @ Z + wishart(d, n - Z.shape[0], rng)
        return Stats(n, gram, np.linalg.cholesky(gram).T, counts, sparse, np.zeros((m, d)))
    dense_gram, cross = _sign_grams(counts, m, rng)
    K = np.block([[np.diag(counts[full].astype(np.float64)), cross[full]],
                  [cross[full].T, dense_gram]])
    try:
        L = np.linalg.cholesky(K)
        rank = K.shape[0]
    except np.linalg.LinAlgError:  # dependent rows (tiny n): a square root of the PSD part
        values, vectors = np.linalg.eigh(K)
        keep = values > 1e-9 * values.max()
        L, rank = vectors[:, keep] * np.sqrt(values[keep]), int(keep.sum())
    Z = rng.standard_normal((L.shape[1], d))
    BX = L @ Z
    sparse = np.zeros((m, d))
    sparse[full] = BX[:int(full.sum())]
    gram = Z.T @ Z + wishart(d, n - rank, rng)
    return Stats(n, gram, np.linalg.cholesky(gram).T, counts, sparse, BX[int(full.sum()):])


def explicit_synthetic_stats(n: int, d: int, m: int, rng: np.random.Generator) -> Stats:
    """The same statistics from an explicit X and explicit sketches (slow; for checks)."""
    return stats_from_matrix(rng.standard_normal((n, d)), m, rng)


def _haar(d: int, rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def lowrank_stats(base: Stats, k: int, rng: np.random.Generator) -> Stats:
    """The paper's low-rank data A = U' Sigma V'^T from the Gaussian X of ``base``.

    X = Q R (R = base.factor) gives a uniformly random U' = Q; with a fresh
    uniformly random V, A = X R^-1 Sigma V^T has singular values Sigma: k of
    sqrt(n/k), d - k of 1/n. Its Gram V Sigma^2 V^T is formed exactly.
    """
    n, d = base.n, base.gram.shape[0]
    sigma = np.full(d, 1.0 / n)
    sigma[:k] = math.sqrt(n / k)
    V = _haar(d, rng)
    factor = sigma[:, None] * V.T
    M = np.linalg.solve(base.factor, factor)  # R^-1 Sigma V^T
    return base.transform(M, gram=(V * sigma**2) @ V.T, factor=factor)


def ridge_stats(base: Stats, mu2: float, rng: np.random.Generator) -> Stats:
    """Z = [X | X x] with x ~ N(0, mu2 I): the paper's regression data, b = A x."""
    d = base.gram.shape[0]
    x = rng.normal(0.0, math.sqrt(mu2), size=d)
    M = np.column_stack([np.eye(d), x])
    return base.transform(M)


def wishart(c: int, dof: int, rng: np.random.Generator) -> np.ndarray:
    """Wishart_c(dof, I) by Bartlett's decomposition: O(c^2) draws for any dof."""
    L = np.tril(rng.standard_normal((c, c)), -1)
    L[np.diag_indices(c)] = np.sqrt(rng.chisquare(dof - np.arange(c)))
    return L @ L.T

