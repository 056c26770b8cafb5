"""Several [[client]] hosts on real sshd servers: each streams its own range of clients
to every server, which sums or writes the streams as they come, and the run verifies bit
for bit. (A client host killed while it streams: tests/remote/test_host_streams.py.)"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
from _sshd import processes_under, trusted_inventory

from harness.clients import vector_gaussian
from harness.experiments import RunConfig, run
from harness.remote._client import ClientHost

pytestmark = [
    pytest.mark.root, pytest.mark.mpspdz,
    pytest.mark.skipif(os.geteuid() != 0, reason="the fake hosts are sshd servers logged into "
                       "as root"),
]


def remote_dirs(fakes) -> list[Path]:
    return [p for f in fakes if f.workdir.exists() for p in f.workdir.iterdir()]


def no_processes_left(root: Path, seconds: float = 5.0) -> list:
    deadline = time.monotonic() + seconds
    while (left := processes_under(root)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


@pytest.mark.parametrize(("program", "protocol", "sharing"), [
    ("local", "semi2k", "full"), ("fast", "semi2k", "full"), ("fast", "semi2k", "seeded"),
    ("local", "ps-rep-ring", "full"), ("local", "ps-rep-ring", "seeded"),
    # reference's servers write one row per slot in the plan's order, whichever host's
    # stream a chunk comes from (refused before: its whole files needed sketch order)
    ("reference", "semi2k", "full"), ("reference", "ps-rep-ring", "seeded")])
def test_two_client_hosts_each_send_their_range_and_the_run_verifies(
        tmp_path, farm, mp_spdz, program_cache, monkeypatch, program, protocol, sharing):
    path, fakes = trusted_inventory(tmp_path, farm, mp_spdz.root, 3, clients=2)
    rows_sent: dict[str, int] = {}
    original = ClientHost._put_rows

    def spy(self, rows, start, stop):  # what each client host is given of the clients' data
        rows_sent[self.host.name] = stop - start
        return original(self, rows, start, stop)

    monkeypatch.setattr(ClientHost, "_put_rows", spy)
    data = tmp_path / "data.npy"
    np.save(data, np.random.default_rng(3).uniform(-1, 1, (2001, 3)))
    cfg = RunConfig(out=tmp_path / "out", data=data, rows=10, seed=11,
                    cache_dir=program_cache, parties=3, program=program, protocol=protocol,
                    sharing=sharing, hosts=path, input_mode="shares")
    result = run(cfg)
    assert result["verification"]["ok"], result["verification"]
    # the split is public and recorded: contiguous ranges covering every client, and
    # each host got only its own range's rows
    ranges = result["parameters"]["layout"]["client_ranges"]
    assert ranges[0][0] == 0 and ranges[0][1] == ranges[1][0] and ranges[1][1] == 2001
    assert 0 < ranges[0][1] < 2001
    assert rows_sent == {"client0": ranges[0][1], "client1": 2001 - ranges[0][1]}
    # streamed: each server summed (or wrote) its stream as it came, over TLS
    assert result["timings"]["stream_upload_bytes"] > 0
    for row in result["parties"]:
        assert row["upload_s"] > 0 and row["upload_bytes_sent"] > 0
        if program == "local":
            assert row["aggregate_s"] > 0
    if sharing == "seeded":
        assert result["timings"]["stream_expand_s"] > 0
    # how the client hosts drew the noise crossed back with their totals (these hosts
    # run this tree's harness, compiled sampler included)
    assert result["noise_observed"]["sampler"] == (
        "compiled, four draws at a time" if vector_gaussian() else "compiled, one draw at a time")
    assert remote_dirs(fakes) == []  # every host's working directory was removed
    assert no_processes_left(farm.root) == []


