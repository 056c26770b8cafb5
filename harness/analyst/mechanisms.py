"""The mechanisms on exact sufficient statistics: one run's error of each.

The local model, the central model (MOD-SULQ, SSP) and the LTM (Gaussian on
the sparse sketch, Laplace on the dense one), each drawn exactly from the
statistics of :mod:`.simulate` (which says why that is exact), and their
errors psi (low-rank) and phi (ridge); also the baselines on a run's own data
that ``ltm analyze`` compares a sketch with.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from harness.analyst import baselines
from harness.analyst.analysis import ridge_from_gram
from harness.analyst.simulate import Stats, gram_factor, stats_from_matrix, wishart
from harness.errors import InputError
from harness.privacy import NoiseSpec

__all__ = [
    "compare_baselines",
    "local_gram",
    "mechanism_error",
    "mechanisms",
    "one_blas_thread",
    "phi_from_stats",
    "psi_from_stats",
]


def local_gram(stats: Stats, sigma2: float, rng: np.random.Generator) -> np.ndarray:
    """(Z + N)^T (Z + N) for N with iid N(0, sigma2) entries, drawn exactly.

    With Z = Q F: Z^T N = F^T W for W = Q^T N (iid), and N^T N = W^T W plus
    N^T (I - Q Q^T) N, an independent sigma2 * Wishart(n - r).
    """
    r, c = stats.factor.shape
    sigma = math.sqrt(sigma2)
    W = rng.standard_normal((r, c)) * sigma
    cross = stats.factor.T @ W
    return stats.gram + cross + cross.T + W.T @ W + sigma2 * wishart(c, stats.n - r, rng)


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
                    rng: np.random.Generator, sketch: bool = True,
                    notes: dict | None = None) -> float:
    """psi (lowrank, rank k) or phi (ridge, lambda) of one run of one mechanism.

    ``sketch=False`` runs the Gaussian LTM without a sketch (m = n: every client
    its own bucket, the analyst solves on A + N). ``notes``, when given, receives
    ``indefinite``: whether the noisy Gram plus lambda I that SSP (central ridge)
    inverts was not positive definite, so that its "solution" minimises nothing.
    """
    privacy = privacy or baselines.Privacy(epsilon)
    privacy = replace(privacy, epsilon=epsilon)
    c = stats.gram.shape[0]
    lowrank = problem == "lowrank"
    if lowrank and k is None:
        raise InputError("the low-rank error needs the rank k")
    if not lowrank and lam is None:
        raise InputError("the ridge error needs lambda")
    # Each is read only for its own problem, where the checks above saw it given.
    rank, lam = (0 if k is None else k), (0.0 if lam is None else lam)
    if mechanism == "local":
        noisy = local_gram(stats, baselines.local_sigma2(c, privacy), rng)
        if lowrank:
            return psi_from_stats(stats, _top_k_gram(noisy, rank))
        return phi_from_stats(stats, ridge_from_gram(noisy[:-1, :-1], noisy[:-1, -1], lam), lam)
    if mechanism == "central":
        if lowrank:
            return psi_from_stats(stats, baselines.mod_sulq_from_gram(
                stats.gram, stats.n, rank, privacy, rng))
        noisy = baselines.ssp_noisy_gram(stats.gram, privacy, rng)
        if notes is not None:
            notes["indefinite"] = not baselines.positive_definite(
                noisy[:-1, :-1] + lam * np.eye(c - 1))
        return phi_from_stats(stats, ridge_from_gram(noisy[:-1, :-1], noisy[:-1, -1], lam), lam)
    if mechanism not in ("ltm-gaussian", "ltm-laplace"):
        raise InputError(f"unknown mechanism {mechanism!r}")
    if not sketch:
        return _unsketched_error(stats, lowrank, mechanism, p, privacy, calibration,
                                 rank, lam, rng)
    T = _ltm_sketch(stats, mechanism, p, c, m, privacy, calibration, rng)
    if T is None:
        T = np.zeros((m, c))
    if lowrank:
        return psi_from_stats(stats, _top_k(T, rank))
    return phi_from_stats(stats, ridge_from_gram(T[:, :-1].T @ T[:, :-1],
                                                 T[:, :-1].T @ T[:, -1], lam), lam)


def _unsketched_error(stats: Stats, lowrank: bool, mechanism: str, p: float,
                      privacy: baselines.Privacy, calibration: str, rank: int, lam: float,
                      rng: np.random.Generator) -> float:
    """The Gaussian LTM with the identity as its sketch: A + N, per-client variance
    sigma_p^2 at m = n (``dp``: the local model's at p = 1; ``experiments``:
    sigma_local^2 / n). Corollary's R_D sends zeros at m = n, so it has no such variant."""
    if mechanism != "ltm-gaussian":
        raise InputError("only the Gaussian LTM has a no-sketch variant")
    if calibration == "corollary":
        raise InputError("the no-sketch variant needs --calibration dp or experiments: "
                         "the corollary's R_D sends zeros at m = n")
    c = stats.gram.shape[0]
    spec = NoiseSpec("gaussian", n=stats.n, m=stats.n, d=c, s=1, epsilon=privacy.epsilon,
                     delta=privacy.delta, eta=privacy.eta)
    noisy = local_gram(stats, baselines.interpolated_sigma2(spec, p, privacy, calibration), rng)
    if lowrank:
        return psi_from_stats(stats, _top_k_gram(noisy, rank))
    return phi_from_stats(stats, ridge_from_gram(noisy[:-1, :-1], noisy[:-1, -1], lam), lam)


def mechanisms(p_values: Sequence[float]) -> list[tuple[str, float | None]]:
    return ([("local", None), ("central", None), ("ltm-laplace", None)]
            + [("ltm-gaussian", float(p)) for p in p_values])


def one_blas_thread():
    """BLAS on one thread: the work is thousands of 50 x 50 decompositions, for which
    threads cost more than they give (and the machine is shared)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - a declared dependency
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")

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
