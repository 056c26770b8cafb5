"""The paper's utility figures and Tables 6-7, each reproduced by one call.

Section "Interpolation between Local and Central DP" (secure-sketching.tex,
lines ~1120-1275) has three figures: psi of low-rank approximation
(``lowrank``: epsilon in {0.1, 0.5} x k in {5, 10}, d = 50), phi of ridge
regression (``ridge``: epsilon in {0.01, 0.03, 0.05, 0.1}, d = 10, lambda = 10,
mu^2 = n) and the same for lambda in {1, 10, 100} (``ridge-lambda``). Each
panel shows the local model, the central model (MOD-SULQ, SSP), the LTM with
Laplace noise and the Gaussian LTM with variance ~ n^-p for the paper's p,
over n = 1000 * 1.5^i, i = 0..16 (the paper prints "1000^{i*1.5}", which would
reach 10^24), 20 runs per point.

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

The figures use the sparse sketch with s = 1 for the Gaussian LTM and the
dense sketch (s = m, whose sum of components is a matrix of iid random signs)
for the Laplace LTM.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from harness.analyst import baselines
from harness.analyst.analysis import ridge_from_gram
from harness.clients import NoiseSpec
from harness.errors import InputError
from harness.fileio import write_atomic

__all__ = [
    "CSV_COLUMNS",
    "FIGURES",
    "check_writable",
    "explicit_synthetic_stats",
    "FigureSpec",
    "Panel",
    "Stats",
    "check_figure_outputs",
    "compare_baselines",
    "figure_spec",
    "gram_factor",
    "mechanism_error",
    "n_values",
    "one_blas_thread",
    "plot_figure",
    "reproduce_figure",
    "run_figure",
    "stats_from_matrix",
    "summarize_runs",
    "synthetic_stats",
    "write_figure",
]

FIGURES = ("lowrank", "ridge", "ridge-lambda")
CSV_COLUMNS = ["figure", "panel", "epsilon", "k", "lambda", "mechanism", "p", "n", "runs",
               "error_mean", "error_std"]
# Colours of the paper's captions: grey local, blue central, orange Gaussian LTM
# (p = 1), lime Laplace LTM.
COLOURS = {"local": "grey", "central": "tab:blue", "ltm-gaussian": "tab:orange",
           "ltm-laplace": "lime"}

# The sketch size, sparsity and delta the paper never states for its figures.
DEFAULT_M = 50
DEFAULT_DELTA = 1e-6
# Rows of l2 norm <= 1, MOD-SULQ's convention; the synthetic low-rank rows have
# mean squared norm exactly 1. The paper does not clip its data either.
DEFAULT_ROW_NORM = 1.0


@dataclass(frozen=True)
class Panel:
    """One subplot: its place in the grid and the parameters that vary between panels."""

    name: str
    row: int
    col: int
    epsilon: float
    k: int | None = None
    lam: float | None = None


@dataclass(frozen=True)
class FigureSpec:
    name: str
    problem: str  # "lowrank" or "ridge"
    d: int
    panels: tuple[Panel, ...]
    n: tuple[int, ...]
    runs: int = 20
    m: int = DEFAULT_M
    s: int = 1
    delta: float = DEFAULT_DELTA
    eta: float = 1.0
    row_norm: float | None = DEFAULT_ROW_NORM
    calibration: str = "corollary"
    p_values: tuple[float, ...] = baselines.P_VALUES
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        baselines.check_calibration(self.calibration)
        if int(self.runs) != self.runs or self.runs < 2:
            raise InputError(f"--runs must be an integer >= 2 (a standard deviation needs two "
                             f"runs), got {self.runs}")
        if self.s != 1:
            raise InputError("the figures use the sparse sketch with s = 1")

    @property
    def columns(self) -> int:
        return self.d + 1 if self.problem == "ridge" else self.d

    @property
    def metric(self) -> str:
        return "psi" if self.problem == "lowrank" else "phi"

    @property
    def grid(self) -> tuple[int, int]:
        return (max(p.row for p in self.panels) + 1, max(p.col for p in self.panels) + 1)

    def privacy(self, epsilon: float) -> baselines.Privacy:
        return baselines.Privacy(epsilon, self.delta, self.eta, row_norm=self.row_norm)

    def describe(self) -> dict:
        return {"figure": self.name, "problem": self.problem, "metric": self.metric,
                "calibration": self.calibration, "d": self.d, "m": self.m, "s": self.s,
                "delta": self.delta, "eta": self.eta, "row_norm": self.row_norm,
                "runs": self.runs, "n": list(self.n), "p_values": list(self.p_values),
                "seed": self.seed, "quick": self.quick}


def n_values(m: int, quick: bool = False) -> tuple[int, ...]:
    """n = 1000 * 1.5^i for i = 0..16, rounded to multiples of m (the dense sketch's)."""
    steps = range(0, 17, 8) if quick else range(17)
    return tuple(max(m, int(round(1000 * 1.5**i / m)) * m) for i in steps)


def figure_spec(name: str, *, quick: bool = False, runs: int | None = None,
                calibration: str = "corollary", seed: int = 0, m: int = DEFAULT_M) -> FigureSpec:
    """The grid of one of the paper's figures (``--quick``: three n, three runs)."""
    if name not in FIGURES:
        raise InputError(f"unknown figure {name!r}; choose one of {', '.join(FIGURES)}")
    runs = runs if runs is not None else (3 if quick else 20)
    common = dict(runs=runs, calibration=calibration, seed=seed, quick=quick, m=m,
                  n=n_values(m, quick))
    if name == "lowrank":
        panels = tuple(Panel(f"eps={e:g}, k={k}", r, c, e, k=k)
                       for r, e in enumerate((0.1, 0.5)) for c, k in enumerate((5, 10)))
        return FigureSpec(name, "lowrank", 50, panels, **common)
    eps = (0.01, 0.03, 0.05, 0.1)
    if name == "ridge":
        panels = tuple(Panel(f"eps={e:g}, lambda=10", i // 2, i % 2, e, lam=10.0)
                       for i, e in enumerate(eps))
    else:
        panels = tuple(Panel(f"eps={e:g}, lambda={lam:g}", r, c, e, lam=lam)
                       for r, e in enumerate(eps) for c, lam in enumerate((1.0, 10.0, 100.0)))
    return FigureSpec(name, "ridge", 10, panels, **common)


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
    rows = rng.integers(0, m, size=n)
    signs = rng.integers(0, 2, size=n).astype(np.float64) * 2 - 1
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


def synthetic_stats(n: int, d: int, m: int, rng: np.random.Generator) -> Stats:
    """Statistics of an n x d matrix X of iid N(0, 1) entries and its two sketches,
    drawn exactly without X.

    Stack both sketches into B (2m x n; the sparse one without its signs, which
    drop out because X's rows are symmetric and independent of everything). Given
    B = L O with orthonormal rows O, O X is an iid Gaussian Z and B X = L Z, while
    X^T X = Z^T Z + X^T (I - O^T O) X, the last an independent Wishart(n - rank B).
    So only B B^T is needed: the bucket counts, R R^T and S R^T, counted in bits.
    """
    counts = rng.multinomial(n, np.full(m, 1.0 / m))
    dense_gram, cross = _sign_grams(counts, m, rng)
    full = counts > 0
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
    gram = Z.T @ Z + _wishart(d, n - rank, rng)
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


# --- the mechanisms ------------------------------------------------------------------


def _wishart(c: int, dof: int, rng: np.random.Generator) -> np.ndarray:
    """Wishart_c(dof, I) by Bartlett's decomposition: O(c^2) draws for any dof."""
    L = np.tril(rng.standard_normal((c, c)), -1)
    L[np.diag_indices(c)] = np.sqrt(rng.chisquare(dof - np.arange(c)))
    return L @ L.T


def local_gram(stats: Stats, sigma2: float, rng: np.random.Generator) -> np.ndarray:
    """(Z + N)^T (Z + N) for N with iid N(0, sigma2) entries, drawn exactly.

    With Z = Q F: Z^T N = F^T W for W = Q^T N (iid), and N^T N = W^T W plus
    N^T (I - Q Q^T) N, an independent sigma2 * Wishart(n - r).
    """
    r, c = stats.factor.shape
    sigma = math.sqrt(sigma2)
    W = rng.standard_normal((r, c)) * sigma
    cross = stats.factor.T @ W
    return stats.gram + cross + cross.T + W.T @ W + sigma2 * _wishart(c, stats.n - r, rng)


def _top_k(matrix: np.ndarray, k: int) -> np.ndarray:
    """The top-k right singular vectors of ``matrix`` (d x k)."""
    _, _, vt = np.linalg.svd(matrix, full_matrices=False)
    return np.ascontiguousarray(vt[:k].T)


def _top_k_gram(gram: np.ndarray, k: int) -> np.ndarray:
    _, vectors = np.linalg.eigh(gram)
    return np.ascontiguousarray(vectors[:, ::-1][:, :k])


def psi_from_stats(stats: Stats, X: np.ndarray) -> float:
    """psi = (cost(X) - cost(X_opt)) / n from A^T A's eigenpairs, without A.

    cost(X) = ||A||^2 - sum_j lambda_j ||X^T v_j||^2; the difference is formed
    term by term, with 1 - ||X^T v||^2 as ||(I - X X^T) v||^2, so it never
    subtracts two numbers of size ||A||^2.
    """
    values, vectors = stats.eig()
    k = X.shape[1]
    top, rest = vectors[:, :k], vectors[:, k:]
    missed = top - X @ (X.T @ top)
    gained = X.T @ rest
    excess = values[:k] @ np.einsum("ij,ij->j", missed, missed) - \
        np.clip(values[k:], 0.0, None) @ np.einsum("ij,ij->j", gained, gained)
    return float(excess) / stats.n


def phi_from_stats(stats: Stats, x: np.ndarray, lam: float) -> float:
    """phi = cost(x) / cost(x_opt); cost(x) - cost(x_opt) = (x - x_opt)^T H (x - x_opt)."""
    G = stats.gram
    H = G[:-1, :-1] + lam * np.eye(G.shape[0] - 1)
    x_opt = np.linalg.solve(H, G[:-1, -1])
    best = float(G[-1, -1] - x_opt @ G[:-1, -1])
    delta = np.asarray(x, dtype=np.float64) - x_opt
    return 1.0 + float(delta @ H @ delta) / best


def _ltm_sketch(stats: Stats, mechanism: str, p: float, spec_d: int, m: int,
                privacy: baselines.Privacy, calibration: str,
                rng: np.random.Generator) -> np.ndarray | None:
    """The revealed sketch T of the Gaussian (sparse, s = 1) or Laplace (dense) LTM.

    None when R_D outputs zeros (Corollary "privacynew"'s threshold; corollary only).
    """
    n, c = stats.n, stats.sparse.shape[1]
    if mechanism == "ltm-gaussian":
        spec = NoiseSpec("gaussian", n=n, m=m, d=spec_d, s=1, epsilon=privacy.epsilon,
                         delta=privacy.delta, eta=privacy.eta)
        if spec.zero_output and calibration == "corollary":
            return None
        sigma2 = baselines.interpolated_sigma2(spec, p, privacy, calibration)
        # the c clients of a bucket add up to one N(0, c sigma^2) draw per entry
        return stats.sparse + rng.standard_normal((m, c)) * np.sqrt(stats.counts * sigma2)[:, None]
    signal = stats.dense / math.sqrt(m)
    if calibration == "experiments":
        return signal + baselines.experiments_laplace_noise((m, c), m, privacy.epsilon, rng)
    spec = NoiseSpec("laplace", n=n, m=m, d=spec_d, s=m, epsilon=privacy.epsilon,
                     delta=privacy.delta, eta=privacy.eta)
    # each client adds Gamma(1/(n/m), b) differences to each of the m rows: n of them per entry
    shape, scale = n * spec.gamma_shape, spec.laplace_scale
    noise = rng.gamma(shape, scale, size=(m, c)) - rng.gamma(shape, scale, size=(m, c))
    return signal + noise / math.sqrt(m)


def mechanism_error(stats: Stats, problem: str, mechanism: str, *, epsilon: float,
                    m: int, k: int | None = None, lam: float | None = None, p: float = 1.0,
                    privacy: baselines.Privacy | None = None, calibration: str = "corollary",
                    rng: np.random.Generator) -> float:
    """psi (lowrank, rank k) or phi (ridge, lambda) of one run of one mechanism."""
    privacy = privacy or baselines.Privacy(epsilon)
    privacy = replace(privacy, epsilon=epsilon)
    c = stats.gram.shape[0]
    lowrank = problem == "lowrank"
    if mechanism == "local":
        noisy = local_gram(stats, baselines.local_sigma2(c, privacy), rng)
        if lowrank:
            return psi_from_stats(stats, _top_k_gram(noisy, k))
        return phi_from_stats(stats, ridge_from_gram(noisy[:-1, :-1], noisy[:-1, -1], lam), lam)
    if mechanism == "central":
        if lowrank:
            return psi_from_stats(stats, baselines.mod_sulq_from_gram(
                stats.gram, stats.n, k, privacy, rng))
        return phi_from_stats(stats, baselines.ssp_from_gram(stats.gram, lam, privacy, rng), lam)
    if mechanism not in ("ltm-gaussian", "ltm-laplace"):
        raise InputError(f"unknown mechanism {mechanism!r}")
    T = _ltm_sketch(stats, mechanism, p, c, m, privacy, calibration, rng)
    if T is None:
        T = np.zeros((m, c))
    if lowrank:
        return psi_from_stats(stats, _top_k(T, k))
    return phi_from_stats(stats, ridge_from_gram(T[:, :-1].T @ T[:, :-1],
                                                 T[:, :-1].T @ T[:, -1], lam), lam)


def _mechanisms(p_values: Sequence[float]) -> list[tuple[str, float | None]]:
    return ([("local", None), ("central", None), ("ltm-laplace", None)]
            + [("ltm-gaussian", float(p)) for p in p_values])


# --- one figure ---------------------------------------------------------------------


def one_blas_thread():
    """BLAS on one thread: the work is thousands of 50 x 50 decompositions, for which
    threads cost more than they give (and the machine is shared)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - a declared dependency
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def run_figure(spec: FigureSpec, *, progress: bool = True):
    """Every panel, mechanism, n and run of a figure; one row per run (a DataFrame)."""
    import pandas as pd
    from tqdm import tqdm

    rows: list[dict] = []
    mechanisms = _mechanisms(spec.p_values)
    total = len(spec.n) * spec.runs
    with one_blas_thread(), tqdm(total=total, disable=not progress,
                                  desc=f"figure {spec.name}", unit="run") as bar:
        for n in spec.n:
            for run in range(spec.runs):
                bar.set_postfix(n=n, refresh=False)
                seeds = np.random.SeedSequence([spec.seed, n, run]).spawn(2)
                data_rng = np.random.default_rng(seeds[0])
                base = synthetic_stats(n, spec.d, spec.m, data_rng)
                per_k: dict[int | None, Stats] = {}
                panel_seeds = seeds[1].spawn(len(spec.panels))
                for index, panel in enumerate(spec.panels):
                    if panel.k not in per_k:
                        per_k[panel.k] = (lowrank_stats(base, panel.k, data_rng)
                                          if spec.problem == "lowrank"
                                          else ridge_stats(base, float(n), data_rng))
                    stats = per_k[panel.k]
                    rng = np.random.default_rng(panel_seeds[index])
                    for mechanism, p in mechanisms:
                        error = mechanism_error(
                            stats, spec.problem, mechanism, epsilon=panel.epsilon, m=spec.m,
                            k=panel.k, lam=panel.lam, p=1.0 if p is None else p,
                            privacy=spec.privacy(panel.epsilon), calibration=spec.calibration,
                            rng=rng)
                        rows.append({"figure": spec.name, "panel": panel.name,
                                     "epsilon": panel.epsilon, "k": panel.k,
                                     "lambda": panel.lam, "mechanism": mechanism, "p": p,
                                     "n": n, "run": run, "error": error})
                bar.update()
    return pd.DataFrame(rows)


def summarize_runs(frame):
    """Mean and standard deviation over runs: the long CSV of CSV_COLUMNS."""
    keys = ["figure", "panel", "epsilon", "k", "lambda", "mechanism", "p", "n"]
    summary = (frame.groupby(keys, sort=False, dropna=False)["error"]
               .agg(runs="count", error_mean="mean", error_std="std").reset_index())
    summary["error_std"] = summary["error_std"].fillna(0.0)
    summary["k"] = summary["k"].astype("Int64")
    return summary[CSV_COLUMNS]


def _label(mechanism: str, p) -> str:
    if mechanism == "ltm-gaussian":
        return "LTM Gaussian (p=1)" if p == 1 else f"Gaussian p={p:g}"
    return {"local": "local", "central": "central", "ltm-laplace": "LTM Laplace"}[mechanism]


def _style(mechanism: str, p) -> dict:
    if mechanism != "ltm-gaussian" or p == 1:
        return {"color": COLOURS[mechanism], "linewidth": 2.0}
    from matplotlib import colormaps

    # p < 1 between the LTM (orange) and the local model (grey): a colour map no
    # fixed curve uses, darker as p falls towards the local model.
    return {"color": colormaps["RdPu"](0.35 + 0.6 * (1.0 - p)), "linewidth": 1.0,
            "linestyle": "--"}


def plot_figure(summary, spec: FigureSpec, path) -> None:
    """One subplot per panel in the paper's layout, log-x, mean with std bars, one legend."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows, cols = spec.grid
    height = 3.2 * rows + 1.2
    fig = Figure(figsize=(4.2 * cols, height))
    FigureCanvasAgg(fig)
    # Fixed margins: constrained layout measures every log-axis tick label and takes
    # seconds per panel.
    fig.subplots_adjust(left=0.08, right=0.98, top=1 - 0.75 / height, bottom=1.15 / height,
                        hspace=0.45, wspace=0.28)
    axes = fig.subplots(rows, cols, squeeze=False)
    handles = {}
    for panel in spec.panels:
        ax = axes[panel.row][panel.col]
        part = summary[summary["panel"] == panel.name]
        for (mechanism, p), curve in part.groupby(["mechanism", "p"], sort=False, dropna=False):
            p = None if p is None or (isinstance(p, float) and math.isnan(p)) else p
            mean, std = curve["error_mean"].to_numpy(), curve["error_std"].to_numpy()
            lower = np.minimum(std, np.where(mean > 0, mean * 0.999, std))
            handle = ax.errorbar(curve["n"], mean, yerr=[lower, std], capsize=2,
                                 ecolor="black", elinewidth=0.6, **_style(mechanism, p))
            handles.setdefault(_label(mechanism, p), handle)
        ax.set_xscale("log")
        if len(part) and (part["error_mean"] > 0).all():
            ax.set_yscale("log")
        ax.set_title(panel.name, fontsize="medium")
        ax.set_xlabel("number of clients n")
        ax.set_ylabel(spec.metric)
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(f"{spec.name}: {spec.metric} against n, calibration={spec.calibration} "
                 f"(d={spec.d}, m={spec.m}, s={spec.s}, delta={spec.delta:g}, "
                 f"{spec.runs} runs)", fontsize="medium", y=1 - 0.15 / height)
    fig.legend(list(handles.values()), list(handles.keys()), loc="lower center",
               ncol=min(5, len(handles)), fontsize="small", frameon=False)
    fig.savefig(path, dpi=110, format="png")


def figure_paths(out_dir: str | os.PathLike, spec: FigureSpec) -> dict[str, Path]:
    stem = f"{spec.name}-{spec.calibration}{'-quick' if spec.quick else ''}"
    out = Path(out_dir)
    return {"csv": out / f"{stem}.csv", "plot": out / f"{stem}.png",
            "report": out / f"{stem}.md"}


def check_figure_outputs(out_dir: str | os.PathLike, spec: FigureSpec,
                         force: bool = False) -> dict[str, Path]:
    """The output paths; refuses (before any work) existing files or an unwritable DIR."""
    paths = figure_paths(out_dir, spec)
    existing = [str(p) for p in paths.values() if p.exists()]
    if existing and not force:
        raise InputError(f"{', '.join(existing)} already exist(s); choose another --out or "
                         "pass --force to overwrite")
    check_writable(Path(out_dir))
    return paths


def check_writable(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".ltm-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise InputError(f"cannot write to --out {out}: {exc.strerror or exc}; "
                         "choose a writable directory") from None


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def figure_report(summary, spec: FigureSpec, seconds: float) -> str:
    """A short markdown report: the settings and, per panel, each curve's first and last n."""
    lines = [f"# Figure `{spec.name}` ({spec.metric}), calibration `{spec.calibration}`", ""]
    d = spec.describe()
    lines += [f"- settings the paper states: d = {spec.d}, n = 1000 * 1.5^i "
              f"({len(spec.n)} values, {spec.n[0]} .. {spec.n[-1]}), {spec.runs} runs per "
              f"point, p in {{{', '.join(f'{p:g}' for p in spec.p_values)}}}",
              f"- settings it does not state (chosen here): m = {spec.m}, s = {spec.s} "
              f"(Gaussian LTM; the Laplace LTM uses the dense sketch, s = m), "
              f"delta = {spec.delta:g}, row-norm bound R = {d['row_norm']} "
              "(l2 sensitivity 2R for the local model, MOD-SULQ's and SSP's row bound), "
              f"seed {spec.seed}",
              f"- run time: {seconds:.0f} s" + (" (quick grid, not the paper's)"
                                                if spec.quick else ""), ""]
    small, large = min(spec.n), max(spec.n)
    lines += [f"| panel | mechanism | p | {spec.metric} at n={small} | "
              f"{spec.metric} at n={large} | last/first |",
              "| --- | --- | --- | ---: | ---: | ---: |"]
    for panel in spec.panels:
        part = summary[summary["panel"] == panel.name]
        for (mechanism, p), curve in part.groupby(["mechanism", "p"], sort=False, dropna=False):
            first = curve[curve["n"] == small].iloc[0]
            last = curve[curve["n"] == large].iloc[0]
            ratio = last["error_mean"] / first["error_mean"] if first["error_mean"] else math.nan
            p_text = "" if p is None or (isinstance(p, float) and math.isnan(p)) else f"{p:g}"
            lines.append(f"| {panel.name} | {mechanism} | {p_text} | "
                         f"{_fmt(first['error_mean'])} +- {_fmt(first['error_std'])} | "
                         f"{_fmt(last['error_mean'])} +- {_fmt(last['error_std'])} | "
                         f"{_fmt(ratio)} |")
    return "\n".join(lines) + "\n"


def write_figure(frame, spec: FigureSpec, out_dir: str | os.PathLike, *, seconds: float = 0.0,
                 force: bool = False) -> dict[str, Path]:
    """The long CSV (CSV_COLUMNS), the multi-panel PNG and the report, each written whole."""
    paths = check_figure_outputs(out_dir, spec, force)
    summary = summarize_runs(frame)
    png = io.BytesIO()
    plot_figure(summary, spec, png)
    write_atomic(paths["csv"], summary.to_csv(index=False))
    write_atomic(paths["plot"], png.getvalue())
    write_atomic(paths["report"], figure_report(summary, spec, seconds))
    return paths


def reproduce_figure(spec: FigureSpec, out_dir: str | os.PathLike, *, force: bool = False,
                     progress: bool = True) -> tuple[object, dict[str, Path], float]:
    """Check the outputs, run the whole grid, write everything: (summary, paths, seconds)."""
    check_figure_outputs(out_dir, spec, force)
    start = time.perf_counter()
    frame = run_figure(spec, progress=progress)
    seconds = time.perf_counter() - start
    paths = write_figure(frame, spec, out_dir, seconds=seconds, force=force)
    return summarize_runs(frame), paths, seconds


# --- baselines for one run's data (``ltm analyze``) -------------------------------------


def _mean_std(values: list[float]) -> dict:
    arr = np.asarray(values, dtype=np.float64)
    return {"mean": float(arr.mean()), "std": float(arr.std(ddof=1)) if arr.size > 1 else 0.0}


def compare_baselines(data: np.ndarray, problem: str, *, m: int, params: dict | None = None,
                      epsilon: float | None = None, calibration: str = "corollary",
                      runs: int = 5, seed: int = 0, k: int | None = None,
                      lam: float | None = None, target_column: int = -1) -> dict:
    """The local and central baselines (and the LTM simulated under ``calibration``)
    on a run's own data, at the run's epsilon, delta and eta unless ``epsilon`` is given.

    The simulated LTM is the Gaussian one with the run's m and s = 1.
    """
    from harness.analyst.analysis import split_target

    baselines.check_calibration(calibration)
    if int(runs) != runs or runs < 1:
        raise InputError(f"--baseline-runs must be a positive integer, got {runs}")
    noise = ((params or {}).get("parameters") or {}).get("noise") or {}
    eps = float(epsilon if epsilon is not None else noise.get("epsilon", 1.0))
    privacy = baselines.Privacy(eps, float(noise.get("delta", 1e-6)),
                                float(noise.get("eta", 1.0)))
    if problem == "lowrank":
        Z = np.asarray(data, dtype=np.float64)
    else:
        Z = np.column_stack(split_target(data, target_column))
    gram = Z.T @ Z
    factor = gram_factor(gram)
    rng = np.random.default_rng(seed)
    errors: dict[str, list[float]] = {"local": [], "central": [], "ltm-simulated": []}
    with one_blas_thread():
        for _ in range(runs):
            stats = stats_from_matrix(Z, m, rng, gram, factor, dense=False)
            for name in errors:
                mechanism = "ltm-gaussian" if name == "ltm-simulated" else name
                errors[name].append(mechanism_error(
                    stats, problem, mechanism, epsilon=eps, m=m, k=k, lam=lam,
                    privacy=privacy, calibration=calibration, rng=rng))
    return {"calibration": calibration, "epsilon": eps, "delta": privacy.delta,
            "eta": privacy.eta, "runs": runs, "m": m, "s": 1,
            **{name: _mean_std(values) for name, values in errors.items()}}
