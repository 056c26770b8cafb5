"""Client noise, calibrated by the paper's corollaries.

- Gaussian (Corollary "privacynew", sparse sketch, randomizer R_D):
  sigma^2 = 4 s^3 eta^2 ln(1.25 s / (delta/d - m exp(-(n-s-t')/(8m)))) m d^2
            / (epsilon^2 (n-s-t')).
  R_D outputs zeros when n <= 8 m ln(d m / delta) + s + t'.
- Laplace (Corollary "privlap", dense sketch, randomizer R_D^dense): the
  difference of two Gamma(1/(n/m - t'), b) samples with b = 2 eta m^2 d / epsilon;
  the n/m - t' honest contributions to a bucket add up to Laplace(0, b). A run
  draws its lattice analogue (:meth:`NoiseSpec.sample_lattice`): Polya
  differences whose sum is a discrete Laplace of scale b 2^F.
- Skellam (``kind="skellam"``, the distributed Skellam mechanism of Agarwal,
  Kairouz and Liu, NeurIPS 2021): integer noise on the fixed-point lattice,
  Poisson(mu/2) - Poisson(mu/2) per entry, added by each client to its already
  encoded values, so the data never meets floating point after encoding. The
  bucket's variance mu comes from the Skellam RDP bound (:mod:`.privacy`) and is
  split over its H honest contributors (the exact binomial tail's, as the analytic
  Gaussian's); sums of Skellams are Skellam, so every
  bucket's noise is exactly Skellam whatever its number of contributors.
- None: no noise, for exact checks.

Gaussian noise has two calibrations (``calibration``): ``corollary``, the
formula above, and ``analytic``, the analytic Gaussian mechanism for the
release's l2 sensitivity on the lattice split over the H honest draws that every
entry of T holds except with probability delta_E, H from the exact binomial tail
of the honest count and delta split between delta_E and the noise so that each
client's variance is least (:mod:`.privacy` derives both; the analytic one holds
for every epsilon). A run rounds each client's draw to the lattice on its own; what that
releases is what :mod:`.lattice` certifies.

Noise is drawn from a cryptographic generator keyed by the OS's entropy
(:func:`noise_rng`), never from the run's public ``--seed``: the sketch is
public, the noise must not be, and a non-cryptographic generator's state can
be recovered from its outputs.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from harness.clients import MAX_POISSON_MEAN, poisson, skellam
from harness.errors import InputError
from harness.privacy import accounting as privacy
from harness.privacy import lattice
from harness.privacy.certificates import calibrated, certificate, honest_split

__all__ = ["CALIBRATIONS", "NOISE_GENERATOR", "NOISE_KINDS", "NoiseSpec", "calibration_table",
           "noise_rng", "zero_output_bound"]

NOISE_KINDS = ("gaussian", "laplace", "skellam", "none")
CALIBRATIONS = ("corollary", "analytic")
NOISE_GENERATOR = "randomgen.AESCounter (AES-128-CTR, AES-NI where present; key from os.urandom)"
# The largest Poisson mean drawn exactly (harness.clients.poisson).
_POISSON_MAX = MAX_POISSON_MEAN
# The ring Z_2^64 holds +-2^63; a bucket's noise stays below 2^62 with margin to spare.
_NOISE_BOUND = 2.0**62
_TAILS = 40.0


def zero_output_bound(m: int, d: int, s: int, t_prime: int, delta: float) -> float:
    """R_D's threshold: at n <= 8 m ln(dm/delta) + s + t' every client sends zeros."""
    # The paper states the threshold for s = 1 (n <= 8m ln(dm/delta) + t'); the
    # corollary's sigma^2 needs delta/d > m exp(-(n-s-t')/8m), i.e. n above the
    # threshold plus s. Zeros up to there leave no n where neither applies.
    return 8 * m * math.log(d * m / delta) + s + t_prime


def noise_rng() -> np.random.Generator:
    """A numpy Generator over AES-128 in counter mode, keyed from ``os.urandom``."""
    # Loaded here: a streamed run's parent process draws no noise (its clients do).
    from randomgen import AESCounter

    return np.random.Generator(AESCounter(key=int.from_bytes(os.urandom(16), "little")))


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
    calibration: str = "corollary"
    # Skellam noise lives on the fixed-point lattice: its sensitivity is in 2^-F steps.
    frac_bits: int = 16

    def __post_init__(self) -> None:
        if self.kind not in NOISE_KINDS:
            raise InputError(f"unknown noise {self.kind!r}; choose one of {', '.join(NOISE_KINDS)}")
        if self.calibration not in CALIBRATIONS:
            raise InputError(f"unknown calibration {self.calibration!r}; choose "
                             f"{' or '.join(CALIBRATIONS)} (--calibration)")
        if self.calibration != "corollary" and self.kind != "gaussian":
            raise InputError(f"--calibration {self.calibration} is for Gaussian noise; "
                             f"{self.kind} noise has one calibration")
        if self.kind == "none":
            return
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise InputError(f"--epsilon must be a positive number, got {self.epsilon}")
        if not self.eta > 0:
            raise InputError(f"--eta must be positive, got {self.eta}")
        if self.t_prime < 0 or self.t_prime >= self.n:
            raise InputError(f"--corrupt-clients t' must satisfy 0 <= t' < n, got {self.t_prime}")
        if self.kind in ("gaussian", "skellam"):
            if not 0 < self.delta < 1:
                raise InputError(f"--delta must lie in (0, 1), got {self.delta}")
            if not self.zero_output:
                if self.n - self.s - self.t_prime <= 0:
                    raise InputError("Gaussian calibration needs n > s + t'")
                if self.kind == "skellam" or self.calibration == "analytic":
                    self._check_tight()
                elif self._log_denominator <= 0:
                    raise InputError(
                        "Gaussian calibration is undefined: delta/d <= m exp(-(n-s-t')/(8m)); "
                        "raise --delta or the number of clients")
        if self.kind == "laplace":
            if self.s != self.m:
                raise InputError("Laplace noise is calibrated for the dense sketch (s = m); "
                                 "use --dense or --noise gaussian")
            if self.n / self.m - self.t_prime <= 0:
                raise InputError("Laplace calibration needs n/m > t'; lower --corrupt-clients")
            # A Polya draw is Poisson(Gamma(shape, ~beta)): an exact Poisson stops at 2^62,
            # which a Gamma passes at 40 beta with probability below e^-40.
            if not 40 * self.laplace_lattice_scale < _POISSON_MAX:
                most = math.floor(math.log2(_POISSON_MAX / (40 * self.laplace_scale)))
                fix = (f"use --frac-bits {most} or less, or raise --epsilon" if most >= 0
                       else "raise --epsilon, or lower --eta (rescale the data)")
                raise InputError(f"Laplace noise of scale {self.laplace_scale:.4g} is too wide "
                                 f"for the lattice at --frac-bits {self.frac_bits}; {fix}")

    def _check_tight(self) -> None:
        """Analytic and Skellam noise need delta_E < delta, and a ring that holds the noise."""
        # The accountant's numerics hold in these ranges (and any sane request lies there).
        for name, value, low, high in (("epsilon", self.epsilon, 1e-4, 100.0),
                                       ("delta", self.delta, 1e-30, 0.5),
                                       ("eta", self.eta, 1e-12, 1e12)):
            if not low <= value <= high:
                raise InputError(f"--{name} must lie in [{low:g}, {high:g}] for {self.kind} "
                                 f"noise ({self.calibration if self.kind == 'gaussian' else 'rdp'} "
                                 f"calibration), got {value}")
        honest, failure = honest_split(self)
        if honest < 1 or failure >= self.delta:
            smallest = privacy.smallest_n(self.m, self.s, self.t_prime, self.delta)
            raise InputError(
                f"no {self.kind} noise gives epsilon={self.epsilon} at n={self.n}: too few clients "
                f"hide each bucket (delta_E >= delta={self.delta}); use n >= {smallest} "
                "or raise --delta")
        if self.kind != "skellam":
            return
        if not 0 <= self.frac_bits <= 52:
            raise InputError(f"--frac-bits must lie in [0, 52], got {self.frac_bits}")
        steps = round(self.eta * 2.0**self.frac_bits)
        if not 1 <= steps < 2**52:
            raise InputError(f"--eta {self.eta} is {steps} steps of the lattice at --frac-bits "
                             f"{self.frac_bits}; Skellam noise needs 1 to 2^52 steps: change "
                             "--frac-bits")
        bucket = self.client_mu * honest_split(self)[0]
        # A bucket holds about n s / m draws, at most twice that except with
        # probability delta_E; prepare checks the real sums. mu scales like 1/epsilon^2.
        worst = self.client_mu * 2 * self.n * self.s / self.m
        excess = max(self.client_mu / 2 / _POISSON_MAX,
                     (_TAILS * math.sqrt(worst) / _NOISE_BOUND) ** 2)
        if excess >= 1:
            least = self.epsilon * math.sqrt(excess) * 1.01
            raise InputError(
                f"no skellam noise for epsilon={self.epsilon} fits the 64-bit ring at "
                f"--frac-bits {self.frac_bits} (bucket variance 2^{math.log2(bucket):.0f} "
                f"lattice steps^2); use epsilon >= {least:.3g} or fewer --frac-bits")

    @property
    def zero_output(self) -> bool:
        """R_D sends zeros when too few clients hide each bucket (Gaussian and Skellam)."""
        if self.kind not in ("gaussian", "skellam"):
            return False
        return self.n <= zero_output_bound(self.m, self.d, self.s, self.t_prime, self.delta)

    @property
    def _log_denominator(self) -> float:
        honest = self.n - self.s - self.t_prime
        return self.delta / self.d - self.m * math.exp(-honest / (8 * self.m))

    @cached_property
    def sigma2(self) -> float:
        """Variance of one Gaussian noise entry (0 for no noise or zero output)."""
        if self.kind != "gaussian" or self.zero_output:
            return 0.0
        if self.calibration == "analytic":
            # On the lattice one entry moves by 2 round(eta 2^F) steps, which can exceed
            # 2 eta 2^F: calibrate for the larger, so that the certificate meets epsilon.
            # H and delta_E from the exact binomial tail, split to minimise this variance.
            sens = privacy.release_sensitivity(self.lattice_eta, self.s, self.d)
            honest, failure = honest_split(self)

            def analytic() -> float:
                return privacy.analytic_gaussian_sigma(sens.l2, self.epsilon,
                                                       self.delta - failure) ** 2 / honest
            return calibrated(self, "analytic sigma2", analytic)
        honest = self.n - self.s - self.t_prime
        log_term = math.log(1.25 * self.s / self._log_denominator)
        return (4 * self.s**3 * self.eta**2 * log_term * self.m * self.d**2
                / (self.epsilon**2 * honest))

    @property
    def lattice_eta(self) -> float:
        """eta as the lattice sees it: max(eta, round(eta 2^F) 2^-F)."""
        return max(self.eta, round(self.eta * 2.0**self.frac_bits) / 2.0**self.frac_bits)

    @property
    def lattice_sigma(self) -> float:
        """Gaussian: one client's standard deviation in lattice steps, before rounding."""
        return math.sqrt(self.sigma2) * 2.0**self.frac_bits

    @property
    def laplace_lattice_scale(self) -> float:
        """Laplace: the discrete Laplace scale beta = b 2^F of H clients' lattice noise."""
        return self.laplace_scale * 2.0**self.frac_bits

    @cached_property
    def bucket_mu(self) -> float:
        """Skellam: the variance, in lattice steps^2, of the H honest draws in an entry of T."""
        if self.kind != "skellam" or self.zero_output:
            return 0.0
        sens = privacy.release_sensitivity(self.eta, self.s, self.d, self.frac_bits)
        rest = self.delta - honest_split(self)[1]
        return privacy.skellam_mu(sens, self.epsilon, rest)

    @property
    def client_mu(self) -> float:
        """Skellam: one client's variance per entry in lattice steps^2 (Poissons of mean mu/2)."""
        if self.kind != "skellam" or self.zero_output:
            return 0.0
        return self.bucket_mu / honest_split(self)[0]

    @property
    def gamma_shape(self) -> float:
        return 1.0 / (self.n / self.m - self.t_prime)

    @property
    def laplace_scale(self) -> float:
        return 2 * self.eta * self.m**2 * self.d / self.epsilon

    @property
    def released_variance(self) -> float:
        """Variance of one client's noise entry as released on the lattice, in reals."""
        if self.kind == "none" or self.zero_output:
            return 0.0
        if self.kind == "gaussian":
            return lattice.rounded_gaussian_variance(self.lattice_sigma) / 4.0**self.frac_bits
        if self.kind == "laplace":
            q = math.exp(-1.0 / self.laplace_lattice_scale)
            return 2 * self.gamma_shape * q / (1 - q) ** 2 / 4.0**self.frac_bits
        return self.variance

    @property
    def variance(self) -> float:
        """Variance of one noise entry added by a client, as calibrated (in reals)."""
        if self.kind == "gaussian":
            return self.sigma2
        if self.kind == "laplace":
            return 2 * self.gamma_shape * self.laplace_scale**2
        if self.kind == "skellam":
            return self.client_mu / 4.0**self.frac_bits
        return 0.0

    def sample_lattice(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """One client's noise per entry as it is released: int64 steps of the 2^-F lattice.

        Added to the encoded value round(x 2^F), so the noise on the lattice does not
        depend on the data (the accountant, :mod:`.lattice`, certifies this noise).
        Gaussian: round(sigma 2^F Z). Laplace: the difference of two Polya
        (negative binomial) draws of shape 1/(n/m - t'), the lattice's analogue of
        the Gamma differences: H of them sum to a discrete Laplace of scale b 2^F.
        Skellam: as :meth:`sample`.
        """
        if self.kind == "none" or self.zero_output:
            return np.zeros(shape, dtype=np.int64)
        if self.kind == "gaussian":
            out = rng.standard_normal(shape)
            out *= self.lattice_sigma
            np.rint(out, out=out)
            return out.astype(np.int64)
        if self.kind == "laplace":
            # Polya(k, p) = Poisson(Gamma(k, (1 - p) / p)), p = 1 - exp(-1/beta), as numpy's
            # negative_binomial draws it, with a Poisson exact at the Gamma's large draws.
            q = math.exp(-1.0 / self.laplace_lattice_scale)
            scale = q / -math.expm1(-1.0 / self.laplace_lattice_scale)  # (1 - p) / p
            k = self.gamma_shape
            return (poisson(rng, rng.gamma(k, scale, size=shape), shape)
                    - poisson(rng, rng.gamma(k, scale, size=shape), shape))
        return self.sample(rng, shape)

    def sample(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """One client's noise per entry as calibrated: reals (the utility simulations'),
        or int64 lattice steps for Skellam. Runs release :meth:`sample_lattice`."""
        if self.kind == "skellam":
            if self.zero_output:
                return np.zeros(shape, dtype=np.int64)
            return skellam(rng, self.client_mu, shape)
        if self.kind == "gaussian" and not self.zero_output:
            return rng.normal(0.0, math.sqrt(self.sigma2), size=shape)
        if self.kind == "laplace":
            k, b = self.gamma_shape, self.laplace_scale
            return rng.gamma(k, b, size=shape) - rng.gamma(k, b, size=shape)
        return np.zeros(shape)

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"kind": self.kind}
        if self.kind != "none":
            certified_epsilon, certified_delta = certificate(self)
            # JSON has no infinity: None is "nothing certified".
            out.update(epsilon=self.epsilon, delta=self.delta, eta=self.eta,
                       t_prime=self.t_prime, variance=self.variance,
                       released_variance=self.released_variance, frac_bits=self.frac_bits,
                       zero_output=self.zero_output, generator=NOISE_GENERATOR,
                       certified_epsilon=(certified_epsilon if math.isfinite(certified_epsilon)
                                          else None),
                       certified_delta=certified_delta)
        if self.kind == "gaussian":
            out.update(calibration=self.calibration)
        if self.kind == "laplace":
            out.update(gamma_shape=self.gamma_shape, laplace_scale=self.laplace_scale,
                       laplace_lattice_scale=self.laplace_lattice_scale)
        if self.kind == "skellam":
            out.update(calibration="skellam-rdp",
                       bucket_mu=self.bucket_mu, client_mu=self.client_mu,
                       honest_contributors=honest_split(self)[0])
        return out


def calibration_table(ns: tuple[int, ...] = (100_000, 200_000, 500_000, 1_000_000), m: int = 100,
                      d: int = 10, s: int = 1, epsilon: float = 1.0, delta: float = 1e-6) -> str:
    """A markdown table: per-client noise of every calibration at these settings.

    The sketch's error scales with the noise's standard deviation, so the ratio
    column is what the analytic calibration does to it. Defaults: the paper's.
    """
    def spec(n: int, kind: str, calibration: str = "corollary") -> NoiseSpec:
        return NoiseSpec(kind, n=n, m=m, d=d, s=s, epsilon=epsilon, delta=delta,
                         calibration=calibration)

    lines = [f"m = {m}, d = {d}, s = {s}, epsilon = {epsilon:g}, delta = {delta:g}, eta = 1",
             "",
             "| n | sigma^2 corollary | sigma^2 analytic | Skellam variance (reals) "
             "| std analytic / corollary | certified epsilon of the corollary's noise |",
             "|---:|---:|---:|---:|---:|---:|"]
    for n in ns:
        cor, ana, ske = spec(n, "gaussian"), spec(n, "gaussian", "analytic"), spec(n, "skellam")
        lines.append(f"| {n:,} | {cor.sigma2:.4g} | {ana.sigma2:.4g} | {ske.variance:.4g} "
                     f"| {math.sqrt(ana.sigma2 / cor.sigma2):.3f} "
                     f"| {privacy.certify(cor)[0]:.3f} |")
    return "\n".join(lines)
