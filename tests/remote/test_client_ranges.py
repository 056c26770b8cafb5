"""Several client hosts: the clients' ranges, each host's own layout, and the servers'
join of the hosts' files, checked end to end without SSH (the agent's own functions)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.clients import (
    ADDITIVE,
    REPLICATED,
    FixedPoint,
    Layout,
    NoiseSpec,
    SeededSink,
    ShareSink,
    Sketch,
    client_ranges,
    expand_file,
    prepare_inputs,
    range_sketch,
    split_clients,
    upload_files,
)
from harness.clients import save_plan as save_expand_plan
from harness.clients.layout import accumulator_index
from harness.engine.aggregate import aggregate_shares
from harness.errors import InputError
from harness.remote._client import combine_parts
from harness.remote.transfer import join

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


@pytest.mark.parametrize(("sharing", "fmt"), [("full", ADDITIVE), ("seeded", ADDITIVE),
                                               ("full", REPLICATED)])
def test_each_host_s_part_joined_and_aggregated_gives_the_whole_sketch(tmp_path, sharing, fmt):
    n, s, hosts = 2500, 2, 3
    parties = 3
    rng = np.random.default_rng(1)
    data = rng.uniform(-1, 1, size=(n, D))
    sketch = Sketch.generate(n, M, s, seed=2)
    split = split_clients(sketch, D, hosts, fmt.words)
    fp = FixedPoint(16)
    parts = []
    for k, ((start, stop), layout) in enumerate(zip(split.ranges, split.parts, strict=True)):
        host = tmp_path / f"client{k}"
        part_sketch = range_sketch(sketch, start, stop)
        noise = NoiseSpec("none", n=stop - start, m=M, d=D, s=s)
        if sharing == "seeded":
            dirs = [host / f"P{i}" for i in range(parties)]
            sink = SeededSink(dirs, layout, fmt, stop - start, s, D)
        else:
            host.mkdir()
            sink = ShareSink([host / f"P{i}.data" for i in range(parties)], fmt)
        parts.append(prepare_inputs(data[start:stop], part_sketch, layout, noise, fp, sink,
                                    np.random.default_rng(k)))
    whole = combine_parts(parts, [b - a for a, b in split.ranges])
    total = np.zeros((M, D), dtype=np.uint64)
    for i in range(parties):
        server = tmp_path / f"server{i}"
        server.mkdir()
        files = []
        for k, ((start, stop), layout) in enumerate(zip(split.ranges, split.parts,
                                                        strict=True)):
            part = server / f"Part-{k}.data"
            if sharing == "seeded":  # the server expands each host's seeds with its plan
                upload = server / f"Client-{k}" / "Upload"
                upload.mkdir(parents=True)
                for path in upload_files(tmp_path / f"client{k}" / f"P{i}"):
                    (upload / path.name).write_bytes(path.read_bytes())
                save_expand_plan(server / f"plan-{k}.npz", layout, fmt, parties, stop - start, s)
                expand_file(i, server / f"plan-{k}.npz", part, server / f"Client-{k}")
            else:
                part.write_bytes((tmp_path / f"client{k}" / f"P{i}.data").read_bytes())
            files.append(part)
        size, _ = join(fmt.name, server / "joined.data", files)
        assert size == len(fmt.header) + 8 * fmt.words * split.joined.total_rows * D
        assert not any(p.exists() for p in files)  # each part goes once it is joined
        share = aggregate_shares(server / "joined.data", split.joined, fmt)
        # replicated: server i holds (a_i, a_{i-1}); its first words sum to the secret
        total += share[..., 0] if fmt.words > 1 else share
    # The hosts' parts summed are the plaintext sketch of all clients, as one host makes it.
    one = prepare_inputs(data, sketch, Layout.blocked(sketch, D), NoiseSpec("none", n=n, m=M,
                         d=D, s=s), fp, ShareSink([tmp_path / f"one{i}" for i in range(2)],
                                                  ADDITIVE), np.random.default_rng(9))
    assert np.array_equal(whole.expected, one.expected)
    assert np.array_equal(total, whole.expected)
    assert whole.upload_bytes == [sum(p.upload_bytes[i] for p in parts) for i in range(parties)]


def test_joining_refuses_a_part_of_another_format(tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(ADDITIVE.header + bytes(8))
    b.write_bytes(REPLICATED.header + bytes(16))
    with pytest.raises(ValueError, match="is not a additive share file"):
        join(ADDITIVE.name, tmp_path / "out", [a, b])
    assert a.exists() and b.exists() and not (tmp_path / "out").exists()



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
