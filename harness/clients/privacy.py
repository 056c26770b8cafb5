"""What the client noise buys: sensitivities, calibrations and the accountant.

The release is the unscaled sketch T = sum_i S_i (X + N_i), an m x d matrix (the
1/sqrt(s) of eq. Ts is public post-processing and changes nothing here).
Neighbouring inputs replace one client's row by another with entries in
[-eta, eta]. That client sits in s distinct buckets (one per component S_i), so
in every one of the d columns s entries of T move, each by at most 2 eta:

    entry sensitivity 2 eta, l2 sensitivity 2 eta sqrt(s d), l1 sensitivity 2 eta s d.

On the fixed-point lattice (``frac_bits`` F) one entry moves by at most
2 round(eta 2^F) steps, since rounding is monotone.

Every bucket of every component holds at least h = ceil((n - s - t') / (2m))
honest clients except with probability delta_E = s m exp(-(n - s - t') / (8m))
(the paper's Lemma "nonzero" with gamma = 1/2, its n - s for the s components
drawn without replacement, and a union bound over the s components). So outside
that event every entry of T carries the noise of at least H = s h honest
clients: Gaussian noise of variance H sigma^2, Skellam noise of variance H mu.
Entries with more contributors carry more noise, which is post-processing.
The whole release is then one additive mechanism on T with the sensitivities
above, certified at delta - delta_E for the noise as released: every client's
noise is drawn in steps of the 2^-F lattice and added to its encoded value.

- Gaussian: each client's draw rounded to the lattice on its own;
  :mod:`.lattice` certifies the sum of H of them (the analytic Gaussian
  mechanism of Balle and Wang, ICML 2018, from Google's dp-accounting, once the
  lattice is fine enough, with the rounding's effect bounded; below that the
  exact pmf's privacy loss distribution). The analytic calibration
  (``get_sigma_gaussian``) is for the lattice's sensitivity.
- Skellam: the Renyi-DP bound of Agarwal, Kairouz and Liu (NeurIPS 2021,
  Theorem 3.5) for noise of variance mu per entry, converted to (epsilon, delta)
  by dp-accounting's RDP conversion (Canonne, Kamath and Steinke 2020).
- Laplace: H Polya differences sum to a discrete Laplace: pure DP, epsilon the
  l1 sensitivity in steps over its scale (:func:`laplace_epsilon`).

docs/privacy.md has the derivation and the comparison with the corollary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from harness.clients import lattice
from harness.optional import lazy_import

# Loaded on first use: importing dp-accounting takes about two seconds, which every
# command and every streaming worker process would pay for nothing.
dp_accounting = lazy_import("dp_accounting")


class CalibratedNoise(Protocol):
    """What the accountant reads of :class:`harness.clients.noise.NoiseSpec` (which
    imports this module, so it is named here by its shape, not imported)."""

    @property
    def kind(self) -> str: ...

    @property
    def n(self) -> int: ...

    @property
    def m(self) -> int: ...

    @property
    def d(self) -> int: ...

    @property
    def s(self) -> int: ...

    @property
    def epsilon(self) -> float: ...

    @property
    def delta(self) -> float: ...

    @property
    def eta(self) -> float: ...

    @property
    def t_prime(self) -> int: ...

    @property
    def calibration(self) -> str: ...

    @property
    def frac_bits(self) -> int: ...

    @property
    def zero_output(self) -> bool: ...

    @property
    def sigma2(self) -> float: ...

    @property
    def lattice_sigma(self) -> float: ...

    @property
    def laplace_scale(self) -> float: ...

    @property
    def client_mu(self) -> float: ...

__all__ = [
    "SKELLAM_ORDERS",
    "CalibratedNoise",
    "Sensitivity",
    "accountant",
    "analytic_gaussian_sigma",
    "certify",
    "concentration_failure",
    "gaussian_epsilon",
    "honest_contributors",
    "laplace_epsilon",
    "pld_gaussian_epsilon",
    "release_sensitivity",
    "skellam_epsilon",
    "skellam_mu",
    "skellam_rdp",
    "smallest_n",
]

# Integer orders: Theorem 3.5 is stated for integer alpha > 1. Small epsilons want
# alpha near 2 ln(1/delta) / epsilon, hence the sparse tail up to 4096.
SKELLAM_ORDERS: tuple[int, ...] = tuple(range(2, 64)) + tuple(range(64, 4097, 16))


@dataclass(frozen=True)
class Sensitivity:
    """How far one client moves the release: ``entries`` entries by ``entry`` each."""

    entry: float
    entries: int

    @property
    def l1(self) -> float:
        return self.entry * self.entries

    @property
    def l2(self) -> float:
        return self.entry * math.sqrt(self.entries)


def release_sensitivity(eta: float, s: int, d: int, frac_bits: int | None = None) -> Sensitivity:
    """The release's sensitivity in reals, or in lattice steps when ``frac_bits`` is given."""
    entry = 2.0 * eta if frac_bits is None else 2.0 * round(eta * 2.0**frac_bits)
    return Sensitivity(entry, s * d)


def honest_contributors(n: int, m: int, s: int, t_prime: int) -> int:
    """H = s ceil((n - s - t') / 2m): the fewest honest noise draws in an entry of T."""
    return s * max(1, math.ceil((n - s - t_prime) / (2 * m)))


def concentration_failure(n: int, m: int, s: int, t_prime: int) -> float:
    """delta_E: the probability that some bucket has fewer honest clients than H assumes."""
    return min(1.0, s * m * math.exp(-(n - s - t_prime) / (8 * m)))


def smallest_n(m: int, s: int, t_prime: int, delta: float) -> int:
    """The smallest n with delta_E < delta, so that some of delta is left for the noise."""
    return s + t_prime + math.floor(8 * m * math.log(s * m / delta)) + 1


def analytic_gaussian_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """The least sigma for which N(0, sigma^2) at l2 ``sensitivity`` is (epsilon, delta)-DP.

    Balle and Wang's analytic Gaussian mechanism, exact for every epsilon > 0
    (the classic sqrt(2 ln(1.25/delta)) / epsilon is proven for epsilon < 1 only).
    Rounded up by 1e-9 relative, so that the certificate of the result never
    exceeds ``epsilon`` by the root finder's last digits.
    """
    # dp-accounting's root finder probes log(0) on the way; the result is exact.
    with np.errstate(divide="ignore", invalid="ignore"):
        sigma = float(dp_accounting.get_sigma_gaussian(epsilon, delta))
    return sensitivity * sigma * (1 + 1e-9)


def gaussian_epsilon(sigma: float, sensitivity: float, delta: float) -> float:
    """The exact epsilon of N(0, sigma^2) at l2 ``sensitivity`` and ``delta``."""
    if sigma <= 0:
        return math.inf
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(dp_accounting.get_epsilon_gaussian(sigma / sensitivity, delta))


def pld_gaussian_epsilon(sigma: float, sensitivity: float, delta: float) -> float:
    """The same epsilon from dp-accounting's privacy-loss-distribution accountant.

    Pessimistic by its discretisation (1e-4 in the privacy loss): an independent
    check on :func:`gaussian_epsilon`.
    """
    from dp_accounting.pld import PLDAccountant

    accountant = PLDAccountant(value_discretization_interval=1e-4)
    accountant.compose(dp_accounting.GaussianDpEvent(sigma / sensitivity))
    return float(accountant.get_epsilon(delta))


def skellam_rdp(alpha: float, sensitivity: Sensitivity, mu: float) -> float:
    """Agarwal, Kairouz and Liu (NeurIPS 2021), Theorem 3.5, for integer alpha > 1.

    The release adds independent Skellam noise of variance ``mu`` (each Poisson of
    mean mu/2) to every entry; with integer l1 and l2 sensitivities D1, D2:
    eps(alpha) <= alpha D2^2 / (2 mu) + min(((2 alpha - 1) D2^2 + 6 D1) / (4 mu^2),
    3 D1 / (2 mu)). The first term is the Gaussian's; the rest is the price of
    the lattice, negligible once mu is large in lattice steps.
    """
    d1, d2sq = sensitivity.l1, sensitivity.l2**2
    return (alpha * d2sq / (2 * mu)
            + min(((2 * alpha - 1) * d2sq + 6 * d1) / (4 * mu**2), 3 * d1 / (2 * mu)))


def skellam_epsilon(mu: float, sensitivity: Sensitivity, delta: float) -> float:
    """The (epsilon, delta) conversion of :func:`skellam_rdp`, minimised over the orders."""
    if mu <= 0:
        return math.inf
    rdp = [skellam_rdp(a, sensitivity, mu) for a in SKELLAM_ORDERS]
    from dp_accounting.rdp import rdp_privacy_accountant

    epsilon, _ = rdp_privacy_accountant.compute_epsilon(SKELLAM_ORDERS, rdp, delta)
    return float(epsilon)


def skellam_mu(sensitivity: Sensitivity, epsilon: float, delta: float) -> float:
    """The least variance mu (to 1e-9 relative) whose certified epsilon is <= ``epsilon``."""
    # The Gaussian's analytic variance is a lower bound: the RDP route never beats it.
    low = analytic_gaussian_sigma(sensitivity.l2, epsilon, delta) ** 2
    if not 0 < low < math.inf:
        raise ValueError(f"no Skellam calibration for sensitivity {sensitivity}")
    high = 2 * low
    while skellam_epsilon(high, sensitivity, delta) > epsilon:
        if high > 1e300:
            raise ValueError(f"no Skellam variance reaches epsilon={epsilon}")
        low, high = high, 2 * high
    while high - low > 1e-9 * high:
        mid = (low + high) / 2
        if skellam_epsilon(mid, sensitivity, delta) > epsilon:
            low = mid
        else:
            high = mid
    return high


def certify(noise: CalibratedNoise) -> tuple[float, float]:
    """The (epsilon, delta) the accountant certifies for the noise ``noise`` draws.

    For the noise actually drawn, as released on the lattice, whatever calibration
    chose it: H honest draws per entry of T (``honest_contributors``), certified at
    delta - delta_E. R_D's zeros are (0, 0)-DP; Laplace is pure DP (delta 0); no
    noise is not private at all (inf).
    """
    if noise.kind == "none":
        return math.inf, 0.0
    if noise.kind == "laplace":
        return laplace_epsilon(noise), 0.0
    if noise.zero_output:
        return 0.0, 0.0
    failure = concentration_failure(noise.n, noise.m, noise.s, noise.t_prime)
    if failure >= noise.delta:
        return math.inf, noise.delta
    honest = honest_contributors(noise.n, noise.m, noise.s, noise.t_prime)
    rest = noise.delta - failure
    if noise.kind == "skellam":
        sens = release_sensitivity(noise.eta, noise.s, noise.d, noise.frac_bits)
        return skellam_epsilon(honest * noise.client_mu, sens, rest), noise.delta
    shift = release_sensitivity(noise.eta, noise.s, noise.d, noise.frac_bits)
    epsilon = lattice.rounded_gaussian_epsilon(noise.lattice_sigma, honest, int(shift.entry),
                                               shift.entries, rest)
    return epsilon, noise.delta


def laplace_epsilon(noise: CalibratedNoise) -> float:
    """Pure epsilon of the Laplace noise as released: l1 sensitivity in steps / (b 2^F).

    Every entry of T holds n - t' >= n/m - t' honest Polya differences of shape
    1/(n/m - t') (the dense sketch puts every client in every bucket), whose sum is
    a discrete Laplace of scale beta = b 2^F plus independent symmetric noise
    (post-processing); its pmf ratio at a shift of k steps is at most e^(|k|/beta).
    """
    shift = release_sensitivity(noise.eta, noise.s, noise.d, noise.frac_bits)
    return shift.l1 / (noise.laplace_scale * 2.0**noise.frac_bits)


def accountant(noise: CalibratedNoise) -> str:
    """What :func:`certify` certified ``noise`` with, in words (result.json, the summary)."""
    if noise.kind == "none":
        return "none (no noise)"
    if noise.kind == "laplace":
        return "discrete Laplace on the lattice (pure DP)"
    if noise.zero_output:
        return "R_D sends zeros ((0, 0)-DP)"
    if noise.kind == "skellam":
        return "dp-accounting RDP (Skellam, Agarwal et al. 2021, Thm 3.5)"
    honest = honest_contributors(noise.n, noise.m, noise.s, noise.t_prime)
    if not lattice.gaussian_route(noise.lattice_sigma, honest):
        return "dp-accounting PLD of the rounded Gaussian on the lattice"
    return "dp-accounting analytic Gaussian (Balle and Wang 2018)"
