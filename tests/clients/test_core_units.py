"""Sketch, noise calibration, encoding, sharing, layout and program cache."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.clients.encoding import FixedPoint
from harness.clients.prepare import SHARE_HEADER, read_share_file, write_share_file
from harness.clients.sharing import share
from harness.clients.sketch import Sketch
from harness.errors import InputError
from harness.privacy.noise import NoiseSpec

# --- sketch -------------------------------------------------------------------------------

def test_sparse_sketch_columns_have_distinct_rows_and_unit_signs():
    sk = Sketch.sparse(5000, 20, 7, seed=3)
    assert sk.rows.shape == sk.signs.shape == (7, 5000)
    assert (np.sort(sk.rows, axis=0)[1:] != np.sort(sk.rows, axis=0)[:-1]).all()
    assert set(np.unique(sk.signs)) == {-1, 1}
    sk.validate()
    # each column of sqrt(s) S has exactly s non-zeros
    assert (np.count_nonzero(sk.matrix()[:, :100], axis=0) == 7).all()


def test_sparse_sketch_is_uniform_over_rows_components_and_signs():
    sk = Sketch.sparse(40_000, 10, 4, seed=1)
    for i in range(4):  # every component sees every row about equally often
        counts = np.bincount(sk.rows[i], minlength=10)
        expected = 40_000 / 10
        chi2 = ((counts - expected) ** 2 / expected).sum()
        assert chi2 < 30  # chi-square, 9 degrees of freedom: p < 1e-3
    assert abs(sk.signs.mean()) < 0.02


def test_sketch_is_reproducible_from_its_seed_and_differs_otherwise(tmp_path):
    a, b, c = (Sketch.sparse(1000, 10, 3, seed=s) for s in (5, 5, 6))
    assert np.array_equal(a.rows, b.rows) and np.array_equal(a.signs, b.signs)
    assert not np.array_equal(a.rows, c.rows)
    a.save(tmp_path / "s.npz")
    loaded = Sketch.load(tmp_path / "s.npz")
    assert loaded.m == 10 and np.array_equal(loaded.rows, a.rows)


def test_dense_sketch_has_n_over_m_nonzeros_per_row_in_every_component():
    sk = Sketch.dense_sketch(600, 12, seed=2)
    assert sk.s == 12
    for i in range(12):
        assert (np.bincount(sk.rows[i], minlength=12) == 50).all()
    assert (np.sort(sk.rows, axis=0) == np.arange(12)[:, None]).all()


def test_sketch_apply_matches_dense_matrix():
    sk = Sketch.sparse(50, 6, 2, seed=1)
    x = np.random.default_rng(0).normal(size=(2, 50, 3))
    dense = np.zeros((6, 3))
    for i in range(2):
        m = np.zeros((6, 50))
        m[sk.rows[i], np.arange(50)] = sk.signs[i]
        dense += m @ x[i]
    assert np.allclose(sk.apply(x), dense)


def test_invalid_sketch_files_are_rejected(tmp_path):
    np.savez(tmp_path / "bad.npz", rows=np.array([[0, 1], [0, 2]]), signs=np.ones((2, 2)),
             m=3)
    with pytest.raises(InputError, match="distinct rows"):
        Sketch.load(tmp_path / "bad.npz")
    with pytest.raises(InputError, match="cannot read"):
        Sketch.load(tmp_path / "missing.npz")


# --- noise --------------------------------------------------------------------------------

def test_gaussian_variance_is_corollary_privacynew():
    spec = NoiseSpec("gaussian", n=1_000_000, m=100, d=10, s=2, epsilon=0.5, delta=1e-6,
                     eta=2.0, t_prime=10)
    honest = 1_000_000 - 2 - 10
    inner = 1e-6 / 10 - 100 * math.exp(-honest / 800)
    expected = 4 * 8 * 4 * math.log(1.25 * 2 / inner) * 100 * 100 / (0.25 * honest)
    assert spec.sigma2 == pytest.approx(expected, rel=1e-12)
    assert spec.variance == spec.sigma2 and not spec.zero_output


def test_randomizer_outputs_zeros_below_the_paper_threshold():
    # 8 m ln(d m / delta) + t' = 8 * 10 * ln(2 * 10 / 1e-3) + 5 = 797.3...
    assert NoiseSpec("gaussian", n=797, m=10, d=2, s=1, delta=1e-3, t_prime=5).zero_output
    # sigma^2 needs n - s - t' above 8 m ln(dm/delta): up to there R_D sends zeros,
    # so no n is left where the calibration is undefined
    assert NoiseSpec("gaussian", n=798, m=10, d=2, s=1, delta=1e-3, t_prime=5).zero_output
    assert NoiseSpec("gaussian", n=799, m=10, d=2, s=1, delta=1e-3, t_prime=5).sigma2 > 0
    for n in range(16_570, 16_700, 5):  # s = 50 moves the threshold by 49 clients
        spec = NoiseSpec("gaussian", n=n, m=100, d=10, s=50)
        assert spec.zero_output == (n <= 8 * 100 * math.log(10 * 100 / 1e-6) + 50)
        assert spec.zero_output or spec.sigma2 > 0
    assert not NoiseSpec("gaussian", n=900, m=10, d=2, s=1, delta=1e-3, t_prime=5).zero_output
    zero = NoiseSpec("gaussian", n=797, m=10, d=2, s=1, delta=1e-3, t_prime=5)
    assert not zero.sample(np.random.default_rng(0), (3, 2)).any()


def test_laplace_is_difference_of_gammas_per_corollary_privlap():
    spec = NoiseSpec("laplace", n=1000, m=10, d=3, s=10, epsilon=2.0, eta=0.5, t_prime=4)
    assert spec.gamma_shape == pytest.approx(1 / (100 - 4))
    assert spec.laplace_scale == pytest.approx(2 * 0.5 * 100 * 3 / 2.0)
    draws = spec.sample(np.random.default_rng(1), (400_000,))
    assert draws.var() == pytest.approx(2 * spec.gamma_shape * spec.laplace_scale**2, rel=0.05)
    assert abs(draws.mean()) < 5 * math.sqrt(spec.variance / draws.size)
    # the n/m - t' honest draws of a bucket add up to Laplace(b): variance 2 b^2
    sums = spec.sample(np.random.default_rng(2), (4000, 96)).sum(axis=1)
    assert sums.var() == pytest.approx(2 * spec.laplace_scale**2, rel=0.1)


def test_gaussian_draws_match_variance():
    spec = NoiseSpec("gaussian", n=100_000, m=10, d=2, s=1, delta=0.01)
    draws = spec.sample(np.random.default_rng(3), (200_000,))
    assert draws.var() == pytest.approx(spec.sigma2, rel=0.02)


@pytest.mark.parametrize(("kw", "needle"), [
    ({"kind": "uniform"}, "unknown noise"),
    ({"epsilon": 0.0}, "--epsilon"),
    ({"delta": 1.5}, "--delta"),
    ({"t_prime": 100_000}, "t'"),
    ({"kind": "laplace"}, "dense sketch"),
])
def test_noise_parameter_errors(kw, needle):
    base = {"kind": "gaussian", "n": 100_000, "m": 10, "d": 2, "s": 1}
    with pytest.raises(InputError, match=needle):
        NoiseSpec(**{**base, **kw})


# --- encoding and sharing -----------------------------------------------------------------

def test_fixed_point_round_trip_and_negative_values():
    fp = FixedPoint(16)
    x = np.array([[0.5, -1.25], [3.0, -0.0001]])
    ring = fp.encode(x)
    assert ring.dtype == np.uint64
    assert ring[0, 1] == 2**64 - int(1.25 * 2**16)
    assert np.allclose(fp.decode(ring), x, atol=2**-17)


def test_encoding_overflow_names_the_bound():
    with pytest.raises(InputError, match=r"2\^63"):
        FixedPoint(40).encode(np.array([2.0**24]))
    fp = FixedPoint(16)
    with pytest.raises(InputError, match=r"entry \(1, 0\).*2\^63"):
        fp.check_bucket_bound(np.array([[1.0, 2.0], [2.0**63, 0.0]]))
    fp.check_bucket_bound(np.array([[2.0**62]]))


def test_shares_sum_to_the_secret_and_masks_are_fresh():
    secret = FixedPoint(8).encode(np.arange(-50, 50, dtype=float).reshape(20, 5))
    a = share(secret, 3)
    b = share(secret, 3)
    total = a[0] + a[1] + a[2]  # uint64 arithmetic wraps mod 2^64
    assert np.array_equal(total, secret)
    assert not np.array_equal(a[0], b[0])  # not a seeded generator
    assert not np.array_equal(a[0], secret)
    with pytest.raises(ValueError):
        share(secret, 1)


def test_masks_look_uniform():
    shares = share(np.zeros(200_000, dtype=np.uint64), 2)[0]
    top_bits = (shares >> np.uint64(63)).astype(float)
    assert abs(top_bits.mean() - 0.5) < 0.01


def test_mask_stream_spans_pieces_without_repeats():
    # Three and a half 1 MiB keystream pieces: a buffer or counter reused across
    # pieces would repeat 16-byte blocks, which a real keystream never does.
    from harness.clients.sharing import random_ring

    words = random_ring((7, 1 << 16))
    blocks = words.reshape(-1, 2)
    assert len(np.unique(blocks, axis=0)) == len(blocks)
    counts = np.bincount(words.view(np.uint8).ravel(), minlength=256)
    expected = words.nbytes / 256
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 400  # 255 degrees of freedom: p < 1e-7 beyond this
    assert not np.array_equal(random_ring((4,)), random_ring((4,)))


def test_share_file_format(tmp_path):
    path = tmp_path / "Transactions-P0.data"
    write_share_file(path, np.array([1, 2**64 - 1], dtype=np.uint64))
    raw = path.read_bytes()
    assert raw[:8] == (9).to_bytes(8, "little") and raw[8:13] == b"Z2^64"
    assert raw[13:17] == (64).to_bytes(4, "little") and len(raw) == len(SHARE_HEADER) + 16
    assert read_share_file(path).tolist() == [1, 2**64 - 1]


def test_io_limit_reads_and_sums_the_whole_file(tmp_path):
    from harness.engine.aggregate import read_and_sum

    values = np.arange(3_000_000, dtype=np.uint64) * np.uint64(2**61 + 3)
    write_share_file(tmp_path / "f.data", values)
    seconds, total = read_and_sum(tmp_path / "f.data")
    assert seconds > 0 and total == values.sum(dtype=np.uint64)


def test_party_input_text_round_trips_every_int64():
    from harness.clients.prepare import format_integers

    extremes = np.array([0, 1, -1, 9, -10, 2**63 - 1, -(2**63)], dtype=np.int64)
    drawn = np.random.default_rng(5).integers(-(2**62), 2**62, size=10_000)
    # up to nine digits, and one past: the narrow and the wide path
    nine = np.array([999_999_999, -999_999_999, 5, -123_456], dtype=np.int64)
    ten = np.array([1_000_000_000, -4_294_967_296, 4_294_967_297, 0], dtype=np.int64)
    small = np.random.default_rng(6).integers(-(10**6), 10**6, size=10_000)
    for values in (extremes, drawn, np.array([7], dtype=np.int64), nine, ten, small):
        text = format_integers(values)
        assert text.endswith(b"\n")
        assert [int(x) for x in text.split()] == values.tolist()


def test_atomic_write_keeps_the_old_file_on_failure_and_sets_modes(tmp_path):
    import os

    from harness.fileio import write_atomic

    target = tmp_path / "result.json"
    old = os.umask(0o022)
    try:
        write_atomic(target, "old\n")
        assert (target.stat().st_mode & 0o777) == 0o644  # not mkstemp's 0600
        with pytest.raises(TypeError):
            write_atomic(target, 42)  # type: ignore[arg-type]
        assert target.read_text() == "old\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]
        write_atomic(target, b"key", mode=0o600)
        assert (target.stat().st_mode & 0o777) == 0o600 and target.read_bytes() == b"key"
    finally:
        os.umask(old)


def test_file_lock_refuses_or_waits_and_leaves_no_file(tmp_path):
    import os
    import threading
    import time

    from harness.fileio import file_lock

    target = tmp_path / "thing"
    events: list[str] = []

    def refuse(holder: str) -> None:
        raise RuntimeError(holder)

    def wait_for_it() -> None:
        with file_lock(target, busy=events.append):
            events.append("got it")

    with file_lock(target) as lock:
        assert lock == tmp_path / ".thing.lock"
        assert lock.read_text().startswith(f"pid {os.getpid()}: ")
        with pytest.raises(RuntimeError, match=f"^pid {os.getpid()}: "), \
                file_lock(target, busy=refuse):
            pytest.fail("a refused caller must not get the lock")
        waiter = threading.Thread(target=wait_for_it)
        waiter.start()
        deadline = time.monotonic() + 10
        while not events and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)
        assert waiter.is_alive() and len(events) == 1  # told who holds it, and waiting
        events.append("released")
    waiter.join(timeout=10)
    assert events[1:] == ["released", "got it"] and events[0].startswith(f"pid {os.getpid()}")
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_streams_a_writer_and_keeps_the_old_file_if_it_fails(tmp_path):
    from harness.fileio import PRIVATE_FILE_MODE, write_atomic

    target = tmp_path / "key"
    write_atomic(target, lambda fh: fh.write(b"secret"), mode=PRIVATE_FILE_MODE)
    assert target.read_bytes() == b"secret" and (target.stat().st_mode & 0o777) == 0o600

    def half(fh):
        fh.write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, half)
    assert target.read_bytes() == b"secret"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["key"]
