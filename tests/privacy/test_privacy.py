"""Privacy of the client noise: generator, calibrations, accountant, Skellam on the lattice."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from randomgen import AESCounter
from scipy import stats
from scipy.special import logsumexp

from harness.clients.encoding import FixedPoint
from harness.clients.matrices import ArrayRows
from harness.clients.sharing import ADDITIVE
from harness.clients.sketch import Sketch
from harness.errors import InputError
from harness.privacy import accounting as privacy
from harness.privacy.noise import NOISE_GENERATOR, NoiseSpec, noise_rng
from harness.stream.noisy import NoisyChunks, group_slots
from harness.stream.plan import StreamPlan

PAPER: dict[str, Any] = {"m": 100, "d": 10, "s": 1, "epsilon": 1.0, "delta": 1e-6}


def test_noise_generator_is_aes_counter_keyed_afresh():
    a, b = noise_rng(), noise_rng()
    assert isinstance(a.bit_generator, AESCounter)
    assert "AESCounter" in NOISE_GENERATOR
    # 128-bit keys from os.urandom: two generators never agree
    assert not np.array_equal(a.standard_normal(8), b.standard_normal(8))
    draws = a.standard_normal(200_000)
    assert abs(draws.mean()) < 0.02 and draws.var() == pytest.approx(1.0, rel=0.02)


@pytest.mark.parametrize("n", [100_000, 300_000, 1_000_000])
def test_analytic_sigma_is_below_the_corollary_and_certifies_the_requested_epsilon(n):
    corollary = NoiseSpec("gaussian", n=n, **PAPER)
    analytic = NoiseSpec("gaussian", n=n, calibration="analytic", **PAPER)
    assert analytic.sigma2 < corollary.sigma2
    epsilon, delta = privacy.certify(analytic)
    assert epsilon <= PAPER["epsilon"] and delta == PAPER["delta"]
    assert epsilon == pytest.approx(PAPER["epsilon"], rel=1e-6)  # tight, not merely below
    # The corollary's noise is certified too, with room to spare at d = 10.
    assert privacy.certify(corollary)[0] < PAPER["epsilon"]


def test_analytic_gaussian_is_exact_balle_wang():
    """delta(epsilon) of Balle and Wang's Theorem 8 at the calibrated sigma is the target."""
    sens, eps, delta = 2.0, 3.0, 1e-5
    sigma = privacy.analytic_gaussian_sigma(sens, eps, delta)

    def balle_wang_delta(sig: float) -> float:
        a, b = sens / (2 * sig), eps * sig / sens
        return stats.norm.cdf(a - b) - math.exp(eps) * stats.norm.cdf(-a - b)

    assert balle_wang_delta(sigma) <= delta
    assert balle_wang_delta(sigma * 0.999) > delta
    # The classic bound, proven only for epsilon < 1, needs more noise here.
    assert sigma < sens * math.sqrt(2 * math.log(1.25 / delta)) / eps
    # The PLD accountant agrees with the exact conversion to its discretisation.
    assert privacy.pld_gaussian_epsilon(sigma, sens, delta) == pytest.approx(eps, abs=2e-3)


def test_certificate_accounts_for_the_drawn_noise_and_the_branches():
    zero = NoiseSpec("gaussian", n=797, m=10, d=2, s=1, delta=1e-3, t_prime=5)
    assert zero.zero_output and privacy.certify(zero) == (0.0, 0.0)
    assert privacy.certify(NoiseSpec("none", n=10, m=2, d=1, s=1))[0] == math.inf
    # Laplace: pure DP of the discrete Laplace on the lattice, l1 shift in steps / (b 2^F):
    # 2 eta 2^16 s d / (2 eta m^2 d / epsilon 2^16) = epsilon s / m^2 = epsilon / m.
    lap = NoiseSpec("laplace", n=1000, m=10, d=3, s=10, epsilon=2.0)
    assert privacy.certify(lap) == (pytest.approx(0.2, rel=1e-12), 0.0)
    # t' corrupted clients' noise is known to the adversary: less noise counts.
    clean = NoiseSpec("gaussian", n=50_000, calibration="analytic", **PAPER)
    honest = privacy.honest_contributors(50_000, 100, 1, 0)
    corrupt = NoiseSpec("gaussian", n=50_000, t_prime=20_000, **PAPER)
    assert privacy.honest_contributors(50_000, 100, 1, 20_000) < honest
    assert privacy.certify(corrupt)[0] < 1.0
    assert clean.describe()["certified_epsilon"] == privacy.certify(clean)[0] <= 1.0


def test_corollary_at_one_column_is_certified_above_its_epsilon():
    """The printed corollary uses 4 where its proof needs 16: at d = 1 the release is
    not (epsilon, delta)-DP for entry sensitivity 2 eta, which the certificate shows."""
    spec = NoiseSpec("gaussian", n=1_000_000, m=100, d=1, s=1)
    assert privacy.certify(spec)[0] > 1.5


def _exact_renyi(alpha: float, mu: float, shift: int) -> float:
    """D_alpha(Sk + shift || Sk) for Sk = Poisson(mu/2) - Poisson(mu/2), summed over the support."""
    half = math.ceil(14 * math.sqrt(mu) + 60 + shift)
    k = np.arange(-half, half + 1)
    log_p = stats.skellam.logpmf(k - shift, mu / 2, mu / 2)
    log_q = stats.skellam.logpmf(k, mu / 2, mu / 2)
    return float(logsumexp(alpha * log_p + (1 - alpha) * log_q)) / (alpha - 1)


@pytest.mark.parametrize(("alpha", "mu", "shift"), [
    (2, 4.0, 1), (5, 10.0, 2), (20, 100.0, 3), (8, 1.0, 1), (3, 0.5, 1), (50, 1000.0, 5),
    (2, 1e4, 10), (10, 50.0, 1),
])
def test_skellam_rdp_bound_holds_against_the_exact_renyi_divergence(alpha, mu, shift):
    bound = privacy.skellam_rdp(alpha, privacy.Sensitivity(shift, 1), mu)
    exact = _exact_renyi(alpha, mu, shift)
    assert bound >= exact > 0
    if mu >= 100:  # large mu: the bound tends to the Gaussian's, which is tight
        assert bound <= 1.1 * exact


def test_skellam_calibration_on_the_lattice():
    spec = NoiseSpec("skellam", n=200_000, frac_bits=16, **PAPER)
    sens = privacy.release_sensitivity(1.0, 1, 10, frac_bits=16)
    assert sens.entry == 2 * 2**16 and sens.l1 == 10 * sens.entry
    honest, failure = privacy.guaranteed_honest(spec)
    assert (honest, failure) == privacy.analytic_split(200_000, 100, 1, 0, 1.0, 1e-6)
    assert spec.client_mu == pytest.approx(spec.bucket_mu / honest)
    epsilon, _ = privacy.certify(spec)
    assert epsilon <= 1.0
    # a 1% smaller variance would not be certified: the calibration is tight
    rest = 1e-6 - failure
    assert privacy.skellam_epsilon(spec.bucket_mu * 0.99, sens, rest) > 1.0
    # close to the analytic Gaussian, in reals
    gaussian = NoiseSpec("gaussian", n=200_000, calibration="analytic", **PAPER)
    assert gaussian.sigma2 < spec.variance < 1.3 * gaussian.sigma2
    info = spec.describe()
    assert info["client_mu"] == spec.client_mu and info["generator"] == NOISE_GENERATOR
    draws = spec.sample(noise_rng(), (4000,))
    assert draws.dtype == np.int64
    assert draws.var() == pytest.approx(spec.client_mu, rel=0.15)


def test_skellam_that_no_parameters_can_meet_names_the_fix():
    # s = m puts every honest client in every row: the exact count leaves nothing to
    # chance (Chernoff's bound asked for n >= 1484 here)
    spec = NoiseSpec("skellam", n=1300, m=10, d=1, s=10)
    assert privacy.guaranteed_honest(spec) == (1300, 0.0)
    with pytest.raises(InputError, match=r"use epsilon >= [0-9.e+]+ or fewer --frac-bits"):
        NoiseSpec("skellam", n=100_000, m=100, d=10, s=1, epsilon=1e-4, frac_bits=40)
    with pytest.raises(InputError, match="is for Gaussian noise"):
        NoiseSpec("skellam", n=100_000, m=100, d=10, s=1, calibration="analytic")


def test_streamed_chunks_add_skellam_noise_in_the_ring_and_sum_it_exactly():
    n, m, s, d = 600, 4, 2, 3
    data = np.random.default_rng(1).uniform(-1, 1, size=(n, d))
    sketch = Sketch.generate(n, m, s, seed=3)
    noise = NoiseSpec("skellam", n=n, m=m, d=d, s=s, epsilon=4.0, delta=0.05, frac_bits=12)
    assert not noise.zero_output
    fp = FixedPoint(12)
    plan = StreamPlan(n, d, m, s, 2, ADDITIVE.name, workers=1, chunk=97)
    orders: list[np.ndarray] = []

    def group(acc: np.ndarray, clients: int) -> tuple[np.ndarray, np.ndarray]:
        order, counts = group_slots(acc, m, clients)
        orders.append(order.copy())
        return order, counts

    noisy = NoisyChunks(plan, sketch, ArrayRows(data, 1.0), noise, fp, group)
    rows, clients, accs = [], [], []
    for k in range(plan.chunks):
        counts, ring = noisy.chunk(k)
        rows.append(ring.T.copy())  # (slots, d): each slot's noisy encoded row
        clients.append(plan.span(k)[0] + orders[-1])
        accs.append(np.repeat(np.arange(2 * m), counts))  # slots come grouped by accumulator
    ring_rows, client, acc = np.concatenate(rows), np.concatenate(clients), np.concatenate(accs)
    assert ring_rows.shape == (s * n, d) and np.array_equal(np.bincount(client), [s] * n)
    encoded = fp.encode(data[client])
    lattice_noise = (ring_rows - encoded).view(np.int64)
    # the noise is integer lattice steps of the calibrated variance, independent per entry
    assert lattice_noise.var() == pytest.approx(noise.client_mu, rel=0.15)
    count = n * s * d
    noise_var = noisy.noise_sq / count - (noisy.noise_sum / count) ** 2
    assert noise_var == pytest.approx(noise.variance, rel=0.15)
    # the plaintext result is the ring sum of the noisy encoded rows, to the bit
    bucket, sign = acc % m, np.where(acc < m, 1, -1)
    got = noisy.expected[:m] - noisy.expected[m:]
    expected = np.zeros((m, d), dtype=np.uint64)
    np.add.at(expected, bucket[sign > 0], ring_rows[sign > 0])
    np.subtract.at(expected, bucket[sign < 0], ring_rows[sign < 0])
    assert np.array_equal(got, expected)
    # ... which decodes to the sketch of the data plus the summed integer noise
    noise_sum = np.zeros((m, d), dtype=np.int64)
    np.add.at(noise_sum, bucket, lattice_noise * sign[:, None])
    data_sum = np.zeros((m, d), dtype=np.int64)
    np.add.at(data_sum, bucket, encoded.view(np.int64) * sign[:, None])
    assert np.array_equal(got.view(np.int64), data_sum + noise_sum)


@pytest.mark.mpspdz
def test_skellam_run_verifies_bit_for_bit(tmp_path, mp_spdz, program_cache):
    from harness.experiments.run import RunConfig, run

    cfg = RunConfig(out=tmp_path / "out", cache_dir=program_cache, timeout=120, noise="skellam",
                    clients=4000, rows=20, dim=4, sparsity=2, delta=0.5, epsilon=50.0,
                    seed=7)
    result = run(cfg)
    assert result["verification"]["ok"]
    info = result["parameters"]["noise"]
    assert info["kind"] == "skellam" and info["client_mu"] > 0
    assert result["noise_observed"]["noise_var"] == pytest.approx(info["variance"], rel=0.1)
