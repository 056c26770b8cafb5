"""The sketch's compiled loops give numpy's integers, bit for bit: the same sketch and
the same grouping of a chunk's slots whichever draws them."""

from __future__ import annotations

import numpy as np
import pytest

from harness.clients import CompiledLoops, NumpyLoops, Sketch, compiled_sketch, sketch_loops
from harness.clients.picks import _FLOYD_CELLS, _library, _load


def _compiled() -> CompiledLoops:
    lib = _library()
    assert lib is not None
    return CompiledLoops(lib)


def _words(k: int, s: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**64, (k, s), dtype=np.uint64)


def test_the_compiled_loops_are_built_and_chosen() -> None:
    assert compiled_sketch(), (
        "harness/clients/_sketch.c is not built: install the harness with a C compiler "
        "(pip install -e .), which builds it in place")
    assert isinstance(sketch_loops(), CompiledLoops)


@pytest.mark.parametrize("source", [
    "int ltm_sketch_abi(void) { return 0; }\nvoid ltm_distinct_picks(void) {}\n",
    "void ltm_distinct_picks(void) {}\n",
])
def test_a_library_built_from_another_source_is_left_unloaded(source, libraries) -> None:
    assert [_load(path) for path in libraries(source)] == [None, None]
    assert _load(None) is None


@pytest.mark.parametrize(("m", "s", "k"), [
    (100, 50, 3000),  # Table 5's s = 50: numpy makes two passes here
    (100, 100, 700),  # every bucket: each column a rotation of a permutation
    (7, 2, 5000), (2, 1, 100), (1000, 3, 300), (70_000, 20, 50), (100, 10, 0),
])
@pytest.mark.parametrize("accumulators", [False, True])
def test_compiled_picks_are_numpys(m, s, k, accumulators) -> None:
    words = _words(k, s, m * 1000 + s)
    before = words.copy()
    want = NumpyLoops().picks(words, m, s, accumulators)
    got = _compiled().picks(words, m, s, accumulators)
    assert np.array_equal(words, before)  # the caller's words are left as they were
    assert got.dtype == np.int64 and got.shape == (s, k)
    assert np.array_equal(got, want)
    buckets = got % m if accumulators else got
    assert ((buckets >= 0) & (buckets < m)).all()
    if k:  # each column's buckets distinct
        ordered = np.sort(buckets, axis=0)
        assert not (ordered[1:] == ordered[:-1]).any()
    if accumulators:  # a top bit of 0 is sign -1: the bucket plus m
        assert np.array_equal(got >= m, (words.T >> np.uint64(63)) == 0)
    if (m, s) == (100, 50):  # the case that spans more than one of numpy's passes
        assert k > _FLOYD_CELLS // m


def test_a_sketch_is_the_same_drawn_either_way(monkeypatch) -> None:
    import harness.clients.sketch as sketch_module

    sketches = []
    for loops in (_compiled(), NumpyLoops()):
        monkeypatch.setattr(sketch_module, "sketch_loops", lambda loops=loops: loops)
        sk = Sketch.sparse(20_000, 100, 30, seed=7)
        sketches.append((sk.columns(0, 20_000), sk.accumulators(1234, 5678)))
    (rows_a, signs_a), acc_a = sketches[0]
    (rows_b, signs_b), acc_b = sketches[1]
    assert np.array_equal(rows_a, rows_b) and np.array_equal(signs_a, signs_b)
    assert np.array_equal(acc_a, acc_b)


@pytest.mark.parametrize(("accs", "s", "clients"), [
    (200, 50, 1048), (200, 1, 5000), (2, 3, 10), (70_000, 4, 3000), (40, 2, 0),
])
def test_compiled_grouping_is_numpys_stable_sort(accs, s, clients) -> None:
    acc = np.random.default_rng(accs + s).integers(0, accs, s * clients)
    order, counts = _compiled().groups(acc, accs, clients)
    want_order, want_counts = NumpyLoops().groups(acc, accs, clients)
    assert np.array_equal(order, want_order) and np.array_equal(counts, want_counts)
    assert counts.dtype == np.int64 and counts.shape == (accs,)
    # Grouped: the slots of each accumulator together, in slot order within each run.
    slot = np.argsort(acc, kind="stable")
    assert np.array_equal(order, slot % clients if clients else slot)
    assert np.array_equal(np.repeat(np.arange(accs), counts), acc[slot])


@pytest.mark.parametrize("loops", [NumpyLoops(), None], ids=["numpy", "compiled"])
def test_what_the_loops_cannot_read_is_refused(loops) -> None:
    loops = loops or _compiled()
    with pytest.raises(ValueError, match="outside"):
        loops.groups(np.array([0, 5, 1, 2]), 4, 2)
    with pytest.raises(ValueError, match="outside"):
        loops.groups(np.array([0, -1]), 4, 2)
    with pytest.raises(TypeError, match="whole copies"):
        loops.groups(np.arange(5), 10, 2)
    with pytest.raises(TypeError, match="whole copies"):
        loops.groups(np.zeros((2, 2), dtype=np.int64), 10, 2)
    with pytest.raises(ValueError, match="distinct buckets"):
        loops.picks(_words(3, 5, 0), 4, 5)
    with pytest.raises(TypeError, match="uint64"):
        loops.picks(_words(3, 5, 0).astype(np.int64), 10, 5)
    with pytest.raises(TypeError, match="uint64"):
        loops.picks(_words(3, 4, 0), 10, 5)
