"""The central mechanism on real sshd hosts: its noise is in the program, so each host's
party draws its share of the coins there; the run verifies bit for bit with the noise
revealed (the test aid)."""

from __future__ import annotations

import os

import pytest
from _sshd import trusted_inventory

from harness.experiments import RunConfig, run

pytestmark = [
    pytest.mark.root, pytest.mark.mpspdz,
    pytest.mark.skipif(os.geteuid() != 0, reason="the fake hosts are sshd servers logged into "
                       "as root"),
]


def test_central_noise_runs_on_the_hosts_and_verifies(tmp_path, farm, mp_spdz, program_cache):
    path, _ = trusted_inventory(tmp_path, farm, mp_spdz.root, 3)
    cfg = RunConfig(out=tmp_path / "out", clients=3000, rows=4, dim=2, seed=5,
                    cache_dir=program_cache, parties=3, program="local",
                    protocol="replicated-ring", hosts=path, mechanism="central",
                    epsilon=4.0, delta=1e-3, grid_bits=0, reveal_noise=True)
    result = run(cfg)
    v = result["verification"]
    assert v["ok"] and v["mismatches"] == 0 and v["noise_check"]["exact"]
    assert result["parameters"]["hosts"] == str(path)
    assert result["privacy"]["certified_epsilon"] <= 4.0
