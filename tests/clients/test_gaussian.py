"""The compiled Gaussian sampler draws numpy's normals, bit for bit, and adds them as
numpy's path does: the noise a run releases is the same whichever made it."""

from __future__ import annotations

import numpy as np
import pytest
from randomgen import AESCounter

from harness.clients import (
    ADDITIVE,
    ArrayRows,
    FixedPoint,
    LatticeGaussian,
    NoiseSpec,
    Sketch,
    compiled_gaussian,
)
from harness.stream import StreamPlan
from harness.stream.noisy import NoisyChunks, group_slots

# numpy's ziggurat leaves its layers for the tail beyond this.
_TAIL = 3.654152885361009


def test_the_compiled_sampler_is_built() -> None:
    assert compiled_gaussian(), (
        "harness/clients/_gaussian.c is not built: install the harness with a C compiler "
        "(pip install -e .), which builds it in place")


def _reference(key: int, sigma: float, data: np.ndarray, clients: np.ndarray):
    """numpy's own path: Generator.standard_normal, scaled, rounded, added as integers."""
    gen = np.random.Generator(AESCounter(key=key))
    z = gen.standard_normal(clients.size)
    steps = np.rint(z * sigma)
    return z, steps, data[clients].astype(np.int64) + steps.astype(np.int64), gen


@pytest.mark.parametrize("sigma", [0.7, 2.95e7, 2.0**40, 3e15])
def test_the_draws_are_numpys_bit_for_bit_and_leave_the_generator_where_numpy_does(sigma):
    n = 1_000_000
    rng = np.random.default_rng(1)
    data = np.rint(rng.uniform(-1, 1, 5000) * 2**16)
    clients = rng.integers(0, data.size, n)
    z, steps, want, gen = _reference(11, sigma, data, clients)
    # The wedge and the tail are taken, not only numpy's fast path.
    assert int((np.abs(z) > _TAIL).sum()) > 50
    source = AESCounter(key=11)
    noise = LatticeGaussian(sigma, source)
    out = np.empty(n, dtype=np.int64)
    cut = 333_333  # two calls: the generator's state carries over
    first = noise.add(data, clients[:cut], out[:cut])
    second = noise.add(data, clients[cut:], out[cut:])
    assert np.array_equal(out, want)
    assert source.random_raw() == gen.bit_generator.random_raw()
    assert max(first.max_step, second.max_step) == float(np.abs(steps).max())
    assert first.sum + second.sum == pytest.approx(float(steps.sum()), rel=1e-9, abs=1.0)
    assert first.sum_sq + second.sum_sq == pytest.approx(float((steps**2).sum()), rel=1e-9)
    top = max(first.max_value, second.max_value)
    assert top == float(np.abs(want).max())


def test_layouts_the_library_cannot_read_are_refused() -> None:
    noise = LatticeGaussian(1.0, AESCounter(key=1))
    data, out = np.zeros(4), np.empty(8, dtype=np.int64)
    with pytest.raises(TypeError):
        noise.add(data, np.zeros(8, dtype=np.int32), out)
    with pytest.raises(TypeError):
        noise.add(data, np.zeros(16, dtype=np.int64)[::2], out)
    with pytest.raises(TypeError):
        noise.add(data, np.zeros(8, dtype=np.int64), np.empty(8))


# Sums in float64 (exact below 2^53), and, at epsilon 1e-9 (sigma 1.2e15 lattice
# steps), in int64 through NoiseSpec.sample_lattice.
@pytest.mark.parametrize("epsilon", [1.0, 1e-9])
def test_a_workers_chunks_are_the_same_compiled_or_through_numpy(epsilon) -> None:
    n, d, m, s = 3000, 4, 7, 5
    plan = StreamPlan(n, d, m, s, 3, ADDITIVE.name, workers=1, chunk=700)
    sketch = Sketch.sparse(n, m, s, seed=5)
    data = np.random.default_rng(3).uniform(-1, 1, (n, d))
    noise = NoiseSpec("gaussian", n, m, d, s, epsilon=epsilon, delta=1e-6)
    made = []
    for compiled in (True, False):
        noisy = NoisyChunks(plan, sketch, ArrayRows(data, 1.0), noise, FixedPoint(16),
                            lambda acc, k: group_slots(acc, m, k), block=512)
        assert noisy.float_add == (epsilon == 1.0)
        noisy.rng = np.random.Generator(AESCounter(key=99))
        noisy.compiled = (LatticeGaussian(noisy.sigma, noisy.rng.bit_generator)
                          if compiled else None)
        chunks = [noisy.chunk(k)[1].copy() for k in range(plan.chunks)]
        made.append((chunks, noisy.expected.copy(), noisy.noise_sum, noisy.noise_sq))
    (a, a_sums, a_mean, a_sq), (b, b_sums, b_mean, b_sq) = made
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert np.array_equal(a_sums, b_sums)
    assert a_mean == pytest.approx(b_mean, rel=1e-9, abs=1e-6)
    assert a_sq == pytest.approx(b_sq, rel=1e-9)
