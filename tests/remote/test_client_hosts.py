"""Several [[client]] hosts on real sshd servers: each streams its own range of clients
to every server, which sums or writes the streams as they come, and the run verifies bit
for bit. (A client host killed while it streams: tests/remote/test_host_streams.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _sshd import processes_under, trusted_inventory

from harness.clients import ADDITIVE, vector_gaussian
from harness.experiments import RunConfig, run
from harness.remote._client import ClientHost
from harness.stream import StreamPlan

ROOT = Path(__file__).resolve().parents[2]

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




def test_fast_takes_each_chunk_from_the_worker_the_plan_names(
        tmp_path, farm, mp_spdz, program_cache, monkeypatch):
    """Each client host sends its own run of chunks, dealt among its workers; a server
    writing fast's file takes chunk k from the worker the plan names, not round robin."""
    path, fakes = trusted_inventory(tmp_path, farm, mp_spdz.root, 2, clients=2)
    cores = ClientHost.workers
    # Two workers on each client host, whatever its cores: with six chunks, host 0's
    # workers send 0 1 0 and host 1's 2 3 2, which round robin (0 1 2 3 0 1) is not.
    monkeypatch.setattr(ClientHost, "workers", lambda self: (cores(self), 2)[1])
    plan = StreamPlan(300_000, 10, 10, 1, 2, ADDITIVE.name, workers=4, hosts=(2, 2))
    assert plan.chunks == 6 and plan.senders == (0, 1, 0, 2, 3, 2)
    cfg = RunConfig(out=tmp_path / "out", clients=300_000, dim=10, rows=10, seed=12,
                    cache_dir=program_cache, parties=2, program="fast", protocol="semi2k",
                    hosts=path, timeout=300)
    result = run(cfg)
    assert result["verification"]["ok"] and result["verification"]["mismatches"] == 0
    assert result["timings"]["stream_workers"] == 4
    assert result["parameters"]["layout"]["client_ranges"] == [[0, 157_284], [157_284, 300_000]]
    assert remote_dirs(fakes) == []
    assert no_processes_left(farm.root) == []


def test_a_csv_file_reaches_two_client_hosts_and_the_run_verifies(tmp_path, farm, mp_spdz,
                                                                  program_cache):
    """Both hosts' upload threads parse their rows of the CSV at once: the first use of
    pandas, in a fresh ``ltm run``, from two threads together."""
    path, fakes = trusted_inventory(tmp_path, farm, mp_spdz.root, 2, clients=2)
    data = tmp_path / "data.csv"
    values = np.random.default_rng(5).uniform(-1, 1, (3000, 3))
    data.write_text("a,b,c\n" + "".join(",".join(f"{v:.6f}" for v in row) + "\n"
                                         for row in values))
    cache = tmp_path / "xdg"
    (cache / "ltm-harness").mkdir(parents=True)
    (cache / "ltm-harness" / "programs").symlink_to(program_cache)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--hosts", str(path), "--program", "local",
         "--data", str(data), "--rows", "10", "--seed", "4", "--timeout", "120",
         "--out", str(out)],
        cwd=ROOT, env={**os.environ, "XDG_CACHE_HOME": str(cache)}, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["verification"]["ok"] and result["verification"]["mismatches"] == 0
    assert result["parameters"]["clients"] == 3000 and result["parameters"]["dim"] == 3
    ranges = result["parameters"]["layout"]["client_ranges"]
    assert ranges[0][0] == 0 and ranges[0][1] == ranges[1][0] and ranges[1][1] == 3000
    assert remote_dirs(fakes) == []
    assert no_processes_left(farm.root) == []
