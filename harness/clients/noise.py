"""Client noise, calibrated by the paper's corollaries.

- Gaussian (Corollary "privacynew", sparse sketch, randomizer R_D):
  sigma^2 = 4 s^3 eta^2 ln(1.25 s / (delta/d - m exp(-(n-s-t')/(8m)))) m d^2
            / (epsilon^2 (n-s-t')).
  R_D outputs zeros when n <= 8 m ln(d m / delta) + s + t'.
- Laplace (Corollary "privlap", dense sketch, randomizer R_D^dense): the
  difference of two Gamma(1/(n/m - t'), b) samples with b = 2 eta m^2 d / epsilon;
  the n/m - t' honest contributions to a bucket add up to Laplace(0, b).
- None: no noise, for exact checks.

Noise is drawn from a generator seeded by the OS's entropy, never from the
run's public ``--seed``: the sketch is public, the noise must not be.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass

import numpy as np

from harness.errors import InputError

__all__ = ["NOISE_KINDS", "NoiseSpec", "noise_rng"]

NOISE_KINDS = ("gaussian", "laplace", "none")


def noise_rng() -> np.random.Generator:
    return np.random.default_rng(secrets.randbits(128))


@dataclass(frozen=True)
class NoiseSpec:
    kind: str
    n: int
    m: int
    d: int
    s: int
    epsilon: float = 1.0
    delta: float = 1e-6
    eta: float = 1.0
    t_prime: int = 0

    def __post_init__(self) -> None:
        if self.kind not in NOISE_KINDS:
            raise InputError(f"unknown noise {self.kind!r}; choose one of {', '.join(NOISE_KINDS)}")
        if self.kind == "none":
            return
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise InputError(f"--epsilon must be a positive number, got {self.epsilon}")
        if not self.eta > 0:
            raise InputError(f"--eta must be positive, got {self.eta}")
        if self.t_prime < 0 or self.t_prime >= self.n:
            raise InputError(f"--corrupt-clients t' must satisfy 0 <= t' < n, got {self.t_prime}")
        if self.kind == "gaussian":
            if not 0 < self.delta < 1:
                raise InputError(f"--delta must lie in (0, 1), got {self.delta}")
            if not self.zero_output:
                if self.n - self.s - self.t_prime <= 0:
                    raise InputError("Gaussian calibration needs n > s + t'")
                if self._log_denominator <= 0:
                    raise InputError(
                        "Gaussian calibration is undefined: delta/d <= m exp(-(n-s-t')/(8m)); "
                        "raise --delta or the number of clients")
        if self.kind == "laplace":
            if self.s != self.m:
                raise InputError("Laplace noise is calibrated for the dense sketch (s = m); "
                                 "use --dense or --noise gaussian")
            if self.n / self.m - self.t_prime <= 0:
                raise InputError("Laplace calibration needs n/m > t'; lower --corrupt-clients")

    @property
    def zero_output(self) -> bool:
        """R_D sends zeros when too few clients hide each bucket (Gaussian only)."""
        if self.kind != "gaussian":
            return False
        # The paper states the threshold for s = 1 (n <= 8m ln(dm/delta) + t'); the
        # corollary's sigma^2 needs delta/d > m exp(-(n-s-t')/8m), i.e. n above the
        # threshold plus s. Zeros up to there leave no n where neither applies.
        bound = 8 * self.m * math.log(self.d * self.m / self.delta) + self.s + self.t_prime
        return self.n <= bound

    @property
    def _log_denominator(self) -> float:
        honest = self.n - self.s - self.t_prime
        return self.delta / self.d - self.m * math.exp(-honest / (8 * self.m))

    @property
    def sigma2(self) -> float:
        """Variance of one Gaussian noise entry (0 for no noise or zero output)."""
        if self.kind != "gaussian" or self.zero_output:
            return 0.0
        honest = self.n - self.s - self.t_prime
        log_term = math.log(1.25 * self.s / self._log_denominator)
        return (4 * self.s**3 * self.eta**2 * log_term * self.m * self.d**2
                / (self.epsilon**2 * honest))

    @property
    def gamma_shape(self) -> float:
        return 1.0 / (self.n / self.m - self.t_prime)

    @property
    def laplace_scale(self) -> float:
        return 2 * self.eta * self.m**2 * self.d / self.epsilon

    @property
    def variance(self) -> float:
        """Variance of one noise entry added by a client."""
        if self.kind == "gaussian":
            return self.sigma2
        if self.kind == "laplace":
            return 2 * self.gamma_shape * self.laplace_scale**2
        return 0.0

    def sample(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        if self.kind == "gaussian" and not self.zero_output:
            return rng.normal(0.0, math.sqrt(self.sigma2), size=shape)
        if self.kind == "laplace":
            k, b = self.gamma_shape, self.laplace_scale
            return rng.gamma(k, b, size=shape) - rng.gamma(k, b, size=shape)
        return np.zeros(shape)

    def describe(self) -> dict:
        out: dict[str, object] = {"kind": self.kind}
        if self.kind != "none":
            out.update(epsilon=self.epsilon, delta=self.delta, eta=self.eta,
                       t_prime=self.t_prime, variance=self.variance,
                       zero_output=self.zero_output)
        if self.kind == "laplace":
            out.update(gamma_shape=self.gamma_shape, laplace_scale=self.laplace_scale)
        return out
