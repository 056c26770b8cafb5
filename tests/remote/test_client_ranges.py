"""Several client hosts: the clients' ranges and each host's own columns of the sketch,
checked without SSH, and a reference run streamed from several client hosts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.clients import (
    Layout,
    Sketch,
    client_ranges,
    range_sketch,
    split_clients,
)
from harness.clients.layout import accumulator_index
from harness.errors import InputError

M, D = 12, 3


@pytest.mark.parametrize(("n", "hosts"), [(10, 1), (10, 3), (1001, 4), (5, 5)])
def test_ranges_are_contiguous_cover_every_client_and_differ_by_one_at_most(n, hosts):
    ranges = client_ranges(n, hosts)
    assert len(ranges) == hosts and ranges[0][0] == 0 and ranges[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    sizes = [stop - start for start, stop in ranges]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


def test_fewer_clients_than_client_hosts_is_refused_in_one_line():
    with pytest.raises(InputError) as info:
        client_ranges(2, 3)
    assert "2 client(s) cannot be split between 3 client hosts" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_range_sketch_is_the_sketch_s_columns_of_that_range():
    sketch = Sketch.generate(500, M, 3, seed=4)
    part = range_sketch(sketch, 120, 260)
    assert part.n == 140 and part.s == 3 and part.m == M
    assert np.array_equal(part.rows, sketch.rows[:, 120:260])
    assert np.array_equal(part.signs, sketch.signs[:, 120:260])


@pytest.mark.parametrize(("n", "s", "hosts"), [(3001, 1, 2), (2000, 3, 3)])
def test_the_joined_layout_holds_every_slot_once_in_its_accumulator_s_blocks(n, s, hosts):
    sketch = Sketch.generate(n, M, s, seed=9)
    split = split_clients(sketch, D, hosts)
    split.joined.check(accumulator_index(sketch).ravel())  # raises on any misplaced slot
    assert split.joined.total_rows == sum(p.total_rows for p in split.parts)
    assert split.joined.n_chunks == sum(p.n_chunks for p in split.parts)
    assert {(p.block_rows, p.chunk_blocks) for p in split.parts} == {
        (split.joined.block_rows, split.joined.chunk_blocks)}
    # a part is exactly what its client host lays out from its range alone
    for (start, stop), part in zip(split.ranges, split.parts, strict=True):
        alone = Layout.blocked(range_sketch(sketch, start, stop), D, part.block_rows,
                               part.chunk_blocks)
        assert np.array_equal(alone.file_slot, part.file_slot)


def test_reference_shares_with_several_client_hosts_streams_to_the_servers(tmp_path: Path):
    # Refused before (its whole share files needed the slots in sketch order); streamed,
    # each server writes the chunks in the plan's order whichever host sends them.
    from harness.experiments import RunConfig

    party = ('\n[[party]]\nname = "{0}"\nssh_host = "{0}"\nuser = "u"\nmpc_host = "{0}"\n'
             'mp_spdz = "/d"\n')
    client = '\n[[client]]\nssh_host = "{0}"\nuser = "u"\nmpc_host = "{0}"\n'
    inv = tmp_path / "hosts.toml"
    inv.write_text('known_hosts = "kh"\n' + party.format("a") + party.format("b")
                   + client.format("c") + client.format("d"))
    cfg = RunConfig(out=tmp_path / "out", clients=100, rows=10, program="reference",
                    input_mode="shares", hosts=inv).validate()
    assert cfg.mode.placement == "client-hosts"
    assert cfg.streams and cfg.route.where == "servers" and cfg.route.shape == "slots"
    # its own default input, the data owner's, is written here: the client hosts stay idle
    party_input = RunConfig(out=tmp_path / "out", clients=100, rows=10, program="reference",
                            hosts=inv).validate()
    assert party_input.route.sink == "owner" and party_input.route.here
