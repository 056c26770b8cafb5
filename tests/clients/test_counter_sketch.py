"""The counter-based sketch and data: any range of clients computed on its own."""

from __future__ import annotations

import numpy as np
import pytest

from harness.clients import NpyRows, Sketch, SyntheticRows, open_rows
from harness.errors import InputError
from harness.stream import chunk_groups


@pytest.mark.parametrize("s", [1, 3, 7])
def test_any_range_of_columns_equals_the_same_slice_of_the_whole(s):
    sk = Sketch.sparse(5000, 20, s, seed=11)
    rows, signs = sk.rows, sk.signs  # materialised through columns(0, n)
    for start, stop in [(0, 1), (1, 2), (3, 700), (4999, 5000), (1234, 4321)]:
        r, g = sk.columns(start, stop)
        assert np.array_equal(r, rows[:, start:stop])
        assert np.array_equal(g, signs[:, start:stop])
    col_rows, col_signs = sk.column(2024)
    assert np.array_equal(col_rows, rows[:, 2024])
    assert np.array_equal(col_signs, signs[:, 2024])
    sk.validate()  # s distinct buckets per column, signs +-1


def test_a_draw_in_several_passes_of_floyds_table_equals_its_pieces_drawn_alone():
    # m = 100: a pass of Floyd's algorithm takes 2,621 clients, so 8,000 take four.
    sk = Sketch.sparse(8000, 100, 50, seed=4)
    whole = sk.accumulators(0, 8000).reshape(50, 8000)
    for start, stop in [(0, 1000), (2600, 2700), (5000, 8000)]:
        piece = sk.accumulators(start, stop).reshape(50, stop - start)
        assert np.array_equal(whole[:, start:stop], piece)
    rows, _ = sk.columns(0, 8000)
    assert np.array_equal(rows, whole % 100)

def test_a_sketch_without_a_seed_draws_and_keeps_one():
    a, b = Sketch.sparse(100, 10, 2), Sketch.sparse(100, 10, 2)
    assert a.seed is not None and a.seed != b.seed
    again = Sketch.sparse(100, 10, 2, seed=a.seed)
    assert np.array_equal(again.rows, a.rows)


def test_every_component_holds_a_uniform_bucket_and_every_subset_is_equally_likely():
    # Floyd's algorithm alone puts the last step's clash value (m - 1) last too often;
    # the column's random shift must make every component equally likely to hold each
    # bucket, and leave the s-subsets uniform.
    sk = Sketch.sparse(60_000, 5, 4, seed=2)
    for i in range(4):
        share = np.bincount(sk.rows[i], minlength=5) / sk.n
        assert np.abs(share - 0.2).max() < 0.01
    pairs = Sketch.sparse(60_000, 5, 2, seed=3).rows
    low, high = np.minimum(pairs[0], pairs[1]), np.maximum(pairs[0], pairs[1])
    share = np.bincount(low * 5 + high, minlength=25) / 60_000
    assert np.count_nonzero(share) == 10  # the 10 subsets of two distinct buckets
    assert np.abs(share[share > 0] - 0.1).max() < 0.01


def test_accumulators_are_the_buckets_shifted_by_m_for_negative_signs():
    for s in (1, 4):
        sk = Sketch.sparse(3000, 9, s, seed=4)
        rows, signs = sk.columns(100, 2100)
        expected = (rows.astype(np.int64) + 9 * (signs < 0)).ravel()
        assert np.array_equal(sk.accumulators(100, 2100), expected)


def test_chunk_groups_put_each_accumulator_s_slots_together():
    sk = Sketch.sparse(3000, 8, 2, seed=5)
    clients, counts = chunk_groups(sk, 1000, 2000)
    rows, signs = sk.columns(1000, 2000)
    acc = (rows + 8 * (signs < 0)).ravel()
    order = np.argsort(acc, kind="stable")
    assert np.array_equal(clients, order % 1000)
    assert np.array_equal(np.sort(acc), np.repeat(np.arange(16), counts))
    assert np.array_equal(np.bincount(sk.accumulators(1000, 2000), minlength=16), counts)


def test_synthetic_rows_are_a_function_of_seed_and_client():
    data = SyntheticRows(10_000, 4, 2.5, seed=9)
    whole = data.read(0, 10_000)
    assert np.array_equal(data.read(777, 1234), whole[777:1234])
    buffer = np.empty((600, 4))
    assert np.array_equal(data.read_into(5, 605, buffer), whole[5:605])
    assert np.abs(whole).max() <= 2.5 and whole.std() > 1.0
    assert not np.array_equal(SyntheticRows(10, 4, 2.5, seed=10).read(0, 10), whole[:10])


def test_an_npy_file_is_read_in_chunks_and_each_chunk_checked(tmp_path):
    matrix = np.random.default_rng(0).uniform(-1, 1, size=(500, 3))
    matrix[321, 2] = 7.0
    path = tmp_path / "a.npy"
    np.save(path, matrix)
    rows = open_rows(path, eta=1.0)
    assert isinstance(rows, NpyRows) and (rows.n, rows.d) == (500, 3)
    assert np.array_equal(rows.read(0, 300), matrix[:300])
    with pytest.raises(InputError, match=r"\|A\[321, 2\]\| = 7 exceeds the bound eta = 1"):
        rows.read(300, 500)


@pytest.mark.parametrize("s", [1, 4])
def test_groups_of_chunks_give_each_chunk_its_own_accumulators(s):
    from harness.stream import SketchGroups, StreamPlan

    sk = Sketch.sparse(40_000, 12, s, seed=8)
    plan = StreamPlan(40_000, 3, 12, s, 3, "additive", workers=2, chunk=97)
    assert plan.group == (1 if s == 1 else 16384 // 97)
    mine = [plan.chunks_of(w) for w in range(2)]
    # Every chunk belongs to exactly one worker, and each worker takes whole groups.
    assert sorted(mine[0] + mine[1]) == list(range(plan.chunks))
    assert all((k // plan.group) % 2 == w for w in range(2) for k in mine[w])
    columns = SketchGroups(sk, plan)
    for k in [*mine[1][:3], *mine[0][-3:], plan.chunks - 1]:
        start, stop = plan.span(k)
        assert np.array_equal(columns.chunk(k), sk.accumulators(start, stop))


def test_a_csv_is_indexed_once_and_read_a_range_at_a_time(tmp_path, monkeypatch):
    import harness.clients.csvfile as csvfile

    monkeypatch.setattr(csvfile, "_CSV_STRIDE", 7)  # many index entries in a small file
    monkeypatch.setattr(csvfile, "_SCAN_BYTES", 64)  # lines that straddle scan blocks
    table = np.random.default_rng(2).uniform(-1, 1, size=(100, 3))
    path = tmp_path / "a.csv"
    path.write_text("x,y,z\n" + "".join(",".join(repr(float(v)) for v in row) + "\n"
                                        for row in table))
    rows = open_rows(path, eta=1.0)
    assert (rows.n, rows.d) == (100, 3) and len(rows.offsets) == 15
    for start, stop in [(0, 100), (0, 1), (6, 7), (7, 8), (13, 29), (99, 100)]:
        assert np.array_equal(rows.read(start, stop), table[start:stop])
    path.write_text("1,2\n3,4\n\n5,6\n")
    with pytest.raises(InputError, match=r"a\.csv, line 3: a blank line between rows"):
        open_rows(path, eta=9.0)
    path.write_text("1,2\n3,4")  # no header, no final newline
    assert np.array_equal(open_rows(path, eta=9.0).read(0, 2), [[1, 2], [3, 4]])
    path.write_text("1,2\n3,x\n")
    with pytest.raises(InputError, match=r"a\.csv, line 2: column 2 holds 'x', not a number"):
        open_rows(path, eta=9.0).read(0, 2)


def test_a_txt_is_read_in_chunks_whitespace_or_comma_separated(tmp_path):
    table = np.random.default_rng(3).uniform(-1, 1, size=(50, 4))
    spaced, commas = tmp_path / "a.txt", tmp_path / "b.txt"
    spaced.write_text("".join("  ".join(repr(float(v)) for v in row) + "\n" for row in table))
    commas.write_text("a,b,c,d\n" + "".join(",".join(repr(float(v)) for v in row) + "\n"
                                          for row in table))
    for path in (spaced, commas):
        rows = open_rows(path, eta=1.0)
        assert (rows.n, rows.d) == (50, 4)
        assert np.array_equal(rows.read(17, 33), table[17:33])
    spaced.write_text("1 2\n3 x\n")
    with pytest.raises(InputError, match=r"a\.txt, line 2: column 2 holds 'x', not a number"):
        open_rows(spaced, eta=9.0).read(0, 2)
