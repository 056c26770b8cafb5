"""What the client noise buys: sensitivities, calibrations and the accountant.

The release is the unscaled sketch T = sum_i S_i (X + N_i), an m x d matrix (the
1/sqrt(s) of eq. Ts is public post-processing and changes nothing here).
Neighbouring inputs replace one client's row by another with entries in
[-eta, eta]. That client sits in s distinct buckets (one per component S_i), so
in every one of the d columns s entries of T move, each by at most 2 eta:

    entry sensitivity 2 eta, l2 sensitivity 2 eta sqrt(s d), l1 sensitivity 2 eta s d.

On the fixed-point lattice (``frac_bits`` F) one entry moves by at most
2 round(eta 2^F) steps, since rounding is monotone.

Outside an event of probability delta_E every entry of T carries the noise of
at least H honest draws: Gaussian noise of variance H sigma^2, Skellam noise of
variance H mu. H and delta_E come from one of two bounds (:func:`guaranteed_honest`):

- the exact binomial tail (the analytic calibration and Skellam noise): a column's
  s non-zeros sit in a uniform s-subset of the m rows, independently per client,
  so a row of T holds Binomial(n - t', s/m) honest draws (the t' corrupt clients
  fixed independently of the public sketch), delta_E = m P[Binomial < H] by a
  union bound over the rows, and H is chosen to minimise each client's variance
  given what delta_E leaves of delta (:func:`analytic_split`);
- the paper's Chernoff bound (its corollary's calibration): every bucket of every
  component holds at least h = ceil((n - s - t') / (2m)) honest clients except with
  probability s m exp(-(n - s - t') / (8m)) (Lemma "nonzero" with gamma = 1/2, its
  n - s, a union bound over the s components), so H = s h.
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
from functools import lru_cache
from typing import Protocol

import numpy as np

from harness.optional import lazy_import
from harness.privacy import lattice

# Loaded on first use: importing dp-accounting takes about two seconds, which every
# command and every streaming worker process would pay for nothing.
dp_accounting = lazy_import("dp_accounting")


class CalibratedNoise(Protocol):
    """What the accountant reads of :class:`harness.privacy.noise.NoiseSpec` (which
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
    "analytic_split",
    "binomial_failure",
    "binomial_honest",
    "certify",
    "concentration_failure",
    "gaussian_epsilon",
    "guaranteed_honest",
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


def binomial_failure(n: int, m: int, s: int, t_prime: int, honest: int) -> float:
    """delta_E of the exact model: m P[Binomial(n - t', s/m) < ``honest``], the chance
    that some row of T holds fewer than ``honest`` honest clients' draws.

    A column of the sketch puts its s non-zeros in a uniformly random s-subset of
    the m rows, independently for every client, so each honest client draws noise
    into a given row of T with probability exactly s/m, and a row's count of honest
    draws is Binomial(n - t', s/m). This assumes the t' corrupt clients are fixed
    independently of the public sketch (as the paper's); the union bound is over the
    m rows (a client's s copies sit in distinct rows, so no row counts one twice).
    """
    from scipy import stats

    if honest <= 0:
        return 0.0
    return min(1.0, m * float(stats.binom.cdf(honest - 1, n - t_prime, s / m)))


def binomial_honest(n: int, m: int, s: int, t_prime: int, failure: float) -> int:
    """The largest H with :func:`binomial_failure` <= ``failure`` (0 if even H = 1 fails)."""
    low, high = 0, n - t_prime + 1  # failure(low) <= failure < failure(high)
    while high - low > 1:
        mid = (low + high) // 2
        if binomial_failure(n, m, s, t_prime, mid) <= failure:
            low = mid
        else:
            high = mid
    return low


@lru_cache(maxsize=256)
def analytic_split(n: int, m: int, s: int, t_prime: int, epsilon: float,
                   delta: float) -> tuple[int, float]:
    """(H, delta_E) of the analytic calibration: the guaranteed honest draws per entry
    of T by the exact binomial tail, and its failure probability, chosen so that each
    client's Gaussian variance sigma_G(epsilon, delta - delta_E)^2 / H is least.

    A 1-D search over the share of delta left to the count's failure (a log grid of
    it, then the best H's neighbours). Independent of the sensitivity, which scales
    sigma_G alone. (0, delta) when no H >= 1 leaves any delta for the noise.
    """
    def cost(honest: int) -> float:
        failure = binomial_failure(n, m, s, t_prime, honest)
        if honest < 1 or failure >= delta:
            return math.inf
        return analytic_gaussian_sigma(1.0, epsilon, delta - failure) ** 2 / honest

    candidates = {binomial_honest(n, m, s, t_prime, delta * share)
                  for share in np.geomspace(1e-9, 1 - 1e-4, 64)}
    best = min(candidates, key=cost)
    while cost(best + 1) < cost(best):
        best += 1
    while best > 1 and cost(best - 1) < cost(best):
        best -= 1
    if not math.isfinite(cost(best)):
        return 0, delta
    return best, binomial_failure(n, m, s, t_prime, best)


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


def guaranteed_honest(noise: CalibratedNoise) -> tuple[int, float]:
    """(H, delta_E) for ``noise``: the analytic Gaussian calibration's and Skellam's
    from the exact binomial tail (:func:`analytic_split`; Skellam takes the split the
    Gaussian of its variance would, its large-variance limit); the paper's corollary's
    from its Chernoff bound (:func:`honest_contributors`, :func:`concentration_failure`)."""
    if noise.kind == "skellam" or (noise.kind == "gaussian" and noise.calibration == "analytic"):
        return analytic_split(noise.n, noise.m, noise.s, noise.t_prime, noise.epsilon,
                              noise.delta)
    return (honest_contributors(noise.n, noise.m, noise.s, noise.t_prime),
            concentration_failure(noise.n, noise.m, noise.s, noise.t_prime))


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
    honest, failure = guaranteed_honest(noise)
    if failure >= noise.delta or honest < 1:
        return math.inf, noise.delta
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


def accountant(noise: CalibratedNoise, honest: int | None = None) -> str:
    """What :func:`certify` certified ``noise`` with, in words (result.json, the summary);
    ``honest``: its H, if known (:func:`guaranteed_honest` otherwise)."""
    if noise.kind == "none":
        return "none (no noise)"
    if noise.kind == "laplace":
        return "discrete Laplace on the lattice (pure DP)"
    if noise.zero_output:
        return "R_D sends zeros ((0, 0)-DP)"
    if noise.kind == "skellam":
        return ("dp-accounting RDP (Skellam, Agarwal et al. 2021, Thm 3.5); honest draws per "
                "entry by the exact binomial tail")
    if honest is None:
        honest, _ = guaranteed_honest(noise)
    count = ("; honest draws per entry by the exact binomial tail"
             if noise.calibration == "analytic" else "")
    if not lattice.gaussian_route(noise.lattice_sigma, honest):
        return "dp-accounting PLD of the rounded Gaussian on the lattice" + count
    return "dp-accounting analytic Gaussian (Balle and Wang 2018)" + count
