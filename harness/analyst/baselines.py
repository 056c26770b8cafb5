"""The mechanisms the paper compares (Section "Interpolation between Local and
Central DP"), simulated in plaintext for fast utility sweeps.

Every mechanism protects one client's row of the n x d input (entries bounded by
eta; neighbouring inputs replace one row) and ends in the same analysis
functions as the LTM (``harness.analyst.analysis``):

- local model: every client releases its row plus Gaussian noise calibrated for
  local DP (Lemma "gaussian_mech" with l2-sensitivity 2 eta sqrt(d));
- central model: MOD-SULQ (Chaudhuri, Sarwate, Sinha, NIPS 2012) for low rank,
  sufficient statistics perturbation (Vu, Slavkovic, ICDM 2009; Gaussian
  variant) for ridge regression;
- LTM, Gaussian: randomizer R_D (eq. R) with sigma^2 of Corollary "privacynew",
  sparse sketch T_S (eq. Ts);
- LTM, Laplace: randomizer R_D^dense (eq. Rdense) with the Gamma-difference
  noise of Corollary "privlap", dense sketch s = m;
- interpolation: the LTM Gaussian with variance proportional to n^-p, anchored so
  that p = 0 is the local model and p = 1 the LTM (the paper, line ~1175):
  sigma_p^2 = sigma_local^2 (sigma_ltm^2 / sigma_local^2)^p.

Three calibrations (``CALIBRATIONS``) say what "the LTM" is:

- ``dp``: the (epsilon, delta)-DP LTM: sigma_p^2 = sigma_local^2 (m/n)^p, so a
  bucket of about n/m clients carries at p = 1 the local model's noise for one
  row, as its sensitivity needs; no R_D zeros; Laplace is Corollary "privlap"'s.
- ``corollary``: the DP guarantee as proven. sigma_ltm^2 is Corollary
  "privacynew"'s (about 1/n, so sigma_p^2 ~ n^-p), R_D sends zeros below its
  threshold, and the Laplace mechanism is Corollary "privlap"'s on the dense sketch.
- ``experiments``: the recipe of the paper's experiments section (lines
  ~1171-1177). sigma_ltm^2 = sigma_local^2 / n, so sigma_p^2 = sigma_local^2 n^-p
  exactly; the Laplace mechanism adds the sum of m Lap(0, 1/epsilon) samples to
  every entry of the dense sketch S A (variance 2 m / epsilon^2). Neither is DP
  (a bucket gets m times less than DP needs: effective epsilon about sqrt(m)
  epsilon at p = 1), and every title and legend says so (``EXPERIMENTS_LABEL``).

The plaintext LTM computes T = (1/sqrt s) sum_i S_i (M + N_i) by scatter-adds,
never forming an m x n matrix. By default the noise is summed per bucket in
distribution (the sum of c client draws is N(0, c sigma^2), resp. a difference
of Gamma(c k, b) variables), which costs O(s m d) draws instead of O(s n d);
``per_client=True`` draws every client's noise as the MPC run does.

Simulations are seeded: they publish nothing, and sweeps must be reproducible.
The ``ltm run`` pipeline draws its noise from OS entropy instead (harness.privacy.noise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.analyst.analysis import lowrank_projection, ridge_from_gram, ridge_solve, split_target
from harness.clients import Sketch
from harness.errors import InputError
from harness.privacy import NoiseSpec

__all__ = [
    "CALIBRATIONS",
    "EXPERIMENTS_LABEL",
    "P_VALUES",
    "Privacy",
    "calibration_label",
    "check_calibration",
    "experiments_laplace_noise",
    "gaussian_sigma2",
    "interpolated_sigma2",
    "ltm_gaussian_sigma2",
    "local_lowrank",
    "local_release",
    "local_ridge",
    "local_sigma2",
    "ltm_lowrank",
    "ltm_noise",
    "ltm_ridge",
    "mod_sulq_beta",
    "mod_sulq_projection",
    "simulate_ltm",
    "sketch_product",
    "positive_definite",
    "ssp_noisy_gram",
    "ssp_ridge",
    "ssp_sigma2",
]

# The paper's interpolation exponents; p = 1 is the LTM's own calibration.
P_VALUES = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.0)
CALIBRATIONS = ("dp", "corollary", "experiments")
EXPERIMENTS_LABEL = ("the paper's recipe (not DP at p = 1: effective epsilon about "
                     "sqrt(m) * epsilon)")


def check_calibration(calibration: str) -> str:
    if calibration not in CALIBRATIONS:
        raise InputError(f"unknown calibration {calibration!r}; choose "
                         f"{', '.join(CALIBRATIONS)} (--calibration)")
    return calibration


def calibration_label(calibration: str) -> str:
    """The calibration as titles name it: ``experiments`` always with its warning."""
    return {"dp": "dp, the (epsilon, delta)-DP LTM",
            "corollary": "corollary, the paper's Corollary privacynew",
            "experiments": f"experiments, {EXPERIMENTS_LABEL}"}[check_calibration(calibration)]


@dataclass(frozen=True)
class Privacy:
    """(epsilon, delta) per release, entry bound eta, corrupt clients t' (LTM only).

    ``row_norm`` is the l2 bound R on one row that the local and central
    calibrations assume; None means eta sqrt(columns), what the entry bound implies.
    """

    epsilon: float = 1.0
    delta: float = 1e-6
    eta: float = 1.0
    t_prime: int = 0
    row_norm: float | None = None

    def __post_init__(self) -> None:
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise InputError(f"--epsilon must be a positive number, got {self.epsilon}")
        if not 0 < self.delta < 1:
            raise InputError(f"--delta must lie in (0, 1), got {self.delta}")
        if not self.eta > 0:
            raise InputError(f"--eta must be positive, got {self.eta}")
        if self.t_prime < 0:
            raise InputError(f"t' must be >= 0, got {self.t_prime}")
        if self.row_norm is not None and not self.row_norm > 0:
            raise InputError(f"the row-norm bound must be positive, got {self.row_norm}")

    def bound(self, columns: int) -> float:
        """R: the l2 bound on one row of ``columns`` entries."""
        if self.row_norm is not None:
            return float(self.row_norm)
        return self.eta * math.sqrt(columns)


def gaussian_sigma2(l2_sensitivity: float, epsilon: float, delta: float) -> float:
    """Lemma "gaussian_mech": sigma^2 = 2 Delta_2^2 ln(1.25 / delta) / epsilon^2."""
    return 2.0 * l2_sensitivity**2 * math.log(1.25 / delta) / epsilon**2


# --- local model -------------------------------------------------------------


def local_sigma2(d: int, privacy: Privacy) -> float:
    """Per-entry variance for a client releasing its own row in local DP.

    Replacing a row of l2 norm <= R moves it by at most 2R (R = eta sqrt(d) for
    entries in [-eta, eta]), so Lemma "gaussian_mech" gives 8 R^2 ln(1.25/delta) / eps^2.
    """
    return gaussian_sigma2(2.0 * privacy.bound(d), privacy.epsilon, privacy.delta)


def local_release(matrix: np.ndarray, privacy: Privacy, rng: np.random.Generator) -> np.ndarray:
    """Every client's row plus its own N(0, local_sigma2) noise (no sketch)."""
    M = np.asarray(matrix, dtype=np.float64)
    sigma = math.sqrt(local_sigma2(M.shape[1], privacy))
    return M + rng.normal(0.0, sigma, size=M.shape)


def local_lowrank(data: np.ndarray, k: int, privacy: Privacy,
                  rng: np.random.Generator) -> np.ndarray:
    """Local-model low rank: the top-k right singular vectors of the noisy rows."""
    return lowrank_projection(local_release(data, privacy, rng), k)


def local_ridge(features: np.ndarray, target: np.ndarray, lam: float, privacy: Privacy,
                rng: np.random.Generator) -> np.ndarray:
    """Clients perturb their whole row [a | b]; the analyst solves ridge on the result."""
    noisy = local_release(np.column_stack([features, target]), privacy, rng)
    return ridge_solve(noisy[:, :-1], noisy[:, -1], lam)


# --- central model -----------------------------------------------------------


def mod_sulq_beta(n: int, d: int, epsilon: float, delta: float) -> float:
    """MOD-SULQ's noise scale for A = X^T X / n with rows of norm <= 1 (CSS12, Alg. 2):

    beta = (d+1)/(n eps) sqrt(2 ln((d^2+d) / (2 sqrt(2 pi) delta))) + 1/(sqrt(eps) n).
    """
    inner = (d * d + d) / (2.0 * math.sqrt(2.0 * math.pi) * delta)
    return ((d + 1) / (n * epsilon) * math.sqrt(2.0 * math.log(inner))
            + 1.0 / (math.sqrt(epsilon) * n))


def _symmetric_gaussian(d: int, std: float, rng: np.random.Generator) -> np.ndarray:
    """Symmetric d x d noise with iid N(0, std^2) on and above the diagonal."""
    upper = np.triu(rng.normal(0.0, std, size=(d, d)))
    return upper + np.triu(upper, 1).T


def mod_sulq_projection(data: np.ndarray, k: int, privacy: Privacy, rng: np.random.Generator,
                        row_norm: float | None = None) -> np.ndarray:
    """Central-model baseline for low rank: top-k eigenvectors of A^T A / (n R^2) + E.

    MOD-SULQ assumes rows of norm <= 1; rows with entries bounded by eta have norm
    <= R = eta sqrt(d), so the data are scaled by 1/R (``row_norm`` overrides R).
    """
    A = np.asarray(data, dtype=np.float64)
    return mod_sulq_from_gram(A.T @ A, A.shape[0], k, privacy, rng, row_norm)


def mod_sulq_from_gram(gram: np.ndarray, n: int, k: int, privacy: Privacy,
                       rng: np.random.Generator, row_norm: float | None = None) -> np.ndarray:
    """MOD-SULQ given A^T A: it needs nothing else of A."""
    d = gram.shape[0]
    R = privacy.bound(d) if row_norm is None else float(row_norm)
    beta = mod_sulq_beta(n, d, privacy.epsilon, privacy.delta)
    noisy = gram / (n * R * R) + _symmetric_gaussian(d, beta, rng)
    _, vectors = np.linalg.eigh(noisy)
    return np.ascontiguousarray(vectors[:, ::-1][:, :k])


def ssp_sigma2(columns: int, privacy: Privacy, row_norm: float | None = None) -> float:
    """SSP's variance on the Gram of Z = [A | b] (rows of norm <= R = eta sqrt(d+1)).

    Replacing a row z changes Z^T Z by z z^T - z' z'^T, of Frobenius norm <= 2 R^2;
    Lemma "gaussian_mech" on its upper triangle gives 8 R^4 ln(1.25/delta) / eps^2.
    """
    R = privacy.bound(columns) if row_norm is None else float(row_norm)
    return gaussian_sigma2(2.0 * R * R, privacy.epsilon, privacy.delta)


def ssp_ridge(features: np.ndarray, target: np.ndarray, lam: float, privacy: Privacy,
              rng: np.random.Generator, row_norm: float | None = None) -> np.ndarray:
    """Central-model baseline for ridge: sufficient statistics perturbation.

    Releases the symmetric Gram [A | b]^T [A | b] plus Gaussian noise (one
    (epsilon, delta) release, so A^T A and A^T b share the budget) and solves
    (A^T A + E_AA + lambda I) x = A^T b + E_Ab.
    """
    Z = np.column_stack([features, target]).astype(np.float64)
    return ssp_from_gram(Z.T @ Z, lam, privacy, rng, row_norm)


def ssp_from_gram(gram: np.ndarray, lam: float, privacy: Privacy, rng: np.random.Generator,
                  row_norm: float | None = None) -> np.ndarray:
    """SSP given the Gram of [A | b] (target last)."""
    noisy = ssp_noisy_gram(gram, privacy, rng, row_norm)
    return ridge_from_gram(noisy[:-1, :-1], noisy[:-1, -1], lam)


def ssp_noisy_gram(gram: np.ndarray, privacy: Privacy, rng: np.random.Generator,
                   row_norm: float | None = None) -> np.ndarray:
    """The Gram of [A | b] plus SSP's symmetric Gaussian noise: what SSP releases."""
    c = gram.shape[0]
    return gram + _symmetric_gaussian(c, math.sqrt(ssp_sigma2(c, privacy, row_norm)), rng)


def positive_definite(matrix: np.ndarray) -> bool:
    """Whether a symmetric matrix is positive definite (its Cholesky factor exists)."""
    try:
        np.linalg.cholesky(matrix)
    except np.linalg.LinAlgError:
        return False
    return True


# --- the LTM, in plaintext ----------------------------------------------------


def ltm_noise(kind: str, n: int, m: int, d: int, s: int, privacy: Privacy) -> NoiseSpec:
    """The client noise of Corollary "privacynew" (gaussian) or "privlap" (laplace)."""
    return NoiseSpec(kind, n=n, m=m, d=d, s=s, epsilon=privacy.epsilon, delta=privacy.delta,
                     eta=privacy.eta, t_prime=privacy.t_prime)


def ltm_gaussian_sigma2(spec: NoiseSpec, privacy: Privacy, calibration: str) -> float:
    """The LTM's per-copy Gaussian variance (p = 1) under ``calibration``.

    dp: sigma_local^2 m / n. corollary: Corollary "privacynew". experiments:
    sigma_local^2 / n, so that the aggregate noise of a bucket, about (n/m) sigma^2,
    no longer grows with n (and is m times below what DP needs).
    """
    check_calibration(calibration)
    if calibration == "dp":
        return local_sigma2(spec.d, privacy) * spec.m / spec.n
    if calibration == "experiments":
        return local_sigma2(spec.d, privacy) / spec.n
    return spec.sigma2


def interpolated_sigma2(spec: NoiseSpec, p: float, privacy: Privacy | None = None,
                        calibration: str = "corollary") -> float:
    """sigma_p^2 = sigma_local^2 (sigma_ltm^2 / sigma_local^2)^p.

    p = 0 is the local model's variance and p = 1 the LTM's; in between the
    variance falls like n^-p because sigma_ltm^2 does like 1/n. ``privacy`` gives
    the local model's calibration (default: the spec's epsilon, delta and eta).
    """
    if not 0.0 <= p <= 1.0:
        raise InputError(f"the interpolation exponent p must lie in [0, 1], got {p}")
    if spec.kind != "gaussian":
        raise InputError("the n^-p interpolation is defined for Gaussian noise only")
    if privacy is None:
        privacy = Privacy(spec.epsilon, spec.delta, spec.eta, spec.t_prime)
    local = local_sigma2(spec.d, privacy)
    ltm = ltm_gaussian_sigma2(spec, privacy, calibration)
    return ltm if p == 1.0 else local * (ltm / local) ** p


def experiments_laplace_noise(shape: tuple[int, ...], m: int, epsilon: float,
                              rng: np.random.Generator) -> np.ndarray:
    """The sum of m Lap(0, 1/epsilon) per entry: a difference of two Gamma(m, 1/epsilon).

    A Laplace variable is a difference of two exponentials, and m exponentials
    of one scale add up to a Gamma(m) variable, so this is exact, not approximate.
    """
    scale = 1.0 / epsilon
    return rng.gamma(m, scale, size=shape) - rng.gamma(m, scale, size=shape)


def _scatter(rows: np.ndarray, signs: np.ndarray, M: np.ndarray, m: int) -> np.ndarray:
    """S_i M for one component: row j of M goes to bucket rows[j] with sign signs[j]."""
    n, d = M.shape
    index = rows.astype(np.int64)[:, None] * d + np.arange(d)
    weights = M * signs[:, None]
    return np.bincount(index.ravel(), weights=weights.ravel(), minlength=m * d).reshape(m, d)


def sketch_product(sketch: Sketch, matrix: np.ndarray) -> np.ndarray:
    """sum_i S_i M (no 1/sqrt(s)): ``Sketch.apply`` on s equal copies, without the copies."""
    M = np.asarray(matrix, dtype=np.float64)
    if M.ndim != 2 or M.shape[0] != sketch.n:
        raise InputError(f"the matrix has shape {M.shape}, the sketch needs ({sketch.n}, d)")
    out = np.zeros((sketch.m, M.shape[1]))
    for i in range(sketch.s):
        out += _scatter(sketch.rows[i], sketch.signs[i], M, sketch.m)
    return out


def _bucket_noise(spec: NoiseSpec, sketch: Sketch, d: int, sigma2: float,
                  rng: np.random.Generator) -> np.ndarray:
    """sum_i S_i N_i in distribution, from the number c of clients in each bucket.

    The noise is symmetric, so the signs drop out; Gaussians add variances and
    Gamma(k, b) draws add shapes.
    """
    m = sketch.m
    counts = np.stack([np.bincount(sketch.rows[i], minlength=m) for i in range(sketch.s)])
    if spec.kind == "gaussian":
        return rng.standard_normal((m, d)) * np.sqrt(sigma2 * counts.sum(axis=0))[:, None]
    if spec.kind == "laplace":
        shape = (counts * spec.gamma_shape)[:, :, None]  # (s, m, 1)
        size, scale = (sketch.s, m, d), spec.laplace_scale
        draws = rng.gamma(shape, scale, size=size) - rng.gamma(shape, scale, size=size)
        return draws.sum(axis=0)
    return np.zeros((m, d))


def _client_noise(spec: NoiseSpec, sketch: Sketch, d: int, sigma2: float,
                  rng: np.random.Generator) -> np.ndarray:
    """sum_i S_i N_i with every client's s noise vectors drawn explicitly."""
    out = np.zeros((sketch.m, d))
    for i in range(sketch.s):
        if spec.kind == "gaussian":
            draws = rng.normal(0.0, math.sqrt(sigma2), size=(sketch.n, d))
        else:
            draws = spec.sample(rng, (sketch.n, d))
        out += _scatter(sketch.rows[i], sketch.signs[i], draws, sketch.m)
    return out


def _check_shapes(M: np.ndarray, sketch: Sketch, spec: NoiseSpec) -> None:
    n, d = M.shape
    if sketch.n != n:
        raise InputError(f"the sketch has {sketch.n} columns but there are {n} clients")
    mismatch = {k: (getattr(spec, k), v) for k, v in
                (("n", n), ("d", d), ("m", sketch.m), ("s", sketch.s)) if getattr(spec, k) != v}
    if mismatch:
        raise InputError("the noise is calibrated for other dimensions: " + ", ".join(
            f"{k}={a} (data/sketch have {b})" for k, (a, b) in mismatch.items()))


def simulate_ltm(matrix: np.ndarray, sketch: Sketch, spec: NoiseSpec, rng: np.random.Generator,
                 *, p: float = 1.0, per_client: bool = False, calibration: str = "corollary",
                 privacy: Privacy | None = None) -> np.ndarray:
    """T = (1/sqrt s) sum_i S_i (M + N_i), the revealed sketch of eq. Ts, without MPC.

    Gaussian noise uses ``interpolated_sigma2(spec, p, privacy, calibration)``.
    Under ``corollary``, when R_D outputs zeros (n <= 8 m ln(dm/delta) + s + t',
    see NoiseSpec.zero_output) every client sends zeros and T = 0; the
    experiments never did that, and ``dp`` does not need it. Under ``experiments``
    Laplace noise is the sum of m Lap(0, 1/epsilon) per entry of the scaled sketch.
    """
    M = np.asarray(matrix, dtype=np.float64)
    _check_shapes(M, sketch, spec)
    check_calibration(calibration)
    if spec.kind != "gaussian" and p != 1.0:
        raise InputError("the n^-p interpolation is defined for Gaussian noise only")
    experiments = calibration == "experiments"
    if spec.zero_output and calibration == "corollary":
        return np.zeros((sketch.m, M.shape[1]))
    if experiments and spec.kind == "laplace":
        return (sketch_product(sketch, M) / math.sqrt(sketch.s)
                + experiments_laplace_noise((sketch.m, M.shape[1]), sketch.m, spec.epsilon, rng))
    sigma2 = (interpolated_sigma2(spec, p, privacy, calibration) if spec.kind == "gaussian"
              else 0.0)
    noise = (_client_noise if per_client else _bucket_noise)(spec, sketch, M.shape[1], sigma2, rng)
    return (sketch_product(sketch, M) + noise) / math.sqrt(sketch.s)


def ltm_lowrank(data: np.ndarray, k: int, sketch: Sketch, spec: NoiseSpec,
                rng: np.random.Generator, p: float = 1.0, **calibrated) -> np.ndarray:
    """LTM low rank (Theorem "utilitykrank"): A_k on the simulated revealed sketch.

    ``calibrated`` passes ``calibration`` and ``privacy`` on to :func:`simulate_ltm`.
    """
    return lowrank_projection(simulate_ltm(data, sketch, spec, rng, p=p, **calibrated), k)


def ltm_ridge(features: np.ndarray, target: np.ndarray, lam: float, sketch: Sketch,
              spec: NoiseSpec, rng: np.random.Generator, p: float = 1.0,
              **calibrated) -> np.ndarray:
    """LTM ridge (Theorem "linreg"): sketch [A | b] as one matrix, solve on the sketch."""
    T = simulate_ltm(np.column_stack([features, target]), sketch, spec, rng, p=p, **calibrated)
    return ridge_solve(*split_target(T, -1), lam)
