"""The compiled Gaussian sampler draws numpy's normals, bit for bit, and adds them as
numpy's path does: the noise a run releases is the same whichever made it."""

from __future__ import annotations

import numpy as np
import pytest
from randomgen import AESCounter

from harness.clients import (
    ADDITIVE,
    AesWords,
    ArrayRows,
    FixedPoint,
    LatticeGaussian,
    NumpyGaussian,
    Sketch,
    compiled_gaussian,
    gaussian_noise,
    vector_gaussian,
)
from harness.privacy import NoiseSpec
from harness.stream import StreamPlan
from harness.stream.noisy import NoisyChunks, group_slots

# numpy's ziggurat leaves its layers for the tail beyond this.
_TAIL = 3.654152885361009


def test_the_compiled_sampler_is_built() -> None:
    assert compiled_gaussian(), (
        "harness/clients/_gaussian.c is not built: install the harness with a C compiler "
        "(pip install -e .), which builds it in place")


def _cpu_has_avx2() -> bool:
    with open("/proc/cpuinfo") as fh:
        return any(line.startswith("flags") and " avx2" in line for line in fh)


def test_the_four_value_path_is_taken_where_the_cpu_has_avx2() -> None:
    assert vector_gaussian() == _cpu_has_avx2()
    assert vector_gaussian(False) is False
    assert vector_gaussian(True) == _cpu_has_avx2()


@pytest.fixture(params=["four at a time", "one at a time"])
def path(request):
    """Every draw below is checked through both of the compiled loop's paths."""
    vector_gaussian(request.param == "four at a time")
    yield request.param
    vector_gaussian(True)


@pytest.mark.parametrize("source", [
    "int ltm_gaussian_abi(void) { return 1; }\nvoid ltm_add_gaussian(void) {}\n",
    "int ltm_gaussian_abi(void) { return 2; }\nvoid ltm_add_gaussian(void) {}\n",
    "int ltm_gaussian_abi(void) { return 3; }\nvoid ltm_add_gaussian(void) {}\n",
    "void ltm_add_gaussian(void) {}\n",
])
def test_a_library_built_from_another_source_is_left_unloaded(source, libraries) -> None:
    # A checkout updated without reinstalling keeps its old library: calling it with
    # this module's arguments would crash the workers, so it is not called at all.
    from harness.clients.gaussian import _load

    assert [_load(path) for path in libraries(source)] == [None, None]


def _reference(key: int, sigma: float, data: np.ndarray, clients: np.ndarray):
    """numpy's own path: Generator.standard_normal, scaled, rounded, added as integers."""
    gen = np.random.Generator(AESCounter(key=key))
    z = gen.standard_normal(clients.size)
    steps = np.rint(z * sigma)
    return z, steps, data[clients].astype(np.int64) + steps.astype(np.int64), gen


# sigma 3e15, and entries near 2^60, are past what four values at once finish exactly:
# those are finished one by one.
@pytest.mark.parametrize("sigma,entries", [(0.7, 2**16), (2.95e7, 2**16), (2.0**40, 2**16),
                                           (3e15, 2**16), (2.95e7, 2**60)])
def test_the_draws_are_numpys_bit_for_bit_and_leave_the_generator_where_numpy_does(
        sigma, entries, path):
    n = 1_000_000
    rng = np.random.default_rng(1)
    data = np.rint(rng.uniform(-1, 1, 5000) * entries)
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


@pytest.mark.parametrize("block", [1, 7, 4096])
def test_draws_the_words_cut_short_are_drawn_again_whole(monkeypatch, block, path) -> None:
    # No spare words: every draw in the wedge or the tail runs out of words in its
    # round (some of them with nothing made), and is drawn again, whole, in the next.
    import harness.clients.gaussian as gaussian

    monkeypatch.setattr(gaussian, "SPARE_SHIFT", 63)
    monkeypatch.setattr(gaussian, "SPARE_WORDS", 0)
    n = 60_000
    rng = np.random.default_rng(4)
    data = np.rint(rng.uniform(-1, 1, 100) * 2**10)
    clients = rng.integers(0, data.size, n)
    z, _, want, gen = _reference(12, 3.5, data, clients)
    assert int((np.abs(z) > _TAIL).sum()) > 2
    source = AESCounter(key=12)
    noise = LatticeGaussian(3.5, source)
    out = np.empty(n, dtype=np.int64)
    for first in range(0, n, block):
        noise.add(data, clients[first:first + block], out[first:first + block])
    assert np.array_equal(out, want)
    assert source.random_raw() == gen.bit_generator.random_raw()


def test_the_words_are_the_generators_from_wherever_it_stands() -> None:
    source = AESCounter(key=2**127 + 3)
    want = AESCounter(key=2**127 + 3).random_raw(300)
    for skip in (0, 1, 5, 8, 9):  # inside and at the ends of its buffer of 8 words
        source = AESCounter(key=2**127 + 3)
        source.random_raw(skip) if skip else None
        words = AesWords(source)
        assert np.array_equal(words.words(100), want[skip:skip + 100])
        words.take(37)
        assert np.array_equal(words.words(50), want[skip + 37:skip + 87])
        assert source.random_raw() == want[skip + 37]
    with pytest.raises(TypeError, match="AESCounter"):
        AesWords(np.random.PCG64(1))


def test_a_generator_the_words_cannot_follow_is_drawn_through_numpy(monkeypatch) -> None:
    import harness.clients.gaussian as gaussian

    rng = np.random.Generator(AESCounter(key=8))
    assert isinstance(gaussian_noise(2.0, rng), LatticeGaussian)
    assert isinstance(gaussian_noise(2.0, np.random.default_rng(8)), NumpyGaussian)
    # An AESCounter that kept its state otherwise (another release of randomgen): the
    # words computed here would not be its words, and it is never read so.
    place = gaussian._place
    monkeypatch.setattr(gaussian, "_place", lambda state: (place(state)[0], place(state)[1] + 1))
    assert not AesWords.reads(rng.bit_generator)
    assert isinstance(gaussian_noise(2.0, rng), NumpyGaussian)
    with pytest.raises(TypeError, match="keeps it otherwise"):
        AesWords(rng.bit_generator)
    # The check drew nothing from the run's generator.
    assert rng.bit_generator.random_raw() == AESCounter(key=8).random_raw()


def test_layouts_and_indices_the_library_cannot_read_are_refused() -> None:
    source = AESCounter(key=1)
    noise = LatticeGaussian(1.0, source)
    data, out = np.zeros(4), np.empty(8, dtype=np.int64)
    with pytest.raises(TypeError):
        noise.add(data, np.zeros(8, dtype=np.int32), out)
    with pytest.raises(TypeError):
        noise.add(data, np.zeros(16, dtype=np.int64)[::2], out)
    with pytest.raises(TypeError):
        noise.add(data, np.zeros(8, dtype=np.int64), np.empty(8))
    for bad in (4, -1):
        clients = np.zeros(8, dtype=np.int64)
        clients[5] = bad
        with pytest.raises(IndexError):
            noise.add(data, clients, out)
    # Refused before any draw: the generator has not moved.
    assert source.random_raw() == AESCounter(key=1).random_raw()


# sigma 1.2e6 lattice steps, and, at epsilon 1e-9, 1.2e15: past 2^53 with the data.
@pytest.mark.parametrize("epsilon", [1.0, 1e-9])
def test_a_workers_chunks_are_the_same_compiled_or_through_numpy(epsilon, path) -> None:
    n, d, m, s = 3000, 4, 7, 5
    plan = StreamPlan(n, d, m, s, 3, ADDITIVE.name, workers=1, chunk=700)
    sketch = Sketch.sparse(n, m, s, seed=5)
    data = np.random.default_rng(3).uniform(-1, 1, (n, d))
    noise = NoiseSpec("gaussian", n, m, d, s, epsilon=epsilon, delta=1e-6)
    made = []
    for compiled in (True, False):
        noisy = NoisyChunks(plan, sketch, ArrayRows(data, 1.0), noise, FixedPoint(16),
                            lambda acc, k: group_slots(acc, m, k), block=512)
        assert isinstance(noisy.gaussian, LatticeGaussian)  # what a run draws with
        noisy.rng = np.random.Generator(AESCounter(key=99))
        noisy.gaussian = (LatticeGaussian(noise.lattice_sigma, noisy.rng.bit_generator)
                          if compiled else NumpyGaussian(noise.lattice_sigma, noisy.rng))
        chunks = [noisy.chunk(k)[1].copy() for k in range(plan.chunks)]
        made.append((chunks, noisy.expected.copy(), noisy.noise_sum, noisy.noise_sq))
    (a, a_sums, a_mean, a_sq), (b, b_sums, b_mean, b_sq) = made
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert np.array_equal(a_sums, b_sums)
    assert a_mean == pytest.approx(b_mean, rel=1e-9, abs=1e-6)
    assert a_sq == pytest.approx(b_sq, rel=1e-9)


def test_without_the_library_the_same_draws_come_through_numpy(monkeypatch, path) -> None:
    import harness.clients.gaussian as gaussian

    rng = np.random.default_rng(2)
    data = np.rint(rng.uniform(-1, 1, 300) * 2**16)
    clients = rng.integers(0, data.size, 50_000)
    outs = []
    for built in (True, False):
        monkeypatch.setattr(gaussian, "compiled_gaussian", lambda built=built: built)
        noise = gaussian_noise(3e7, np.random.Generator(AESCounter(key=4)))
        assert isinstance(noise, LatticeGaussian if built else NumpyGaussian)
        out = np.empty(clients.size, dtype=np.int64)
        outs.append((out, noise.add(data, clients, out)))
    (a, a_noise), (b, b_noise) = outs
    assert np.array_equal(a, b)
    assert (a_noise.max_step, a_noise.max_value) == (b_noise.max_step, b_noise.max_value)
