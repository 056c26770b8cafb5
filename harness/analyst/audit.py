"""An empirical privacy audit of one bucket of the LTM's release.

The design follows the auditing literature (Jagielski, Ullman and Oprea,
NeurIPS 2020; Nasr, Song, Thakurta, Papernot and Carlini, IEEE S&P 2021) and
Google's DP-Auditorium (a mechanism to sample, a property tester, a verdict):

- **Mechanism** (:class:`BucketMechanism`): one entry of T = sum_i S_i (X + N_i),
  simulated along the run's own noise path: H honest clients each encode their
  value on the fixed-point lattice and add their noise drawn on the lattice
  (``NoiseSpec.sample_lattice``: the Gaussian rounded on its own, Polya
  differences for Laplace, Skellam), and the encoded values are summed as int64,
  which is the ring sum as long as it does not wrap. H is
  the fewest honest contributors an entry has outside the concentration event
  the calibrations rely on (``harness.clients.guaranteed_honest``): the worst
  case the claim covers. The two neighbouring inputs differ in one client's
  value, +eta against -eta, so the bucket sums differ by the entry sensitivity
  2 eta; the other contributors hold 0.
- **Tester** (:func:`threshold_test`): the optimal test for a one-dimensional
  location family is a threshold on the output. The threshold is chosen on one
  half of the trials and its false positive and false negative rates are counted
  on the other half, so the choice cannot overfit the counts. Clopper-Pearson
  upper bounds on both rates (97.5% each, so 95% jointly) turn them into a lower
  bound on epsilon: (epsilon, delta)-DP forces FPR + e^eps FNR >= 1 - delta and
  FNR + e^eps FPR >= 1 - delta.
- **Verdict**: the bound X against the claimed epsilon Y. X > Y proves, with
  95% confidence, that the mechanism is not (Y, delta)-DP: one bucket is a
  post-processing of the whole release, so its epsilon can only be smaller.

Calibrations: ``corollary`` and ``analytic`` (Gaussian, harness.clients.NoiseSpec),
the Skellam RDP calibration, Corollary "privlap" for Laplace, and the utility
sweeps' interpolations: ``experiments`` (the paper's recipe, per-client variance
sigma_loc^2 n^-p; Laplace: the sum of m Lap(1/epsilon) on each entry of the scaled
sketch) and ``dp`` (sigma_loc^2 (m/n)^p).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from harness.analyst.baselines import Privacy, experiments_laplace_noise, local_sigma2
from harness.clients import FixedPoint
from harness.errors import InputError
from harness.privacy import NoiseSpec, guaranteed_honest, honest_contributors, noise_rng

__all__ = ["AUDIT_CALIBRATIONS", "AUDIT_NOISES", "AuditConfig", "AuditResult",
           "BucketMechanism", "audit", "bucket_mechanism", "threshold_test", "trials_needed"]

AUDIT_NOISES = ("gaussian", "laplace", "skellam")
AUDIT_CALIBRATIONS = ("corollary", "analytic", "experiments", "dp")
CONFIDENCE = 0.95
# Noise draws per neighbouring input when --trials is not given: about a minute
# for both inputs on one core of this machine (Gaussian ~40 ns a draw with its encoding).
_DRAW_BUDGET = {"gaussian": 400_000_000, "skellam": 150_000_000, "laplace": 40_000_000}
_MAX_DEFAULT_TRIALS = 4_000_000
_CHUNK_DRAWS = 1 << 22
# Thresholds tried on the selection half: quantiles, dense in both tails.
_CANDIDATES = 4000

# (option, low, high): every numeric option has a finite range.
RANGES: dict[str, tuple[float, float]] = {
    "n": (2, 10**9), "m": (1, 10**6), "d": (1, 10**5), "s": (1, 10**6),
    "epsilon": (1e-4, 100.0), "delta": (1e-30, 0.5), "eta": (1e-9, 1e9), "p": (0.0, 1.0),
    "frac_bits": (0, 52), "trials": (2, 10**9), "seed": (0, 2**63 - 1), "t_prime": (0, 10**9),
}

_OPTIONS = {"n": "--clients", "m": "--rows", "d": "--dim", "s": "--sparsity",
            "t_prime": "--corrupt-clients"}


@dataclass(frozen=True)
class AuditConfig:
    noise: str = "gaussian"
    calibration: str = "corollary"
    p: float = 1.0
    n: int = 100_000
    m: int = 100
    d: int = 10
    s: int = 1
    epsilon: float = 1.0
    delta: float = 1e-6
    eta: float = 1.0
    t_prime: int = 0
    frac_bits: int = 16
    trials: int | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.noise not in AUDIT_NOISES:
            raise InputError(f"unknown noise {self.noise!r}; choose {', '.join(AUDIT_NOISES)}")
        if self.calibration not in AUDIT_CALIBRATIONS:
            raise InputError(f"unknown calibration {self.calibration!r}; "
                             f"choose {', '.join(AUDIT_CALIBRATIONS)}")
        for name, (low, high) in RANGES.items():
            value = getattr(self, name)
            if value is None:
                continue
            if not (math.isfinite(value) and low <= value <= high):
                raise InputError(f"{_OPTIONS.get(name, '--' + name.replace('_', '-'))} must "
                                 f"lie in [{low:g}, {high:g}], got {value}")
        if self.m > self.n or self.s > self.m:
            raise InputError(f"need s <= m <= n, got n={self.n}, m={self.m}, s={self.s}; "
                             "change --clients, --rows or --sparsity")
        if self.noise == "skellam" and self.calibration != "corollary":
            raise InputError("skellam noise has one calibration (its RDP bound); "
                             "drop --calibration")
        if self.noise == "laplace" and self.calibration not in ("corollary", "experiments"):
            raise InputError("laplace noise is calibrated by corollary or experiments; "
                             f"not {self.calibration}")
        if self.noise == "laplace" and self.calibration == "corollary" and self.s != self.m:
            # NoiseSpec's own message names `ltm run`'s --dense, which audit does not have
            raise InputError(f"laplace noise is calibrated for the dense sketch (s = m): pass "
                             f"--sparsity {self.m} (= --rows) or --noise gaussian")
        if self.calibration == "analytic" and self.noise != "gaussian":
            raise InputError("--calibration analytic is for gaussian noise")


@dataclass(frozen=True)
class BucketMechanism:
    """One entry of T on the lattice: ``contributors`` clients' encoded noisy values, summed.

    ``client_noise(rng, shape)`` is one client's noise (reals, or int64 lattice
    steps when ``integer``); ``bucket_noise``, when set, is added once to the
    decoded entry instead (the experiments' Laplace recipe, which is not client noise).
    """

    contributors: int
    client_noise: Callable[[np.random.Generator, tuple[int, int]], np.ndarray] | None
    integer: bool
    fp: FixedPoint
    eta: float
    scale_out: float = 1.0
    bucket_noise: Callable[[np.random.Generator, int], np.ndarray] | None = None
    silent: bool = False  # R_D's zeros: nothing leaves the clients

    def outputs(self, rng: np.random.Generator, value: float, trials: int) -> np.ndarray:
        """``trials`` draws of the entry when the audited client holds ``value``."""
        if self.silent:
            return np.zeros(trials)
        out = np.empty(trials)
        chunk = max(1, _CHUNK_DRAWS // self.contributors)
        values = np.zeros(self.contributors)
        values[0] = value
        for start in range(0, trials, chunk):
            k = min(chunk, trials - start)
            out[start:start + k] = self._sums(rng, values, k)
        if self.bucket_noise is not None:
            out /= self.fp.scale
            out *= self.scale_out
            out += self.bucket_noise(rng, trials)
        return out

    def _sums(self, rng: np.random.Generator, values: np.ndarray, k: int) -> np.ndarray:
        shape = (k, self.contributors)
        if self.client_noise is None:
            noisy = np.broadcast_to(values, shape).copy()
            encoded = self.fp.encode(noisy).view(np.int64)
        elif self.integer:
            encoded = self.fp.encode(values).view(np.int64) + self.client_noise(rng, shape)
        else:
            noisy = self.client_noise(rng, shape)
            noisy += values
            encoded = self.fp.encode(noisy).view(np.int64)
        return encoded.sum(axis=1, dtype=np.int64).astype(np.float64)


def _spec(config: AuditConfig, kind: str, calibration: str = "corollary") -> NoiseSpec:
    return NoiseSpec(kind, n=config.n, m=config.m, d=config.d, s=config.s,
                     epsilon=config.epsilon, delta=config.delta, eta=config.eta,
                     t_prime=config.t_prime, calibration=calibration, frac_bits=config.frac_bits)


def _gaussian(sigma2: float, fp: FixedPoint
              ) -> Callable[[np.random.Generator, tuple[int, int]], np.ndarray]:
    """N(0, sigma2) rounded to the lattice on its own, as a run's clients release it."""
    sigma = math.sqrt(sigma2) * fp.scale

    def draw(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        out = rng.standard_normal(shape)
        out *= sigma
        np.rint(out, out=out)
        return out.astype(np.int64)
    return draw


def bucket_mechanism(config: AuditConfig) -> tuple[BucketMechanism, str]:
    """The audited entry for ``config``, and one line describing its noise."""
    fp = FixedPoint(config.frac_bits)
    honest = honest_contributors(config.n, config.m, config.s, config.t_prime)
    privacy = Privacy(config.epsilon, config.delta, config.eta, config.t_prime)
    if config.noise == "skellam":
        spec = _spec(config, "skellam")
        honest = guaranteed_honest(spec)[0] if not spec.zero_output else honest
        mech = BucketMechanism(honest, spec.sample, True, fp, config.eta, silent=spec.zero_output)
        return mech, (f"skellam, client variance {spec.client_mu:.4g} lattice steps^2 "
                      f"(bucket {spec.bucket_mu:.4g}), {honest} honest contributors")
    if config.noise == "laplace":
        if config.calibration == "experiments":
            # The recipe adds noise to the scaled sketch (1/sqrt(s)) sum_i S_i A, not per client.
            def bucket(rng: np.random.Generator, k: int) -> np.ndarray:
                return experiments_laplace_noise((k,), config.m, config.epsilon, rng)
            # The other clients add neither noise nor (holding 0) data: one contributor.
            mech = BucketMechanism(1, None, False, fp, config.eta,
                                   scale_out=1 / math.sqrt(config.s), bucket_noise=bucket)
            return mech, (f"laplace, the experiments' recipe: the sum of m={config.m} "
                          "Lap(1/epsilon) on the entry of the scaled sketch")
        spec = _spec(config, "laplace")
        contributors = config.s * (config.n // config.m - config.t_prime)
        mech = BucketMechanism(contributors, spec.sample_lattice, True, fp, config.eta)
        return mech, (f"laplace (Corollary privlap), Polya({spec.gamma_shape:.4g}) differences "
                      f"on the lattice (scale {spec.laplace_lattice_scale:.4g} steps), "
                      f"{contributors} honest contributors")
    if config.calibration in ("corollary", "analytic"):
        spec = _spec(config, "gaussian", config.calibration)
        sigma2, silent = spec.sigma2, spec.zero_output
        if not silent:
            honest, _ = guaranteed_honest(spec)  # the analytic one's is the exact tail's
    else:
        local = local_sigma2(config.d, privacy)
        ratio = 1 / config.n if config.calibration == "experiments" else config.m / config.n
        sigma2, silent = local * ratio**config.p, False
    mech = BucketMechanism(honest, _gaussian(sigma2, fp), True, fp, config.eta, silent=silent)
    what = "zeros (R_D below its threshold)" if silent else f"client variance {sigma2:.4g}"
    return mech, (f"gaussian ({config.calibration}, p={config.p:g}), {what}, "
                  f"{honest} honest contributors")


# --- the tester ---------------------------------------------------------------


def _upper(failures: np.ndarray, total: int, alpha: float) -> np.ndarray:
    """One-sided Clopper-Pearson upper bounds at level 1 - alpha."""
    from scipy import stats  # a second's import, which the parser of `ltm` must not pay

    failures = np.asarray(failures, dtype=np.float64)
    bound = stats.beta.ppf(1 - alpha, failures + 1, np.maximum(total - failures, 1e-300))
    return np.where(failures >= total, 1.0, bound)


def _epsilon_bounds(fp_count: np.ndarray, fn_count: np.ndarray, total: int, delta: float,
                    alpha: float) -> np.ndarray:
    fpr = _upper(fp_count, total, alpha)
    fnr = _upper(fn_count, total, alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.log(np.maximum(1 - delta - fpr, 0) / fnr)
        b = np.log(np.maximum(1 - delta - fnr, 0) / fpr)
    return np.maximum(np.nan_to_num(np.maximum(a, b), nan=0.0, neginf=0.0), 0.0)


def _counts(out0: np.ndarray, out1: np.ndarray, thresholds: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """Test "the input was D" when output >= t: FP counts D' outputs >= t, FN D outputs < t."""
    s0, s1 = np.sort(out0), np.sort(out1)
    fn = np.searchsorted(s0, thresholds, side="left")
    fp = s1.size - np.searchsorted(s1, thresholds, side="left")
    return fp, fn


@dataclass(frozen=True)
class AuditResult:
    epsilon_lower: float
    claimed: float
    threshold: float
    false_positives: int
    false_negatives: int
    evaluated: int
    trials: int
    description: str = ""

    @property
    def refuted(self) -> bool:
        return self.epsilon_lower > self.claimed


def threshold_test(out0: np.ndarray, out1: np.ndarray, delta: float,
                   confidence: float = CONFIDENCE) -> tuple[float, float, int, int, int]:
    """Lower bound on epsilon from samples of M(D) (``out0``) and M(D') (``out1``).

    The first half of each picks the threshold, the second half is counted.
    Returns (bound, threshold, false positives, false negatives, evaluated per input).
    """
    alpha = (1 - confidence) / 2  # two rates, each bounded at 1 - alpha
    half = min(out0.size, out1.size) // 2
    pick0, pick1, eval0, eval1 = out0[:half], out1[:half], out0[half:2 * half], out1[half:2 * half]
    pooled = np.concatenate([pick0, pick1])
    quantiles = np.concatenate([np.geomspace(1e-7, 0.5, _CANDIDATES // 2),
                                1 - np.geomspace(1e-7, 0.5, _CANDIDATES // 2)])
    thresholds = np.unique(np.quantile(pooled, np.clip(quantiles, 0, 1)))
    fp, fn = _counts(pick0, pick1, thresholds)
    best = float(thresholds[int(np.argmax(_epsilon_bounds(fp, fn, half, delta, alpha)))])
    fp_eval, fn_eval = _counts(eval0, eval1, np.array([best]))
    bound = float(_epsilon_bounds(fp_eval, fn_eval, half, delta, alpha)[0])
    return bound, best, int(fp_eval[0]), int(fn_eval[0]), half


def trials_needed(claimed: float, delta: float, confidence: float = CONFIDENCE) -> int:
    """The fewest trials whose best possible bound (no errors at all) reaches 2 x ``claimed``.

    Fewer cannot tell a mechanism from one with twice the claimed epsilon.
    """
    alpha = (1 - confidence) / 2
    target = (1 - delta) * math.exp(-2 * claimed)
    evaluated = math.ceil(math.log(alpha) / math.log1p(-target))
    return 2 * evaluated


def default_trials(config: AuditConfig, contributors: int) -> int:
    budget = _DRAW_BUDGET[config.noise] // max(1, contributors)
    return int(min(_MAX_DEFAULT_TRIALS, max(budget, trials_needed(config.epsilon, config.delta))))


def audit(config: AuditConfig, rng: np.random.Generator | None = None) -> AuditResult:
    """Simulate the bucket on both neighbours and bound epsilon from below."""
    mech, description = bucket_mechanism(config)
    trials = config.trials or default_trials(config, mech.contributors)
    needed = trials_needed(config.epsilon, config.delta)
    if trials < needed:
        raise InputError(f"--trials {trials} is too few for a meaningful bound at claimed "
                         f"epsilon {config.epsilon:g}: use --trials {needed} or more")
    if rng is None:
        # A seed makes an audit repeatable; the run's own noise never takes one.
        rng = noise_rng() if config.seed is None else np.random.default_rng(config.seed)
    out0 = mech.outputs(rng, config.eta, trials)
    out1 = mech.outputs(rng, -config.eta, trials)
    # Laplace's claim is pure DP; the others are certified at delta.
    delta = 0.0 if config.noise == "laplace" else config.delta
    bound, threshold, fp, fn, evaluated = threshold_test(out0, out1, delta)
    return AuditResult(bound, config.epsilon, threshold, fp, fn, evaluated, trials, description)
