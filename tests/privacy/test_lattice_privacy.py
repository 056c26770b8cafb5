"""The certificate is for the noise as released: rounded to the 2^-F lattice per client.

The exact epsilon is computed here by code of its own: each client's pmf from the
normal distribution, the H-fold sum by direct convolution (no FFT), the hockey-stick
divergence summed over the support, epsilon by bisection. The harness's certificate
must never be below it, and not far above it either.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import signal, stats

from harness.clients.encoding import FixedPoint
from harness.clients.matrices import ArrayRows
from harness.clients.sharing import ADDITIVE
from harness.clients.sketch import Sketch
from harness.privacy import accounting as privacy
from harness.privacy import lattice
from harness.privacy.noise import NoiseSpec, noise_rng
from harness.stream.noisy import NoisyChunks, group_slots
from harness.stream.plan import StreamPlan

# The issue's setting: n = 1e6, d = 1, m = 100, s = 1, analytic, epsilon 1, delta 1e-6.
ISSUE = {"n": 1_000_000, "m": 100, "d": 1, "s": 1, "epsilon": 1.0, "delta": 1e-6,
         "calibration": "analytic"}


def _client_pmf(sc: float) -> np.ndarray:
    """P(round(sc Z) = k), k = -K..K, from the normal distribution's cdf and sf."""
    K = int(sc * 15) + 3
    k = np.arange(-K, K + 1, dtype=np.float64)
    low = stats.norm.cdf((k + 0.5) / sc) - stats.norm.cdf((k - 0.5) / sc)
    high = stats.norm.sf((k - 0.5) / sc) - stats.norm.sf((k + 0.5) / sc)
    return np.where(k < 0, low, high)


def _trim(p: np.ndarray) -> np.ndarray:
    """Drop both ends below 1e-60 of the peak (symmetric, so the centre stays the centre)."""
    live = np.flatnonzero(p > 1e-60 * p.max())
    cut = min(live[0], p.size - 1 - live[-1])
    return p[cut: p.size - cut]


def _sum_pmf(sc: float, honest: int) -> np.ndarray:
    """The pmf of H rounded Gaussians' sum, centred, by binary powering with direct
    convolutions (positive terms only: no cancellation)."""
    result = np.ones(1)
    power = _client_pmf(sc)
    h = honest
    while h:
        if h & 1:
            result = _trim(signal.convolve(result, power, method="direct"))
        h >>= 1
        if h:
            power = _trim(signal.convolve(power, power, method="direct"))
    return result / result.sum()


def _delta(p: np.ndarray, shift: int, epsilon: float, entries: int) -> float:
    """The hockey-stick divergence of (S + shift)^entries against S^entries."""
    upper = np.concatenate([p, np.zeros(shift)])
    lower = np.concatenate([np.zeros(shift), p])
    if entries == 1:
        return float(np.maximum(upper - math.exp(epsilon) * lower, 0).sum())
    # Both entries shifted: the sum over every pair (i, j) of outcomes of
    # (u_i u_j - e^eps l_i l_j)_+, whose term is positive exactly when the losses
    # ln(u/l) add up past eps; summed per i over the j sorted by loss.
    assert entries == 2
    live = upper > 0
    u, low = upper[live], lower[live]
    with np.errstate(divide="ignore"):
        loss = np.log(u) - np.log(low)  # +inf where low = 0
    order = np.argsort(loss)
    loss, u, low = loss[order], u[order], low[order]
    tail_u = np.concatenate([np.cumsum(u[::-1])[::-1], [0.0]])
    tail_l = np.concatenate([np.cumsum(low[::-1])[::-1], [0.0]])
    with np.errstate(invalid="ignore"):
        first = np.searchsorted(loss, epsilon - loss, side="right")
    return float(np.sum(u * tail_u[first] - math.exp(epsilon) * low * tail_l[first]))


def exact_epsilon(sc: float, honest: int, shift: int, delta: float, entries: int = 1) -> float:
    """The least epsilon at which the release is (epsilon, delta)-DP, to 1e-6."""
    p = _sum_pmf(sc, honest)
    if _delta(p, shift, 0.0, entries) <= delta:
        return 0.0
    low, high = 0.0, 60.0
    if _delta(p, shift, high, entries) > delta:
        return math.inf
    while high - low > 1e-6:
        mid = (low + high) / 2
        low, high = (mid, high) if _delta(p, shift, mid, entries) > delta else (low, mid)
    return high


def _lattice(spec: NoiseSpec) -> tuple[float, int, int, float]:
    """(client sd in steps, H, shift in steps, delta - delta_E) of a spec."""
    honest, failure = privacy.guaranteed_honest(spec)
    shift = 2 * round(spec.eta * 2**spec.frac_bits)
    rest = spec.delta - failure
    return math.sqrt(spec.sigma2) * 2**spec.frac_bits, honest, shift, rest


# H = 9,381 honest draws by the exact binomial tail (delta_E 1.6e-8); at F = 0 the
# exact epsilon (21.7) is past what the accountant resolves, and it certifies none.
@pytest.mark.parametrize(("frac_bits", "issue_figure"), [(1, 2.776), (2, 0.887), (6, 0.9986)])
def test_exact_epsilon_of_the_issue_setting_and_the_certificate_bounds_it(frac_bits,
                                                                         issue_figure):
    spec = NoiseSpec("gaussian", frac_bits=frac_bits, **ISSUE)
    sc, honest, shift, rest = _lattice(spec)
    assert (honest, shift) == (9381, 2 * 2**frac_bits)
    exact = exact_epsilon(sc, honest, shift, rest)
    assert exact == pytest.approx(issue_figure, abs=0.006)
    certified, delta = privacy.certify(spec)
    assert delta == 1e-6
    # an upper bound, and not a vacuous one: within 1% or 1e-3
    assert exact <= certified <= max(exact * 1.01, exact + 1e-3)


def test_the_issue_setting_is_certified_only_where_the_rounding_leaves_the_noise():
    certified = {f: privacy.certify(NoiseSpec("gaussian", frac_bits=f, **ISSUE))[0]
                 for f in (0, 1, 2, 16)}
    assert certified[0] > 8 and certified[1] > 1.2  # the noise is rounded away
    assert certified[2] < 1 and certified[16] == pytest.approx(1.0, rel=1e-6)


# A grid small enough for the exact computation: H = 100 and 1000 honest clients.
_GRID = [(n, d, calibration, frac_bits)
         for n, fracs in ((20_000, range(7)), (200_000, range(4)))
         for d in (1, 2) for calibration in ("analytic", "corollary") for frac_bits in fracs]


@pytest.mark.parametrize(("n", "d", "calibration", "frac_bits"), _GRID)
def test_every_accepted_configuration_is_certified_at_or_above_its_exact_epsilon(
        n, d, calibration, frac_bits):
    spec = NoiseSpec("gaussian", n=n, m=100, d=d, s=1, epsilon=1.0, delta=1e-6,
                     calibration=calibration, frac_bits=frac_bits)
    certified, _ = privacy.certify(spec)
    sc, honest, shift, rest = _lattice(spec)
    exact = exact_epsilon(sc, honest, shift, rest, entries=d)
    assert certified >= exact - 1e-9
    if math.isfinite(exact):
        assert certified <= max(exact * 1.01, exact + 1e-3)


def test_the_bound_on_fine_lattices_is_the_gaussians_and_above_the_exact_value():
    """sc >= 4 steps: the Gaussian route; still checked against the exact sum."""
    spec = NoiseSpec("gaussian", n=20_000, m=100, d=1, s=1, calibration="analytic",
                     frac_bits=4, eta=1.0)
    sc, honest, shift, rest = _lattice(spec)
    assert sc >= 4
    exact = exact_epsilon(sc, honest, shift, rest)
    certified, _ = privacy.certify(spec)
    assert exact <= certified == pytest.approx(1.0, rel=1e-6)
    assert certified <= exact * 1.01


def test_the_analytic_calibration_uses_the_lattices_sensitivity():
    """eta 2^F = 1.5 rounds to 2 steps: calibrated for 2, certified at epsilon."""
    spec = NoiseSpec("gaussian", n=200_000, m=100, d=1, s=1, eta=0.75, calibration="analytic",
                     frac_bits=1)
    reals = NoiseSpec("gaussian", n=200_000, m=100, d=1, s=1, eta=0.75, calibration="analytic",
                      frac_bits=20)
    assert spec.sigma2 == pytest.approx(reals.sigma2 * (1.0 / 0.75) ** 2, rel=1e-6)
    sc, honest, shift, rest = _lattice(spec)
    assert shift == 4
    certified = privacy.certify(spec)[0]
    assert exact_epsilon(sc, honest, shift, rest) <= certified <= 1.0


def test_laplace_is_certified_for_the_discrete_laplace_it_releases():
    """H Polya differences of shape 1/H sum to a discrete Laplace of scale b 2^F: its
    largest log pmf ratio at the release's l1 shift is the certificate (pure DP)."""
    spec = NoiseSpec("laplace", n=400, m=4, d=1, s=4, epsilon=40.0, frac_bits=0)
    honest = round(1 / spec.gamma_shape)
    assert honest == 100
    sums = spec.sample_lattice(noise_rng(), (60_000, honest)).sum(axis=1)
    beta = spec.laplace_scale  # F = 0
    q = math.exp(-1 / beta)
    k = np.arange(-30, 31)
    expected = (1 - q) / (1 + q) * q ** np.abs(k)
    # Goodness of fit over the values expected at least 5 times, the rest in one bin
    # (a chi-square over bins expected 1e-12 times fails on a single draw there).
    kept = 60_000 * expected >= 5
    counts = np.array([(sums == v).sum() for v in k[kept]])
    observed = np.append(counts, 60_000 - counts.sum())
    wanted = 60_000 * np.append(expected[kept], 1 - expected[kept].sum())
    chi2 = float((((observed - wanted) ** 2) / wanted).sum())
    assert chi2 < stats.chi2.ppf(0.9999, observed.size - 1)
    # the exact pure epsilon of that pmf over the release's entries, each shifted 2 steps
    log_pmf = np.log(expected)
    worst = float(np.max(log_pmf[2:] - log_pmf[:-2]))
    certified, delta = privacy.certify(spec)
    assert delta == 0.0
    assert certified == pytest.approx(worst * spec.s * spec.d, rel=1e-9)


def test_the_noise_released_does_not_depend_on_the_data_and_is_observed_as_released():
    """Every client holds 0.49 at F = 0 and adds N(0, 0.01): rounded with its value,
    round(0.49 + g) - round(0.49) would be 1 half the time; on its own it is 0
    except with probability 2 Phi(-5) (released variance ~ 6e-7, not 0.01)."""
    n, m, d = 4000, 4, 2
    spec = NoiseSpec("gaussian", n=n, m=m, d=d, s=1, epsilon=1.0, delta=1e-6,
                     calibration="corollary", frac_bits=0)
    spec = _with_sigma(spec, 0.01)
    data = np.full((n, d), 0.49)
    sketch = Sketch.generate(n, m, 1, seed=3)
    fp = FixedPoint(0)
    plan = StreamPlan(n, d, m, 1, 2, ADDITIVE.name, workers=1, chunk=997)
    noisy = NoisyChunks(plan, sketch, ArrayRows(data, 1.0), spec, fp,
                        lambda acc, clients: group_slots(acc, m, clients))
    values = np.concatenate([noisy.chunk(k)[1].view(np.int64).ravel().copy()
                             for k in range(plan.chunks)])
    var = noisy.noise_sq / (n * d) - (noisy.noise_sum / (n * d)) ** 2
    noise = values - 0  # round(0.49) = 0 at F = 0
    assert np.count_nonzero(noise) <= 5  # not ~half of the 8000 entries
    assert var == pytest.approx(spec.released_variance, abs=2e-3)
    assert var < 0.002 < spec.variance


def _with_sigma(spec: NoiseSpec, sigma2: float) -> NoiseSpec:
    """``spec`` with its per-client variance set (a cached property)."""
    spec.__dict__["sigma2"] = sigma2
    return spec


@pytest.mark.parametrize("sc", [1.0, 1.7, 4.0, 31.0, 2500.0, 52_985.0])
def test_the_released_variance_in_closed_form_is_the_rounded_gaussians(sc):
    """From one lattice step on, the variance is Sheppard's series (no scipy needed); it
    is the pmf's, summed with scipy's normal distribution, to rounding. The pmf's
    differences of tails lose digits as sc grows, so the tolerance grows with sc."""
    pmf = _client_pmf(sc)
    k = np.arange(pmf.size, dtype=np.float64) - pmf.size // 2
    summed = float(np.dot(pmf, k**2))
    assert lattice.rounded_gaussian_variance(sc) == pytest.approx(summed, rel=1e-14 * sc)
