"""The analyst's functions A and their error measures (paper, Section "Numerical
Linear Algebra in LTM" and Section "Interpolation between Local and Central DP").

The analyst receives the revealed sketch T = S [A | b] (m x d, already scaled by
1/sqrt(s)) and post-processes it; nothing here touches a client's data except the
error measures, which compare the answer with the optimum on the true A.

Low-rank approximation (Theorem "utilitykrank"):
    X' = top-k right singular vectors of T        (d x k, orthonormal columns)
    cost(X) = ||A - A X X^T||_F^2
    psi = (cost(X') - cost(X_opt)) / n

Ridge regression (Theorem "linreg"):
    x' = argmin_x ||T_A x - T_b||^2 + lambda ||x||^2 = (T_A^T T_A + lambda I)^-1 T_A^T T_b
    cost(x) = ||A x - b||^2 + lambda ||x||^2
    phi = cost(x') / cost(x_opt)

Because E[S^T S] = I for the scaled sketch, ||S v|| estimates ||v||, so lambda is
used on the sketch unchanged.
"""

from __future__ import annotations

import numpy as np

from harness.errors import InputError

__all__ = [
    "analyze_lowrank",
    "analyze_ridge",
    "lowrank_cost",
    "lowrank_error",
    "lowrank_projection",
    "psi",
    "phi",
    "ridge_cost",
    "ridge_error",
    "ridge_from_gram",
    "ridge_solve",
    "split_target",
]


def _matrix(name: str, value: np.ndarray) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim != 2:
        raise InputError(f"{name} must be a 2-D matrix, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise InputError(f"{name} contains NaN or infinite values; clean the data first")
    return arr


def _check_rank(k: int, d: int) -> None:
    if int(k) != k or not 1 <= k <= d:
        raise InputError(f"rank k must be an integer in [1, d={d}], got {k}; set --k")


# --- low-rank approximation -------------------------------------------------


def lowrank_projection(sketch: np.ndarray, k: int) -> np.ndarray:
    """X = the top-k right singular vectors of ``sketch`` (d x k, orthonormal columns).

    This is the analysis function A_k of Theorem "utilitykrank": the rank-k
    projection minimising ||T - T X X^T||_F is spanned by T's top right singular
    vectors (Eckart-Young), so it needs only the m x d sketch.
    """
    T = _matrix("the sketch", sketch)
    _check_rank(k, T.shape[1])
    _, _, vt = np.linalg.svd(T, full_matrices=False)
    if vt.shape[0] < k:
        raise InputError(f"the sketch has only {T.shape[0]} rows, fewer than k={k}; "
                         "use more sketch rows (--m) or a smaller --k")
    return np.ascontiguousarray(vt[:k].T)


def lowrank_cost(data: np.ndarray, projection: np.ndarray) -> float:
    """cost(X) = ||A - A X X^T||_F^2 for X with orthonormal columns.

    The residual is formed explicitly instead of ||A||^2 - ||A X||^2: for data
    with a large spectral gap the optimum is tiny and the difference would cancel.
    """
    A = _matrix("A", data)
    X = _matrix("the projection X", projection)
    if X.shape[0] != A.shape[1]:
        raise InputError(f"the projection has {X.shape[0]} rows, A has {A.shape[1]} columns")
    residual = A - (A @ X) @ X.T
    return float(np.einsum("ij,ij->", residual, residual))


def psi(data: np.ndarray, estimate: np.ndarray, optimum: np.ndarray) -> float:
    """psi = (||A - A X' X'^T||_F^2 - ||A - A X_opt X_opt^T||_F^2) / n."""
    n = np.asarray(data).shape[0]
    return (lowrank_cost(data, estimate) - lowrank_cost(data, optimum)) / n


def lowrank_error(data: np.ndarray, estimate: np.ndarray,
                  optimum: np.ndarray | None = None) -> float:
    """psi of ``estimate`` on A, computing X_opt from A's SVD unless it is given."""
    k = np.asarray(estimate).shape[1]
    if optimum is None:
        optimum = lowrank_projection(data, k)
    return psi(data, estimate, optimum)


# --- ridge regression --------------------------------------------------------


def split_target(matrix: np.ndarray, target_column: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Split [A | b] into (A, b); ``target_column`` indexes b (negative counts from the end)."""
    M = _matrix("the matrix", matrix)
    d = M.shape[1]
    if d < 2:
        raise InputError("ridge regression needs at least one feature besides the target; "
                         f"the matrix has {d} column(s)")
    if not -d <= target_column < d:
        raise InputError(f"--target-column {target_column} is out of range for {d} columns "
                         f"(use 0..{d - 1} or -1 for the last)")
    col = target_column % d
    return np.delete(M, col, axis=1), M[:, col].copy()


def _check_lambda(lam: float) -> None:
    if not (lam >= 0 and np.isfinite(lam)):
        raise InputError(f"--lambda must be a finite number >= 0, got {lam}")


def ridge_from_gram(gram: np.ndarray, moment: np.ndarray, lam: float) -> np.ndarray:
    """x = (G + lambda I)^-1 c for G ~ A^T A and c ~ A^T b (also used by SSP)."""
    _check_lambda(lam)
    G = np.asarray(gram, dtype=np.float64)
    system = G + lam * np.eye(G.shape[0])
    try:
        return np.linalg.solve(system, np.asarray(moment, dtype=np.float64))
    except np.linalg.LinAlgError:
        # A singular system (lambda = 0, rank-deficient sketch): take the
        # minimum-norm solution, which is what the regularised limit gives.
        return np.linalg.lstsq(system, moment, rcond=None)[0]


def ridge_solve(features: np.ndarray, target: np.ndarray, lam: float) -> np.ndarray:
    """x = argmin ||M x - y||^2 + lambda ||x||^2 = (M^T M + lambda I)^-1 M^T y.

    Applied to the sketch's feature and target columns this is the analysis
    function A_lambda of Theorem "linreg"; applied to A and b it gives x_opt.
    """
    M = _matrix("the features", features)
    y = np.asarray(target, dtype=np.float64).reshape(-1)
    if y.shape[0] != M.shape[0]:
        raise InputError(f"the target has {y.shape[0]} entries, the features {M.shape[0]} rows")
    return ridge_from_gram(M.T @ M, M.T @ y, lam)


def ridge_cost(features: np.ndarray, target: np.ndarray, x: np.ndarray, lam: float) -> float:
    """cost(x) = ||A x - b||^2 + lambda ||x||^2."""
    A = _matrix("A", features)
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    if x.shape[0] != A.shape[1]:
        raise InputError(f"x has {x.shape[0]} entries, A has {A.shape[1]} columns")
    r = A @ x - np.asarray(target, dtype=np.float64).reshape(-1)
    return float(r @ r + lam * (x @ x))


def phi(features: np.ndarray, target: np.ndarray, estimate: np.ndarray,
        optimum: np.ndarray, lam: float) -> float:
    """phi = cost(x') / cost(x_opt) with cost(x) = ||A x - b||^2 + lambda ||x||^2."""
    best = ridge_cost(features, target, optimum, lam)
    if best <= 0:
        raise InputError("the optimal ridge cost is 0 (b = A x exactly and lambda = 0), so "
                         "phi is undefined; use --lambda > 0")
    return ridge_cost(features, target, estimate, lam) / best


def ridge_error(features: np.ndarray, target: np.ndarray, estimate: np.ndarray, lam: float,
                optimum: np.ndarray | None = None) -> float:
    """phi of ``estimate``, computing x_opt on (A, b) unless it is given."""
    if optimum is None:
        optimum = ridge_solve(features, target, lam)
    return phi(features, target, estimate, optimum, lam)


# --- whole analyses, as reported by ``ltm analyze`` --------------------------


def analyze_lowrank(sketch: np.ndarray, data: np.ndarray, k: int) -> dict:
    """Run A_k on the sketch and measure psi against A; a flat, JSON-ready dict."""
    A = _matrix("A", data)
    T = _matrix("the sketch", sketch)
    if T.shape[1] != A.shape[1]:
        raise InputError(f"the sketch has {T.shape[1]} columns but A has {A.shape[1]}; "
                         "they must come from the same run")
    estimate = lowrank_projection(T, k)
    optimum = lowrank_projection(A, k)
    cost, best = lowrank_cost(A, estimate), lowrank_cost(A, optimum)
    return {"problem": "lowrank", "n": A.shape[0], "d": A.shape[1], "m": T.shape[0], "k": k,
            "cost": cost, "optimal_cost": best, "psi": (cost - best) / A.shape[0],
            "projection": estimate.tolist()}


def analyze_ridge(sketch: np.ndarray, data: np.ndarray, lam: float,
                  target_column: int = -1) -> dict:
    """Run A_lambda on the sketch of [A | b] and measure phi against (A, b)."""
    features, target = split_target(data, target_column)
    sketch = _matrix("the sketch", sketch)
    sk_features, sk_target = split_target(sketch, target_column)
    if sk_features.shape[1] != features.shape[1]:
        raise InputError(f"the sketch has {sk_features.shape[1] + 1} columns but the data "
                         f"{features.shape[1] + 1}; they must come from the same run")
    estimate = ridge_solve(sk_features, sk_target, lam)
    optimum = ridge_solve(features, target, lam)
    best = ridge_cost(features, target, optimum, lam)
    return {"problem": "ridge", "n": features.shape[0], "d": features.shape[1],
            "m": sketch.shape[0], "lambda": lam,
            "cost": ridge_cost(features, target, estimate, lam), "optimal_cost": best,
            "phi": phi(features, target, estimate, optimum, lam),
            "coefficients": estimate.tolist(), "optimal_coefficients": optimum.tolist()}
