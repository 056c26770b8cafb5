"""--validate under every protocol where the parties are placed apart: on real sshd
hosts and through the emulated network, honest clients all accepted and lying ones
rejected, every run verified bit for bit (spdz2k through its data owner's input,
the others' clients streaming their shares)."""

from __future__ import annotations

import os

import pytest
from _sshd import trusted_inventory

from harness.engine import PROTOCOLS
from harness.experiments import RunConfig, run

pytestmark = [
    pytest.mark.root, pytest.mark.mpspdz,
    pytest.mark.skipif(os.geteuid() != 0, reason="the fake hosts are sshd servers logged into "
                       "as root, and the emulated network needs namespaces"),
]

SMALL = {"clients": 300, "rows": 10, "dim": 3, "seed": 7}
# spdz2k's comparisons cost 0.1 s each in preprocessing: its runs are smaller.
SPDZ2K = {"clients": 20, "rows": 4, "dim": 2, "noise": "none", "seed": 7}


def _cfg(tmp_path, cache, protocol, name, **kw):
    # spdz2k's shares carry MACs no client can write: the data owner types the rows in.
    party = PROTOCOLS[protocol].share_format is None
    return RunConfig(out=tmp_path / name, cache_dir=cache, timeout=600, parties=3,
                     input_mode="party" if party else None,
                     program="reference" if party else "fast", protocol=protocol,
                     **{**(SPDZ2K if party else SMALL), **kw})


@pytest.mark.parametrize("where", ["hosts", "network"])
@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_validated_runs_placed_apart_verify_and_reject_exactly_the_liars(
        tmp_path, farm, mp_spdz, program_cache, protocol, where):
    placed = ({"hosts": trusted_inventory(tmp_path, farm, mp_spdz.root, 3)[0]}
              if where == "hosts" else {"network": "t3.large-baseline"})
    honest = run(_cfg(tmp_path, program_cache, protocol, "honest", validation="linf",
                      **placed))
    assert honest.verification.ok and honest.verification.mismatches == 0
    assert honest.validation["rejected_rows"] == 0 == honest.validation["expected_rejected_rows"]
    lied = run(_cfg(tmp_path, program_cache, protocol, "lied", validation="l2", poison=2,
                    **placed))
    # the accepted clients' sketch, bit for bit, and exactly the two liars rejected
    assert lied.verification.ok and lied.verification.mismatches == 0
    assert lied.validation["rejected_rows"] == 2 == lied.validation["expected_rejected_rows"]
    assert len(lied.parameters.poisoned) == 2
