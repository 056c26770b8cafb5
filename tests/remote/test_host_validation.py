"""--validate on real sshd hosts: each host's party checks every client's row inside the
MPC, the run verified bit for bit, and no honest client rejected."""

from __future__ import annotations

import os

import numpy as np
import pytest
from _sshd import trusted_inventory

from harness.experiments import RunConfig, run

pytestmark = [
    pytest.mark.root, pytest.mark.mpspdz,
    pytest.mark.skipif(os.geteuid() != 0, reason="the fake hosts are sshd servers logged into "
                       "as root"),
]


@pytest.mark.parametrize(("check", "sharing"), [("linf", "full"), ("l2", "seeded")])
def test_a_validated_run_on_the_hosts_verifies_and_rejects_no_honest_client(
        tmp_path, farm, mp_spdz, program_cache, check, sharing):
    path, _ = trusted_inventory(tmp_path, farm, mp_spdz.root, 3)
    result = run(RunConfig(out=tmp_path / "out", clients=3000, rows=10, dim=4, sparsity=2,
                           seed=5, cache_dir=program_cache, parties=3, program="fast",
                           protocol="replicated-ring", hosts=path, validation=check,
                           sharing=sharing))
    assert result.verification.ok and result.verification.mismatches == 0
    v = result.validation
    assert v["check"] == check and v["rejected_rows"] == 0 == v["expected_rejected_rows"]
    assert v["noise_bound_lattice"] > 0  # the LTM's rows: the bound covers their noise


@pytest.mark.parametrize(("client_hosts", "check"), [(0, "l2"), (1, "linf"), (1, None)])
def test_poisoned_clients_lie_from_their_hosts_and_are_rejected_there_too(
        tmp_path, farm, mp_spdz, program_cache, client_hosts, check):
    path, _ = trusted_inventory(tmp_path, farm, mp_spdz.root, 3, clients=client_hosts)
    result = run(RunConfig(out=tmp_path / "out", clients=3000, rows=10, dim=4, seed=5,
                           cache_dir=program_cache, parties=3, program="fast",
                           protocol="replicated-ring", hosts=path, validation=check or "none",
                           poison=3))
    # verified bit for bit: against the accepted clients' sketch, or the rows as sent
    assert result.verification.ok and result.verification.mismatches == 0
    assert len(result.parameters.poisoned) == 3
    if check:
        assert result.validation["rejected_rows"] == 3 == result.validation[
            "expected_rejected_rows"]
    else:  # the liars' words counted: they moved their cells past any use
        assert result.validation is None
        assert np.abs(np.load(tmp_path / "out" / "output.npy")).max() > 1e12
